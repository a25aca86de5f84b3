//! The proxy's own work, as the `conservative` and `proportional` modes see it: spans of
//! work the front ends open ([`Foreground`]: a request head read and decided, a cache hit
//! written) and the splices each class starts, from which a class's share is computed.
//!
//! Seed 001's kernel thread forwarded "while the application is blocked"; here the front
//! ends say when they have work of their own in hand, which is what a splice must not
//! delay. Spans are counted only while a class of some front end is in one of those
//! modes: otherwise opening one costs a relaxed load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Class, Front};

/// How often a class's share is computed again, and the time constant of the request
/// rates it is computed from (an exponentially weighted mean).
const SHARE_EVERY: Duration = Duration::from_millis(100);
const SHARE_TAU: f64 = 1.0;
/// The least share a class is given: a class whose requests the proxy has not yet seen
/// (its first splice) still moves.
pub const MIN_SHARE: f64 = 0.05;

pub(crate) struct Demand {
    /// Whether spans and splice starts are counted (a class follows the demand).
    pub(super) on: AtomicBool,
    /// Spans of the proxy's own work open now.
    open: AtomicU64,
    /// Bumped each time `open` rises from zero: a sampler sees a span that opened and
    /// closed between two of its looks.
    busy_periods: AtomicU64,
    /// Woken when `open` falls to zero.
    idle: Notify,
    /// Spans opened, ever.
    spans: AtomicU64,
    /// Splices started, ever, per front end and class.
    splices: [[AtomicU64; 3]; 3],
    share: Mutex<Share>,
    /// The time no span was open: a `conservative` kernel splice's share.
    idle_clock: Mutex<IdleClock>,
}

/// The proxy's idle time (no span open), kept at the transitions to and from none. Both
/// are decided under this lock against the count as it is then, so a close and an open
/// racing past each other count no busy time as idle.
#[derive(Default)]
struct IdleClock {
    /// Since when no span is open (`None`: one is).
    since: Option<Instant>,
    /// Idle time before `since`.
    total: Duration,
}

/// The request rates the shares are computed from.
struct Share {
    at: Instant,
    spans_seen: u64,
    splices_seen: [[u64; 3]; 3],
    /// Spans a second, and splices a second per front end and class.
    span_rate: f64,
    splice_rates: [[f64; 3]; 3],
}

impl Default for Demand {
    fn default() -> Self {
        Demand {
            on: AtomicBool::new(false),
            open: AtomicU64::new(0),
            busy_periods: AtomicU64::new(0),
            idle: Notify::new(),
            spans: AtomicU64::new(0),
            splices: Default::default(),
            share: Mutex::new(Share {
                at: Instant::now(),
                spans_seen: 0,
                splices_seen: [[0; 3]; 3],
                span_rate: 0.0,
                splice_rates: [[0.0; 3]; 3],
            }),
            idle_clock: Mutex::new(IdleClock {
                since: Some(Instant::now()),
                total: Duration::ZERO,
            }),
        }
    }
}

impl Demand {
    /// Opens a span of the proxy's own work; `false` when nothing is counted.
    pub(super) fn open(&self) -> bool {
        if !self.on.load(Ordering::Relaxed) {
            return false;
        }
        self.spans.fetch_add(1, Ordering::Relaxed);
        if self.open.fetch_add(1, Ordering::AcqRel) == 0 {
            self.busy_periods.fetch_add(1, Ordering::Relaxed);
            let mut c = self.clock();
            if let Some(since) = c.since.take() {
                c.total += since.elapsed();
            }
        }
        true
    }

