//! Pipes and `splice(2)`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::{cvt, cvt_size};

/// A non-blocking pipe used as the in-kernel buffer between two sockets.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

impl Pipe {
    /// Creates a pipe and asks for `capacity` bytes (rounded up by the kernel to pages; capped
    /// by `/proc/sys/fs/pipe-max-size`, in which case the default size is kept).
    pub fn new(capacity: usize) -> io::Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: fds is a valid array of two ints for pipe2 to fill.
        cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) })?;
        // SAFETY: pipe2 succeeded, so both descriptors are fresh and owned by us.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let want = libc::c_int::try_from(capacity).unwrap_or(libc::c_int::MAX);
        // SAFETY: F_SETPIPE_SZ / F_GETPIPE_SZ on a descriptor we own.
        let set = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, want) };
        let capacity = if set > 0 {
            set as usize
        } else {
            // SAFETY: as above.
            cvt(unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ) })? as usize
        };
        Ok(Pipe {
            read,
            write,
            capacity,
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn read_end(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    pub fn write_end(&self) -> BorrowedFd<'_> {
        self.write.as_fd()
    }

    /// Bytes sitting in the pipe.
    pub fn pending(&self) -> io::Result<usize> {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int through the pointer.
        cvt(unsafe { libc::ioctl(self.read.as_raw_fd(), libc::FIONREAD, &mut n) })?;
        Ok(n as usize)
    }
}

/// Moves up to `len` bytes from `from` to `to` without blocking (`SPLICE_F_NONBLOCK |
/// SPLICE_F_MOVE`). One of the two must be a pipe. `Ok(0)` means end of file on `from`;
/// `WouldBlock` means `from` is empty or `to` is full.
pub fn splice(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    // SAFETY: null offsets are allowed for sockets and pipes; both fds are borrowed, so open.
    cvt_size(unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
        )
    })
}

/// Copies up to `len` bytes from the pipe `from` into the pipe `to` without consuming
/// them (`tee(2)`, non-blocking): what the relay uses to tap spliced bytes.
pub fn tee(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    // SAFETY: both fds are borrowed, so open; tee takes no pointers.
    cvt_size(unsafe {
        libc::tee(
            from.as_raw_fd(),
            to.as_raw_fd(),
            len,
            libc::SPLICE_F_NONBLOCK,
        )
    })
}

/// Reads from a pipe (or any fd) into `buf`.
pub fn read(from: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the pointer and length describe `buf`, which is writable for the call.
    cvt_size(unsafe { libc::read(from.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn splice_through_pipe_exact_len() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let l2 = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l2.local_addr().unwrap()).unwrap();
        let (mut d, _) = l2.accept().unwrap();
        a.write_all(b"hello world").unwrap();
        let p = Pipe::new(1 << 20).unwrap();
        assert!(p.capacity() >= 4096);
        std::thread::sleep(std::time::Duration::from_millis(50));
        // Exactly five bytes leave the socket; the rest stays readable there.
        assert_eq!(splice(b.as_fd(), p.write_end(), 5).unwrap(), 5);
        assert_eq!(p.pending().unwrap(), 5);
        assert_eq!(splice(p.read_end(), c.as_fd(), 5).unwrap(), 5);
        let mut got = [0u8; 5];
        d.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
        let mut rest = [0u8; 6];
        (&b).read_exact(&mut rest).unwrap();
        assert_eq!(&rest, b" world");
        // Empty non-blocking socket: WouldBlock, not 0. (The relay's sockets are always
        // non-blocking; SPLICE_F_NONBLOCK alone only covers the pipe.)
        b.set_nonblocking(true).unwrap();
        let e = splice(b.as_fd(), p.write_end(), 5).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn tee_copies_without_consuming() {
        let a = Pipe::new(1 << 16).unwrap();
        let b = Pipe::new(1 << 16).unwrap();
        let mut w = std::fs::File::from(a.write_end().try_clone_to_owned().unwrap());
        w.write_all(b"tapped").unwrap();
        assert_eq!(tee(a.read_end(), b.write_end(), 6).unwrap(), 6);
        assert_eq!(a.pending().unwrap(), 6, "tee leaves the source as it was");
        let mut got = [0u8; 6];
        assert_eq!(read(b.read_end(), &mut got).unwrap(), 6);
        assert_eq!(&got, b"tapped");
        assert_eq!(read(a.read_end(), &mut got).unwrap(), 6);
        assert_eq!(&got, b"tapped");
    }
}
