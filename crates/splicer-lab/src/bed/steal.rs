//! `splicer-lab steal`: takes a share of one CPU away from everything else on it, so that a
//! proxy on a 2026 CPU is the bottleneck seed 001's proxy was, its receive work included.
//!
//! A cgroup quota (`cpu_limit`) charges a process for its own time only: the kernel's
//! receive work for its sockets runs in other threads (threaded NAPI, the kernel's
//! workers) and escapes it, and that work is what seed 001 is about. This thread instead
//! runs at real-time priority (`SCHED_FIFO`), pinned to the CPU, busy for `share` of every
//! `period` and asleep for the rest: whatever else runs there, the proxy, its receive
//! threads and the workers alike, has the rest of the CPU, as on a slower one. Its cost is
//! the scheduler's share of the CPU, in slices of `period` (2 ms: below the 10 ms the
//! pacer looks at, above the scheduler's tick).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use splicer_sys::process::{pin_to_cpu, set_fifo};

/// The real-time priority: above every normal thread and the kernel's threaded NAPI.
const PRIORITY: i32 = 90;

pub struct Params {
    pub cpu: usize,
    /// Of each period, the share it is busy (0 to 0.9: the kernel keeps 5% of each second
    /// for normal threads anyway, `sched_rt_runtime_us`).
    pub share: f64,
    pub period: Duration,
}

impl Params {
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (0.0..=0.9).contains(&self.share),
            "--share: 0 to 0.9 of the CPU"
        );
        anyhow::ensure!(
            (Duration::from_micros(500)..=Duration::from_millis(100)).contains(&self.period),
            "--period-ms: 0.5 to 100"
        );
        Ok(())
    }
}

/// Runs until killed, or for `limit` when given (the tests).
pub fn run(p: &Params, limit: Option<Duration>) -> anyhow::Result<()> {
    p.check()?;
    pin_to_cpu(p.cpu).with_context(|| format!("pinning to CPU {}", p.cpu))?;
    set_fifo(PRIORITY).context("SCHED_FIFO (needs root)")?;
    let busy = p.period.mul_f64(p.share);
    let start = Instant::now();
    loop {
        let t = Instant::now();
        while t.elapsed() < busy {
            std::hint::spin_loop();
        }
        if limit.is_some_and(|l| start.elapsed() >= l) {
            return Ok(());
        }
        std::thread::sleep(p.period - busy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_checked() {
        let p = |share, ms| Params {
            cpu: 0,
            share,
            period: Duration::from_millis(ms),
        };
        assert!(p(0.5, 2).check().is_ok());
        assert!(p(0.95, 2).check().is_err());
        assert!(p(-0.1, 2).check().is_err());
        assert!(p(0.5, 0).check().is_err());
    }

    /// This thread's time on a CPU so far (`schedstat`'s first field).
    fn on_cpu() -> Duration {
        let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
        Duration::from_nanos(text.split_whitespace().next().unwrap().parse().unwrap())
    }

    #[test]
    fn a_thread_sharing_the_cpu_gets_what_is_left() {
        if !splicer_sys::process::is_root() {
            eprintln!("skipped: SCHED_FIFO needs root");
            return;
        }
        let cpu = 0;
        let wall = Duration::from_millis(600);
        let stealer = std::thread::spawn(move || {
            let p = Params {
                cpu,
                share: 0.5,
                period: Duration::from_millis(2),
            };
            run(&p, Some(wall + Duration::from_millis(100)))
        });
        // A spinner on the same CPU, measured over the stealer's run.
        let spinner = std::thread::spawn(move || {
            pin_to_cpu(cpu).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let (t0, c0) = (Instant::now(), on_cpu());
            while t0.elapsed() < wall {
                std::hint::spin_loop();
            }
            (on_cpu() - c0).as_secs_f64() / t0.elapsed().as_secs_f64()
        });
        let share = spinner.join().unwrap();
        stealer.join().unwrap().unwrap();
        // At most what the stealer leaves (other tests' threads may take some of it too).
        assert!(
            (0.1..0.6).contains(&share),
            "the spinner had {share} of the CPU"
        );
    }
}
