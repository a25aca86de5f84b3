//! A CPU budget for one process of a run (`cpu_limit` of a `[[process]]`): the process is
//! moved into a cgroup of its own with a CFS bandwidth quota, so that a proxy on a 2026 CPU
//! can be made the bottleneck the papers' proxies were (seed 000's 133 MHz proxy ran at 98%).
//!
//! Works with the cgroup v2 `cpu` controller (`cpu.max`) or, on hosts still on v1, the `cpu`
//! hierarchy (`cpu.cfs_quota_us`). The group is `splab-LABPID-PID`; it is removed when the
//! limit is dropped (after its process has exited), and by `splicer-lab clean` when the run
//! that made it is gone.
//!
//! What a quota charges: the process's own time, its system calls included (so `copy` and
//! `pipe` pay for their forwarding), but not softirq work the kernel does for its sockets
//! on other tasks' time (a `sockmap` redirect runs when the packet arrives, charged to the
//! task it interrupts: docs/kernel-notes.md, "Whose CPU a host's network receive is").

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

const V2_ROOT: &str = "/sys/fs/cgroup";
const V1_CPU: &str = "/sys/fs/cgroup/cpu";
const PREFIX: &str = "splab-";

/// The kernel's smallest quota (1 ms).
const MIN_QUOTA_US: u64 = 1000;
/// The period for budgets of 10% of a CPU and more; smaller budgets stretch it, since a
/// quota cannot go below 1 ms. A short period keeps the throttled stretches short.
const BASE_PERIOD_US: u64 = 10_000;

/// Quota and period (µs) for `percent` of one CPU.
pub fn quota(percent: f64) -> (u64, u64) {
    let mut period = BASE_PERIOD_US;
    let mut q = (percent / 100.0 * period as f64).round() as u64;
    if q < MIN_QUOTA_US {
        q = MIN_QUOTA_US;
        period = (MIN_QUOTA_US as f64 * 100.0 / percent).round() as u64;
    }
    (q, period)
}

/// A process's CPU budget; dropping it removes the group (call it once the process exited).
#[derive(Debug)]
pub struct CpuLimit {
    dir: PathBuf,
}

enum Hierarchy {
    V2,
    V1,
}

fn hierarchy() -> anyhow::Result<Hierarchy> {
    let controllers = std::fs::read_to_string(Path::new(V2_ROOT).join("cgroup.controllers"));
    if controllers.is_ok_and(|c| c.split_whitespace().any(|w| w == "cpu")) {
        return Ok(Hierarchy::V2);
    }
    if Path::new(V1_CPU).join("cpu.cfs_quota_us").exists() {
        return Ok(Hierarchy::V1);
    }
    anyhow::bail!(
        "cpu_limit needs the cgroup cpu controller (v2 {V2_ROOT}/cgroup.controllers listing \
         `cpu`, or v1 {V1_CPU}); neither is mounted here"
    )
}

fn write(path: &Path, what: &str) -> anyhow::Result<()> {
    std::fs::write(path, what)
        .with_context(|| format!("cannot write {what:?} to {}", path.display()))
}

impl CpuLimit {
    /// Puts `pid` (all its threads) into a new group limited to `percent` of one CPU.
    pub fn apply(pid: u32, percent: f64) -> anyhow::Result<CpuLimit> {
        // Below 0.1% the 1 ms minimum quota would need a period over the kernel's 1 s.
        anyhow::ensure!(
            percent >= 0.1 && percent.is_finite(),
            "cpu_limit: a share of one CPU in percent, from 0.1"
        );
        let (q, period) = quota(percent);
        let name = format!("{PREFIX}{}-{pid}", std::process::id());
        let limit = match hierarchy()? {
            Hierarchy::V2 => {
                let root = Path::new(V2_ROOT);
                let enabled = std::fs::read_to_string(root.join("cgroup.subtree_control"))
                    .unwrap_or_default();
                if !enabled.split_whitespace().any(|w| w == "cpu") {
                    write(&root.join("cgroup.subtree_control"), "+cpu")?;
                }
                let dir = root.join(&name);
                std::fs::create_dir(&dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                let limit = CpuLimit { dir };
                write(&limit.dir.join("cpu.max"), &format!("{q} {period}"))?;
                limit
            }
            Hierarchy::V1 => {
                let dir = Path::new(V1_CPU).join(&name);
                std::fs::create_dir(&dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                let limit = CpuLimit { dir };
                write(&limit.dir.join("cpu.cfs_period_us"), &period.to_string())?;
                write(&limit.dir.join("cpu.cfs_quota_us"), &q.to_string())?;
                limit
            }
        };
        // `cgroup.procs` moves every thread of the process (threads it starts later are
        // born inside).
        write(&limit.dir.join("cgroup.procs"), &pid.to_string())?;
        Ok(limit)
    }

    /// Times the group's tasks were throttled, and for how long in total (from `cpu.stat`).
    pub fn throttled(&self) -> (u64, Duration) {
        let stat = std::fs::read_to_string(self.dir.join("cpu.stat")).unwrap_or_default();
        let field = |k: &str| {
            stat.lines()
                .find_map(|l| l.strip_prefix(k)?.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        // v2 counts microseconds, v1 nanoseconds.
        let time = if stat.contains("throttled_usec") {
            Duration::from_micros(field("throttled_usec "))
        } else {
            Duration::from_nanos(field("throttled_time "))
        };
        (field("nr_throttled "), time)
    }
}

impl Drop for CpuLimit {
    fn drop(&mut self) {
        // A group's directory can go only once its tasks are gone; a just-killed process
        // may take a moment to leave.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: cannot remove {}", self.dir.display());
    }
}

/// Removes the groups of runs whose process is gone; returns their paths.
pub fn clean() -> Vec<String> {
    let mut removed = Vec::new();
    for root in [V2_ROOT, V1_CPU] {
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(PREFIX) else {
                continue;
            };
            let lab = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
            let alive = lab.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
            if !alive && std::fs::remove_dir(e.path()).is_ok() {
                removed.push(e.path().display().to_string());
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_keep_the_share_and_the_kernel_minimum() {
        assert_eq!(quota(50.0), (5000, 10_000));
        assert_eq!(quota(10.0), (1000, 10_000));
        assert_eq!(quota(5.0), (1000, 20_000));
        assert_eq!(quota(2.5), (1000, 40_000));
        assert_eq!(quota(150.0), (15_000, 10_000));
    }

    /// A busy loop limited to 10% of a CPU gets about that much (root only: cgroups).
    #[test]
    fn a_limited_process_gets_its_share() {
        if !splicer_testkit::require_root("to create a cgroup") {
            return;
        }
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let limit = CpuLimit::apply(child.id(), 10.0).unwrap();
        let t0 = crate::measure::process_cpu(child.id());
        std::thread::sleep(Duration::from_millis(1500));
        let used = crate::measure::process_cpu(child.id()) - t0;
        let (times, _) = limit.throttled();
        child.kill().unwrap();
        child.wait().unwrap();
        let dir = limit.dir.clone();
        drop(limit);
        assert!(!dir.exists(), "the group was not removed");
        // 10% of 1.5 s = 0.15 s; allow for the clock tick (10 ms) and the period.
        assert!((0.08..0.3).contains(&used), "used {used} CPU seconds");
        assert!(times > 10, "throttled only {times} times");
    }
}
