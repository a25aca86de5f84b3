use std::time::{Duration, SystemTime};

use super::*;
use crate::policy::Ask;

fn object(fields: &[(&str, &str)], body: &[u8]) -> Object {
    let mut headers = Headers::default();
    for (n, v) in fields {
        headers.push(n, *v);
    }
    let req = Headers::default();
    let ask = Ask {
        method: "GET",
        headers: &req,
        host: "h:80",
    };
    Object {
        status: 200,
        reason: "OK".into(),
        policy: Policy::new(ask, 200, &headers, SystemTime::now(), 0.1),
        headers,
        body: crate::object::Body::Memory(Bytes::copy_from_slice(body)),
        hit_head: Default::default(),
    }
}

fn request(fields: &[(&str, &str)]) -> Headers {
    let mut h = Headers::default();
    for (n, v) in fields {
        h.push(n, *v);
    }
    h
}

fn field<'a>(s: &'a Served, name: &str) -> Option<&'a str> {
    s.head
        .headers
        .get(name)
        .map(|v| std::str::from_utf8(v).unwrap())
}

const LM: &str = "Mon, 01 Jan 2024 00:00:00 GMT";

#[test]
fn whole_answer_has_length_and_age() {
    let o = object(&[("Cache-Control", "max-age=60"), ("Age", "7")], b"hello");
    let s = o.answer("GET", &Headers::default(), SystemTime::now());
    assert_eq!((s.head.status, s.body.clone()), (200, 0..5));
    assert_eq!(field(&s, "content-length"), Some("5"));
    let age: u64 = field(&s, "age").unwrap().parse().unwrap();
    assert!((7..=8).contains(&age), "age {age}");
    assert_eq!(s.head.headers.get_all("age").count(), 1);
    let later = o.answer(
        "GET",
        &Headers::default(),
        SystemTime::now() + Duration::from_secs(30),
    );
    let age: u64 = field(&later, "age").unwrap().parse().unwrap();
    assert!(age >= 37, "age grows while held: {age}");
}

#[test]
fn head_gets_the_head_only() {
    let o = object(&[], b"hello");
    let s = o.answer("HEAD", &Headers::default(), SystemTime::now());
    assert_eq!(s.body, 0..0);
    assert_eq!(field(&s, "content-length"), Some("5"));
}

#[test]
fn conditional_requests_get_304() {
    let o = object(
        &[
            ("ETag", "\"v1\""),
            ("Last-Modified", LM),
            ("Cache-Control", "max-age=9"),
            ("X-Other", "1"),
        ],
        b"x",
    );
    let now = SystemTime::now();
    let s = o.answer(
        "GET",
        &request(&[("If-None-Match", "\"v0\", W/\"v1\"")]),
        now,
    );
    assert_eq!(s.head.status, 304);
    assert_eq!(s.body, 0..0);
    assert_eq!(field(&s, "etag"), Some("\"v1\""));
    assert_eq!(field(&s, "cache-control"), Some("max-age=9"));
    assert!(field(&s, "x-other").is_none() && field(&s, "content-length").is_none());
    assert_eq!(
        o.answer("GET", &request(&[("If-None-Match", "\"v2\"")]), now)
            .head
            .status,
        200
    );
    assert_eq!(
        o.answer("GET", &request(&[("If-None-Match", "*")]), now)
            .head
            .status,
        304
    );
    // If-Modified-Since: not modified since a later date, modified since an earlier one.
    let later = "Tue, 02 Jan 2024 00:00:00 GMT";
    let earlier = "Sun, 31 Dec 2023 00:00:00 GMT";
    assert_eq!(
        o.answer("GET", &request(&[("If-Modified-Since", later)]), now)
            .head
            .status,
        304
    );
    assert_eq!(
        o.answer("GET", &request(&[("If-Modified-Since", LM)]), now)
            .head
            .status,
        304
    );
    assert_eq!(
        o.answer("GET", &request(&[("If-Modified-Since", earlier)]), now)
            .head
            .status,
        200
    );
    // If-None-Match wins over If-Modified-Since.
    let both = request(&[("If-None-Match", "\"v2\""), ("If-Modified-Since", later)]);
    assert_eq!(o.answer("GET", &both, now).head.status, 200);
}

#[test]
fn ranges() {
    let o = object(&[("ETag", "\"v1\""), ("Last-Modified", LM)], b"0123456789");
    let now = SystemTime::now();
    let get = |range: &str| o.answer("GET", &request(&[("Range", range)]), now);
    let s = get("bytes=2-4");
    assert_eq!((s.head.status, s.body.clone()), (206, 2..5));
    assert_eq!(field(&s, "content-range"), Some("bytes 2-4/10"));
    assert_eq!(field(&s, "content-length"), Some("3"));
    assert_eq!(get("bytes=7-").body, 7..10);
    assert_eq!(get("bytes=-3").body, 7..10);
    assert_eq!(get("bytes=5-100").body, 5..10);
    let s = get("bytes=10-");
    assert_eq!(s.head.status, 416);
    assert_eq!(field(&s, "content-range"), Some("bytes */10"));
    // Several ranges, other units, nonsense: the whole.
    for whole in [
        "bytes=0-1,3-4",
        "items=0-1",
        "bytes=x-2",
        "bytes=4-2",
        "bytes=-",
    ] {
        assert_eq!(get(whole).head.status, 200, "{whole}");
    }
    // If-Range: only a strong ETag or the exact date lets the range apply.
    let with = |cond: &str| {
        o.answer(
            "GET",
            &request(&[("Range", "bytes=0-0"), ("If-Range", cond)]),
            now,
        )
        .head
        .status
    };
    assert_eq!(with("\"v1\""), 206);
    assert_eq!(with("\"v0\""), 200);
    assert_eq!(with(LM), 206);
    assert_eq!(with("Tue, 02 Jan 2024 00:00:00 GMT"), 200);
    // Not for HEAD.
    assert_eq!(
        o.answer("HEAD", &request(&[("Range", "bytes=0-0")]), now)
            .head
            .status,
        200
    );
}

#[test]
fn stored_fields_lose_hop_by_hop_and_framing() {
    let h = request(&[
        ("Connection", "close, X-Hop"),
        ("X-Hop", "1"),
        ("Transfer-Encoding", "chunked"),
        ("Content-Length", "5"),
        ("ETag", "\"a\""),
    ]);
    let kept = Object::stored_fields(h);
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept.get("etag").is_some());
}
