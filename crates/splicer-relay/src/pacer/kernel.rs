//! Pacing a kernel engine's splice: the rate is set on what its bytes leave by (an
//! [`Outlet`]: for `sockmap` the sockets, with `SO_MAX_PACING_RATE`; for `ipsplice` the
//! windows its program rewrites), and set again whenever the setting or the class's number
//! of kernel splices changes, until the splice ends. In the `conservative` and `proportional`
//! modes the splice looks at the proxy's work every [`LOOK_EVERY`]. `conservative` runs
//! it free for the share of its looks in which the proxy's threads wanted no CPU
//! (`ready.rs`) and holds it at its part of the class's `floor` otherwise, at most `hold`
//! in a row; `proportional` paces it, while the proxy has work in hand, at its class's
//! share of the requests times what it moved while free, never below that floor: slowed,
//! never stopped. The engine's end comes when its last
//! bytes are in the sending socket's queue, which may hold megabytes not yet paced out, so
//! the cap stays until they have left (bounded by [`DRAIN_LIMIT`]) and is lifted then:
//! the sockets may go back to the proxy (a bounded body, a kept-alive connection), and
//! whatever the proxy writes next goes behind the body on the same stream anyway.

use std::future::Future;
use std::os::fd::AsFd;
use std::time::Duration;

use splicer_sys::sock::{set_max_pacing_rate, tcp_info, unsent_bytes};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::demand::MIN_SHARE;
use super::{Class, Front, KernelSplice, Mode, Pacer, MIN_RATE};

/// No cap, as the kernel spells it.
const UNCAPPED: u64 = u64::MAX;

/// The longest a splice's end waits for its queued bytes to be paced out before the cap is
/// lifted anyway (a reader that stopped reading would otherwise hold it forever).
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// How often a kernel splice of a `conservative` or `proportional` class looks at the
/// proxy's work: a held splice is slowed within this of a request coming, and let go
/// within it of the last one ending.
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// A full segment's bytes on the wire, for the least cap a held splice gets.
const SEGMENT: f64 = 1500.0;

/// How old a `proportional` splice's free rate may grow before it is let go for a look to
/// measure it again (while the proxy works without a pause, that is 1% of the time).
const REMEASURE: Duration = Duration::from_secs(1);

/// What a kernel splice's bytes leave by, as the pacer caps it.
pub(crate) trait Outlet: Sync {
    /// Bytes sent and acknowledged so far (what a free rate is measured from).
    fn sent(&self) -> u64;
    /// Caps its rate in bytes a second (`None`: uncapped).
    fn cap(&self, rate: Option<u64>);
    /// Bytes taken in and not yet sent: a cap stays until they left.
    fn unsent(&self) -> u64 {
        0
    }
    /// Whether a cap is steered toward its rate from what was measured, so that it must be
    /// set again at every look, not only when the rate changes.
    fn steered(&self) -> bool {
        false
    }
}

/// Sockets that send a splice's bytes (`sockmap`): capped with `SO_MAX_PACING_RATE`, which
/// turns on TCP's own pacing on this kernel without `fq`.
pub(crate) struct Sockets<'a>(pub &'a [&'a TcpStream]);

impl Outlet for Sockets<'_> {
    fn sent(&self) -> u64 {
        self.0
            .iter()
            .filter_map(|s| tcp_info(s.as_fd()).ok())
            .map(|i| i.bytes_acked)
            .sum()
    }

    fn cap(&self, rate: Option<u64>) {
        for s in self.0 {
            // Not fatal: the splice then runs at the engine's own speed, and the failure
            // (not expected on a TCP socket) is logged.
            if let Err(e) = set_max_pacing_rate(s.as_fd(), rate.unwrap_or(UNCAPPED)) {
                tracing::warn!(error = %e, "pacer: cannot set SO_MAX_PACING_RATE");
            }
        }
    }

    fn unsent(&self) -> u64 {
        self.0
            .iter()
            .map(|s| unsent_bytes(s.as_fd()).unwrap_or(0) as u64)
            .max()
            .unwrap_or(0)
    }
}

