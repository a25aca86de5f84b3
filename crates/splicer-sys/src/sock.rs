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

/// The socket's cookie (`SO_COOKIE`): what eBPF programs know a socket by.
pub fn socket_cookie(fd: BorrowedFd<'_>) -> io::Result<u64> {
    get_u64(fd, libc::SO_COOKIE)
}

/// The cookie of the socket's network namespace (`SO_NETNS_COOKIE`): what eBPF programs
/// know a namespace by.
pub fn netns_cookie(fd: BorrowedFd<'_>) -> io::Result<u64> {
    get_u64(fd, libc::SO_NETNS_COOKIE)
}

fn get_u64(fd: BorrowedFd<'_>, option: libc::c_int) -> io::Result<u64> {
    let mut v: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&mut v as *mut u64).cast(),
            &mut len,
        )
    };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// The congestion control of a TCP socket (`TCP_CONGESTION`).
pub fn congestion(fd: BorrowedFd<'_>) -> io::Result<String> {
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `name`.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Sets the congestion control of a TCP socket (`TCP_CONGESTION`). As root this loads the
/// algorithm's module when it is not loaded yet (an eBPF program cannot).
pub fn set_congestion(fd: BorrowedFd<'_>, name: &str) -> io::Result<()> {
    // SAFETY: setsockopt reads `name.len()` bytes from the pointer.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// Makes an IPv6 socket IPv6-only (`IPV6_V6ONLY`): a `[::]` listener then leaves IPv4 to a
/// `0.0.0.0` listener on the same port, whatever `net.ipv6.bindv6only` says.
pub fn set_only_v6(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads one int from the pointer.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_V6ONLY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
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

/// Bytes written to a TCP socket and not yet acknowledged by the other end (`SIOCOUTQ`: sent and
/// unsent alike).
pub fn outq_bytes(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int through the pointer.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut n) })?;
    Ok(n as usize)
}

/// Bytes written to a TCP socket and not yet sent (`SIOCOUTQNSD`): what a paced socket
/// still has to pace out.
pub fn unsent_bytes(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQNSD writes one int through the pointer.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCOUTQNSD, &mut n) })?;
    Ok(n as usize)
}

/// Reads what a socket holds now into `buf`, without waiting (`recv` with `MSG_DONTWAIT`):
/// `WouldBlock` when nothing is there, 0 at end of stream.
pub fn recv_now(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: recv writes at most `buf.len()` bytes into `buf`.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Sends `buf` without waiting and with `MSG_MORE`: the kernel holds a short write back
/// to join it with what follows (a response head before its body is sent from a file).
pub fn send_more(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: send reads at most `buf.len()` bytes from `buf`.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_MORE | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Half-closes the sending side (`shutdown(SHUT_WR)`): the other end reads EOF while the
/// opposite direction keeps flowing.
pub fn shutdown_write(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: shutdown on a borrowed, open descriptor.
    cvt(unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_WR) })?;
    Ok(())
}

/// Shuts both directions (`shutdown(SHUT_RDWR)`): the socket reads EOF from now on, so a
/// pool that checks it before reuse drops it.
pub fn shutdown_both(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: shutdown on a borrowed, open descriptor.
    cvt(unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) })?;
    Ok(())
}

/// The `TCP_INFO` figures the relay needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// TCP state (`TCP_ESTABLISHED` = 1, `TCP_CLOSE_WAIT` = 8, …).
    pub state: u8,
    /// Bytes the other end acknowledged (a SYN and a FIN count one each).
    pub bytes_acked: u64,
    /// Bytes received in sequence (a FIN counts one).
    pub bytes_received: u64,
    /// Options agreed at the handshake (`TCPI_OPT_*`: timestamps 1, SACK 2, window
    /// scaling 4, ECN 8).
    pub options: u8,
    /// Window scale the other end applies to the windows it sends (`tcpi_snd_wscale`), and the
    /// one this socket applies to its own (`tcpi_rcv_wscale`).
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
    /// Current send MSS (options taken off) and the MSS this side advertised.
    pub snd_mss: u32,
    pub advmss: u32,
    /// Smoothed round-trip time, µs.
    pub rtt_us: u32,
    /// Congestion window, in segments, and the slow-start threshold.
    pub snd_cwnd: u32,
    pub snd_ssthresh: u32,
    /// Retransmission timeout, µs.
    pub rto_us: u32,
    /// Segments this socket retransmitted over its life (`tcpi_total_retrans`).
    pub total_retrans: u32,
    /// Data segments received out of order (`tcpi_rcv_ooopack`): on a receiver, the mark
    /// of a segment lost on the way and sent again (all but a lost tail).
    pub rcv_ooopack: u32,
    /// Segments with data received over the socket's life (`tcpi_data_segs_in`).
    pub data_segs_in: u32,
}

