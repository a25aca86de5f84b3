//! Cache keys: the effective request URI, and a secondary key per `Vary` variant.
//!
//! A response without `Vary` is stored under its URI. A response with `Vary` leaves a
//! marker under the URI naming the request fields it varies on, and is stored under the
//! URI plus those fields' values, so one URI holds several variants (Squid and nginx do
//! the same).

use std::fmt::Write as _;

use splicer_wire::http::{Authority, Headers};

/// The primary key of a request: `http://host:port/path?query`, host lower-cased and the
/// port always written, so `http://a/` and `http://A:80/` are one object.
pub fn primary(authority: &Authority, path: &str) -> String {
    // Made once per request: one allocation, sized for it.
    let host = &authority.host;
    let v6 = host.contains(':');
    let mut key = String::with_capacity("http://[]:65535".len() + host.len() + path.len());
    key.push_str("http://");
    if v6 {
        key.push('[');
    }
    key.extend(host.chars().map(|c| c.to_ascii_lowercase()));
    if v6 {
        key.push(']');
    }
    // Writing to a String cannot fail.
    let _ = write!(key, ":{}", authority.port);
    key.push_str(path);
    key
}

/// The lower-cased field names of a `Vary` header (all its fields), `*` included.
pub fn vary_names(headers: &Headers) -> Vec<String> {
    let mut names = headers.tokens("vary");
    names.dedup();
    names
}

/// The key of the variant `request` selects among those of `primary` that vary on `names`.
/// Field values are joined as received: RFC 9111 §4.1 allows (not requires) normalising.
pub fn variant(primary: &str, names: &[String], request: &Headers) -> String {
    let mut key = String::with_capacity(primary.len() + 32);
    key.push_str(primary);
    for name in names {
        key.push('\n');
        key.push_str(name);
        key.push(':');
        let mut first = true;
        for v in request.get_all(name) {
            if !first {
                key.push(',');
            }
            first = false;
            key.push_str(&String::from_utf8_lossy(v));
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primary_keys_normalise_host_and_port() {
        let a = Authority::parse("Example.ORG", Some(80)).unwrap();
        assert_eq!(primary(&a, "/x?y"), "http://example.org:80/x?y");
        let b = Authority::parse("example.org:80", None).unwrap();
        assert_eq!(primary(&a, "/x?y"), primary(&b, "/x?y"));
        let c = Authority::parse("example.org:8080", None).unwrap();
        assert_ne!(primary(&a, "/x"), primary(&c, "/x"));
        let v6 = Authority::parse("[::1]:81", None).unwrap();
        assert_eq!(primary(&v6, "/"), "http://[::1]:81/");
    }

    #[test]
    fn variants_differ_by_the_named_fields_only() {
        let mut gz = Headers::default();
        gz.push("Accept-Encoding", "gzip");
        gz.push("User-Agent", "a");
        let mut br = Headers::default();
        br.push("accept-encoding", "br");
        br.push("User-Agent", "a");
        let names = vec!["accept-encoding".to_string()];
        assert_ne!(variant("u", &names, &gz), variant("u", &names, &br));
        let ua = vec!["user-agent".to_string()];
        assert_eq!(variant("u", &ua, &gz), variant("u", &ua, &br));
        // An absent field is a value of its own.
        assert_ne!(
            variant("u", &names, &gz),
            variant("u", &names, &Headers::default())
        );
    }

    #[test]
    fn vary_names_are_lower_cased_and_listed_once() {
        let mut h = Headers::default();
        h.push("Vary", "Accept-Encoding, accept-encoding");
        h.push("Vary", "Origin");
        assert_eq!(vary_names(&h), ["accept-encoding", "origin"]);
    }
}
