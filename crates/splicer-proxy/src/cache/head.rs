//! The head a cached answer goes out with: built field by field (`full`), or, for a plain
//! hit, copied from the bytes the object keeps and finished with what changes per hit
//! (`plain_hit`). Both write the same bytes; the tests below hold them to it.

use std::ops::Range;
use std::time::SystemTime;

use splicer_cache::{CacheResult, HitHead, Object};
use splicer_wire::forward;
use splicer_wire::http::{write_decimal, BodyLength, Headers, Method, ResponseHead};

use super::hit::Send;
use crate::error::{Error, Side};

/// The head as the client gets it, field by field, and the part of the object's body that
/// follows it.
pub(super) fn full(
    object: &Object,
    send: &Send<'_>,
    now: SystemTime,
) -> Result<(ResponseHead, Range<usize>), Error> {
    let served = object.answer(send.method.as_str(), send.request, now);
    // A 304 and a HEAD answer have no body to frame; their length fields stay as they are.
    let bodiless = served.head.status == 304 || *send.method == Method::Head;
    let framing = if bodiless {
        BodyLength::None
    } else {
        BodyLength::Length(served.body.len() as u64)
    };
    let ttl = object.policy.time_to_live(now).as_secs();
    let member = send
        .result
        .member(send.via, false, Some(ttl), send.origin_status);
    let head = finish(served.head, framing, send, member)?;
    Ok((head, served.body))
}

/// The head as the client gets it: HTTP/1.1, `Via`, `Connection`, and `Cache-Status`.
pub(super) fn finish(
    mut head: ResponseHead,
    framing: BodyLength,
    send: &Send<'_>,
    member: String,
) -> Result<ResponseHead, Error> {
    head.version = 1;
    let mut head = forward::response(head, framing, send.keep, send.client_version, send.via)
        .map_err(|e| Error::unparsable(Side::Internal, e))?;
    if let Some(own) = send.own {
        head.headers.extend(own.iter());
    }
    head.headers.push("Cache-Status", member);
    Ok(head)
}

/// A plain hit's head (a fresh `GET` answered whole: no condition, no range, no field of
/// this client's own), from the bytes the object keeps: `None` when the request is not
/// plain or the object has none for this front end, and [`full`] must build it.
pub(super) fn plain_hit(object: &Object, send: &Send<'_>, now: SystemTime) -> Option<Vec<u8>> {
    let plain = *send.method == Method::Get
        && send.result == CacheResult::Hit
        && send.own.is_none()
        && send.origin_status.is_none()
        && object.status != 304
        && ["range", "if-none-match", "if-modified-since"]
            .iter()
            .all(|name| send.request.get(name).is_none());
    if !plain {
        return None;
    }
    let made = object.hit_head.get_or_make(|| make(object, send.via))?;
    if &*made.via != send.via {
        // Another front end's name: the object keeps one front end's head.
        return None;
    }
    let via = send.via.as_bytes();
    let mut out = Vec::with_capacity(made.len() + 2 * via.len() + 80);
    out.extend_from_slice(&made.before_age);
    out.extend_from_slice(b"Age: ");
    write_decimal(&mut out, object.policy.age(now).as_secs());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&made.after_age);
    // As `forward::response` writes it, after `Via`.
    if !send.keep {
        out.extend_from_slice(b"Connection: close\r\n");
    } else if send.client_version == 0 {
        out.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    // `CacheResult::member` for a hit.
    out.extend_from_slice(b"Cache-Status: ");
    out.extend_from_slice(via);
    out.extend_from_slice(b"; hit; ttl=");
    write_decimal(&mut out, object.policy.time_to_live(now).as_secs());
    out.extend_from_slice(b"\r\n\r\n");
    Some(out)
}

