//! The proxy's readiness: the share of its CPUs its own threads wanted, running or waiting
//! to run. What `conservative` holds the kernel engines' splices by.
//!
//! Seed 001's kernel thread forwarded "while the application is blocked". The spans of
//! work the front ends open (`demand.rs`) say when the proxy has a head or a hit in hand,
//! but not what the kernel's receive work costs it: a hit whose write waits for the
//! client's window closes its span, and the proxy then waits for a CPU its splices' receive
//! work holds, its span closed. The scheduler counts both: `/proc/PID/task/TID/schedstat`
//! gives each thread's time on a CPU and its time runnable but not running (the kernel's
//! `sched_info`, `CONFIG_SCHED_INFO`). Their sum over the process's threads, over the CPUs
//! the process may use, is how much of its CPU the proxy wanted; the rest is the time it
//! was blocked, which a `conservative` splice may have.
//!
//! One sampler for the process, read at most every [`EVERY`] whatever the number of
//! splices looking (each looks every 10 ms); a thread's file is kept open and read again
//! from its start, and the thread list is read again every [`RESCAN`].

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A sample younger than this is answered from memory.
const EVERY: Duration = Duration::from_millis(5);
/// How often the list of threads is read again (runtimes start and end blocking threads).
const RESCAN: Duration = Duration::from_secs(1);
/// The time constant of the idle share (one 5 ms sample is too short to judge).
const TAU: Duration = Duration::from_millis(100);

pub(crate) struct Readiness {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// `/proc/PID/task`.
    tasks: PathBuf,
    /// The CPUs the process may use: its threads' wanted time is a share of these.
    cpus: f64,
    /// Each thread's schedstat file and its wanted nanoseconds at the last sample.
    threads: HashMap<u32, (File, u64)>,
    scanned: Option<Instant>,
    /// When the last sample was taken.
    at: Option<Instant>,
    /// The share of the time the process was blocked, a mean over about [`TAU`] (below 0
    /// where its threads wanted more than its CPUs); `None` before two samples.
    idle_mean: Option<f64>,
    /// Whether schedstat could be read at all (a kernel without `CONFIG_SCHED_INFO`).
    unreadable: bool,
}

impl Readiness {
    /// This process.
    pub(crate) fn this_process() -> Readiness {
        // `available_parallelism` follows the process's CPU affinity (a `taskset`).
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::of(std::process::id(), cpus)
    }

    /// Process `pid`, which may use `cpus` CPUs.
    pub(crate) fn of(pid: u32, cpus: usize) -> Readiness {
        Readiness {
            state: Mutex::new(State::of(pid, cpus)),
        }
    }

    /// Looks at process `pid` from now on (the pacer's tests: a child that spins or sleeps
    /// stands for the proxy).
    #[cfg(test)]
    pub(crate) fn watch(&self, pid: u32, cpus: usize) {
        *self.state.lock().unwrap() = State::of(pid, cpus);
    }

    /// The share of the time the process was blocked (wanted none of its CPUs), over about
    /// the last [`TAU`]; `None` before two samples, and where the kernel does not say (the
    /// caller then judges by spans).
    pub(crate) fn idle_share(&self) -> Option<f64> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if s.unreadable {
            return None;
        }
        if s.at.is_some_and(|at| now.duration_since(at) < EVERY) {
            return s.idle_mean.map(|m| m.clamp(0.0, 1.0));
        }
        if s.scanned.is_none_or(|t| now.duration_since(t) >= RESCAN) {
            s.rescan();
            s.scanned = Some(now);
        }
        let mut wanted = 0u64;
        let mut gone = Vec::new();
        for (tid, (file, last)) in s.threads.iter_mut() {
            match read_wanted(file) {
                Some(w) => {
                    wanted += w.saturating_sub(*last);
                    *last = w;
                }
                None => gone.push(*tid),
            }
        }
        for tid in gone {
            s.threads.remove(&tid);
        }
        if s.threads.is_empty() {
            s.unreadable = true;
            return None;
        }
        if let Some(at) = s.at {
            let dt = now.duration_since(at).as_secs_f64();
            // Not clamped before the mean: a running thread's time is brought up to date at
            // the scheduler's ticks (4 ms here), so one sample reads 0.8 of a CPU and the
            // next 1.2; clamping each would read a spinning process as 10% idle.
            let fresh = 1.0 - wanted as f64 / 1e9 / (dt * s.cpus);
            let weight = 1.0 - (-dt / TAU.as_secs_f64()).exp();
            s.idle_mean = Some(match s.idle_mean {
                Some(old) => old + weight * (fresh - old),
                None => fresh,
            });
        }
        s.at = Some(now);
        s.idle_mean.map(|m| m.clamp(0.0, 1.0))
    }
}

