//! What the `ipsplice` engine reads from, and sets on, the two sockets it takes over:
//! `TCP_REPAIR` (the sequence numbers, and a close that sends nothing), the socket's
//! current TSval, its receive memory (to tell whether out-of-order data waits), keepalive.
//! `TCP_REPAIR` needs `CAP_NET_ADMIN`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::{cvt, get_u32, set_int};

/// Puts a TCP socket in repair mode (`on`) or takes it out. In repair mode the socket's
/// queues can be inspected and closing it sends neither FIN nor RST.
/// Leaving it gives the socket back its `SO_REUSEADDR` ([`reuse_again`]).
pub fn set_repair(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR, i32::from(on))?;
    if !on {
        reuse_again(fd)?;
    }
    Ok(())
}

/// Takes a socket out of repair mode without the window probe the kernel otherwise sends
/// (`TCP_REPAIR_OFF_NO_WP`): the `ipsplice` engine writes its reply through the socket
/// after the snapshot, and nothing else may reach the other end in between.
pub fn leave_repair_quietly(fd: BorrowedFd<'_>) -> io::Result<()> {
    // TCP_REPAIR_OFF_NO_WP = -1 (linux/tcp.h).
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_REPAIR, -1)?;
    reuse_again(fd)
}

/// Sets `SO_REUSEADDR` again after repair mode. Leaving repair mode sets the socket's
/// `sk_reuse` to "no reuse" whatever it was before (`do_tcp_setsockopt`), so a socket
/// accepted from one of Splicer's listeners (which set the flag, and accepted sockets
/// inherit it), once closed and lingering in TIME_WAIT, kept a restarted proxy from binding
/// that listener's address for a minute: `Address already in use` (found in the lab, a
/// proxy started right after an `ipsplice` run). On an upstream connection the flag only
/// lets another socket that sets it bind the same local port while this one does not
/// listen.
fn reuse_again(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
}

/// Forgets the connection without a packet to the other end: repair mode, then a disconnect
/// (`connect(AF_UNSPEC)`, which in repair mode sends no RST). Its queues and timers go, so
/// nothing it sent is retransmitted; the descriptor stays open, in the closed state.
pub fn forget(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_repair(fd, true)?;
    let sa = libc::sockaddr {
        sa_family: libc::AF_UNSPEC as libc::sa_family_t,
        sa_data: [0; 14],
    };
    // SAFETY: connect reads one sockaddr of the size given.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &sa,
            std::mem::size_of::<libc::sockaddr>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// The socket's TSval clock as an offset from `CLOCK_MONOTONIC` in ms: its TSval at
/// monotonic time `t` ns is `t / 10^6 + offset` (mod 2^32), the clock the kernel stamps
/// segments with (`tcp_clock_ns`). Read again if the millisecond turned meanwhile.
pub fn timestamp_offset(fd: BorrowedFd<'_>) -> io::Result<u32> {
    loop {
        let before = monotonic_ms();
        let ts = timestamp(fd)?;
        if monotonic_ms() == before {
            return Ok(ts.wrapping_sub(before));
        }
    }
}

fn monotonic_ms() -> u32 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000) as u32
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
/// The `ipsplice` engine uses a one-second probe to make a silent other end send a packet.
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

    /// A connected loopback pair: (client, accepted).
    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn a_socket_out_of_repair_mode_leaves_its_listeners_address_free_to_bind() {
        if !root() {
            eprintln!("skipped: TCP_REPAIR needs CAP_NET_ADMIN (run as root)");
            return;
        }
        for quietly in [false, true] {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            let (s, _) = l.accept().unwrap();
            set_repair(s.as_fd(), true).unwrap();
            if quietly {
                leave_repair_quietly(s.as_fd()).unwrap();
            } else {
                set_repair(s.as_fd(), false).unwrap();
            }
            // The accepted side closes first, so it lingers in TIME_WAIT on the
            // listener's port; then the listener goes, as at a restart.
            drop(s);
            assert_eq!(c.read(&mut [0u8; 1]).unwrap(), 0);
            drop(c);
            drop(l);
            let again = std::net::TcpListener::bind(addr);
            assert!(again.is_ok(), "quietly {quietly}: {again:?}");
        }
    }

    #[test]
    fn repair_reads_both_sequence_numbers() {
        if !root() {
            eprintln!("skipped: TCP_REPAIR needs CAP_NET_ADMIN (run as root)");
            return;
        }
        let (mut c, mut s) = pair();
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
        // The offset reproduces the TSval from the monotonic clock.
        let off = timestamp_offset(s.as_fd()).unwrap();
        let now = monotonic_ms().wrapping_add(off);
        let ts = timestamp(s.as_fd()).unwrap();
        assert!(
            ts.wrapping_sub(now) <= 1,
            "TSval {ts}, from the offset {now}"
        );
    }

    #[test]
    fn forget_sends_nothing_and_leaves_the_repair_mode_off_quietly() {
        if !root() {
            eprintln!("skipped: TCP_REPAIR needs CAP_NET_ADMIN (run as root)");
            return;
        }
        let (mut c, mut s) = pair();
        set_repair(c.as_fd(), true).unwrap();
        leave_repair_quietly(c.as_fd()).unwrap();
        c.write_all(b"reply").unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"reply", "the socket works after a quiet repair");
        forget(s.as_fd()).unwrap();
        let info = crate::sock::tcp_info(s.as_fd()).unwrap();
        assert_eq!(info.state, 7, "TCP_CLOSE after forget");
        // The other end got neither FIN nor RST: a read times out.
        c.set_read_timeout(Some(std::time::Duration::from_millis(200)))
            .unwrap();
        let e = c.read(&mut b).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
    }
}