/// Reads `TCP_INFO` of a TCP socket.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    // SAFETY: tcp_info is plain data; zero is a valid value for every field.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    })?;
    Ok(TcpInfo {
        state: info.tcpi_state,
        bytes_acked: info.tcpi_bytes_acked,
        bytes_received: info.tcpi_bytes_received,
        options: info.tcpi_options,
        // Two 4-bit fields, snd then rcv (libc exposes them packed).
        snd_wscale: info.tcpi_snd_rcv_wscale & 0x0f,
        rcv_wscale: info.tcpi_snd_rcv_wscale >> 4,
        snd_mss: info.tcpi_snd_mss,
        advmss: info.tcpi_advmss,
        rtt_us: info.tcpi_rtt,
        snd_cwnd: info.tcpi_snd_cwnd,
        snd_ssthresh: info.tcpi_snd_ssthresh,
        rto_us: info.tcpi_rto,
        total_retrans: info.tcpi_total_retrans,
        rcv_ooopack: info.tcpi_rcv_ooopack,
        data_segs_in: info.tcpi_data_segs_in,
    })
}

/// Sets `SO_RCVLOWAT`. Setting it also makes the kernel look at the receive queue again,
/// which is how the sockmap engine flushes bytes that arrived before the socket was
/// inserted in its map (docs/kernel-notes.md).
pub fn set_rcvlowat(fd: BorrowedFd<'_>, bytes: i32) -> io::Result<()> {
    crate::set_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, bytes)
}

/// The socket's receive buffer (`SO_RCVBUF`, as the kernel reports it).
pub fn receive_buffer(fd: BorrowedFd<'_>) -> io::Result<usize> {
    Ok(crate::get_u32(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)? as usize)
}

/// The socket's send buffer (`SO_SNDBUF`, as the kernel reports it).
pub fn send_buffer(fd: BorrowedFd<'_>) -> io::Result<usize> {
    Ok(crate::get_u32(fd, libc::SOL_SOCKET, libc::SO_SNDBUF)? as usize)
}

