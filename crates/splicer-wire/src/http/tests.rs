//! Unit tests of `http`.

use super::*;
use proptest::prelude::*;

const L: Limits = Limits {
    max_head: 1024,
    max_headers: 16,
};

#[test]
fn request_round_trip() {
    let raw = b"GET http://example.org/a?b HTTP/1.1\r\nHost: example.org\r\nX-A: 1\r\n\r\nBODY";
    let (head, n) = RequestHead::parse(raw, &L).unwrap().unwrap();
    assert_eq!(n, raw.len() - 4);
    assert_eq!(head.method, Method::Get);
    assert_eq!(head.headers.get("host"), Some(&b"example.org"[..]));
    let mut out = Vec::new();
    head.encode(&mut out);
    assert_eq!(out, &raw[..n]);
    assert_eq!(RequestHead::parse(&raw[..10], &L).unwrap(), None);
}

#[test]
fn limits() {
    let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(2000));
    assert_eq!(
        RequestHead::parse(big.as_bytes(), &L),
        Err(Error::TooLarge(1024))
    );
    // Partial but already over the limit: no need to wait for the rest.
    assert_eq!(
        RequestHead::parse(&big.as_bytes()[..1500], &L),
        Err(Error::TooLarge(1024))
    );
    let many: String = (0..20).map(|i| format!("H{i}: v\r\n")).collect();
    let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
    assert_eq!(
        RequestHead::parse(many.as_bytes(), &L),
        Err(Error::TooManyHeaders(16))
    );
    assert!(RequestHead::parse(b"GET / FOO/1.1\r\n\r\n", &L).is_err());
}

#[test]
fn response_framing() {
    let parse = |s: &str| ResponseHead::parse(s.as_bytes(), &L).unwrap().unwrap().0;
    assert_eq!(
        parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n").body(&Method::Get),
        Ok(BodyLength::Length(5))
    );
    assert_eq!(
        parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n").body(&Method::Head),
        Ok(BodyLength::None)
    );
    assert_eq!(
        parse("HTTP/1.1 304 NM\r\nContent-Length: 5\r\n\r\n").body(&Method::Get),
        Ok(BodyLength::None)
    );
    assert_eq!(
        parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n").body(&Method::Get),
        Ok(BodyLength::Chunked)
    );
    assert_eq!(
        parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n").body(&Method::Get),
        Ok(BodyLength::Close)
    );
    assert_eq!(
        parse("HTTP/1.0 200 OK\r\n\r\n").body(&Method::Get),
        Ok(BodyLength::Close)
    );
    assert_eq!(
        parse("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n").body(&Method::Get),
        Ok(BodyLength::Length(5))
    );
    assert_eq!(
        parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n")
            .body(&Method::Get),
        Err(Error::ContentLength)
    );
    assert_eq!(
        parse("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").body(&Method::Get),
        Err(Error::ContentLength)
    );
    let r = parse("HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n");
    assert!(r.keep_alive());
    assert!(!parse("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n").keep_alive());
}

/// Found by the `forward_response` fuzz target: `002` parsed as status 2 and went out
/// as `HTTP/1.1 2 OK`.
#[test]
fn status_codes_below_100_are_malformed() {
    assert!(ResponseHead::parse(b"HTTP/1.1 002 OK\r\n\r\n", &L).is_err());
    assert!(ResponseHead::parse(b"HTTP/1.1 099 OK\r\n\r\n", &L).is_err());
    assert!(ResponseHead::parse(b"HTTP/1.1 100 Continue\r\n\r\n", &L).is_ok());
}

#[test]
fn request_framing() {
    let parse = |s: &str| RequestHead::parse(s.as_bytes(), &L).unwrap().unwrap().0;
    assert_eq!(
        parse("POST / HTTP/1.1\r\nContent-Length: 7\r\n\r\n").body(),
        Ok(BodyLength::Length(7))
    );
    assert_eq!(
        parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").body(),
        Ok(BodyLength::Chunked)
    );
    assert!(parse("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n")
        .body()
        .is_err());
    assert_eq!(parse("GET / HTTP/1.1\r\n\r\n").body(), Ok(BodyLength::None));
    assert_eq!(
        parse("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: Chunked\r\n\r\n")
            .body(),
        Ok(BodyLength::Chunked)
    );
}

/// The framing is decided from everything it is written from: a malformed length beside a
/// coding is refused, not forwarded; the codings and length come back for the rewrite.
#[test]
fn request_framing_keeps_what_it_was_read_from() {
    let parse = |s: &str| RequestHead::parse(s.as_bytes(), &L).unwrap().unwrap().0;
    let both = parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n");
    assert_eq!(
        both.framing(),
        Ok(Framing {
            body: BodyLength::Chunked,
            codings: Some(vec!["chunked".into()]),
            length: Some(5),
        })
    );
    let bad_length =
        parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5x\r\n\r\n");
    assert!(bad_length.framing().is_err());
    assert!(
        bad_length.body().is_err(),
        "body() is the framing's decision"
    );
    let plain = parse("GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(
        plain.framing().map(|f| (f.body, f.length)),
        Ok((BodyLength::None, Some(0)))
    );
}

