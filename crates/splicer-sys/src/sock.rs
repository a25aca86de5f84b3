//! Socket options.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::cvt;

/// Sets `SO_LINGER` to zero so that closing the socket sends a reset instead of a FIN:
/// how the relay makes a failure on one side visible on the other.
pub fn set_linger_zero(fd: BorrowedFd<'_>) -> io::Result<()> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: passes a valid linger struct of the right size.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Bytes waiting to be read on a socket (`FIONREAD`).
pub fn readable_bytes(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) })?;
    Ok(n as usize)
}

/// Half-closes the sending side (`shutdown(SHUT_WR)`): the other end reads EOF while the
/// opposite direction keeps flowing.
pub fn shutdown_write(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: shutdown on a borrowed, open descriptor.
    cvt(unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) })?;
    Ok(())
}
