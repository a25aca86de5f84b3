//! RFC 9111 rule by rule where `http-cache-semantics` reads fields otherwise (issue 34):
//! the normalisation of what it is given, and what a `304` may change.

use super::*;

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
