//! The pacer: how fast the proxy lets its splices run, per front end and per class of
//! traffic, so that spliced bytes do not starve the proxy's own work (seed 001).
//!
//! Modes, per class (docs/pacer.md): `off`, and `rate`, a cap in bytes a second on each
//! splice (one direction of one connection) and on the class as a whole. What paces which
//! engine:
//! - `copy` and `pipe` take each read's worth from token buckets ([`Paced`]) before the
//!   read, so a capped splice reads no faster than its cap and its source's window closes
//!   behind it (the kernel holds no more than the sockets' buffers);
//! - `sockmap` sets `SO_MAX_PACING_RATE` on the socket its bytes leave by: the kernel's TCP
//!   then paces its sends itself (internal pacing: this kernel has no `fq` qdisc), and the
//!   redirect queue's gate closes the source's window behind it. The class's cap is shared
//!   out evenly over its kernel splices;
//! - `ipsplice` forwards packets as they come, so it slows the senders: its program clamps
//!   the windows it rewrites, at a size user space steers toward the rate from the bytes
//!   the program counted (`crate::ipsplice`'s `pace`).
//!
//! A new setting ([`crate::Relay::set_pacing`], a reload) applies to running splices: the
//! user-space engines look at it before their next read, the kernel ones are woken to set
//! their sockets again.
//!
//! # Layout
//! - this file: the pacer (settings in force, the classes' buckets, kernel splices
//!   counted, the figures).
//! - `settings`: front ends, classes, modes and the `[pacer]` tables.
//! - `bucket`: a token bucket in bytes.
//! - `paced`: one user-space splice's pacing.
//! - `kernel`: a kernel engine's splice paced through its sockets.
//! - `ready`: the share of its CPUs the proxy wanted (the scheduler's count), for
//!   `conservative` kernel splices.

mod bucket;
mod demand;
#[cfg(feature = "bpf")]
mod kernel;
mod paced;
#[cfg(feature = "bpf")]
mod ready;
mod settings;

pub use demand::Foreground;
#[cfg(feature = "bpf")]
pub(crate) use kernel::{Outlet, Sockets};
pub(crate) use paced::Paced;
pub use settings::{
    Class, ClassPace, Front, Hold, Mode, PacerConfig, Pacing, DEFAULT_FLOOR, DEFAULT_HOLD_MS,
    MAX_HOLD_MS, MIN_RATE,
};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use bucket::Bucket;

/// The relay's pacer: the settings, the classes' shared buckets, and what the kernel
/// engines' splices need to share a class's cap.
pub(crate) struct Pacer {
    settings: RwLock<Pacing>,
    /// Whether any class of any front end is paced: the user-space engines' fast path.
    any: AtomicBool,
    /// Per front end and class: the class's bucket while it has a `total`.
    classes: [[Mutex<Option<Bucket>>; 3]; 3],
    /// Per front end and class: kernel splices running now (they share `total`).
    kernel_splices: [[AtomicU64; 3]; 3],
    /// Per front end and class: user-space splices running now (they share `floor`).
    user_splices: [[AtomicU64; 3]; 3],
    /// Per front end and class: nanoseconds user-space splices waited for tokens or for
    /// the proxy's work.
    waited_ns: [[AtomicU64; 3]; 3],
    /// Per front end and class: reads of user-space splices that deferred to the proxy's
    /// work (`conservative`, `proportional`).
    holds: [[AtomicU64; 3]; 3],
    /// Bumped by a new setting and by a kernel splice starting or ending in a class with a
    /// `total`: running kernel splices then set their sockets again.
    epoch: watch::Sender<u64>,
    /// The proxy's own work, for the `conservative` and `proportional` modes.
    pub(crate) demand: demand::Demand,
    /// The proxy's threads' wanted CPU, for `conservative` kernel splices.
    #[cfg(feature = "bpf")]
    ready: ready::Readiness,
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer {
            settings: RwLock::new(Pacing::default()),
            any: AtomicBool::new(false),
            classes: Default::default(),
            kernel_splices: Default::default(),
            user_splices: Default::default(),
            waited_ns: Default::default(),
            holds: Default::default(),
            epoch: watch::Sender::new(0),
            demand: demand::Demand::default(),
            #[cfg(feature = "bpf")]
            ready: ready::Readiness::this_process(),
        }
    }
}