impl Pacer {
    /// Runs `splice`, a kernel engine moving bytes out through `out`, paced as its
    /// class of front end `front` says. `cut` resolves when every splice must end (a
    /// shutdown): the wait for queued bytes to be paced out stops then.
    pub(crate) async fn kernel<F: Future>(
        &self,
        (front, class): (Front, Class),
        out: &dyn Outlet,
        splice: F,
        cut: impl Future<Output = ()>,
    ) -> F::Output {
        let counted = self.kernel_splice(front, class);
        let mut changes = self.changes();
        let mut held = Held {
            busy_seen: self.demand.periods(),
            ..Held::default()
        };
        let mut applied = None;
        let apply = |applied: &mut Option<u64>, held: &mut Held| {
            let rate = self.kernel_rate(&counted, held, out);
            if rate != *applied || (rate.is_some() && out.steered()) {
                out.cap(rate);
                *applied = rate;
            }
        };
        apply(&mut applied, &mut held);
        let mut look = tokio::time::interval(LOOK_EVERY);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(splice);
        let output = loop {
            // A steered cap is looked at while it is in force, a `rate` one included.
            let follows = self.class_pace(front, class).mode.follows_demand()
                || (applied.is_some() && out.steered());
            tokio::select! {
                out = &mut splice => break out,
                changed = changes.changed() => {
                    if changed.is_err() {
                        // The pacer lives as long as the relay: no more changes will come.
                        break splice.await;
                    }
                    apply(&mut applied, &mut held);
                }
                _ = look.tick(), if follows => apply(&mut applied, &mut held),
            }
        };
        if applied.is_some() {
            // A `rate` cap stays until the queued bytes went at it; a held splice is let go.
            tokio::select! {
                () = paced_out(out, || counted.rate()) => {}
                () = cut => {}
            }
            out.cap(None);
        }
        drop(counted);
        output
    }

    /// The rate a kernel splice's sockets should send at now (`None`: uncapped).
    fn kernel_rate(
        &self,
        counted: &KernelSplice<'_>,
        held: &mut Held,
        out: &dyn Outlet,
    ) -> Option<u64> {
        let cp = self.class_pace(counted.front, counted.class);
        if !cp.mode.follows_demand() {
            *held = Held::default();
            return counted.rate();
        }
        let now = Instant::now();
        // Conservative judges by the scheduler's view of the proxy where the kernel gives
        // it (`ready.rs`: time waiting for a CPU counts as work), by its spans otherwise.
        let ready = match cp.mode {
            Mode::Conservative => self.ready.idle_share(),
            _ => None,
        };
        // The class's floor, shared evenly over its kernel splices: a floor per splice did
        // not hold back 170 splices together (seed 001's experiment, 2026-11-27). Never
        // below two segments per `hold`: a paced socket sends its next packet only
        // once the last one's time at the cap has passed, cap lifted or not, so a lower one
        // would hold the splice past `hold` (200 splices sharing 1 MiB/s each waited 0.55 s
        // after every two segments).
        let floor = (cp.floor_rate() / counted.running().max(1))
            .max(MIN_RATE)
            .max((2.0 * SEGMENT / cp.hold.0.as_secs_f64()) as u64);
        if let Some(share) = ready {
            return held.duty(share, cp.hold.0, now).then_some(floor);
        }
        // The free rate, which only the spans' judgement uses (a `TCP_INFO` per look).
        held.measure(out, now);
        held.look_idle(self.demand.idle_time(), now);
        if !self.demand.busy_since(&mut held.busy_seen) {
            held.since = None;
            held.free_until_next(true);
            return None;
        }
        let share = match cp.mode {
            Mode::Proportional => self.demand.share(counted.front, counted.class),
            // Conservative: the share of the time the proxy had nothing in hand, as seed
            // 001's kernel thread forwarded while the proxy was blocked. Under a load that
            // keeps it working without a pause that is nothing, and the floor moves it
            // (without the free looks below: there is nothing to take a share of).
            _ if held.idle_share < MIN_SHARE => {
                held.since = None;
                held.free_until_next(false);
                return Some(floor);
            }
            _ => held.idle_share,
        };
        // Its share of what it moves free, never below its part of the floor (slowed, never
        // stopped). That free rate is taken again when it is older than `REMEASURE`, by
        // letting the splice go for one look once it has been held `hold`.
        let since = *held.since.get_or_insert(now);
        let stale = held
            .measured_at
            .is_none_or(|t| now.saturating_duration_since(t) >= REMEASURE);
        if stale && now.saturating_duration_since(since) >= cp.hold.0 {
            held.since = None;
            held.free_until_next(true);
            return None;
        }
        held.free_until_next(false);
        Some(((share * held.free_rate) as u64).max(floor))
    }
}

