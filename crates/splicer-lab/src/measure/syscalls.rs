//! How many system calls a process makes while the loads run, counted by the kernel's
//! `raw_syscalls:sys_enter` tracepoint with `perf stat -p` (every thread of the process
//! at the start, and the threads they start): a splice's set-up and end cost system calls
//! (map updates, `TCP_REPAIR` steps, the watch's looks), and a count per request says
//! where an engine's CPU goes where a CPU figure alone cannot.

use std::process::{Child, Command, Stdio};

/// A `perf stat` attached to one process until [`SyscallCount::finish`].
pub struct SyscallCount {
    child: Child,
}

impl SyscallCount {
    /// Starts counting `pid`'s system calls; `None` when perf cannot start.
    pub fn start(pid: u32) -> Option<SyscallCount> {
        let child = Command::new("perf")
            .args(["stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p"])
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        // perf needs a moment to attach; what it misses is the first instant of the loads.
        std::thread::sleep(std::time::Duration::from_millis(200));
        Some(SyscallCount { child })
    }

    /// Stops perf (SIGINT, as at the terminal) and returns the count, if it printed one.
    pub fn finish(self) -> Option<u64> {
        // perf prints its counts when interrupted.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let out = self.child.wait_with_output().ok()?;
        parse(&String::from_utf8_lossy(&out.stderr))
    }
}

/// The count in `perf stat -x,` output (`N,,raw_syscalls:sys_enter,…`).
pub fn parse(perf: &str) -> Option<u64> {
    perf.lines()
        .find(|l| l.contains("raw_syscalls:sys_enter"))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_is_the_first_field() {
        assert_eq!(
            parse("18890,,raw_syscalls:sys_enter,270634512,100.00,,\n"),
            Some(18890)
        );
        assert_eq!(
            parse("<not counted>,,raw_syscalls:sys_enter,0,100.00,,"),
            None
        );
        assert_eq!(parse(""), None);
    }
}
