//! What a process asks of the kernel while the loads run: events counted by `perf stat -p`
//! (every thread of the process at the start, and the threads they start) — system calls
//! (the `raw_syscalls:sys_enter` tracepoint), context switches, a ring's completions — and
//! how long its threads waited for a CPU (the scheduler's `schedstat`). A splice's set-up
//! and end cost system calls (map updates, `TCP_REPAIR` steps, the watch's looks); a ring
//! costs wake-ups rather than calls; a count per request says where an engine's CPU goes
//! where a CPU figure alone cannot.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};

/// The tracepoint that counts system calls.
pub const SYSCALLS: &str = "raw_syscalls:sys_enter";

/// A `perf stat` attached to one process until [`PerfCount::finish`].
pub struct PerfCount {
    child: Child,
}

impl PerfCount {
    /// Starts counting `events` of `pid`; `None` when there are none or perf cannot start.
    pub fn start(pid: u32, events: &[String]) -> Option<PerfCount> {
        if events.is_empty() {
            return None;
        }
        let child = Command::new("perf")
            .args(["stat", "-x,", "-e", &events.join(","), "-p"])
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        // perf needs a moment to attach; what it misses is the first instant of the loads.
        std::thread::sleep(std::time::Duration::from_millis(200));
        Some(PerfCount { child })
    }

    /// Stops perf (SIGINT, as at the terminal) and returns the counts it printed, by event.
    pub fn finish(self) -> BTreeMap<String, u64> {
        // perf prints its counts when interrupted.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let Ok(out) = self.child.wait_with_output() else {
            return BTreeMap::new();
        };
        let text = String::from_utf8_lossy(&out.stderr);
        let counts = parse(&text);
        if counts.is_empty() {
            // An event perf does not know ends it at once: the run says why it has none.
            eprintln!("perf stat counted nothing on the proxy: {}", text.trim());
        }
        counts
    }
}

/// The counts in `perf stat -x,` output (`N,unit,event,…` per line; an event perf could
/// not count says `<not counted>` or `<not supported>` and is left out).
pub fn parse(perf: &str) -> BTreeMap<String, u64> {
    perf.lines()
        .filter_map(|l| {
            let mut f = l.split(',');
            let n = f.next()?.trim().parse().ok()?;
            let event = f.nth(1)?.trim();
            (!event.is_empty()).then(|| (event.to_string(), n))
        })
        .collect()
}

/// Nanoseconds the threads of `pid` have waited on a run queue for a CPU so far (the second
/// field of each `/proc/PID/task/TID/schedstat`), summed over its live threads; `None` when
/// the process is gone or the kernel keeps no schedstat.
pub fn run_wait_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut sum = None;
    for t in tasks.flatten() {
        let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        if let Some(w) = s
            .split_whitespace()
            .nth(1)
            .and_then(|w| w.parse::<u64>().ok())
        {
            sum = Some(sum.unwrap_or(0) + w);
        }
    }
    sum
}

/// Context switches of the whole machine so far (`ctxt` in `/proc/stat`): the client's,
/// the origin's and the kernel threads' wake-ups as well as the proxy's.
pub fn machine_switches() -> Option<u64> {
    std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("ctxt "))
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_gives_its_count_by_event() {
        let counts = parse(
            "18890,,raw_syscalls:sys_enter,270634512,100.00,,\n\
             412,,context-switches,270634512,100.00,1.52,K/sec\n\
             <not counted>,,io_uring:io_uring_complete,0,100.00,,\n\
             <not supported>,,cycles,0,100.00,,\n",
        );
        assert_eq!(counts.get(SYSCALLS), Some(&18890));
        assert_eq!(counts.get("context-switches"), Some(&412));
        assert_eq!(counts.len(), 2);
        assert!(parse("").is_empty());
    }

    #[test]
    fn a_process_has_waited_some_time_for_a_cpu_or_none_is_kept() {
        // The test's own process: every thread has a schedstat line when the kernel keeps
        // them (CONFIG_SCHED_INFO), and a process that does not exist has none.
        if std::path::Path::new("/proc/self/schedstat").exists() {
            assert!(run_wait_ns(std::process::id()).is_some());
        }
        assert_eq!(run_wait_ns(u32::MAX), None);
    }

    #[test]
    fn the_machine_has_switched_contexts() {
        assert!(machine_switches().is_some_and(|n| n > 0));
    }
}