/// How long a paced transfer sleeps at most before it looks at the settings again, so
/// that a new setting (`off`, a higher rate) reaches it soon.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

impl Pacer {
    /// What `conservative` kernel splices judge the proxy's work by.
    #[cfg(all(test, feature = "bpf"))]
    pub(crate) fn readiness(&self) -> &ready::Readiness {
        &self.ready
    }

    pub(crate) fn settings(&self) -> Pacing {
        // A poisoned lock still holds a whole value (it is replaced whole).
        *self.settings.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn class_pace(&self, front: Front, class: Class) -> ClassPace {
        self.settings().get(front, class)
    }

    pub(crate) fn set(&self, p: Pacing) {
        let old = std::mem::replace(
            &mut *self.settings.write().unwrap_or_else(|e| e.into_inner()),
            p,
        );
        if old == p {
            return;
        }
        let any = Front::ALL
            .iter()
            .any(|&f| Class::ALL.iter().any(|&c| p.get(f, c).paced()));
        self.any.store(any, Ordering::Relaxed);
        let follows = Front::ALL.iter().any(|&f| {
            Class::ALL
                .iter()
                .any(|&c| p.get(f, c).mode.follows_demand())
        });
        self.demand.on.store(follows, Ordering::Relaxed);
        let now = Instant::now();
        for f in Front::ALL {
            for c in Class::ALL {
                let cp = p.get(f, c);
                let mut b = self.class_bucket(f, c);
                *b = match (cp.paced() && cp.total > 0, b.take()) {
                    (false, _) => None,
                    (true, Some(mut kept)) => {
                        kept.set(cp.total, cp.burst_for(cp.total), now);
                        Some(kept)
                    }
                    (true, None) => Some(Bucket::new(cp.total, cp.burst_for(cp.total), now)),
                };
            }
        }
        self.epoch.send_modify(|e| *e += 1);
    }

    fn class_bucket(&self, f: Front, c: Class) -> std::sync::MutexGuard<'_, Option<Bucket>> {
        self.classes[f.index()][c.index()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// A user-space splice's pacing, counted in its class while it lives when a class
    /// follows the proxy's work (only those share a `floor`; the count is a shared atomic,
    /// which the unpaced path does without).
    pub(crate) fn paced(&self, front: Front, class: Class) -> Paced<'_> {
        self.demand.splice_started(front, class);
        let counted = self.demand.on.load(Ordering::Relaxed);
        if counted {
            self.user_splices[front.index()][class.index()].fetch_add(1, Ordering::Relaxed);
        }
        Paced::new(self, front, class, counted)
    }

    /// Pacing for a write that is not a splice (a head, a reply: never asked for leave to
    /// read), counted nowhere.
    pub(crate) fn uncounted(&self, front: Front) -> Paced<'_> {
        Paced::new(self, front, Class::Bodies, false)
    }

    /// A kernel splice of `class` starting: counted while the guard lives, for the share.
    #[cfg_attr(not(feature = "bpf"), allow(dead_code))]
    pub(crate) fn kernel_splice(&self, front: Front, class: Class) -> KernelSplice<'_> {
        self.kernel_splices[front.index()][class.index()].fetch_add(1, Ordering::Relaxed);
        self.demand.splice_started(front, class);
        if self.class_pace(front, class).total > 0 {
            self.epoch.send_modify(|e| *e += 1);
        }
        KernelSplice {
            pacer: self,
            front,
            class,
        }
    }

    /// What the pacer did for `class` of `front` (the metrics).
    pub(crate) fn stats(&self, front: Front, class: Class) -> PacerStats {
        let (f, c) = (front.index(), class.index());
        PacerStats {
            waited: Duration::from_nanos(self.waited_ns[f][c].load(Ordering::Relaxed)),
            kernel_splices: self.kernel_splices[f][c].load(Ordering::Relaxed),
            holds: self.holds[f][c].load(Ordering::Relaxed),
        }
    }

    #[cfg_attr(not(feature = "bpf"), allow(dead_code))]
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }
}

