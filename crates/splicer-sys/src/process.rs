//! Process limits and accounting.

use std::io;
use std::time::Duration;

use crate::cvt;

/// Raises the soft limit on open files to the hard limit, as HAProxy and nginx do, and
/// returns the new soft limit. A proxy holds two descriptors per tunnel.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit read and write one rlimit struct.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) })?;
    if r.rlim_cur < r.rlim_max {
        r.rlim_cur = r.rlim_max;
        cvt(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) })?;
    }
    Ok(r.rlim_cur)
}

/// User plus system CPU time used so far by this process (all threads).
pub fn cpu_time() -> io::Result<Duration> {
    // SAFETY: an all-zero rusage is valid, and getrusage fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) })?;
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Ok(tv(u.ru_utime) + tv(u.ru_stime))
}
