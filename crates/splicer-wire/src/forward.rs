//! The heads a forward proxy sends on: the request head it writes upstream and the response
//! head it writes back to the client, from the heads it read. Pure functions, so every rule
//! (hop-by-hop fields, `Host`, `Via`, `Connection`, the framing guards) is unit-tested here
//! and the differential fuzz target checks exactly what the proxy forwards.
//!
//! The framing guards: a message is forwarded with the framing Splicer itself used and no
//! other (a chunked request loses its `Content-Length`; a transfer-coding list is written
//! anew from the validated list), so the next parser cannot frame it differently.

use std::net::IpAddr;

use crate::http::{
    self, Authority, BodyLength, Error, Framing, Headers, RequestHead, ResponseHead,
};

/// A request ready to go upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub head: RequestHead,
    /// How its body is framed (the same on both sides).
    pub body: BodyLength,
    /// The client asked for `100 Continue`; Splicer answers it itself, so the expectation is
    /// not forwarded.
    pub expects_continue: bool,
    /// The client wants its connection kept open after this exchange.
    pub client_keep: bool,
}

/// Rewrites an absolute-form request for the origin at `authority`: origin-form `path`,
/// `Host` from the target, hop-by-hop fields removed, the framing guards for `framing`
/// (`RequestHead::framing`, decided once by the caller), `Via: 1.x via`. An HTTP/1.0
/// client gets an HTTP/1.0 request upstream (so no chunked response it could not read),
/// with `Connection: keep-alive` so the upstream connection can be pooled.
pub fn request(
    head: RequestHead,
    framing: &Framing,
    authority: &Authority,
    path: String,
    via: &str,
) -> Request {
    rewrite(head, framing, host_header(authority), path, via, |_| {})
}

/// Rewrites a request a reverse proxy (the `edge`) received, for the origin it chose: as
/// [`request`], except that `Host` stays the one the client asked for (`host`, from its
/// `Host` field or an absolute-form target), and, with `client`, the client's address is
/// appended to `X-Forwarded-For` and `Forwarded` (RFC 7239; earlier hops' entries stay, the
/// last is this proxy's word) and `X-Forwarded-Proto` is set (a client's own is dropped: the
/// origin would believe it).
pub fn reverse_request(
    head: RequestHead,
    framing: &Framing,
    host: &str,
    path: String,
    via: &str,
    client: Option<IpAddr>,
) -> Request {
    rewrite(head, framing, host.to_string(), path, via, |headers| {
        if let Some(ip) = client {
            forwarded_fields(headers, ip, host);
        }
    })
}

/// The rewrite both kinds of proxy share; `more` adds fields before `Via`.
fn rewrite(
    mut head: RequestHead,
    framing: &Framing,
    host: String,
    path: String,
    via: &str,
    more: impl FnOnce(&mut Headers),
) -> Request {
    let Framing {
        body,
        codings,
        length,
    } = framing;
    let body = *body;
    let client_keep = head.keep_alive();
    let mut headers = std::mem::take(&mut head.headers);
    headers.remove_hop_by_hop();
    headers.remove("host");
    frame(&mut headers, body, codings.as_deref(), *length);
    headers.insert(0, "Host", host);
    let expects_continue = headers.has_token("expect", "100-continue");
    if expects_continue {
        headers.remove("expect");
    }
    if head.version == 0 {
        headers.push("Connection", "keep-alive");
    }
    more(&mut headers);
    push_via(&mut headers, head.version, via);
    Request {
        head: RequestHead {
            method: head.method,
            target: path,
            version: head.version,
            headers,
        },
        body,
        expects_continue,
        client_keep,
    }
}

/// `X-Forwarded-For`, `Forwarded` and `X-Forwarded-Proto` for a request from `client`.
fn forwarded_fields(headers: &mut Headers, client: IpAddr, host: &str) {
    let append = |headers: &mut Headers, name: &str, entry: String| {
        // Most requests carry none: the entry is the whole field.
        if headers.get(name).is_none() {
            headers.push(name, entry);
            return;
        }
        let mut all: Vec<Vec<u8>> = headers.get_all(name).map(<[u8]>::to_vec).collect();
        all.retain(|v| !v.iter().all(u8::is_ascii_whitespace));
        all.push(entry.into_bytes());
        headers.remove(name);
        headers.push(name, all.join(&b", "[..]));
    };
    append(headers, "X-Forwarded-For", client.to_string());
    // RFC 7239 §6: an IPv6 address is bracketed and quoted; `host` is quoted (it may carry a
    // port) and only given when it is a plain authority, so no quote or backslash is in it.
    let mut entry = match client {
        IpAddr::V4(v4) => format!("for={v4}"),
        IpAddr::V6(v6) => format!("for=\"[{v6}]\""),
    };
    if !host.is_empty() && Authority::parse(host, Some(80)).is_ok() {
        entry.push_str(";host=\"");
        entry.push_str(host);
        entry.push('"');
    }
    entry.push_str(";proto=http");
    append(headers, "Forwarded", entry);
    headers.remove("x-forwarded-proto");
    headers.push("X-Forwarded-Proto", "http");
}

