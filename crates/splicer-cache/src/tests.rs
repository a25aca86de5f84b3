//! Unit tests of the cache's fills: the memory budget, collapsing and its pass marks.
use super::*;

fn head(length: Option<u64>) -> Head {
    let h = Headers::default();
    let ask = policy::Ask {
        method: "GET",
        headers: &h,
        host: "h:80",
    };
    let mut fields = Headers::default();
    fields.push("Cache-Control", "max-age=60");
    Head {
        status: 200,
        reason: "OK".into(),
        policy: policy::Policy::new(ask, 200, &fields, std::time::SystemTime::now(), 0.1),
        headers: fields,
        length,
    }
}

fn writer(cache: &Cache, uri: &str) -> Writer {
    match cache.fill(uri, &Headers::default(), true) {
        Joined::Writer(w) => w,
        Joined::Reader(_) => panic!("{uri} is being filled already"),
    }
}

/// Fills together hold at most `fill_memory`; one past it is given up, and what a
/// fill held is given back when it ends, stored or not.
#[test]
fn fills_share_one_memory_budget() {
    let cache = Cache::new(Settings {
        memory: 16 << 20,
        max_object: 1 << 20,
        fill_memory: 1 << 20,
        ..Settings::default()
    })
    .unwrap();
    let held = || cache.inner.fill_bytes.load(Ordering::Relaxed);
    let kib = vec![7u8; 1024];
    // A known length is reserved at the head: 600 KiB of the 1 MiB.
    let mut a = writer(&cache, "http://h/a");
    a.start(head(Some(600 << 10)));
    assert_eq!(held(), 600 << 10);
    // Unknown length: grows by doubling, charged as it grows.
    let mut b = writer(&cache, "http://h/b");
    b.start(head(None));
    assert_eq!(held(), 600 << 10);
    for i in 0..400 {
        assert!(b.tap(&kib), "b refused at {i} KiB with {} held", held());
    }
    assert!(held() <= 1 << 20, "{} held", held());
    // Past the budget: b is given up, its bytes given back; a goes on.
    let mut refused = false;
    for _ in 0..200 {
        if !b.tap(&kib) {
            refused = true;
            break;
        }
    }
    assert!(refused, "b grew past the budget");
    assert_eq!(held(), 600 << 10);
    assert_eq!(
        cache.counters().fills_over_budget.load(Ordering::Relaxed),
        1
    );
    assert!(!b.finish());
    for _ in 0..600 {
        assert!(a.tap(&kib));
    }
    assert!(a.finish(), "a was stored");
    assert_eq!(held(), 0);
    // With the budget free again, a new fill of the size b had is stored.
    let mut c = writer(&cache, "http://h/c");
    c.start(head(None));
    for _ in 0..500 {
        assert!(c.tap(&kib));
    }
    assert!(c.finish());
    assert_eq!(held(), 0);
    // A writer dropped without an end gives its share back too.
    let mut d = writer(&cache, "http://h/d");
    d.start(head(Some(4096)));
    assert_eq!(held(), 4096);
    drop(d);
    assert_eq!(held(), 0);
}

/// After a response that could not be stored, misses for its URI go upstream each on
/// its own (not collapsed) until one is stored again.
#[test]
fn a_uri_answered_unstorably_is_not_collapsed_until_stored() {
    let cache = Cache::new(Settings::default()).unwrap();
    let first = writer(&cache, "/u");
    assert!(matches!(
        cache.fill("/u", &Headers::default(), true),
        Joined::Reader(_)
    ));
    first.abandon();
    let a = writer(&cache, "/u");
    let mut b = writer(&cache, "/u");
    assert_eq!(cache.counters().passed.load(Ordering::Relaxed), 2);
    a.abandon();
    b.start(head(Some(2)));
    assert!(b.tap(b"ok"));
    assert!(b.finish());
    // Stored: the next misses (after it is purged) collapse again.
    cache.invalidate("/u");
    let _c = writer(&cache, "/u");
    assert!(matches!(
        cache.fill("/u", &Headers::default(), true),
        Joined::Reader(_)
    ));
    // A request others could not read (a range, a condition) marks nothing.
    match cache.fill("/v", &Headers::default(), false) {
        Joined::Writer(w) => w.abandon(),
        Joined::Reader(_) => panic!("unshared fills are never joined"),
    }
    let _d = writer(&cache, "/v");
    assert!(matches!(
        cache.fill("/v", &Headers::default(), true),
        Joined::Reader(_)
    ));
}