    pub(super) fn close(&self) {
        if self.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            {
                let mut c = self.clock();
                // An open that came in meanwhile keeps the proxy busy.
                if !self.busy() && c.since.is_none() {
                    c.since = Some(Instant::now());
                }
            }
            self.idle.notify_waiters();
        }
    }

    fn clock(&self) -> std::sync::MutexGuard<'_, IdleClock> {
        self.idle_clock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The time the proxy had no span open, ever (a sampler takes its differences: the
    /// kernel engines' splices).
    #[cfg_attr(not(feature = "bpf"), allow(dead_code))]
    pub(crate) fn idle_time(&self) -> Duration {
        let c = self.clock();
        c.total + c.since.map_or(Duration::ZERO, |s| s.elapsed())
    }

    /// Counts a splice of `class` of `front` starting.
    pub(super) fn splice_started(&self, front: Front, class: Class) {
        if self.on.load(Ordering::Relaxed) {
            self.splices[front.index()][class.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether the proxy has work of its own in hand now.
    pub(crate) fn busy(&self) -> bool {
        self.open.load(Ordering::Acquire) > 0
    }

    /// The busy periods so far: a splice starts looking from here, not from the work that
    /// came before it.
    pub(crate) fn periods(&self) -> u64 {
        self.busy_periods.load(Ordering::Relaxed)
    }

    /// Whether the proxy had work in hand at any time since the last call with `seen`
    /// (a sampler's view: a span may open and close between two looks).
    pub(crate) fn busy_since(&self, seen: &mut u64) -> bool {
        let periods = self.busy_periods.load(Ordering::Relaxed);
        let opened = periods != *seen;
        *seen = periods;
        opened || self.busy()
    }

    /// Waits until the proxy has no work in hand or `limit` has passed; returns at once
    /// when it has none.
    pub(crate) async fn until_idle(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Registered before the look, so a close between the two is not missed.
            idle.as_mut().enable();
            if !self.busy() {
                return;
            }
            tokio::select! {
                () = idle => {}
                () = tokio::time::sleep_until(deadline) => return,
            }
        }
    }

    /// The share of the machine `class` of `front` gets while the proxy's own work waits:
    /// its splices a second over all requests a second (spans and every class's splices),
    /// at least [`MIN_SHARE`]. Recomputed at most every [`SHARE_EVERY`].
    pub(crate) fn share(&self, front: Front, class: Class) -> f64 {
        let now = Instant::now();
        let mut s = self.share.lock().unwrap_or_else(|e| e.into_inner());
        let dt = now.saturating_duration_since(s.at).as_secs_f64();
        if dt >= SHARE_EVERY.as_secs_f64() {
            let weight = 1.0 - (-dt / SHARE_TAU).exp();
            let spans = self.spans.load(Ordering::Relaxed);
            let fresh = (spans - s.spans_seen) as f64 / dt;
            s.span_rate += weight * (fresh - s.span_rate);
            s.spans_seen = spans;
            for f in Front::ALL {
                for c in Class::ALL {
                    let (i, j) = (f.index(), c.index());
                    let n = self.splices[i][j].load(Ordering::Relaxed);
                    let fresh = (n - s.splices_seen[i][j]) as f64 / dt;
                    s.splice_rates[i][j] += weight * (fresh - s.splice_rates[i][j]);
                    s.splices_seen[i][j] = n;
                }
            }
            s.at = now;
        }
        share_of(
            s.splice_rates[front.index()][class.index()],
            s.span_rate + s.splice_rates.iter().flatten().sum::<f64>(),
        )
    }
}

/// A class's share from its rate and the rate of every request.
fn share_of(class_rate: f64, all: f64) -> f64 {
    if all <= 0.0 {
        return 1.0;
    }
    (class_rate / all).clamp(MIN_SHARE, 1.0)
}

/// A span of the proxy's own work (a head read and decided, a hit written): while one is
/// open, `conservative` classes are held and `proportional` ones slowed. Closes when
/// dropped. Made by [`crate::Relay::foreground`].
#[must_use = "the span closes when the guard is dropped"]
pub struct Foreground {
    relay: Option<crate::Relay>,
}

impl Foreground {
    pub(crate) fn open(relay: &crate::Relay) -> Foreground {
        let counted = relay.pacer().demand.open();
        Foreground {
            relay: counted.then(|| relay.clone()),
        }
    }

    /// Closes the span now (the work goes on waiting for the network).
    pub fn close(&mut self) {
        if let Some(r) = self.relay.take() {
            r.pacer().demand.close();
        }
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for Foreground {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Foreground")
            .field("open", &self.relay.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_the_class_part_of_all_requests() {
        assert_eq!(share_of(0.0, 0.0), 1.0);
        assert!((share_of(25.0, 100.0) - 0.25).abs() < 1e-9);
        // A class not seen yet still moves.
        assert_eq!(share_of(0.0, 100.0), MIN_SHARE);
    }

    #[tokio::test(start_paused = true)]
    async fn rates_follow_the_starts() {
        let d = Demand::default();
        d.on.store(true, Ordering::Relaxed);
        // 30 spans and 10 body splices a second for 5 s.
        for _ in 0..50 {
            for _ in 0..3 {
                assert!(d.open());
                d.close();
            }
            d.splice_started(Front::Http, Class::Bodies);
            tokio::time::sleep(Duration::from_millis(100)).await;
            let _ = d.share(Front::Http, Class::Bodies);
        }
        let w = d.share(Front::Http, Class::Bodies);
        assert!((0.22..0.28).contains(&w), "{w}");
        assert_eq!(d.share(Front::Socks, Class::Tunnels), MIN_SHARE);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_time_is_the_time_no_span_was_open() {
        let d = Demand::default();
        d.on.store(true, Ordering::Relaxed);
        let t0 = d.idle_time();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(
            d.idle_time() - t0,
            Duration::from_millis(30),
            "idle from the start"
        );
        // Two spans overlapping for 50 ms in all: busy from the first open to the last close.
        assert!(d.open());
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(d.open());
        d.close();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(
            d.idle_time() - t0,
            Duration::from_millis(30),
            "busy not counted"
        );
        d.close();
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(d.idle_time() - t0, Duration::from_millis(70));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_when_the_work_does_or_at_its_limit() {
        let d = std::sync::Arc::new(Demand::default());
        d.on.store(true, Ordering::Relaxed);
        let t0 = Instant::now();
        d.until_idle(Duration::from_secs(1)).await;
        assert_eq!(t0.elapsed(), Duration::ZERO, "idle: no wait");
        assert!(d.open());
        let closer = {
            let d = d.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(30)).await;
                d.close();
            })
        };
        d.until_idle(Duration::from_secs(1)).await;
        assert_eq!(t0.elapsed(), Duration::from_millis(30));
        closer.await.unwrap();
        assert!(d.open());
        let t1 = Instant::now();
        d.until_idle(Duration::from_millis(50)).await;
        assert_eq!(
            t1.elapsed(),
            Duration::from_millis(50),
            "held no longer than the limit"
        );
        let mut seen = 0;
        assert!(d.busy_since(&mut seen));
        d.close();
        assert!(!d.busy_since(&mut seen), "no span since the last look");
        assert!(d.open());
        d.close();
        assert!(
            d.busy_since(&mut seen),
            "a span opened and closed between two looks"
        );
    }
}
