//! Safe wrappers over the Linux system calls Splicer uses. This is, with `splicer-bpf`, the
//! only crate allowed `unsafe`; each wrapper checks its arguments and turns `-1` into
//! `io::Error`.
//!
//! # Layout
//! - [`net`]: the host's own interface addresses.
//! - [`nfqueue`]: NFQUEUE batch verdicts (the lab's link emulator).
//! - [`pipe`]: non-blocking pipes with a chosen capacity, `splice(2)`, bytes pending.
//! - [`sock`]: socket options the relay needs (linger-zero resets), readiness of a raw fd.
//! - [`process`]: resource limits and CPU accounting for the process.
//! - [`repair`]: `TCP_REPAIR` sequence numbers, TSval, receive memory, keepalive (the
//!   `ipsplice` engine).

pub mod net;
pub mod nfqueue;
pub mod pipe;
pub mod process;
pub mod repair;
pub mod sock;

use std::io;

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
