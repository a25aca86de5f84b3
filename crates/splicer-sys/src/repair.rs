//! What the `ipsplice` engine reads from, and sets on, the two sockets it takes over:
//! `TCP_REPAIR` (the sequence numbers, and a close that sends nothing), the socket's
//! current TSval, its receive memory (to tell whether out-of-order data waits), keepalive.
//! `TCP_REPAIR` needs `CAP_NET_ADMIN`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::{cvt, get_u32, set_int};

/// Puts a TCP socket in repair mode (`on`) or takes it out. In repair mode the socket's
/// queues can be inspected and closing it sends neither FIN nor RST.
pub fn set_repair(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR, i32::from(on))
}

/// Which queue [`queue_seq`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// Next sequence number the socket will write (`write_seq`).
    Send,
    /// Next sequence number it expects to receive (`rcv_nxt`).
    Recv,
}

/// The sequence number at the end of a queue (`TCP_REPAIR_QUEUE` + `TCP_QUEUE_SEQ`). The
/// socket must be in repair mode.
pub fn queue_seq(fd: BorrowedFd<'_>, q: Queue) -> io::Result<u32> {
    // TCP_RECV_QUEUE = 1, TCP_SEND_QUEUE = 2 (linux/tcp.h).
    let which = match q {
        Queue::Recv => 1,
        Queue::Send => 2,
    };
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR_QUEUE, which)?;
    get_u32(fd, libc::IPPROTO_TCP, libc::TCP_QUEUE_SEQ)
}

/// The TSval the socket would send now (`TCP_TIMESTAMP`: its clock plus its offset).
pub fn timestamp(fd: BorrowedFd<'_>) -> io::Result<u32> {
    get_u32(fd, libc::IPPROTO_TCP, libc::TCP_TIMESTAMP)
}

/// Receive memory charged to the socket (`SO_MEMINFO`, `SK_MEMINFO_RMEM_ALLOC`): with an
/// empty receive queue, non-zero means out-of-order data waits for a hole to fill.
pub fn rmem_alloc(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // SK_MEMINFO_VARS is 9 in linux/sock_diag.h; RMEM_ALLOC is the first.
    let mut v = [0u32; 9];
    let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            v.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    Ok(v[0])
}

/// Turns keepalive on with probes after `idle_s` seconds without traffic, or off (`None`).
/// The `ipsplice` engine uses a one-second probe to make a silent peer send a packet.
pub fn set_keepalive(fd: BorrowedFd<'_>, idle_s: Option<i32>) -> io::Result<()> {
    if let Some(s) = idle_s {
        set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, s)?;
        set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, s)?;
    }
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_KEEPALIVE,
        i32::from(idle_s.is_some()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn repair_reads_both_sequence_numbers() {
        if !root() {
            eprintln!("skipped: TCP_REPAIR needs CAP_NET_ADMIN (run as root)");
            return;
        }
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        set_repair(c.as_fd(), true).unwrap();
        set_repair(s.as_fd(), true).unwrap();
        let (c0, s0) = (
            queue_seq(c.as_fd(), Queue::Send).unwrap(),
            queue_seq(s.as_fd(), Queue::Recv).unwrap(),
        );
        assert_eq!(c0, s0, "what one sends next is what the other expects");
        set_repair(c.as_fd(), false).unwrap();
        set_repair(s.as_fd(), false).unwrap();
        c.write_all(&[1u8; 1000]).unwrap();
        let mut b = [0u8; 1000];
        s.read_exact(&mut b).unwrap();
        set_repair(s.as_fd(), true).unwrap();
        assert_eq!(
            queue_seq(s.as_fd(), Queue::Recv).unwrap(),
            s0.wrapping_add(1000)
        );
        assert_eq!(rmem_alloc(s.as_fd()).unwrap(), 0, "everything was read");
        // Loopback agrees on timestamps; the clock ticks in ms.
        let t = timestamp(s.as_fd()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let dt = timestamp(s.as_fd()).unwrap().wrapping_sub(t);
        assert!((10..1000).contains(&dt), "{dt}");
        set_keepalive(c.as_fd(), Some(1)).unwrap();
        set_keepalive(c.as_fd(), None).unwrap();
    }
}