/// Transfer-coding lists that parsers disagree on are refused on requests and responses.
#[test]
fn ambiguous_transfer_codings_are_refused() {
    for te in [
        "identity, chunked",
        "chunked, chunked",
        "chunked\r\nTransfer-Encoding: chunked",
        "chunked, identity",
        "chunked, gzip",
        "chun ked",
        "\"chunked\"",
        "chunked;q=1",
        ",",
    ] {
        let req = format!("POST / HTTP/1.1\r\nTransfer-Encoding: {te}\r\n\r\n");
        let (h, _) = RequestHead::parse(req.as_bytes(), &L).unwrap().unwrap();
        assert!(h.body().is_err(), "request with {te:?}: {:?}", h.body());
    }
    for te in [
        "identity, chunked",
        "chunked, chunked",
        "identity",
        "chun ked",
    ] {
        let resp = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: {te}\r\n\r\n");
        let (h, _) = ResponseHead::parse(resp.as_bytes(), &L).unwrap().unwrap();
        assert!(h.body(&Method::Get).is_err(), "response with {te:?}");
    }
}

/// HTTP/1.0 has no transfer codings: a message with one has faulty framing (RFC 9112
/// §6.1), even with a Content-Length.
#[test]
fn http10_with_transfer_encoding_is_refused() {
    let (h, _) = RequestHead::parse(
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        &L,
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        h.body(),
        Err(Error::BadTransferEncoding("Transfer-Encoding on HTTP/1.0"))
    );
    let (r, _) = ResponseHead::parse(b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", &L)
        .unwrap()
        .unwrap();
    assert!(r.body(&Method::Get).is_err());
}

#[test]
fn hop_by_hop_removed() {
    let mut h = Headers::default();
    h.push("Connection", "close, X-Secret");
    h.push("X-Secret", "1");
    h.push("Proxy-Authorization", "Basic x");
    h.push("Transfer-Encoding", "chunked");
    h.push("Accept", "*/*");
    h.remove_hop_by_hop();
    let names: Vec<_> = h.iter().map(|h| h.name).collect();
    assert_eq!(names, ["Transfer-Encoding", "Accept"]);
}

#[test]
fn targets() {
    let (a, p) = split_absolute("http://Example.org:8080/x?y").unwrap();
    assert_eq!(
        (a.host.as_str(), a.port, p.as_str()),
        ("example.org", 8080, "/x?y")
    );
    let (a, p) = split_absolute("http://[::1]/").unwrap();
    assert_eq!((a.host.as_str(), a.port, p.as_str()), ("::1", 80, "/"));
    assert_eq!(split_absolute("http://h").unwrap().1, "/");
    assert!(split_absolute("ftp://h/").is_err());
    assert!(split_absolute("/relative").is_err());
    assert!(split_absolute("http://u@h/").is_err());
    assert_eq!(Authority::parse("h:443", None).unwrap().port, 443);
    assert!(Authority::parse("h", None).is_err());
    assert!(Authority::parse("h:0", None).is_err());
    assert!(Authority::parse("h:99999", None).is_err());
    assert_eq!(Authority::parse("h:65535", None).unwrap().port, 65535);
}

#[test]
fn a_target_becomes_its_origin_form_in_place() {
    for (target, want) in [
        ("http://h/x?y", "/x?y"),
        ("http://h", "/"),
        ("http://h?q=1", "/?q=1"),
        ("http://h:81//a", "//a"),
        ("HTTP://h/", "/"),
    ] {
        let (_, rest) = absolute_form(target).unwrap();
        assert_eq!(origin_form(rest), want, "{target}");
        let owned = target.to_string();
        let (at, room) = (owned.as_ptr(), owned.capacity());
        let path = into_origin_form(owned, target.len() - rest.len());
        assert_eq!(path, want, "{target}");
        // The target's own allocation, not a new one.
        assert_eq!((path.as_ptr(), path.capacity()), (at, room), "{target}");
    }
}

/// A head parsed into an earlier head's target and table is the head `parse` gives, and
/// keeps nothing of the earlier one (its fields, a longer target).
#[test]
fn heads_parsed_into_earlier_tables_are_the_heads_parsed_anew() {
    let limits = Limits {
        max_head: 4096,
        max_headers: 64,
    };
    let first = b"POST http://a.example/a/long/path?with=query HTTP/1.1\r\nHost: a.example\r\n\
                  Cookie: one=secret\r\nX-Only-First: 1\r\nContent-Length: 0\r\n\r\n";
    let second = b"GET / HTTP/1.0\r\nHost: b\r\n\r\n";
    let (mut target, mut table) = (String::new(), Headers::default());
    let (old, _) = RequestHead::parse_reusing(first, &limits, &mut target, &mut table)
        .unwrap()
        .unwrap();
    let (mut target, mut table) = (old.target, old.headers);
    // A partial head takes nothing.
    assert!(
        RequestHead::parse_reusing(&second[..5], &limits, &mut target, &mut table)
            .unwrap()
            .is_none()
    );
    assert!(table.allocated() > 0 && target.capacity() > 0);
    let (again, n) = RequestHead::parse_reusing(second, &limits, &mut target, &mut table)
        .unwrap()
        .unwrap();
    assert_eq!(
        (again, n),
        RequestHead::parse(second, &limits).unwrap().unwrap()
    );
    let resp = b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nContent-Length: 2\r\n\r\n";
    let other = b"HTTP/1.1 204 No Content\r\nX-B: 2\r\n\r\n";
    let (old, _) = ResponseHead::parse_reusing(resp, &limits, &mut Headers::default())
        .unwrap()
        .unwrap();
    let mut table = old.headers;
    let (again, n) = ResponseHead::parse_reusing(other, &limits, &mut table)
        .unwrap()
        .unwrap();
    assert_eq!(
        (again, n),
        ResponseHead::parse(other, &limits).unwrap().unwrap()
    );
}

/// A port has one spelling; a colon outside brackets is not part of a host name.
#[test]
fn odd_ports_and_colons_are_refused() {
    for bad in [
        "127.0.0.1:+29002",
        "127.0.0.1:029002",
        "127.0.0.1:08080",
        "127.0.0.1:-1",
        "127.0.0.1: 80",
        "127.0.0.1:80 ",
        "127.0.0.1:0x50",
        "127.0.0.1:",
        "127.0.0.1:65536",
        "a:b:29002",
        "::1:80",
        "[::1]:+80",
        "[::1]:080",
    ] {
        assert!(
            Authority::parse(bad, Some(80)).is_err(),
            "{bad} accepted as {:?}",
            Authority::parse(bad, Some(80))
        );
    }
    assert!(split_absolute("http://127.0.0.1:+29002/").is_err());
    assert!(split_absolute("http://a:b:29002/").is_err());
    assert_eq!(
        split_absolute("http://127.0.0.1:29002/").unwrap().0.port,
        29002
    );
    assert_eq!(
        Authority::parse("[2001:db8::1]:443", None)
            .unwrap()
            .to_string(),
        "[2001:db8::1]:443"
    );
}

proptest! {
    #[test]
    fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Ok(Some((h, _))) = RequestHead::parse(&data, &L) {
            let _ = h.body();
            let _ = split_absolute(&h.target);
            let _ = Authority::parse(&h.target, None);
        }
        if let Ok(Some((h, _))) = ResponseHead::parse(&data, &L) {
            let _ = h.body(&Method::Get);
        }
    }

    #[test]
    fn headers_round_trip(vals in proptest::collection::vec("[a-zA-Z0-9 ,;=/]{0,40}", 0..10)) {
        let mut head = ResponseHead::new(200, "OK");
        for (i, v) in vals.iter().enumerate() {
            head.headers.push(&format!("X-H{i}"), v.trim().as_bytes());
        }
        let mut out = Vec::new();
        head.encode(&mut out);
        let (back, n) = ResponseHead::parse(&out, &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(n, out.len());
        prop_assert_eq!(back, head);
    }
}

#[test]
fn method_classes_follow_rfc_9110() {
    for m in ["GET", "HEAD", "OPTIONS", "TRACE"] {
        let m = Method::parse(m);
        assert!(m.is_safe() && m.is_idempotent(), "{m}");
    }
    for m in ["PUT", "DELETE"] {
        let m = Method::parse(m);
        assert!(!m.is_safe() && m.is_idempotent(), "{m}");
    }
    for m in ["POST", "PATCH", "CONNECT", "get", "PURGE", "Get"] {
        let m = Method::parse(m);
        assert!(
            !m.is_idempotent(),
            "{m}: not idempotent (names are case-sensitive)"
        );
    }
}

#[test]
fn a_method_is_kept_as_written() {
    for m in ["GET", "get", "PURGE", "BREW", "M-SEARCH"] {
        assert_eq!(Method::parse(m).as_str(), m);
    }
    assert_eq!(Method::parse("get"), Method::Other("get".into()));
    assert_ne!(Method::parse("get"), Method::Get);
}
