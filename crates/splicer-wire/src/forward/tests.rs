//! The rewrite's rules, one test each.

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

/// The parts written into the head spell what formatting the authority would.
#[test]
fn host_values_are_the_authority_in_its_one_spelling() {
    for (host, port) in [
        ("example.org", 80),
        ("example.org", 8080),
        ("h", 1),
        ("h", 65_535),
        ("::1", 80),
        ("fe80::1", 9),
        ("10.0.0.1", 0),
    ] {
        let a = Authority {
            host: host.into(),
            port,
        };
        let bracketed = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let want = if port == 80 {
            bracketed
        } else {
            format!("{bracketed}:{port}")
        };
        assert_eq!(host_header(&a), want);
        let (head, _) = RequestHead::parse(b"GET / HTTP/1.1\r\n\r\n", &Limits::default())
            .unwrap()
            .unwrap();
        let framing = head.framing().unwrap();
        let r = request(head, &framing, &a, "/".into(), "s");
        assert_eq!(r.head.headers.get("host"), Some(want.as_bytes()));
    }
}

#[test]
fn origin_form_host_and_via() {
    let r = req("GET http://Example.org:8080/a?b HTTP/1.1\r\nHost: wrong\r\nAccept: */*\r\n\r\n")
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
    let r = req(
        "POST http://h/ HTTP/1.1\r\nConnection: close, Content-Length\r\nContent-Length: 5\r\n\r\n",
    )
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