impl State {
    fn of(pid: u32, cpus: usize) -> State {
        State {
            tasks: PathBuf::from(format!("/proc/{pid}/task")),
            cpus: cpus.max(1) as f64,
            ..State::default()
        }
    }

    /// Opens the files of threads not seen before; their past is not this sample's.
    fn rescan(&mut self) {
        let Ok(dir) = std::fs::read_dir(&self.tasks) else {
            return;
        };
        for entry in dir.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if self.threads.contains_key(&tid) {
                continue;
            }
            if let Ok(file) = File::open(entry.path().join("schedstat")) {
                if let Some(w) = read_wanted(&file) {
                    self.threads.insert(tid, (file, w));
                }
            }
        }
    }
}

/// A thread's nanoseconds on a CPU plus waiting for one (`schedstat`'s first two fields);
/// `None` once it has ended.
fn read_wanted(file: &File) -> Option<u64> {
    let mut buf = [0u8; 96];
    let n = file.read_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    let mut fields = text.split_ascii_whitespace();
    let on_cpu: u64 = fields.next()?.parse().ok()?;
    let waiting: u64 = fields.next()?.parse().ok()?;
    Some(on_cpu + waiting)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::process::{Child, Command};

    /// A shell pinned to one CPU, spinning or sleeping; killed (by PID) when dropped.
    pub(crate) struct Shell(pub(crate) Child);

    impl Shell {
        pub(crate) fn run(script: &str) -> Shell {
            Shell(
                Command::new("taskset")
                    .args(["-c", "0", "sh", "-c", script])
                    .spawn()
                    .expect("taskset and sh"),
            )
        }
    }

    impl Drop for Shell {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// The idle share of `r` after looking every 10 ms for `secs`, as the splices do.
    fn idle_share(r: &Readiness, secs: f64) -> f64 {
        let start = Instant::now();
        let mut share = None;
        while start.elapsed().as_secs_f64() < secs {
            share = r.idle_share();
            std::thread::sleep(Duration::from_millis(10));
        }
        share.expect("schedstat readable")
    }

    #[test]
    fn a_process_that_spins_is_never_idle_and_one_that_sleeps_always() {
        let spin = Shell::run("while :; do :; done");
        let r = Readiness::of(spin.0.id(), 1);
        let share = idle_share(&r, 0.6);
        assert!(share < 0.1, "a spinning shell idle {share}");
        // Of two CPUs it wants one: half idle.
        let r = Readiness::of(spin.0.id(), 2);
        let share = idle_share(&r, 0.6);
        assert!((0.4..0.6).contains(&share), "of two CPUs: {share}");
        let sleep = Shell::run("sleep 5");
        let r = Readiness::of(sleep.0.id(), 1);
        let share = idle_share(&r, 0.6);
        assert!(share > 0.9, "a sleeping shell idle {share}");
    }

    #[test]
    fn waiting_for_a_cpu_another_thread_holds_is_wanted_time() {
        // Two spinners on one CPU: each runs half the time and waits the other half; both
        // halves are wanted.
        let a = Shell::run("while :; do :; done");
        let _b = Shell::run("while :; do :; done");
        let r = Readiness::of(a.0.id(), 1);
        let share = idle_share(&r, 0.6);
        assert!(share < 0.1, "a spinner sharing its CPU idle {share}");
    }

    #[test]
    fn a_process_gone_is_no_reading() {
        let r = {
            let s = Shell::run("sleep 5");
            Readiness::of(s.0.id(), 1)
        };
        assert_eq!(r.idle_share(), None);
    }
}
