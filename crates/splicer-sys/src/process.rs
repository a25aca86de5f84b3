//! Process limits and accounting.

use std::io;
use std::time::Duration;

use crate::cvt;

/// Whether the process runs as root (effective uid 0): what the kernel engines need.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The capabilities the kernel engines need: `CAP_NET_ADMIN` (attaching TC programs,
/// `TCP_REPAIR`), `CAP_PERFMON` (the programs read kernel memory, `bpf_probe_read_kernel`)
/// and `CAP_BPF` (loading them, and their maps).
pub const KERNEL_ENGINE_CAPS: [(u32, &str); 3] =
    [(12, "CAP_NET_ADMIN"), (38, "CAP_PERFMON"), (39, "CAP_BPF")];

/// Whether the process may run the kernel engines: root, or a user holding every one of
/// [`KERNEL_ENGINE_CAPS`] in its effective set (a service's `AmbientCapabilities`).
pub fn kernel_engine_capable() -> bool {
    is_root() || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let eff = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        KERNEL_ENGINE_CAPS
            .iter()
            .all(|(bit, _)| eff & (1u64 << bit) != 0)
    }
}

/// Raises the open-file limit as far as allowed and returns the new soft limit: with
/// `CAP_SYS_RESOURCE` (root) both limits go up to `fs.nr_open` capped at 1,048,576, otherwise
/// the soft limit goes up to the hard one, as HAProxy and nginx do. A proxy holds two
/// descriptors per tunnel.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) })?;
    let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(r.rlim_max)
        .min(1 << 20);
    if r.rlim_max < ceiling {
        let want = libc::rlimit {
            rlim_cur: ceiling as libc::rlim_t,
            rlim_max: ceiling as libc::rlim_t,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return Ok(ceiling);
        }
    }
    if r.rlim_cur < r.rlim_max {
        r.rlim_cur = r.rlim_max;
        // SAFETY: as above.
        cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) })?;
    }
    Ok(r.rlim_cur)
}

/// User plus system CPU time used so far by this process (all threads).
pub fn cpu_time() -> io::Result<Duration> {
    // SAFETY: an all-zero rusage is valid, and getrusage fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage struct through the pointer.
    cvt(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) })?;
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Ok(tv(u.ru_utime) + tv(u.ru_stime))
}

/// Sets this thread's timer slack (`PR_SET_TIMERSLACK`): how late the kernel may fire its
/// timers to batch wake-ups (50 µs by default). The link emulator sets 1 ns so that a
/// sleep until a packet's release time ends on time without busy-waiting.
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and touches no memory of ours.
    crate::cvt(unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, ns.max(1) as libc::c_ulong, 0, 0, 0)
    })?;
    Ok(())
}

/// `CLOCK_MONOTONIC` now, in ns: the clock of eBPF's `bpf_ktime_get_ns` (ipsplice ages its
/// flow entries by it).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Pins the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes within it (checked below
    // against its size) and sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Makes the calling thread a real-time one (`SCHED_FIFO` at `priority`, 1–99): it runs
/// before every normal thread of its CPU whenever it is runnable (root).
pub fn set_fifo(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: param is a valid sched_param for the call's duration.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn timer_slack_is_set_for_this_thread() {
        super::set_timer_slack(1234).unwrap();
        // PR_GET_TIMERSLACK returns the value as the call's result.
        // SAFETY: PR_GET_TIMERSLACK takes no pointer.
        let v = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
        assert_eq!(v, 1234);
    }
}
