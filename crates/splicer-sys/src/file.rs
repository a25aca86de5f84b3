//! Files to sockets without a copy through user space.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `sendfile(2)`: up to `count` bytes of `from` at `*offset` to `to`; advances `*offset` by
/// what was sent. On a non-blocking socket it returns `WouldBlock` when the socket is full.
pub fn sendfile(
    to: BorrowedFd<'_>,
    from: BorrowedFd<'_>,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    let mut off = libc::off_t::try_from(*offset).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: both descriptors are borrowed open files; `off` is a valid off_t the kernel
    // updates in place.
    let n = unsafe { libc::sendfile(to.as_raw_fd(), from.as_raw_fd(), &mut off, count) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    *offset = off as u64;
    Ok(n as usize)
}