/// Rewrites a response for the client: HTTP/1.1, hop-by-hop fields removed, the framing
/// guards for `framing` (from [`ResponseHead::body`]), `Via` with the upstream's version,
/// `Connection: close` unless `keep`, `Connection: keep-alive` for a kept HTTP/1.0 client.
/// To an HTTP/1.0 client a chunked body goes de-chunked and ended by the close, so the
/// head loses its `Transfer-Encoding` (RFC 9112 §6.1: none in a response to a 1.0
/// request; the caller must not keep the connection); a coding other than the chunking
/// cannot be undone for it, and is refused.
pub fn response(
    mut resp: ResponseHead,
    framing: BodyLength,
    keep: bool,
    client_version: u8,
    via: &str,
) -> Result<ResponseHead, Error> {
    let upstream_version = resp.version;
    let mut codings = http::transfer_codings(resp.version, &resp.headers)?;
    if client_version == 0 && framing == BodyLength::Chunked {
        match codings.as_deref() {
            Some([c]) if c.eq_ignore_ascii_case("chunked") => codings = None,
            _ => {
                return Err(Error::BadTransferEncoding(
                    "a transfer coding an HTTP/1.0 client cannot decode",
                ))
            }
        }
    }
    let length = http::content_length(&resp.headers)?;
    resp.version = 1;
    resp.headers.remove_hop_by_hop();
    frame(&mut resp.headers, framing, codings.as_deref(), length);
    push_via(&mut resp.headers, upstream_version, via);
    if !keep {
        resp.headers.push("Connection", "close");
    } else if client_version == 0 {
        resp.headers.push("Connection", "keep-alive");
    }
    Ok(resp)
}

/// The framing guards: with a transfer coding, `Content-Length` goes (Transfer-Encoding wins,
/// RFC 9112 §6.3) and the coding list is written as one field in one spelling; without one,
/// agreeing `Content-Length` values (`5, 5`, or the field twice) become one field with one
/// value, which a strict parser after Splicer reads as Splicer did. A message without a body
/// to frame (a HEAD response, a 304) keeps its length, as it describes the representation.
fn frame(
    headers: &mut Headers,
    framing: BodyLength,
    codings: Option<&[String]>,
    length: Option<u64>,
) {
    // Written from the values parsed before the hop-by-hop removal: a `Connection` field
    // naming Content-Length must not strip the framing off a message with a body.
    headers.remove("content-length");
    headers.remove("transfer-encoding");
    // With a coding the length goes, except on a message without a body to frame.
    let keep_length = codings.is_none() || framing == BodyLength::None;
    if let Some(codings) = codings {
        headers.push("Transfer-Encoding", codings.join(", "));
    }
    if let Some(n) = length.filter(|_| keep_length) {
        headers.push_decimal("Content-Length", n);
    }
}

/// `Via: 1.x name` for a message of HTTP/1.`version` (0 or 1, all the parser accepts),
/// written straight into the fields: it is added to every message.
fn push_via(headers: &mut Headers, version: u8, via: &str) {
    let minor = [b'0' + version % 10];
    headers.push_parts("Via", &[b"1.", &minor, b" ", via.as_bytes()]);
}