/// What the pacer did for one class of one front end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacerStats {
    /// How long the user-space engines' splices waited for the cap or for the proxy's
    /// work, all together.
    pub waited: Duration,
    /// Reads of the user-space engines' splices that deferred to the proxy's work.
    pub holds: u64,
    /// Kernel engine splices running now, paced or not (a class's `total` is shared over
    /// them).
    pub kernel_splices: u64,
}

/// A kernel splice counted in its class.
#[cfg_attr(not(feature = "bpf"), allow(dead_code))]
pub(crate) struct KernelSplice<'p> {
    pacer: &'p Pacer,
    front: Front,
    class: Class,
}

#[cfg_attr(not(feature = "bpf"), allow(dead_code))]
impl KernelSplice<'_> {
    /// Kernel splices of its class of its front end running now, itself included.
    #[cfg_attr(not(feature = "bpf"), allow(dead_code))]
    pub(crate) fn running(&self) -> u64 {
        self.pacer.kernel_splices[self.front.index()][self.class.index()].load(Ordering::Relaxed)
    }

    /// The rate its sockets should send at now in `rate` mode (`None`: unpaced, or another
    /// mode): its own cap, and an even share of the class's.
    pub(crate) fn rate(&self) -> Option<u64> {
        let cp = self.pacer.class_pace(self.front, self.class);
        if cp.mode != Mode::Rate || !cp.paced() {
            return None;
        }
        let n = self.running().max(1);
        let share = (cp.total > 0).then(|| (cp.total / n).max(MIN_RATE));
        let own = (cp.per_splice > 0).then_some(cp.per_splice);
        match (own, share) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl Drop for KernelSplice<'_> {
    fn drop(&mut self) {
        self.pacer.kernel_splices[self.front.index()][self.class.index()]
            .fetch_sub(1, Ordering::Relaxed);
        if self.pacer.class_pace(self.front, self.class).total > 0 {
            self.pacer.epoch.send_modify(|e| *e += 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_splice: u64, total: u64) -> ClassPace {
        ClassPace {
            mode: Mode::Rate,
            per_splice,
            total,
            burst: 0,
            ..ClassPace::default()
        }
    }

    #[test]
    fn a_table_is_checked() {
        assert!(ClassPace::default().check().is_ok());
        assert!(rate(0, 0).check().is_err());
        assert!(rate(100, 0).check().is_err());
        assert!(rate(1 << 20, 0).check().is_ok());
        let tiny_burst = ClassPace {
            burst: 10,
            ..rate(1 << 20, 0)
        };
        assert!(tiny_burst.check().is_err());
    }

    #[test]
    fn kernel_splices_share_the_class_cap_evenly() {
        let pacer = Pacer::default();
        let mut p = Pacing::default();
        p.set(
            Front::Socks,
            PacerConfig {
                tunnels: rate(3_000_000, 4_000_000),
                ..PacerConfig::default()
            },
        );
        pacer.set(p);
        let a = pacer.kernel_splice(Front::Socks, Class::Tunnels);
        assert_eq!(a.rate(), Some(3_000_000));
        let b = pacer.kernel_splice(Front::Socks, Class::Tunnels);
        assert_eq!(a.rate(), Some(2_000_000));
        drop(b);
        assert_eq!(a.rate(), Some(3_000_000));
        // Another front end, another class: unpaced.
        assert_eq!(
            pacer.kernel_splice(Front::Http, Class::Tunnels).rate(),
            None
        );
        assert_eq!(
            pacer.kernel_splice(Front::Socks, Class::Bodies).rate(),
            None
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_capped_splice_takes_no_more_than_its_rate() {
        let pacer = Pacer::default();
        let mut p = Pacing::default();
        p.set(
            Front::Http,
            PacerConfig {
                bodies: rate(1_000_000, 0),
                ..PacerConfig::default()
            },
        );
        pacer.set(p);
        let mut paced = pacer.paced(Front::Http, Class::Bodies);
        let t0 = Instant::now();
        let mut taken = 0u64;
        while taken < 5_000_000 {
            taken += paced.take(1 << 20).await as u64;
        }
        // 5 MB at 1 MB/s less the first burst (64 KiB): about 4.93 s of paused time.
        let took = t0.elapsed().as_secs_f64();
        assert!((4.9..5.1).contains(&took), "{took}");
        // All of it waiting, and counted for that class only.
        let waited = pacer.stats(Front::Http, Class::Bodies).waited.as_secs_f64();
        assert!((4.9..5.1).contains(&waited), "{waited}");
        assert_eq!(
            pacer.stats(Front::Http, Class::Tunnels),
            PacerStats::default()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn splices_of_a_class_share_its_total() {
        let pacer = Pacer::default();
        let mut p = Pacing::default();
        p.set(
            Front::Edge,
            PacerConfig {
                fills: rate(0, 2_000_000),
                ..PacerConfig::default()
            },
        );
        pacer.set(p);
        let mut a = pacer.paced(Front::Edge, Class::Fills);
        let mut b = pacer.paced(Front::Edge, Class::Fills);
        let t0 = Instant::now();
        let mut taken = 0u64;
        while taken < 4_000_000 {
            taken += a.take(256 * 1024).await as u64;
            taken += b.take(256 * 1024).await as u64;
        }
        let took = t0.elapsed().as_secs_f64();
        assert!((1.8..2.2).contains(&took), "{took}");
    }

    fn following(front: Front, mode: Mode, hold_ms: u64) -> Pacing {
        let mut p = Pacing::default();
        p.set(
            front,
            PacerConfig {
                tunnels: ClassPace {
                    mode,
                    hold: Hold(Duration::from_millis(hold_ms)),
                    ..ClassPace::default()
                },
                ..PacerConfig::default()
            },
        );
        p
    }

    /// The relay's pacer and a way to open spans of the proxy's work on it.
    fn with_spans(p: Pacing) -> crate::Relay {
        let relay = crate::Relay::new(crate::RelayConfig::default());
        relay.set_pacing(p);
        relay
    }

    #[tokio::test(start_paused = true)]
    async fn conservative_holds_a_splice_while_the_proxy_works_never_past_its_hold() {
        let relay = with_spans(following(Front::Socks, Mode::Conservative, 20));
        let pacer = relay.pacer();
        let mut paced = pacer.paced(Front::Socks, Class::Tunnels);
        // Nothing in hand: no wait.
        let t0 = Instant::now();
        assert_eq!(paced.take(4096).await, 4096);
        assert_eq!(t0.elapsed(), Duration::ZERO);
        // Work in hand for a second: each read waits its whole hold, and no longer.
        let work = relay.foreground();
        for _ in 0..5 {
            let t = Instant::now();
            assert_eq!(paced.take(4096).await, 4096);
            assert_eq!(t.elapsed(), Duration::from_millis(20));
        }
        // The work ends 5 ms into a wait: the splice goes on then.
        let t = Instant::now();
        let end = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            drop(work);
        };
        let (n, ()) = tokio::join!(paced.take(4096), end);
        assert_eq!(n, 4096);
        assert_eq!(t.elapsed(), Duration::from_millis(5));
        let waited = pacer.stats(Front::Socks, Class::Tunnels).waited;
        assert_eq!(waited, Duration::from_millis(105));
        // Another front end's class does not follow the work.
        let work = relay.foreground();
        let mut other = pacer.paced(Front::Http, Class::Tunnels);
        let t = Instant::now();
        assert_eq!(other.take(4096).await, 4096);
        assert_eq!(t.elapsed(), Duration::ZERO);
        drop(work);
    }

    #[tokio::test(start_paused = true)]
    async fn held_splices_share_the_class_floor() {
        let mut p = following(Front::Socks, Mode::Conservative, 50);
        let mut cp = p.get(Front::Socks, Class::Tunnels);
        cp.floor = 1_000_000;
        p.set(
            Front::Socks,
            PacerConfig {
                tunnels: cp,
                ..PacerConfig::default()
            },
        );
        let relay = with_spans(p);
        let pacer = relay.pacer();
        let mut one = pacer.paced(Front::Socks, Class::Tunnels);
        let work = relay.foreground();
        // Alone, at the end of its hold: 50 ms of the 1 MB/s floor.
        let t = Instant::now();
        assert_eq!(one.take(1 << 20).await, 50_000);
        assert_eq!(t.elapsed(), Duration::from_millis(50));
        // A smaller read is not made larger.
        assert_eq!(one.take(4096).await, 4096);
        // Ten of them share it; a hundred get a segment each, not a few bytes.
        let ten: Vec<_> = (0..9)
            .map(|_| pacer.paced(Front::Socks, Class::Tunnels))
            .collect();
        assert_eq!(one.take(1 << 20).await, 5_000);
        let more: Vec<_> = (0..90)
            .map(|_| pacer.paced(Front::Socks, Class::Tunnels))
            .collect();
        assert_eq!(one.take(1 << 20).await, super::paced::HELD_LEAST);
        drop((ten, more));
        // A head written is no splice of the class.
        let _head = pacer.uncounted(Front::Socks);
        assert_eq!(one.take(1 << 20).await, 50_000);
        // The work ended during the hold: the read is whole.
        let end = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            drop(work);
        };
        let (n, ()) = tokio::join!(one.take(1 << 20), end);
        assert_eq!(n, 1 << 20);
    }

    #[tokio::test(start_paused = true)]
    async fn proportional_waits_its_share_of_the_chunk_time() {
        let relay = with_spans(following(Front::Socks, Mode::Proportional, 500));
        let pacer = relay.pacer();
        // A second with one span and one splice of the class: a share of a half.
        let mut paced = pacer.paced(Front::Socks, Class::Tunnels);
        drop(relay.foreground());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let share = pacer.demand.share(Front::Socks, Class::Tunnels);
        assert!((share - 0.5).abs() < 1e-9, "{share}");
        assert_eq!(paced.take(4096).await, 4096);
        // The chunk (read and write) took 40 ms; with work in hand the splice then waits
        // as long again: it moves half of the time.
        tokio::time::sleep(Duration::from_millis(40)).await;
        let work = relay.foreground();
        let t = Instant::now();
        assert_eq!(paced.take(4096).await, 4096);
        assert_eq!(t.elapsed(), Duration::from_millis(40));
        // A drained source starts the next chunk's time afresh: no wait for the idle time.
        paced.unused(100);
        let t = Instant::now();
        assert_eq!(paced.take(4096).await, 4096);
        assert_eq!(t.elapsed(), Duration::ZERO);
        // Never past the hold, however long the chunk.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let t = Instant::now();
        assert_eq!(paced.take(4096).await, 4096);
        assert_eq!(t.elapsed(), Duration::from_millis(500));
        drop(work);
    }

    #[test]
    fn modes_that_follow_the_work_are_checked() {
        let mode = |mode, hold_ms, floor| ClassPace {
            mode,
            hold: Hold(Duration::from_millis(hold_ms)),
            floor,
            ..ClassPace::default()
        };
        assert!(mode(Mode::Conservative, 50, 0).check().is_ok());
        assert!(mode(Mode::Proportional, 1, MIN_RATE).check().is_ok());
        assert!(mode(Mode::Conservative, 0, 0).check().is_err());
        assert!(mode(Mode::Conservative, MAX_HOLD_MS + 1, 0)
            .check()
            .is_err());
        assert!(mode(Mode::Proportional, 50, 100).check().is_err());
        let with_rate = ClassPace {
            per_splice: 1 << 20,
            ..mode(Mode::Conservative, 50, 0)
        };
        assert!(with_rate.check().is_err());
        // `hold` and `floor` belong to those modes.
        let rate_with_hold = ClassPace {
            floor: 1 << 20,
            ..rate(1 << 20, 0)
        };
        assert!(rate_with_hold.check().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_setting_reaches_a_waiting_splice() {
        let pacer = Pacer::default();
        let mut p = Pacing::default();
        p.set(
            Front::Http,
            PacerConfig {
                bodies: rate(MIN_RATE, 0),
                ..PacerConfig::default()
            },
        );
        pacer.set(p);
        let mut paced = pacer.paced(Front::Http, Class::Bodies);
        assert_eq!(paced.take(64 * 1024).await, 64 * 1024);
        let t0 = Instant::now();
        let waiting = async {
            // At 4 KiB/s the next 16 KiB would take 4 s; the switch to `off` ends the wait.
            paced.take(1 << 20).await
        };
        let switch = async {
            tokio::time::sleep(Duration::from_millis(250)).await;
            pacer.set(Pacing::default());
        };
        let (n, ()) = tokio::join!(waiting, switch);
        assert_eq!(n, 1 << 20);
        assert!(
            t0.elapsed() <= Duration::from_millis(350),
            "{:?}",
            t0.elapsed()
        );
    }
}
