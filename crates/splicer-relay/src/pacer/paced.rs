//! One user-space splice's pacing: the token buckets a `copy` or `pipe` splice takes each
//! read's worth from.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::bucket::Bucket;
use super::{Class, ClassPace, Front, Pacer, LOOK_AGAIN};

/// One user-space splice's pacing: its own bucket (`per_splice`) and its class's (`total`).
pub(crate) struct Paced<'p> {
    pacer: &'p Pacer,
    front: Front,
    class: Class,
    own: Option<Bucket>,
    /// The setting `own` was made from.
    seen: Option<ClassPace>,
}

impl<'p> Paced<'p> {
    pub(super) fn new(pacer: &'p Pacer, front: Front, class: Class) -> Paced<'p> {
        Paced {
            pacer,
            front,
            class,
            own: None,
            seen: None,
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

    /// Gives back `n` bytes taken and not read (a short read, a drained source).
    pub(crate) fn unused(&mut self, n: usize) {
        if n == 0 || !self.seen.is_some_and(|cp| cp.paced()) {
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