/// The time constant of a held splice's view of the proxy's idle share (its looks come
/// every 10 ms; one look is too short to judge).
const IDLE_TAU: Duration = Duration::from_millis(100);

/// A kernel splice's state in the `conservative` and `proportional` modes.
#[derive(Default)]
struct Held {
    /// Since when it is held (paced at its share).
    since: Option<Instant>,
    /// When `free_rate` was last measured.
    measured_at: Option<Instant>,
    /// The proxy's busy periods seen at the last look.
    busy_seen: u64,
    /// The bytes its sockets had sent, acknowledged, at the last look, and whether it ran
    /// uncapped since.
    last: Option<(u64, Instant, bool)>,
    /// Bytes a second it moved while uncapped (a mean over the looks it moved in): what a
    /// share is a share of.
    free_rate: f64,
    /// The proxy's idle time and when, at the last look.
    idle_seen: Option<(Duration, Instant)>,
    /// The share of the time the proxy had no span open, a mean over about [`IDLE_TAU`]:
    /// the share a `conservative` splice judged by spans is paced at (without `schedstat`).
    idle_share: f64,
    /// Free looks a `conservative` splice has earned and not yet taken ([`Held::duty`]).
    credit: f64,
}

impl Held {
    fn measure(&mut self, out: &dyn Outlet, now: Instant) {
        let acked = out.sent();
        if let Some((before, at, true)) = self.last {
            let dt = now.saturating_duration_since(at).as_secs_f64();
            let moved = acked.saturating_sub(before);
            if dt > 0.0 && moved > 0 {
                let r = moved as f64 / dt;
                self.free_rate = if self.free_rate == 0.0 {
                    r
                } else {
                    (self.free_rate + r) / 2.0
                };
                self.measured_at = Some(now);
            }
        }
        self.last = Some((acked, now, false));
    }

    /// Takes the proxy's idle time (`idle`, ever) into the idle share.
    fn look_idle(&mut self, idle: Duration, now: Instant) {
        if let Some((before, at)) = self.idle_seen {
            let dt = now.saturating_duration_since(at);
            if !dt.is_zero() {
                let fresh =
                    (idle.saturating_sub(before).as_secs_f64() / dt.as_secs_f64()).clamp(0.0, 1.0);
                let weight = 1.0 - (-dt.as_secs_f64() / IDLE_TAU.as_secs_f64()).exp();
                self.idle_share += weight * (fresh - self.idle_share);
            }
        }
        self.idle_seen = Some((idle, now));
    }