/// `Host` for an authority: brackets around IPv6, the port unless it is 80.
pub fn host_header(a: &Authority) -> String {
    let host = if a.host.contains(':') {
        format!("[{}]", a.host)
    } else {
        a.host.clone()
    };
    if a.port == 80 {
        host
    } else {
        format!("{host}:{}", a.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{split_absolute, Limits};

    fn req(raw: &str) -> Result<Request, Error> {
        let (head, _) = RequestHead::parse(raw.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let (authority, path) = split_absolute(&head.target).unwrap();
        let framing = head.framing()?;
        Ok(request(head, &framing, &authority, path, "splicer"))
    }

    /// `reverse_request` with the head's own framing.
    fn reverse(
        head: RequestHead,
        host: &str,
        path: String,
        via: &str,
        client: Option<IpAddr>,
    ) -> Result<Request, Error> {
        let framing = head.framing()?;
        Ok(reverse_request(head, &framing, host, path, via, client))
    }

    fn encoded(r: &Request) -> String {
        let mut out = Vec::new();
        r.head.encode(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn origin_form_host_and_via() {
        let r =
            req("GET http://Example.org:8080/a?b HTTP/1.1\r\nHost: wrong\r\nAccept: */*\r\n\r\n")
                .unwrap();
        assert_eq!(
            encoded(&r),
            "GET /a?b HTTP/1.1\r\nHost: example.org:8080\r\nAccept: */*\r\nVia: 1.1 splicer\r\n\r\n"
        );
        assert!(r.client_keep && !r.expects_continue);
        assert_eq!(r.body, BodyLength::None);
        let r = req("GET http://[::1]/ HTTP/1.1\r\n\r\n").unwrap();
        assert!(encoded(&r).contains("Host: [::1]\r\n"));
    }

    #[test]
    fn hop_by_hop_fields_end_here() {
        let r = req(
            "GET http://h/ HTTP/1.1\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\n\
             Proxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\n\
             Keep-Alive: 5\r\nUpgrade: h2c\r\nTrailer: X\r\nX-Keep: 1\r\n\r\n",
        )
        .unwrap();
        let text = encoded(&r);
        for gone in [
            "Connection",
            "X-Drop",
            "Proxy-Authorization",
            "TE:",
            "Keep-Alive",
            "Upgrade",
            "Trailer",
        ] {
            assert!(!text.contains(gone), "{gone} forwarded:\n{text}");
        }
        assert!(text.contains("X-Keep: 1\r\n"));
    }

    /// Transfer-Encoding wins over Content-Length, and the coding list is written anew.
    #[test]
    fn chunked_requests_lose_content_length_and_keep_one_coding_field() {
        let r = req(
            "POST http://h/ HTTP/1.1\r\nContent-Length: 6\r\nTransfer-Encoding: gzip\r\n\
             Transfer-Encoding:  CHUNKED \r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body, BodyLength::Chunked);
        let text = encoded(&r);
        assert!(
            !text.to_ascii_lowercase().contains("content-length"),
            "{text}"
        );
        assert_eq!(text.matches("Transfer-Encoding").count(), 1, "{text}");
        assert!(
            text.contains("Transfer-Encoding: gzip, chunked\r\n"),
            "{text}"
        );
    }

    #[test]
    fn framing_errors_refuse_the_request() {
        for raw in [
            "POST http://h/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nTransfer-Encoding: identity, chunked\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            "POST http://h/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST http://h/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        ] {
            assert!(req(raw).is_err(), "{raw:?} forwarded");
        }
    }

    /// A `Connection` field naming the framing fields does not take them off (the body
    /// would reach the origin as a request of its own).
    #[test]
    fn connection_cannot_strip_framing() {
        let r = req("POST http://h/ HTTP/1.1\r\nConnection: close, Content-Length\r\nContent-Length: 5\r\n\r\n")
            .unwrap();
        assert!(
            encoded(&r).contains("Content-Length: 5\r\n"),
            "{}",
            encoded(&r)
        );
        let r = req("POST http://h/ HTTP/1.1\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n")
            .unwrap();
        assert!(
            encoded(&r).contains("Transfer-Encoding: chunked\r\n"),
            "{}",
            encoded(&r)
        );
        let r = resp(
            "HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 3\r\n\r\n",
            true,
            1,
        );
        assert!(r.contains("Content-Length: 3\r\n"), "{r}");
    }

    /// Agreeing Content-Length values are written as one field with one value.
    #[test]
    fn content_length_is_written_once() {
        let r = req("POST http://h/ HTTP/1.1\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\n")
            .unwrap();
        let text = encoded(&r);
        assert_eq!(text.matches("Content-Length").count(), 1, "{text}");
        assert!(text.contains("Content-Length: 5\r\n"), "{text}");
        let r = resp("HTTP/1.1 200 OK\r\nContent-Length: 3,3\r\n\r\n", true, 1);
        assert!(r.contains("Content-Length: 3\r\nVia"), "{r}");
    }

    #[test]
    fn expect_continue_is_answered_here() {
        let r = req("POST http://h/ HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
            .unwrap();
        assert!(r.expects_continue);
        assert!(!encoded(&r).contains("Expect"));
        assert_eq!(r.body, BodyLength::Length(1));
    }

    #[test]
    fn http10_clients_get_http10_upstream_with_keep_alive() {
        let r = req("GET http://h/ HTTP/1.0\r\n\r\n").unwrap();
        let text = encoded(&r);
        assert!(text.starts_with("GET / HTTP/1.0\r\n"));
        assert!(text.contains("Connection: keep-alive\r\nVia: 1.0 splicer\r\n"));
        assert!(
            !r.client_keep,
            "an HTTP/1.0 client without keep-alive closes"
        );
        assert!(
            req("GET http://h/ HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
                .unwrap()
                .client_keep
        );
    }

    /// The edge keeps the client's Host and appends the client to the forwarding fields.
    #[test]
    fn reverse_requests_keep_host_and_say_who_asked() {
        let raw = "GET /a?b HTTP/1.1\r\nHost: Example.org:8080\r\nX-Forwarded-For: 10.0.0.1\r\n\
                   Forwarded: for=10.0.0.1\r\nX-Forwarded-Proto: https\r\nConnection: close\r\n\r\n";
        let (head, _) = RequestHead::parse(raw.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let r = reverse(
            head.clone(),
            "Example.org:8080",
            "/a?b".into(),
            "edge",
            Some(ip),
        )
        .unwrap();
        let text = encoded(&r);
        assert!(
            text.starts_with("GET /a?b HTTP/1.1\r\nHost: Example.org:8080\r\n"),
            "{text}"
        );
        assert!(
            text.contains("X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "Forwarded: for=10.0.0.1, for=192.0.2.7;host=\"Example.org:8080\";proto=http\r\n"
            ),
            "{text}"
        );
        assert_eq!(text.matches("X-Forwarded-Proto").count(), 1, "{text}");
        assert!(text.contains("X-Forwarded-Proto: http\r\n"), "{text}");
        assert!(!text.contains("Connection: close"), "{text}");
        assert!(text.ends_with("Via: 1.1 edge\r\n\r\n"), "{text}");
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let text = encoded(&reverse(head.clone(), "", "/".into(), "e", Some(v6)).unwrap());
        assert!(
            text.contains("for=\"[2001:db8::1]\";proto=http\r\n"),
            "{text}"
        );
        // A Host that is not a plain authority is not quoted into Forwarded.
        let text = encoded(&reverse(head.clone(), "a\"b", "/".into(), "e", Some(ip)).unwrap());
        assert!(text.contains("for=192.0.2.7;proto=http\r\n"), "{text}");
        let text = encoded(&reverse(head, "h", "/".into(), "e", None).unwrap());
        assert!(
            !text.contains("192.0.2.7"),
            "no client given, none added: {text}"
        );
        // Without earlier hops the client's entry is the whole field, once.
        let bare = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
        let (head, _) = RequestHead::parse(bare.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let text = encoded(&reverse(head, "h", "/".into(), "e", Some(ip)).unwrap());
        assert_eq!(text.matches("X-Forwarded-For").count(), 1, "{text}");
        assert!(text.contains("X-Forwarded-For: 192.0.2.7\r\n"), "{text}");
        assert!(
            text.contains("Forwarded: for=192.0.2.7;host=\"h\";proto=http\r\n"),
            "{text}"
        );
    }

    /// A chunked body reaches an HTTP/1.0 client de-chunked: no Transfer-Encoding in its
    /// head; a coding it could not decode is refused.
    #[test]
    fn http10_clients_get_no_transfer_encoding() {
        let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        let r = resp(chunked, false, 0);
        assert!(!r.to_lowercase().contains("transfer-encoding"), "{r}");
        assert!(r.contains("Connection: close\r\n"), "{r}");
        assert!(resp(chunked, true, 1).contains("Transfer-Encoding: chunked\r\n"));
        let gz = "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        let (head, _) = ResponseHead::parse(gz.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let framing = head.body(&crate::http::Method::Get).unwrap();
        assert!(response(head, framing, false, 0, "splicer").is_err());
    }

    fn resp(raw: &str, keep: bool, client_version: u8) -> String {
        let (head, _) = ResponseHead::parse(raw.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let framing = head.body(&crate::http::Method::Get).unwrap();
        let mut out = Vec::new();
        response(head, framing, keep, client_version, "splicer")
            .unwrap()
            .encode(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn responses() {
        let r = resp(
            "HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\n\r\n",
            true,
            1,
        );
        assert_eq!(
            r,
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nVia: 1.0 splicer\r\n\r\n"
        );
        let r = resp("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", false, 1);
        assert!(
            r.ends_with("Via: 1.1 splicer\r\nConnection: close\r\n\r\n"),
            "{r}"
        );
        let r = resp("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", true, 0);
        assert!(r.ends_with("Connection: keep-alive\r\n\r\n"), "{r}");
        let r = resp(
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: Chunked\r\n\r\n",
            true,
            1,
        );
        assert!(
            !r.contains("Content-Length") && r.contains("Transfer-Encoding: chunked\r\n"),
            "{r}"
        );
    }
}