/// Sets `SO_MAX_PACING_RATE` in bytes a second (`u64::MAX`: no cap). Setting it also turns
/// on TCP's internal pacing for the socket when no qdisc paces it (this kernel has no `fq`):
/// the kernel then spaces the socket's segments itself, whoever hands them to TCP (the
/// proxy or a `sockmap` redirect). The 64-bit form has been accepted since Linux 4.19.
pub fn set_max_pacing_rate(fd: BorrowedFd<'_>, bytes_per_second: u64) -> io::Result<()> {
    // SAFETY: passes a valid u64 of the right size.
    crate::cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&bytes_per_second as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// The socket's `SO_MAX_PACING_RATE` in bytes a second (`u64::MAX`: no cap).
pub fn max_pacing_rate(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut v: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`.
    crate::cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&mut v as *mut u64).cast(),
            &mut len,
        )
    })?;
    Ok(v)
}

/// Sets `TCP_MAXSEG` on a socket before it connects: the MSS its SYN advertises (the
/// smaller of this and what the route allows).
pub fn set_maxseg(fd: BorrowedFd<'_>, mss: u32) -> io::Result<()> {
    let mss =
        libc::c_int::try_from(mss).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    crate::set_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, mss)
}

/// Fixes a socket's receive buffer at `bytes` (`SO_RCVBUF`), which also turns off the
/// kernel's receive-buffer autotuning for it. Tries `SO_RCVBUFFORCE` first, which passes
/// `net.core.rmem_max` with `CAP_NET_ADMIN`; without it the kernel silently caps the value
/// there. Returns the buffer the socket got, as the kernel reports it: twice the bytes
/// granted (the other half is its bookkeeping allowance).
pub fn set_receive_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    set_buffer(fd, (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), bytes)
}

/// Fixes a socket's send buffer at `bytes` (`SO_SNDBUF`), which turns off send-buffer
/// autotuning for it; as [`set_receive_buffer`], `SO_SNDBUFFORCE` first, and returns what
/// the kernel reports (twice the bytes granted).
pub fn set_send_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<usize> {
    set_buffer(fd, (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF), bytes)
}

/// Sets a buffer size with the forcing option, or the plain one without `CAP_NET_ADMIN`;
/// returns what the kernel reports.
fn set_buffer(fd: BorrowedFd<'_>, (force, plain): (i32, i32), bytes: usize) -> io::Result<usize> {
    let v =
        libc::c_int::try_from(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    if let Err(e) = crate::set_int(fd, libc::SOL_SOCKET, force, v) {
        if e.raw_os_error() != Some(libc::EPERM) {
            return Err(e);
        }
        crate::set_int(fd, libc::SOL_SOCKET, plain, v)?;
    }
    Ok(crate::get_u32(fd, libc::SOL_SOCKET, plain)? as usize)
}

/// Waits until descriptor number `fd` is readable or `timeout` passes (to the microsecond:
/// `ppoll`); returns whether it is readable. Takes a raw number because some libraries (the
/// `nfq` crate) own a socket without lending its descriptor. Sound for any number: `ppoll`
/// only reads the array it is given, and a number that is not an open descriptor is
/// reported as an error (`POLLNVAL`).
pub fn poll_readable(fd: std::os::fd::RawFd, timeout: std::time::Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd, count 1, a valid timespec, no signal mask.
    let n = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    if p.revents & libc::POLLNVAL != 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    Ok(n > 0)
}

/// Which of `fds` have something to read, a FIN or an error waiting, asked in one `poll`
/// without waiting: `quiet[i]` is `false` for those (a descriptor that is not open counts
/// as not quiet). For a look at many sockets at once (the idle pool's sweep, which held
/// its lock across one system call per idle connection). Sound for any numbers, as
/// [`poll_readable`].
pub fn poll_quiet(fds: &[std::os::fd::RawFd]) -> io::Result<Vec<bool>> {
    let mut ps: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        // SAFETY: `ps` is a valid array of `ps.len()` pollfds; timeout 0 does not wait.
        let n = unsafe { libc::poll(ps.as_mut_ptr(), ps.len() as libc::nfds_t, 0) };
        if n >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(ps.iter().map(|p| p.revents == 0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    #[test]
    fn receive_buffer_is_fixed_at_twice_the_bytes_asked() {
        use std::os::fd::AsFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        // Far below net.core.rmem_max (212992 by default), so granted as asked.
        let got = set_receive_buffer(c.as_fd(), 8192).unwrap();
        assert_eq!(got, 16384);
        assert!(set_receive_buffer(c.as_fd(), usize::MAX).is_err());
    }

    #[test]
    fn tcp_info_counts_bytes() {
        use std::io::Read;
        use std::os::fd::AsFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[7u8; 1000]).unwrap();
        let mut b = [0u8; 1000];
        s.read_exact(&mut b).unwrap();
        let i = tcp_info(s.as_fd()).unwrap();
        assert_eq!((i.state, i.bytes_received), (1, 1000));
        set_rcvlowat(s.as_fd(), 1).unwrap();
        assert_eq!(
            outq_bytes(c.as_fd()).unwrap(),
            0,
            "everything was read, so acked"
        );
    }

    #[test]
    fn poll_readable_waits_for_data() {
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = b.as_raw_fd();
        assert!(!poll_readable(fd, Duration::from_millis(10)).unwrap());
        a.write_all(b"x").unwrap();
        assert!(poll_readable(fd, Duration::from_millis(1000)).unwrap());
        // A number far above any descriptor limit here is never open.
        assert!(poll_readable(1_000_000, Duration::ZERO).is_err());
    }

    #[test]
    fn poll_quiet_tells_each_socket_apart_in_one_call() {
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (c, d) = std::os::unix::net::UnixStream::pair().unwrap();
        let (e, f) = std::os::unix::net::UnixStream::pair().unwrap();
        a.write_all(b"x").unwrap();
        drop(c);
        let fds = [b.as_raw_fd(), d.as_raw_fd(), f.as_raw_fd(), 1_000_000];
        // Bytes waiting, the other end closed, quiet, not open.
        assert_eq!(poll_quiet(&fds).unwrap(), [false, false, true, false]);
        assert!(poll_quiet(&[]).unwrap().is_empty());
        drop(e);
    }
}
