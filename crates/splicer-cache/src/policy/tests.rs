//! One test per rule of RFC 9111 / 5861 the policy applies; each fails if the rule is
//! dropped.

use std::time::{Duration, SystemTime};

use super::*;

fn headers(fields: &[(&str, &str)]) -> Headers {
    let mut h = Headers::default();
    for (n, v) in fields {
        h.push(n, *v);
    }
    h
}

fn ask<'a>(method: &'a str, h: &'a Headers) -> Ask<'a> {
    Ask {
        method,
        headers: h,
        host: "example.org:80",
    }
}

fn policy_at(req: &[(&str, &str)], resp: &[(&str, &str)], status: u16, now: SystemTime) -> Policy {
    let r = headers(req);
    Policy::new(ask("GET", &r), status, &headers(resp), now, 0.1)
}

fn policy(resp: &[(&str, &str)]) -> Policy {
    policy_at(&[], resp, 200, SystemTime::now())
}

fn check(p: &Policy, req: &[(&str, &str)], at: SystemTime) -> Check {
    let r = headers(req);
    p.check(ask("GET", &r), at)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn freshness_sources() {
    let now = SystemTime::now();
    let date = httpdate::fmt_http_date(now);
    let in_100 = httpdate::fmt_http_date(now + secs(100));
    let lm = httpdate::fmt_http_date(now - secs(1000));
    let ttl = |resp: &[(&str, &str)]| policy_at(&[], resp, 200, now).time_to_live(now).as_secs();
    assert_eq!(ttl(&[("Cache-Control", "max-age=60")]), 60);
    // s-maxage wins for a shared cache, over max-age and Expires.
    assert_eq!(
        ttl(&[
            ("Cache-Control", "max-age=60, s-maxage=30"),
            ("Expires", &in_100)
        ]),
        30
    );
    // max-age wins over Expires.
    assert_eq!(
        ttl(&[
            ("Cache-Control", "max-age=60"),
            ("Date", &date),
            ("Expires", &in_100)
        ]),
        60
    );
    let t = ttl(&[("Date", &date), ("Expires", &in_100)]);
    assert!((99..=100).contains(&t), "{t}");
    // Heuristic: 10 % of the time since Last-Modified.
    let t = ttl(&[("Date", &date), ("Last-Modified", &lm)]);
    assert!((99..=100).contains(&t), "{t}");
    // An Age already spent counts.
    assert_eq!(ttl(&[("Cache-Control", "max-age=60"), ("Age", "50")]), 10);
    // An invalid Expires is in the past.
    assert_eq!(ttl(&[("Expires", "0")]), 0);
}

#[test]
fn what_a_shared_cache_may_not_store() {
    assert!(policy(&[("Cache-Control", "max-age=60")]).storable());
    assert!(!policy(&[("Cache-Control", "no-store, max-age=60")]).storable());
    assert!(!policy(&[("Cache-Control", "private, max-age=60")]).storable());
    let now = SystemTime::now();
    assert!(!policy_at(
        &[("Cache-Control", "no-store")],
        &[("Cache-Control", "max-age=60")],
        200,
        now
    )
    .storable());
    // A request with Authorization: only with public, s-maxage or must-revalidate.
    let auth = [("Authorization", "Basic eDp5")];
    assert!(!policy_at(&auth, &[("Cache-Control", "max-age=60")], 200, now).storable());
    assert!(policy_at(&auth, &[("Cache-Control", "public, max-age=60")], 200, now).storable());
    assert!(policy_at(&auth, &[("Cache-Control", "s-maxage=60")], 200, now).storable());
    // A status not cacheable by default needs explicit freshness.
    assert!(!policy_at(&[], &[], 302, now).storable());
    assert!(policy_at(&[], &[("Cache-Control", "max-age=5")], 302, now).storable());
    assert!(!policy_at(&[], &[("Cache-Control", "max-age=5")], 206, now).storable());
}

#[test]
fn no_cache_and_revalidate_directives() {
    let now = SystemTime::now();
    // no-cache: stored, but always revalidated.
    let p = policy(&[("Cache-Control", "no-cache, max-age=60")]);
    assert!(p.storable());
    assert_eq!(check(&p, &[], now), Check::Stale);
    // proxy-revalidate and must-revalidate: no stale serving even when the client allows.
    let p = policy(&[("Cache-Control", "max-age=1, must-revalidate")]);
    assert_eq!(
        check(&p, &[("Cache-Control", "max-stale")], now + secs(5)),
        Check::Stale
    );
    let p = policy(&[("Cache-Control", "max-age=1")]);
    assert_eq!(
        check(&p, &[("Cache-Control", "max-stale")], now + secs(5)),
        Check::Fresh
    );
    assert_eq!(
        check(&p, &[("Cache-Control", "max-stale=10")], now + secs(5)),
        Check::Fresh
    );
    assert_eq!(
        check(&p, &[("Cache-Control", "max-stale=2")], now + secs(5)),
        Check::Stale
    );
    let p = policy(&[("Cache-Control", "max-age=60, proxy-revalidate")]);
    assert_eq!(
        check(&p, &[], now),
        Check::Stale,
        "proxy-revalidate binds shared caches"
    );
}

#[test]
fn request_directives() {
    let now = SystemTime::now();
    let p = policy(&[("Cache-Control", "max-age=60")]);
    assert_eq!(check(&p, &[], now + secs(10)), Check::Fresh);
    assert_eq!(check(&p, &[], now + secs(61)), Check::Stale);
    assert_eq!(
        check(&p, &[("Cache-Control", "no-cache")], now),
        Check::Stale
    );
    assert_eq!(check(&p, &[("Pragma", "no-cache")], now), Check::Stale);
    assert_eq!(
        check(&p, &[("Cache-Control", "max-age=5")], now + secs(10)),
        Check::Stale
    );
    assert_eq!(
        check(&p, &[("Cache-Control", "max-age=20")], now + secs(10)),
        Check::Fresh
    );
    assert_eq!(
        check(&p, &[("Cache-Control", "min-fresh=55")], now + secs(10)),
        Check::Stale
    );
    assert_eq!(
        check(&p, &[("Cache-Control", "min-fresh=30")], now + secs(10)),
        Check::Fresh
    );
}

#[test]
fn vary_selects() {
    let now = SystemTime::now();
    let p = policy_at(
        &[("Accept-Encoding", "gzip")],
        &[("Cache-Control", "max-age=60"), ("Vary", "Accept-Encoding")],
        200,
        now,
    );
    assert_eq!(check(&p, &[("Accept-Encoding", "gzip")], now), Check::Fresh);
    assert_eq!(
        check(&p, &[("Accept-Encoding", "br")], now),
        Check::Mismatch
    );
    assert_eq!(check(&p, &[], now), Check::Mismatch);
    let star = policy(&[("Cache-Control", "max-age=60"), ("Vary", "*")]);
    assert_ne!(check(&star, &[], now), Check::Fresh);
}

#[test]
fn head_is_answered_from_a_stored_get() {
    let now = SystemTime::now();
    let p = policy(&[("Cache-Control", "max-age=60")]);
    let r = Headers::default();
    assert_eq!(p.check(ask("HEAD", &r), now), Check::Fresh);
    assert_eq!(p.check(ask("POST", &r), now), Check::Mismatch);
}

#[test]
fn stale_while_revalidate_and_stale_if_error_windows() {
    let now = SystemTime::now();
    let p = policy(&[(
        "Cache-Control",
        "max-age=10, stale-while-revalidate=30, stale-if-error=100",
    )]);
    assert!(p.may_serve_while_revalidating(now + secs(20)));
    assert!(!p.may_serve_while_revalidating(now + secs(50)));
    let none = Headers::default();
    assert!(p.may_serve_on_error(&none, now + secs(50)));
    assert!(!p.may_serve_on_error(&none, now + secs(120)));
    // The request's own stale-if-error.
    let req = headers(&[("Cache-Control", "stale-if-error=5")]);
    assert!(!p.may_serve_on_error(&req, now + secs(50)));
    // must-revalidate forbids both.
    let p = policy(&[(
        "Cache-Control",
        "max-age=10, stale-while-revalidate=30, stale-if-error=100, must-revalidate",
    )]);
    assert!(!p.may_serve_while_revalidating(now + secs(20)));
    assert!(!p.may_serve_on_error(&none, now + secs(20)));
    let plain = policy(&[("Cache-Control", "max-age=10")]);
    assert!(!plain.may_serve_while_revalidating(now + secs(11)));
}

#[test]
fn a_304_refreshes_the_stored_fields() {
    let now = SystemTime::now();
    let stored = headers(&[
        ("ETag", "\"v1\""),
        ("Cache-Control", "max-age=1"),
        ("Link", "</a>"),
        ("Link", "</b>"),
        ("Content-Encoding", "gzip"),
        ("X-Old", "1"),
    ]);
    let r = Headers::default();
    let p = Policy::new(ask("GET", &r), 200, &stored, now, 0.1);
    let later = now + secs(5);
    assert_eq!(p.check(ask("GET", &r), later), Check::Stale);
    let fields = headers(&[
        ("ETag", "\"v1\""),
        ("Cache-Control", "max-age=100"),
        ("Content-Encoding", "br"),
        ("X-New", "2"),
    ]);
    let Refreshed {
        policy: p2,
        merged,
        own,
        storable,
    } = p
        .refreshed(ask("GET", &r), &fields, &stored, later)
        .unwrap();
    assert!(storable && own.is_empty());
    assert_eq!(p2.check(ask("GET", &r), later + secs(50)), Check::Fresh);
    assert_eq!(merged.get("cache-control"), Some(&b"max-age=100"[..]));
    assert_eq!(
        merged.get("content-encoding"),
        Some(&b"gzip"[..]),
        "body metadata stays"
    );
    assert_eq!(merged.get_all("link").count(), 2, "repeated fields kept");
    assert!(merged.get("x-old").is_some() && merged.get("x-new").is_some());
    // A 304 with another strong validator is not about this response.
    let other = headers(&[("ETag", "\"v2\"")]);
    assert!(p
        .refreshed(ask("GET", &r), &other, &stored, later)
        .is_none());
    // A 304 with no validator answers the cache's own conditional request: it is about the
    // stored response (issue 34, item 9); a weak tag matches the stored strong one.
    for about in [
        vec![("Cache-Control", "max-age=9")],
        vec![("ETag", "W/\"v1\"")],
    ] {
        assert!(p
            .refreshed(ask("GET", &r), &headers(&about), &stored, later)
            .is_some());
    }
    // A Last-Modified that differs from the stored one names another response.
    let lm = headers(&[("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")]);
    assert!(p.refreshed(ask("GET", &r), &lm, &stored, later).is_none());
}

#[test]
fn validators_of_a_revalidation() {
    let h = headers(&[
        ("ETag", "\"v1\""),
        ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT"),
    ]);
    let v = validators(&h);
    assert_eq!(v[0], ("If-None-Match", b"\"v1\"".to_vec()));
    assert_eq!(v[1].0, "If-Modified-Since");
    assert!(validators(&Headers::default()).is_empty());
}

/// The check of plain hits without the crate answers as the crate does, at every age, for
/// every stored response and request it takes on; and it does take on the plain hit.
#[test]
fn the_quick_check_agrees_with_the_crate() {
    let stored_at = SystemTime::now();
    let date = httpdate::fmt_http_date(stored_at);
    let modified = httpdate::fmt_http_date(stored_at - secs(1000));
    let expires = httpdate::fmt_http_date(stored_at + secs(90));
    let responses: Vec<Vec<(&str, &str)>> = vec![
        vec![("Cache-Control", "max-age=60")],
        vec![("Cache-Control", "s-maxage=30, max-age=600")],
        vec![("Date", &date), ("Expires", &expires)],
        vec![("Date", &date), ("Last-Modified", &modified)],
        vec![("Cache-Control", "max-age=60, must-revalidate")],
        vec![("Cache-Control", "no-cache")],
        vec![("Cache-Control", "max-age=60"), ("Age", "50")],
        vec![("Cache-Control", "max-age=60"), ("Vary", "Accept")],
    ];
    let requests: Vec<Vec<(&str, &str)>> = vec![
        vec![],
        vec![("Accept", "text/html")],
        vec![("Cache-Control", "max-age=5")],
        vec![("Cache-Control", "max-stale")],
        vec![("Pragma", "no-cache")],
    ];
    let mut quick = 0;
    for resp in &responses {
        for stored_method in ["GET", "HEAD"] {
            let r = headers(&[]);
            let p = Policy::new(ask(stored_method, &r), 200, &headers(resp), stored_at, 0.1);
            for req in &requests {
                let h = headers(req);
                for method in ["GET", "HEAD", "POST"] {
                    for host in ["example.org:80", "other.example:80"] {
                        let a = Ask {
                            method,
                            headers: &h,
                            host,
                        };
                        for after in [0, 20, 40, 59, 61, 95, 120, 5000] {
                            let at = stored_at + secs(after);
                            if let Some(c) = p.quick_check(a, at) {
                                quick += 1;
                                assert_eq!(
                                    c,
                                    p.full_check(a, at),
                                    "{resp:?} stored by {stored_method}, {method} {host} {req:?} at +{after}s"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(quick > 100, "the quick check took on {quick} cases only");
    let p = policy(&[("Cache-Control", "max-age=60")]);
    let plain = headers(&[("Accept", "*/*")]);
    assert_eq!(
        p.quick_check(ask("GET", &plain), SystemTime::now()),
        Some(Check::Fresh)
    );
}

/// Age, time to live and staleness, kept from the policy's making, are what the crate
/// computes at every call: for lifetimes from every source, an `Age` past the lifetime,
/// and clocks before the response arrived.
#[test]
fn the_kept_lifetime_agrees_with_the_crate() {
    let stored_at = SystemTime::now();
    let date = httpdate::fmt_http_date(stored_at);
    let modified = httpdate::fmt_http_date(stored_at - secs(1000));
    let expires = httpdate::fmt_http_date(stored_at + secs(90));
    let expired = httpdate::fmt_http_date(stored_at - secs(90));
    let responses: Vec<Vec<(&str, &str)>> = vec![
        vec![("Cache-Control", "max-age=60")],
        vec![("Cache-Control", "s-maxage=30, max-age=600")],
        vec![("Date", &date), ("Expires", &expires)],
        vec![("Date", &date), ("Expires", &expired)],
        vec![("Date", &date), ("Last-Modified", &modified)],
        vec![("Cache-Control", "no-cache")],
        vec![("Cache-Control", "max-age=60"), ("Age", "50")],
        vec![("Cache-Control", "max-age=60"), ("Age", "60")],
        vec![("Cache-Control", "max-age=60"), ("Age", "700")],
        vec![("Cache-Control", "no-store")],
        vec![],
    ];
    for resp in &responses {
        for status in [200, 404] {
            let p = policy_at(&[], resp, status, stored_at);
            for after in [
                -100i64, -1, 0, 1, 9, 10, 29, 30, 59, 60, 61, 89, 90, 91, 100, 5000,
            ] {
                let at = if after < 0 {
                    stored_at - secs(after.unsigned_abs())
                } else {
                    stored_at + secs(after as u64)
                };
                let what = format!("{resp:?} {status} at {after:+}s");
                assert_eq!(p.age(at), p.inner.age(at), "age: {what}");
                let ttl = p.inner.time_to_live(at);
                assert_eq!(p.time_to_live(at), ttl, "time to live: {what}");
                assert_eq!(p.is_stale(at), p.inner.is_stale(at), "stale: {what}");
            }
        }
    }
}

mod rfc9111;
