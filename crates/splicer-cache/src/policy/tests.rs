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

/// Issue 34, item 1: the fields of a 304 that belong to one client (`Set-Cookie`, a field a
/// qualified `private` names) are never merged into what is stored: they come back apart,
/// for the revalidating client alone; a 304 that says `private` or `no-store` leaves the
/// response unstorable.
#[test]
fn a_304s_personal_fields_are_not_stored() {
    let now = SystemTime::now();
    let stored = headers(&[
        ("ETag", "\"v1\""),
        ("Cache-Control", "max-age=1"),
        ("X-User", "none"),
    ]);
    let r = Headers::default();
    let p = Policy::new(ask("GET", &r), 200, &stored, now, 0.1);
    let fields = headers(&[
        ("Cache-Control", "max-age=60, private=\"X-User, X-Other\""),
        ("Set-Cookie", "session=1"),
        ("set-cookie", "theme=dark"),
        ("Set-Cookie2", "old=1"),
        ("X-User", "alice"),
        ("X-Gen", "2"),
    ]);
    let got = p
        .refreshed(ask("GET", &r), &fields, &stored, now + secs(5))
        .unwrap();
    for personal in ["set-cookie", "set-cookie2"] {
        assert_eq!(got.merged.get(personal), None, "{personal} stored");
    }
    assert_eq!(
        got.merged.get("x-user"),
        Some(&b"none"[..]),
        "a private field replaced the stored one"
    );
    assert_eq!(got.merged.get("x-gen"), Some(&b"2"[..]));
    let own: Vec<(String, Vec<u8>)> = got
        .own
        .iter()
        .map(|f| (f.name.to_ascii_lowercase(), f.value.to_vec()))
        .collect();
    assert_eq!(own.len(), 4, "{own:?}");
    assert!(own.contains(&("x-user".into(), b"alice".to_vec())));
    // A 304 that makes the response private or not to be stored leaves it unstorable.
    for cc in ["private", "no-store", "max-age=60, Private"] {
        let f = headers(&[("Cache-Control", cc)]);
        let got = p
            .refreshed(ask("GET", &r), &f, &stored, now + secs(5))
            .unwrap();
        assert!(!got.storable, "{cc}");
    }
}

#[test]
fn cache_control_directives_are_tokenised_with_quoted_strings() {
    let d = directives(b"max-age=5, private=\"a, b\", no-cache ,s-maxage = 7,x=\"q\\\"y\"");
    let names: Vec<&[u8]> = d.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [&b"max-age"[..], b"private", b"no-cache", b"s-maxage", b"x"]
    );
    assert_eq!(d[1].1, Some(&b"a, b"[..]));
    assert_eq!(d[2].1, None);
    assert_eq!(d[3].1, Some(&b"7"[..]));
    assert_eq!(d[4].1, Some(&b"q\\\"y"[..]));
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