    /// A `conservative` splice's look when the scheduler says what the proxy wanted:
    /// whether it is held (at the floor) until the next look. It goes free for the share
    /// of the looks the proxy was blocked (`idle`: a credit that each look earns and each
    /// free look spends), which is seed 001's "forward while the application is blocked"
    /// at the looks' grain, and never held longer than `hold` in a row. No rate measured
    /// free is needed, which on a path of 80 ms and looks of 10 ms came out as nothing.
    fn duty(&mut self, idle: f64, hold: Duration, now: Instant) -> bool {
        let since = *self.since.get_or_insert(now);
        self.credit = (self.credit + idle).min(2.0);
        let free = idle > 1.0 - MIN_SHARE
            || self.credit >= 1.0
            || now.saturating_duration_since(since) >= hold;
        if free {
            self.credit = (self.credit - 1.0).max(0.0);
            self.since = None;
        }
        !free
    }

    /// Whether the splice runs uncapped until the next look (its bytes then count in
    /// `free_rate`).
    fn free_until_next(&mut self, free: bool) {
        if let Some(l) = self.last.as_mut() {
            l.2 = free;
        }
    }
}

/// Waits until the sockets have sent what they hold, while a cap (`rate()`) is in force,
/// at most [`DRAIN_LIMIT`].
async fn paced_out(out: &dyn Outlet, rate: impl Fn() -> Option<u64>) {
    let deadline = Instant::now() + DRAIN_LIMIT;
    loop {
        let unsent = out.unsent();
        let Some(rate) = rate() else { return };
        if unsent == 0 || Instant::now() >= deadline {
            return;
        }
        // Look again about when half of it should have left, between 1 and 50 ms.
        let half = Duration::from_secs_f64(unsent as f64 / rate as f64 / 2.0);
        let wait = half.clamp(Duration::from_millis(1), Duration::from_millis(50));
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pacer::{ClassPace, Hold, PacerConfig, Pacing};
    use splicer_sys::sock::max_pacing_rate;

    const FLOOR: u64 = 256 * 1024;

    fn relay(mode: Mode) -> crate::Relay {
        let relay = crate::Relay::new(crate::RelayConfig::default());
        let mut p = Pacing::default();
        p.set(
            Front::Socks,
            PacerConfig {
                tunnels: ClassPace {
                    mode,
                    hold: Hold(Duration::from_millis(200)),
                    floor: FLOOR,
                    ..ClassPace::default()
                },
                ..PacerConfig::default()
            },
        );
        relay.set_pacing(p);
        relay
    }

    async fn socket() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        (a, l.accept().await.unwrap().0)
    }

    /// The cap on `s` `after` into a kernel splice of the SOCKS tunnels that lasts 150 ms,
    /// and once it ended.
    async fn cap_during(relay: &crate::Relay, s: &TcpStream, after: Duration) -> (u64, u64) {
        cap_during_of(relay, s, after, Duration::from_millis(150)).await
    }

    /// The same for a splice that lasts `lasts`.
    async fn cap_during_of(
        relay: &crate::Relay,
        s: &TcpStream,
        after: Duration,
        lasts: Duration,
    ) -> (u64, u64) {
        let splice = tokio::time::sleep(lasts);
        let look = async {
            tokio::time::sleep(after).await;
            max_pacing_rate(s.as_fd()).unwrap()
        };
        let pacer = relay.pacer();
        let senders = [s];
        let class = (Front::Socks, Class::Tunnels);
        let out = Sockets(&senders);
        let run = pacer.kernel(class, &out, splice, std::future::pending());
        let ((), during) = tokio::join!(run, look);
        (during, max_pacing_rate(s.as_fd()).unwrap())
    }

    #[test]
    fn the_idle_share_follows_the_time_no_span_was_open() {
        let mut h = Held::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        h.look_idle(ms(0), t0);
        // A proxy idle 40% of the time, for a second of 10 ms looks: 0.4.
        for i in 1..=100u32 {
            h.look_idle(ms(4) * i, t0 + ms(10) * i);
        }
        assert!((h.idle_share - 0.4).abs() < 0.01, "{}", h.idle_share);
        // Then busy without a pause: it falls to nothing within a few time constants.
        for i in 101..=150u32 {
            h.look_idle(ms(400), t0 + ms(10) * i);
        }
        assert!(h.idle_share < 0.01, "{}", h.idle_share);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_kernel_splice_is_slowed_while_the_proxy_works_and_freed_after() {
        let mode = Mode::Proportional;
        let relay = relay(mode);
        let (s, _peer) = socket().await;
        // No work: free.
        let (during, after) = cap_during(&relay, &s, Duration::from_millis(50)).await;
        assert_eq!((during, after), (UNCAPPED, UNCAPPED));
        // Work in hand: the floor (the splice has not been measured free yet), lifted at
        // the end.
        let work = relay.foreground();
        let (during, after) = cap_during(&relay, &s, Duration::from_millis(50)).await;
        assert_eq!((during, after), (FLOOR, UNCAPPED));
        // Another kernel splice of the class running: the floor is the class's, shared.
        let other = relay.pacer().kernel_splice(Front::Socks, Class::Tunnels);
        let (during, _) = cap_during(&relay, &s, Duration::from_millis(50)).await;
        assert_eq!(during, FLOOR / 2);
        drop(other);
        // The work ends during the splice: freed at the next look.
        let ending = async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            drop(work);
        };
        let ((during, _), ()) =
            tokio::join!(cap_during(&relay, &s, Duration::from_millis(100)), ending);
        assert_eq!(during, UNCAPPED);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_splice_gets_at_least_two_segments_per_hold() {
        let relay = relay(Mode::Proportional);
        let (s, _peer) = socket().await;
        let _work = relay.foreground();
        let _others: Vec<_> = (0..99)
            .map(|_| relay.pacer().kernel_splice(Front::Socks, Class::Tunnels))
            .collect();
        // The floor of 256 KiB/s over 100 splices is 2.6 kB/s each; two segments of 1500
        // bytes per `hold` of 200 ms are 15 kB/s.
        let (during, _) = cap_during(&relay, &s, Duration::from_millis(50)).await;
        assert!((14_999..=15_000).contains(&during), "{during}");
    }

    /// `conservative` judges by the scheduler: a process that wants its CPU holds the
    /// splice at the floor, spans or not; one that sleeps frees it. A child shell stands for
    /// the proxy (this test process runs other tests beside it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_conservative_kernel_splice_follows_the_cpu_the_proxy_wants() {
        use crate::pacer::ready::tests::Shell;
        let relay = relay(Mode::Conservative);
        let (s, _peer) = socket().await;
        let sleeps = Shell::run("sleep 30");
        let spins = Shell::run("while :; do :; done");
        let ready = relay.pacer().readiness();
        // Looked at every 10 ms for 400 ms: the shells have started and the idle share,
        // a mean over 100 ms, has settled.
        let settle = |pid| async move {
            ready.watch(pid, 1);
            for _ in 0..40 {
                let _ = ready.idle_share();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        settle(sleeps.0.id()).await;
        // A span open, but the proxy wants no CPU: free.
        let work = relay.foreground();
        let (during, after) = cap_during(&relay, &s, Duration::from_millis(50)).await;
        assert_eq!((during, after), (UNCAPPED, UNCAPPED));
        drop(work);
        // No span, but the proxy wants all of its CPU: the class's floor, lifted at the end.
        settle(spins.0.id()).await;
        let (during, after) = cap_during(&relay, &s, Duration::from_millis(100)).await;
        assert_eq!((during, after), (FLOOR, UNCAPPED));
        // It stops wanting it during the splice: freed within a few of the idle share's
        // time constants (100 ms).
        let stop = async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            ready.watch(sleeps.0.id(), 1);
        };
        let long = Duration::from_millis(800);
        let ((during, _), ()) = tokio::join!(
            cap_during_of(&relay, &s, Duration::from_millis(600), long),
            stop
        );
        assert_eq!(during, UNCAPPED);
    }
}
