//! One user-space splice's pacing: the token buckets a `copy` or `pipe` splice takes each
//! read's worth from (`rate`), or the wait for the proxy's own work before each read
//! (`conservative`, `proportional`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::bucket::Bucket;
use super::{Class, ClassPace, Front, Mode, Pacer, LOOK_AGAIN};

/// The shortest wait worth a timer: tokio's timer counts whole milliseconds.
const TIMER_GRAIN: Duration = Duration::from_millis(1);

/// The least a held splice reads at the end of its `hold`: a full segment, so that a
/// class of many splices does not go on in reads of a few bytes each.
pub(super) const HELD_LEAST: usize = 1448;

/// One user-space splice's pacing: its own bucket (`per_splice`) and its class's (`total`).
pub(crate) struct Paced<'p> {
    pacer: &'p Pacer,
    front: Front,
    class: Class,
    own: Option<Bucket>,
    /// The setting `own` was made from.
    seen: Option<ClassPace>,
    /// When the last chunk was granted, while the splice keeps moving: the time its read
    /// and write took is what `proportional` weighs its wait by.
    granted: Option<Instant>,
    /// The proxy's busy periods seen at the last read.
    periods_seen: u64,
    /// `proportional`: waits owed and not yet slept (each under the timer's grain).
    owed: Duration,
    /// Whether it is counted among its class's user-space splices (those started while a
    /// class followed the proxy's work).
    counted: bool,
}

impl<'p> Paced<'p> {
    pub(super) fn new(pacer: &'p Pacer, front: Front, class: Class, counted: bool) -> Paced<'p> {
        Paced {
            pacer,
            front,
            class,
            own: None,
            seen: None,
            granted: None,
            periods_seen: pacer.demand.periods(),
            owed: Duration::ZERO,
            counted,
        }
    }

    /// Waits until some of `want` bytes may be read, and returns how many (at least 1
    /// when `want` is). What the read did not take goes back with [`Paced::unused`].
    pub(crate) async fn take(&mut self, want: usize) -> usize {
        if want == 0 || !self.pacer.any.load(Ordering::Relaxed) {
            // Nothing is paced (the common case): no lock, no bucket.
            self.seen = None;
            return want;
        }
        loop {
            let cp = self.pacer.class_pace(self.front, self.class);
            if !cp.paced() {
                self.own = None;
                self.seen = Some(cp);
                return want;
            }
            if cp.mode.follows_demand() {
                self.own = None;
                self.seen = Some(cp);
                return self
                    .behind_the_proxy(cp)
                    .await
                    .map_or(want, |most| want.min(most));
            }
            let now = Instant::now();
            if self.seen != Some(cp) {
                self.own = (cp.per_splice > 0).then(|| {
                    let burst = cp.burst_for(cp.per_splice);
                    match self.own.take() {
                        Some(mut b) => {
                            b.set(cp.per_splice, burst, now);
                            b
                        }
                        None => Bucket::new(cp.per_splice, burst, now),
                    }
                });
                self.seen = Some(cp);
            }
            let mut n = want as u64;
            let mut wait = Duration::ZERO;
            if let Some(own) = self.own.as_mut() {
                match own.take(n, now) {
                    Ok(k) => n = k,
                    Err(w) => wait = w,
                }
            }
            if wait.is_zero() {
                let mut class = self.pacer.class_bucket(self.front, self.class);
                match class.as_mut().map(|c| c.take(n, now)) {
                    None => return n as usize,
                    Some(Ok(k)) => {
                        drop(class);
                        if let Some(own) = self.own.as_mut() {
                            own.refund(n - k);
                        }
                        return k as usize;
                    }
                    Some(Err(w)) => {
                        drop(class);
                        if let Some(own) = self.own.as_mut() {
                            own.refund(n);
                        }
                        wait = w;
                    }
                }
            }
            let slept = Instant::now();
            tokio::time::sleep(wait.min(LOOK_AGAIN)).await;
            let ns = slept.elapsed().as_nanos() as u64;
            self.pacer.waited_ns[self.front.index()][self.class.index()]
                .fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// `conservative`: while the proxy has work of its own in hand, waits until it has
    /// none, at most `hold`; when the hold ran out with the work still in hand, returns the
    /// most this read may take: the splice's part of the class's `floor` over the hold (the
    /// class's user-space splices of its front end share it evenly), at least a segment.
    /// So a class of many splices moves about its floor while the proxy works, as its
    /// kernel splices do. When the proxy had work since the last read but has none now,
    /// yields once, so that whatever the proxy's tasks have ready runs before this read.
    /// `proportional`: when the proxy had work since the last read, waits the time the last
    /// chunk took times `(1 − share) / share`, so that the splice moves a `share` of the
    /// time; waits shorter than the timer's millisecond are added up and slept together;
    /// at most `hold` at a time (docs/pacer.md).
    async fn behind_the_proxy(&mut self, cp: ClassPace) -> Option<usize> {
        let demand = &self.pacer.demand;
        let now = Instant::now();
        let worked = demand.busy_since(&mut self.periods_seen);
        let mut most = None;
        if worked {
            self.pacer.holds[self.front.index()][self.class.index()]
                .fetch_add(1, Ordering::Relaxed);
            match cp.mode {
                Mode::Proportional => {
                    let share = demand.share(self.front, self.class);
                    let chunk = self
                        .granted
                        .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
                    self.owed += chunk.mul_f64((1.0 - share) / share);
                    if self.owed >= TIMER_GRAIN {
                        let wait = self.owed.min(cp.hold.0);
                        self.owed = Duration::ZERO;
                        tokio::time::sleep(wait).await;
                    }
                }
                _ if demand.busy() => {
                    demand.until_idle(cp.hold.0).await;
                    if demand.busy() {
                        most = Some(self.held_part(cp));
                    }
                }
                _ => tokio::task::yield_now().await,
            }
            let ns = now.elapsed().as_nanos() as u64;
            self.pacer.waited_ns[self.front.index()][self.class.index()]
                .fetch_add(ns, Ordering::Relaxed);
        }
        self.granted = Some(Instant::now());
        most
    }

    /// A held splice's part of its class's `floor` over one `hold`, in bytes.
    fn held_part(&self, cp: ClassPace) -> usize {
        let splices = self.pacer.user_splices[self.front.index()][self.class.index()]
            .load(Ordering::Relaxed)
            .max(1);
        let bytes = cp.floor_rate() as f64 * cp.hold.0.as_secs_f64() / splices as f64;
        (bytes as usize).max(HELD_LEAST)
    }

    /// Gives back `n` bytes taken and not read (a short read, a drained source).
    pub(crate) fn unused(&mut self, n: usize) {
        if n > 0 {
            // The source is drained: the next chunk's time starts when bytes come.
            self.granted = None;
        }
        if n == 0
            || !self
                .seen
                .is_some_and(|cp| cp.paced() && cp.mode == Mode::Rate)
        {
            return;
        }
        if let Some(own) = self.own.as_mut() {
            own.refund(n as u64);
        }
        if let Some(c) = self.pacer.class_bucket(self.front, self.class).as_mut() {
            c.refund(n as u64);
        }
    }
}

impl Drop for Paced<'_> {
    fn drop(&mut self) {
        if self.counted {
            self.pacer.user_splices[self.front.index()][self.class.index()]
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}