/// Issue 34, items 10 to 13: what the crate gets wrong, rule by rule, each row a stored
/// response (status, fields, stored `secs` ago) and a request, and what RFC 9111 says of
/// them: whether it may be stored, and whether it is fresh for the request. Every row
/// failed with the fields given to the crate as they came (the rows marked so in their
/// names), or holds a rule that must not change with the normalisation.
#[test]
fn rfc_9111_rules_the_crate_is_held_to() {
    struct Row {
        rule: &'static str,
        status: u16,
        response: Vec<(&'static str, String)>,
        request: Vec<(&'static str, &'static str)>,
        after: u64,
        storable: bool,
        fresh: bool,
    }
    let now = SystemTime::now();
    let date = httpdate::fmt_http_date(now);
    let ahead = now + secs(60);
    let imf = httpdate::fmt_http_date(ahead);
    // The same instant in the two obsolete forms (RFC 9110 §5.6.7).
    let t = time_parts(ahead);
    let rfc850 = format!(
        "{}, {:02}-{}-{:02} {:02}:{:02}:{:02} GMT",
        t.weekday_long,
        t.day,
        t.month,
        t.year % 100,
        t.h,
        t.m,
        t.s
    );
    let asctime = format!(
        "{} {} {:>2} {:02}:{:02}:{:02} {}",
        t.weekday, t.month, t.day, t.h, t.m, t.s, t.year
    );
    let spaced = imf.replacen(", ", ",  ", 1);
    let modified = httpdate::fmt_http_date(now - secs(100_000));
    let cc = |v: &str| ("Cache-Control", v.to_string());
    let row =
        |rule, status, response: Vec<(&'static str, String)>, request, after, storable, fresh| {
            Row {
                rule,
                status,
                response,
                request,
                after,
                storable,
                fresh,
            }
        };
    let rows = vec![
        // 11: directive names are case-insensitive.
        row(
            "MaX-AgE counts (failed)",
            200,
            vec![cc("MaX-AgE=60")],
            vec![],
            30,
            true,
            true,
        ),
        row(
            "No-Store refuses (failed)",
            200,
            vec![cc("No-Store, max-age=60")],
            vec![],
            0,
            false,
            true,
        ),
        row(
            "PRIVATE refuses (failed)",
            200,
            vec![cc("PRIVATE, max-age=60")],
            vec![],
            0,
            false,
            true,
        ),
        row(
            "No-CaChE revalidates (failed)",
            200,
            vec![cc("No-CaChE, max-age=60"), ("ETag", "\"x\"".into())],
            vec![],
            1,
            true,
            false,
        ),
        row(
            "request No-CaChE revalidates (failed)",
            200,
            vec![cc("max-age=60")],
            vec![("Cache-Control", "No-CaChE")],
            1,
            true,
            false,
        ),
        // 11: Age with a list or parameters counts by its first member.
        row(
            "Age: 7200, 0 is 7200 (failed)",
            200,
            vec![cc("max-age=60"), ("Age", "7200, 0".into())],
            vec![],
            0,
            true,
            false,
        ),
        row(
            "Age: 50;x=y is 50 (failed)",
            200,
            vec![cc("max-age=60"), ("Age", "50;x=y".into())],
            vec![],
            20,
            true,
            false,
        ),
        row(
            "Age: 30 is 30",
            200,
            vec![cc("max-age=60"), ("Age", "30".into())],
            vec![],
            20,
            true,
            true,
        ),
        // 11: Expires is an HTTP-date in any of its three forms; anything else is expired.
        row(
            "Expires IMF-fixdate",
            200,
            vec![("Date", date.clone()), ("Expires", imf.clone())],
            vec![],
            30,
            true,
            true,
        ),
        row(
            "Expires RFC 850 (failed)",
            200,
            vec![("Date", date.clone()), ("Expires", rfc850)],
            vec![],
            30,
            true,
            true,
        ),
        row(
            "Expires asctime (failed)",
            200,
            vec![("Date", date.clone()), ("Expires", asctime)],
            vec![],
            30,
            true,
            true,
        ),
        row(
            "Expires with extra spaces is expired (failed)",
            200,
            vec![("Date", date.clone()), ("Expires", spaced)],
            vec![],
            0,
            true,
            false,
        ),
        row(
            "Expires: 0 is expired",
            200,
            vec![("Date", date.clone()), ("Expires", "0".into())],
            vec![],
            0,
            true,
            false,
        ),
        // 10, 11: Pragma counts only as `no-cache`, and only without Cache-Control.
        row(
            "Pragma: no-cache beside Cache-Control is ignored (failed)",
            200,
            vec![cc("max-age=60")],
            vec![("Pragma", "no-cache"), ("Cache-Control", "max-stale=5")],
            1,
            true,
            true,
        ),
        row(
            "Pragma: x-no-cache-y is not no-cache (failed)",
            200,
            vec![cc("max-age=60")],
            vec![("Pragma", "x-no-cache-y")],
            1,
            true,
            true,
        ),
        row(
            "Pragma: no-cache alone revalidates",
            200,
            vec![cc("max-age=60")],
            vec![("Pragma", "no-cache")],
            1,
            true,
            false,
        ),
        row(
            "Pragma in a response means nothing (failed)",
            200,
            vec![
                ("Pragma", "no-cache".into()),
                ("Expires", imf.clone()),
                ("Date", date.clone()),
            ],
            vec![],
            1,
            true,
            true,
        ),
        // 12: any final status with explicit freshness may be stored.
        row(
            "400 with max-age (failed)",
            400,
            vec![cc("max-age=60")],
            vec![],
            1,
            true,
            true,
        ),
        row(
            "500 with s-maxage (failed)",
            500,
            vec![cc("s-maxage=60")],
            vec![],
            1,
            true,
            true,
        ),
        row(
            "599 public with max-age (failed)",
            599,
            vec![cc("public, max-age=60")],
            vec![],
            1,
            true,
            true,
        ),
        row(
            "299 with Expires (failed)",
            299,
            vec![("Date", date.clone()), ("Expires", imf)],
            vec![],
            1,
            true,
            true,
        ),
        row(
            "400 without explicit freshness",
            400,
            vec![("Last-Modified", modified.clone())],
            vec![],
            0,
            false,
            false,
        ),
        // 12: heuristic freshness only for heuristically cacheable statuses.
        row(
            "200 with Last-Modified is fresh by heuristic",
            200,
            vec![("Date", date.clone()), ("Last-Modified", modified.clone())],
            vec![],
            1,
            true,
            true,
        ),
        row(
            "302 public with Last-Modified: no heuristic (failed)",
            302,
            vec![
                cc("public"),
                ("Date", date.clone()),
                ("Last-Modified", modified.clone()),
            ],
            vec![],
            1,
            true,
            false,
        ),
        row(
            "599 public with Last-Modified: no heuristic (failed)",
            599,
            vec![cc("public"), ("Date", date), ("Last-Modified", modified)],
            vec![],
            1,
            true,
            false,
        ),
        row(
            "204 with max-age",
            204,
            vec![cc("max-age=60")],
            vec![],
            1,
            true,
            true,
        ),
        row(
            "206 is not stored",
            206,
            vec![cc("max-age=60")],
            vec![],
            0,
            false,
            false,
        ),
    ];
    let mut failures = Vec::new();
    for r in &rows {
        let stored = headers(
            &r.response
                .iter()
                .map(|(n, v)| (*n, v.as_str()))
                .collect::<Vec<_>>(),
        );
        let none = Headers::default();
        let p = Policy::new(ask("GET", &none), r.status, &stored, now, 0.1);
        let request = headers(&r.request);
        let fresh = p.check(ask("GET", &request), now + secs(r.after)) == Check::Fresh;
        if p.storable() != r.storable || (r.storable && fresh != r.fresh) {
            failures.push(format!(
                "{}: storable {} fresh {} (want {} {})",
                r.rule,
                p.storable(),
                fresh,
                r.storable,
                r.fresh
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

struct Parts {
    weekday: &'static str,
    weekday_long: &'static str,
    day: u64,
    month: &'static str,
    year: u64,
    h: u64,
    m: u64,
    s: u64,
}

/// The calendar parts of a time, read back from its IMF-fixdate.
fn time_parts(t: SystemTime) -> Parts {
    let imf = httpdate::fmt_http_date(t);
    // "Sun, 06 Nov 1994 08:49:37 GMT"
    let w = &imf[..3];
    let long = [
        ("Mon", "Monday"),
        ("Tue", "Tuesday"),
        ("Wed", "Wednesday"),
        ("Thu", "Thursday"),
        ("Fri", "Friday"),
        ("Sat", "Saturday"),
        ("Sun", "Sunday"),
    ];
    let (weekday, weekday_long) = long.into_iter().find(|(s, _)| *s == w).unwrap();
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = months.into_iter().find(|m| *m == &imf[8..11]).unwrap();
    Parts {
        weekday,
        weekday_long,
        day: imf[5..7].parse().unwrap(),
        month,
        year: imf[12..16].parse().unwrap(),
        h: imf[17..19].parse().unwrap(),
        m: imf[20..22].parse().unwrap(),
        s: imf[23..25].parse().unwrap(),
    }
}