/// The object's plain-hit head for the front end named `via`, cut from a head [`full`]
/// builds for a kept HTTP/1.1 client (no `Connection` field) around its `Age` line and
/// before its `Cache-Status` line. A field value holds no line break (the parser refuses
/// them), so a line starting `Age: ` is the field `full` wrote: the stored fields have
/// none (`Object::answer` takes the stored `Age` out), and its `Cache-Status` is the last.
fn make(object: &Object, via: &str) -> Option<HitHead> {
    let request = Headers::default();
    let send = Send {
        via,
        method: &Method::Get,
        request: &request,
        client_version: 1,
        keep: true,
        result: CacheResult::Hit,
        origin_status: None,
        own: None,
        work: None,
    };
    let (head, _) = full(object, &send, SystemTime::now()).ok()?;
    let mut bytes = Vec::with_capacity(512);
    head.encode(&mut bytes);
    let age = find(&bytes, b"\r\nAge: ")? + 2;
    let age_end = age + find(&bytes[age..], b"\r\n")? + 2;
    let status = rfind(&bytes, b"\r\nCache-Status: ")? + 2;
    if status < age_end {
        return None;
    }
    Some(HitHead {
        via: via.into(),
        before_age: bytes[..age].into(),
        after_age: bytes[age_end..status].into(),
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use splicer_cache::{Ask, Body, Policy};

    use super::*;

    fn fields(list: &[(&str, &str)]) -> Headers {
        let mut h = Headers::default();
        for (n, v) in list {
            h.push(n, *v);
        }
        h
    }

    /// An object stored `ago` before now, as the store keeps it (its fields without
    /// hop-by-hop and framing fields).
    fn object(status: u16, list: &[(&str, &str)], body: &[u8], ago: u64) -> Object {
        let headers = Object::stored_fields(fields(list));
        let request = Headers::default();
        let ask = Ask {
            method: "GET",
            headers: &request,
            host: "h:80",
        };
        let at = SystemTime::now() - Duration::from_secs(ago);
        Object {
            status,
            reason: "Whatever It Was".into(),
            policy: Policy::new(ask, status, &headers, at, 0.1),
            headers,
            body: Body::Memory(Bytes::copy_from_slice(body)),
            hit_head: Default::default(),
        }
    }

    fn send<'a>(via: &'a str, request: &'a Headers, keep: bool, version: u8) -> Send<'a> {
        Send {
            via,
            method: &Method::Get,
            request,
            client_version: version,
            keep,
            result: CacheResult::Hit,
            origin_status: None,
            own: None,
            work: None,
        }
    }

    fn encoded(object: &Object, send: &Send<'_>, now: SystemTime) -> Vec<u8> {
        let (head, body) = full(object, send, now).expect("a head");
        assert_eq!(body, 0..object.body.len() as usize, "a plain hit is whole");
        let mut out = Vec::new();
        head.encode(&mut out);
        out
    }

    #[test]
    fn a_plain_hit_gets_the_bytes_the_full_head_has() {
        let objects = [
            object(200, &[("Cache-Control", "max-age=600")], b"hello", 0),
            object(
                200,
                &[
                    ("Date", "Tue, 01 Dec 2026 10:00:00 GMT"),
                    ("Cache-Control", "public, max-age=3600"),
                    ("Age", "17"),
                    ("Content-Type", "text/html; charset=utf-8"),
                    ("ETag", "\"abc\""),
                    ("Via", "1.0 elsewhere"),
                    ("Cache-Status", "origin-cache; hit"),
                    ("Set-Cookie2", "not the one refused"),
                    ("Content-Length", "3"),
                    ("x-age", "Age: 5"),
                ],
                b"abc",
                30,
            ),
            object(203, &[("Expires", "Thu, 01 Dec 2050 16:00:00 GMT")], b"", 5),
            object(
                301,
                &[("Location", "/there"), ("Cache-Control", "max-age=9")],
                b"x",
                2,
            ),
            object(
                200,
                &[("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")],
                b"y",
                100,
            ),
            // Fields named in `Connection` and hop-by-hop fields never reach the store.
            object(
                200,
                &[
                    ("Connection", "x-gone, keep-alive"),
                    ("X-Gone", "1"),
                    ("Keep-Alive", "timeout=5"),
                    ("Cache-Control", "max-age=60"),
                ],
                &[7u8; 300],
                1,
            ),
        ];
        let requests = [
            fields(&[]),
            fields(&[("Host", "h"), ("Accept", "*/*"), ("User-Agent", "curl")]),
            // Conditions that do not hold: the whole answer, by the long way.
            fields(&[("If-None-Match", "\"other\"")]),
        ];
        let start = SystemTime::now();
        let mut fast = 0;
        for (i, object) in objects.iter().enumerate() {
            for via in ["splicer", "edge-1"] {
                for request in &requests {
                    for (keep, version) in [(true, 1), (false, 1), (true, 0), (false, 0)] {
                        let send = send(via, request, keep, version);
                        // Before the object was stored, at its arrival, past its lifetime.
                        for later in [0, 1, 59, 3_600, 400_000] {
                            let now = start + Duration::from_secs(later);
                            let slow = encoded(object, &send, now);
                            match plain_hit(object, &send, now) {
                                Some(quick) => {
                                    fast += 1;
                                    assert_eq!(
                                        String::from_utf8_lossy(&quick),
                                        String::from_utf8_lossy(&slow),
                                        "object {i}, {via}, keep {keep}, 1.{version}, +{later}s"
                                    );
                                }
                                None => assert!(
                                    request.get("if-none-match").is_some() || via != "splicer",
                                    "object {i}: a plain hit took the long way"
                                ),
                            }
                        }
                    }
                }
            }
        }
        // Every object, both plain requests, four connection kinds, five times; the second
        // front end's name is not the one the object kept.
        assert_eq!(fast, objects.len() * 2 * 4 * 5);
    }

    #[test]
    fn only_plain_hits_are_copied() {
        let o = object(
            200,
            &[("Cache-Control", "max-age=600"), ("ETag", "\"e\"")],
            b"0123",
            0,
        );
        let now = SystemTime::now();
        let plain = Headers::default();
        assert!(plain_hit(&o, &send("s", &plain, true, 1), now).is_some());
        for (name, value) in [
            ("Range", "bytes=0-1"),
            ("If-None-Match", "\"e\""),
            ("If-Modified-Since", "Tue, 01 Dec 2026 10:00:00 GMT"),
        ] {
            let request = fields(&[(name, value)]);
            assert_eq!(
                plain_hit(&o, &send("s", &request, true, 1), now),
                None,
                "{name}"
            );
        }
        let head_request = Send {
            method: &Method::Head,
            ..send("s", &plain, true, 1)
        };
        assert_eq!(plain_hit(&o, &head_request, now), None, "HEAD");
        let own = fields(&[("Set-Cookie", "mine")]);
        let with_own = Send {
            own: Some(&own),
            ..send("s", &plain, true, 1)
        };
        assert_eq!(
            plain_hit(&o, &with_own, now),
            None,
            "a field of one client's own"
        );
        let refreshed = Send {
            result: CacheResult::Refresh,
            origin_status: Some(304),
            ..send("s", &plain, true, 1)
        };
        assert_eq!(plain_hit(&o, &refreshed, now), None, "a revalidated answer");
    }

    #[test]
    fn a_changed_copy_is_not_served_the_original_head() {
        let o = object(
            200,
            &[("Cache-Control", "max-age=600"), ("X-V", "1")],
            b"a",
            0,
        );
        let plain = Headers::default();
        let s = send("s", &plain, true, 1);
        let now = SystemTime::now();
        assert!(plain_hit(&o, &s, now).is_some());
        let mut copy = o.clone();
        copy.headers.remove("x-v");
        copy.headers.push("X-V", "2");
        let quick = plain_hit(&copy, &s, now).expect("made again");
        assert_eq!(quick, encoded(&copy, &s, now));
        assert!(String::from_utf8_lossy(&quick).contains("X-V: 2\r\n"));
    }
}
