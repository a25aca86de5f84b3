//! A token bucket in bytes: what the `rate` mode holds each splice and each class to.
//!
//! Time is passed in, so the arithmetic is tested without a clock. The bucket lends
//! nothing: a transfer takes its bytes' worth before it moves them (what it did not move
//! goes back), so the tokens never go below zero, and over any interval no more moves than
//! the rate allows plus one burst. Taking before moving also keeps the splices that share
//! a class's bucket from spending the same tokens twice.

use std::time::Duration;

use tokio::time::Instant;

/// The least a waiting splice asks for before it moves again, so that a low rate moves
/// fewer, larger chunks rather than one system call per few bytes (capped by the burst).
pub(crate) const MIN_GRANT: u64 = 16 * 1024;

#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    /// Bytes per second.
    rate: u64,
    /// Most tokens held: the largest burst after a pause.
    burst: u64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// A full bucket of `rate` bytes a second holding at most `burst` bytes (at least 1).
    pub(crate) fn new(rate: u64, burst: u64, now: Instant) -> Bucket {
        let burst = burst.max(1);
        Bucket {
            rate: rate.max(1),
            burst,
            tokens: burst as f64,
            last: now,
        }
    }

    /// Changes the rate and burst of a running bucket (a reload); the tokens held are kept,
    /// capped by the new burst.
    pub(crate) fn set(&mut self, rate: u64, burst: u64, now: Instant) {
        self.refill(now);
        self.rate = rate.max(1);
        self.burst = burst.max(1);
        self.tokens = self.tokens.min(self.burst as f64);
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate as f64).min(self.burst as f64);
        self.last = now;
    }

    /// Takes up to `want` bytes' worth now and returns how many, or how long to wait
    /// before a worthwhile number may go (`want`, [`MIN_GRANT`] and the burst, whichever
    /// is least). What the transfer then does not move goes back with [`Bucket::refund`].
    pub(crate) fn take(&mut self, want: u64, now: Instant) -> Result<u64, Duration> {
        self.refill(now);
        let least = want.min(MIN_GRANT).min(self.burst).max(1);
        if self.tokens >= least as f64 {
            let n = want.min(self.tokens as u64);
            self.tokens -= n as f64;
            return Ok(n);
        }
        let short = least as f64 - self.tokens;
        Err(Duration::from_secs_f64(short / self.rate as f64))
    }

    /// Gives back bytes taken and not moved (a short read).
    pub(crate) fn refund(&mut self, n: u64) {
        self.tokens = (self.tokens + n as f64).min(self.burst as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_bucket_grants_its_burst_then_paces_at_the_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1_000_000, 100_000, t0);
        assert_eq!(b.take(1 << 20, t0), Ok(100_000));
        // Empty: the wait is until MIN_GRANT bytes have accrued at 1 MB/s.
        let wait = b.take(1 << 20, t0).unwrap_err();
        assert_eq!(wait, Duration::from_secs_f64(MIN_GRANT as f64 / 1e6));
        // 50 ms later 50,000 bytes have accrued.
        let t1 = t0 + Duration::from_millis(50);
        assert_eq!(b.take(1 << 20, t1), Ok(50_000));
        // Seconds later, no more than the burst.
        let t2 = t0 + Duration::from_secs(5);
        assert_eq!(b.take(1 << 20, t2), Ok(100_000));
    }

    #[test]
    fn what_moves_over_a_long_run_is_the_rate_plus_one_burst() {
        let t0 = Instant::now();
        let (rate, burst) = (250_000u64, 32_768u64);
        let mut b = Bucket::new(rate, burst, t0);
        let mut now = t0;
        let mut moved = 0u64;
        // A transfer that always wants 64 KiB, waiting as told; 10 simulated seconds.
        while now < t0 + Duration::from_secs(10) {
            match b.take(65_536, now) {
                Ok(n) => moved += n,
                Err(wait) => now += wait,
            }
        }
        let most = rate * 10 + burst;
        assert!(moved <= most, "{moved} > {most}");
        assert!(moved >= rate * 10 - MIN_GRANT, "{moved} too few");
    }

    #[test]
    fn a_small_want_is_granted_without_waiting_for_a_full_chunk() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1_000, 10_000, t0);
        assert_eq!(b.take(10_000, t0), Ok(10_000));
        // A want of 50 waits for 50 bytes (50 ms at 1,000 a second), not for MIN_GRANT.
        assert_eq!(b.take(50, t0), Err(Duration::from_millis(50)));
        assert_eq!(b.take(50, t0 + Duration::from_millis(100)), Ok(50));
    }

    #[test]
    fn a_new_rate_applies_to_a_running_bucket() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1_000, 1_000_000, t0);
        assert_eq!(b.take(1_000_000, t0), Ok(1_000_000));
        b.set(1_000_000, 20_000, t0);
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(b.take(1 << 20, t1), Ok(20_000));
    }

    #[test]
    fn bytes_not_moved_go_back() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1_000, 10_000, t0);
        assert_eq!(b.take(10_000, t0), Ok(10_000));
        b.refund(4_000);
        // A small want goes at once with the refund; then the bucket is empty again.
        assert_eq!(b.take(4_000, t0), Ok(4_000));
        assert!(b.take(1, t0).is_err());
    }
}
