//! What `http-cache-semantics` is given, made to mean what RFC 9111 says. The crate reads
//! header fields its own way, and where that differs from the RFC the fields are rewritten
//! here before it sees them (a table-driven test per rule in `policy/tests.rs` holds each):
//!
//! - `Cache-Control` directive names are case-insensitive (RFC 9111 §5.2): the crate
//!   compares them as written, so `No-Store` or `MaX-AgE` meant nothing to it. They are
//!   written again lower-cased, one list, quoted values kept whole.
//! - `Age` is a number of seconds; a list or a value with parameters counts by its first
//!   member (the crate read `Age: 7200, 0` as no age at all).
//! - `Expires`, `Date` and `Last-Modified` are HTTP-dates (RFC 9110 §5.6.7): IMF-fixdate,
//!   and the obsolete RFC 850 and asctime forms a recipient must accept. The crate parses
//!   RFC 2822, which takes other forms and refuses asctime. They are written again as
//!   IMF-fixdate; an `Expires` that is not an HTTP-date (extra spaces, `0`) means already
//!   expired (§5.3), an invalid `Date` or `Last-Modified` is left out.
//! - `Pragma` (§5.4): in a request, `no-cache` counts only without `Cache-Control`, and then
//!   as `Cache-Control: no-cache`; any other `Pragma` means nothing (the crate took any
//!   `Pragma` holding `no-cache` anywhere). In a response it has no meaning at all.
//! - Storability by status (§3): the crate stores only the statuses it lists; RFC 9111 lets
//!   a cache store any final status with explicit freshness or `public`, and needs to
//!   understand only `206` and `304`. The crate is given a status that stands for the real
//!   one ([`stand_in`]).

use http::{HeaderMap, HeaderName, HeaderValue};
use splicer_wire::http::Headers;

use super::directives;

/// Statuses the crate stores (its `UNDERSTOOD_STATUSES`).
const CRATE_KNOWS: &[u16] = &[
    200, 203, 204, 300, 301, 302, 303, 307, 308, 404, 405, 410, 414, 501,
];

/// Statuses a response may be stored with by default, with heuristic freshness (RFC 9110
/// §15.1).
pub const HEURISTIC: &[u16] = &[200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501];

/// Expired: what an `Expires` that is not an HTTP-date means.
const EPOCH: &str = "Thu, 01 Jan 1970 00:00:00 GMT";

/// A response's fields (its status `status`) as the crate must see them.
pub fn response(status: u16, h: &Headers) -> HeaderMap {
    // Heuristic freshness is for the statuses defined as heuristically cacheable only; the
    // crate applies it to any response it stores that has a `Last-Modified`.
    let heuristic = HEURISTIC.contains(&status);
    let mut out = HeaderMap::with_capacity(h.len());
    let mut cache_control = Vec::new();
    for f in h.iter() {
        let name = f.name.to_ascii_lowercase();
        match name.as_str() {
            "cache-control" => cache_control.push(f.value),
            "pragma" => {}
            "age" if !out.contains_key("age") => {
                if let Some(age) = first_number(f.value) {
                    insert(&mut out, "age", age.as_bytes());
                }
            }
            "age" => {}
            "expires" if !out.contains_key("expires") => {
                let date = http_date(f.value).unwrap_or_else(|| EPOCH.into());
                insert(&mut out, "expires", date.as_bytes());
            }
            "last-modified" if !heuristic => {}
            "date" | "last-modified" if !out.contains_key(name.as_str()) => {
                if let Some(date) = http_date(f.value) {
                    insert(&mut out, &name, date.as_bytes());
                }
            }
            "expires" | "date" | "last-modified" => {}
            _ => append(&mut out, f.name, f.value),
        }
    }
    if let Some(cc) = cache_control_value(&cache_control) {
        insert(&mut out, "cache-control", cc.as_bytes());
    }
    out
}

/// A request's fields as the crate must see them.
pub fn request(h: &Headers) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(h.len());
    let mut cache_control = Vec::new();
    for f in h.iter() {
        match f.name.to_ascii_lowercase().as_str() {
            "cache-control" => cache_control.push(f.value),
            "pragma" => {}
            _ => append(&mut out, f.name, f.value),
        }
    }
    match cache_control_value(&cache_control) {
        Some(cc) => insert(&mut out, "cache-control", cc.as_bytes()),
        None if cache_control.is_empty() && pragma_no_cache(h) => {
            insert(&mut out, "cache-control", b"no-cache")
        }
        None => {}
    }
    out
}

/// Whether a request's `Pragma` asks for validation: `no-cache` among its directives, and
/// no `Cache-Control` in the request (RFC 9111 §5.4).
pub fn pragma_no_cache(request: &Headers) -> bool {
    request.get("cache-control").is_none()
        && request
            .get_all("pragma")
            .flat_map(directives)
            .any(|(name, _)| name.eq_ignore_ascii_case(b"no-cache"))
}

/// The status the crate is given for a response with `status` and `fields`: the status
/// itself when the crate knows it; for another final status (not `206`, whose ranges the
/// cache does not keep, nor `304`), `200` when the response makes itself storable
/// (`max-age`, `s-maxage`, `Expires` or `public`, RFC 9111 §3), else `302` (one the crate
/// knows and never stores by default). Its `Last-Modified` is not given to the crate
/// ([`response`]), so no heuristic freshness comes with the stand-in.
pub fn stand_in(status: u16, fields: &Headers) -> u16 {
    if CRATE_KNOWS.contains(&status) || !(200..600).contains(&status) {
        return status;
    }
    if matches!(status, 206 | 304) {
        return 206;
    }
    let explicit = fields.get("expires").is_some()
        || ["max-age", "s-maxage", "public"]
            .iter()
            .any(|d| super::has_directive(fields, d));
    if explicit {
        200
    } else {
        302
    }
}

/// The `Cache-Control` values as one list with lower-cased names; `None` when they hold
/// no directive.
fn cache_control_value(values: &[&[u8]]) -> Option<String> {
    let mut out = String::new();
    for (name, value) in values.iter().flat_map(|v| directives(v)) {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&name.to_ascii_lowercase());
        if let Some(v) = value.and_then(|v| std::str::from_utf8(v).ok()) {
            out.push('=');
            if v.bytes().all(splicer_wire::http::is_tchar) && !v.is_empty() {
                out.push_str(v);
            } else {
                out.push('"');
                out.push_str(v);
                out.push('"');
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The first member of a list, if it is a number of seconds (parameters after `;` left off).
fn first_number(value: &[u8]) -> Option<String> {
    let first = value.split(|&b| b == b',').next()?;
    let first = first.split(|&b| b == b';').next()?.trim_ascii();
    (!first.is_empty() && first.iter().all(u8::is_ascii_digit))
        .then(|| String::from_utf8_lossy(first).into_owned())
}

/// An HTTP-date in any of its three forms, written as IMF-fixdate; `None` if it is not one.
fn http_date(value: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(value).ok()?;
    // The forms have fixed spacing: a value with other spacing is not one of them.
    let t = httpdate::parse_http_date(s).ok()?;
    Some(httpdate::fmt_http_date(t))
}

fn insert(out: &mut HeaderMap, name: &str, value: &[u8]) {
    if let (Ok(n), Ok(v)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_bytes(value),
    ) {
        out.insert(n, v);
    }
}

/// Fields the `http` crate cannot represent are left out (the parser already refused
/// anything that is not a token name).
fn append(out: &mut HeaderMap, name: &str, value: &[u8]) {
    if let (Ok(n), Ok(v)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_bytes(value),
    ) {
        out.append(n, v);
    }
}
