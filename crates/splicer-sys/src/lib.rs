//! Safe wrappers over the Linux system calls Splicer uses. This is, with `splicer-bpf`, the
//! only crate allowed `unsafe`; each wrapper checks its arguments and turns `-1` into
//! `io::Error`.
//!
//! # Layout
//! - [`file`]: `sendfile(2)` (disk-cache hits).
//! - [`net`]: the host's own interface addresses.
//! - [`nfqueue`]: NFQUEUE batch verdicts (the lab's link emulator).
//! - [`pipe`]: non-blocking pipes with a chosen capacity, `splice(2)`, bytes pending.
//! - [`sock`]: socket options the relay needs (linger-zero resets), readiness of a raw fd.
//! - [`process`]: resource limits and CPU accounting for the process.
//! - [`ring`]: an `io_uring` that owns its operations' buffers, for a tokio loop to batch
//!   receives and sends through (a measurement, `splicer-bench relay-floor`).
//! - [`uring`]: a TCP relay on one `io_uring` per thread (a measurement of the
//!   per-request path, `splicer-bench relay-floor`).
//! - [`repair`]: `TCP_REPAIR` sequence numbers, TSval, receive memory, keepalive (the
//!   `ipsplice` engine).
// A panic is not an error path: product code handles what it can and names why it cannot
// (each exception to these is allowed where it stands, with the invariant it rests on).
#![deny(clippy::unwrap_used, clippy::expect_used)]
// Every dependency is used (checked for the library itself, whose tests have dev-dependencies
// too; CI runs clippy with -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod file;
pub mod net;
pub mod nfqueue;
pub mod pipe;
pub mod process;
pub mod repair;
pub mod ring;
pub mod sock;
pub mod uring;

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cvt_size(r: libc::ssize_t) -> io::Result<usize> {
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `setsockopt` of one int.
pub(crate) fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a valid int of the right size.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// `getsockopt` of one 32-bit value.
pub(crate) fn get_u32(fd: BorrowedFd<'_>, level: libc::c_int, opt: libc::c_int) -> io::Result<u32> {
    let mut v: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&mut v as *mut u32).cast(),
            &mut len,
        )
    })?;
    Ok(v)
}
