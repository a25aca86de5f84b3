//! An `io_uring` that owns the buffers of its operations: receives, sends, reads and polls
//! are queued here, handed to the kernel together (one `io_uring_enter` for all of them),
//! and come back from [`Ring::complete`] with their buffers. Safe to use: a buffer is the
//! ring's from the call that queues it until its completion is taken, so the kernel never
//! writes into memory that is freed or borrowed elsewhere.
//!
//! Two uses: a ring beside another event loop ([`Ring::new`]: it signals an `eventfd` on
//! completions, for `splicer-bench relay-floor --io tokio-ring`), and a ring that is its
//! thread's only event loop ([`Ring::waited_in`]: the thread waits in it with
//! [`Ring::wait`], and the kernel runs the completions' work then, in that thread's
//! system call, not in interrupts and wake-ups: `SINGLE_ISSUER` and `DEFER_TASKRUN`),
//! which the proxy's ring path uses.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};

/// One finished operation: the number [`Ring::recv`] (or `send`, `read`, `poll`) gave for
/// it, the kernel's result (bytes moved, 0 at a receive's end of stream, poll events, or
/// `-errno`), and its buffer back. A receive's or read's bytes were appended to the buffer
/// (its length grew by the result).
#[derive(Debug)]
pub struct Completion {
    pub op: u64,
    pub result: i32,
    pub buf: Vec<u8>,
}

/// A buffer the kernel may be using, and whether the operation fills it (its length is
/// grown by what it got when it completes).
struct Held {
    buf: Vec<u8>,
    fills: bool,
}

pub struct Ring {
    ring: IoUring,
    /// Buffers of operations the kernel may hold, by slot (the `user_data` of the entry).
    held: Vec<Option<Held>>,
    free: Vec<usize>,
    queued: usize,
    /// Counts operations, so that an operation's number is not given again soon after
    /// its slot is reused.
    issued: u32,
    eventfd: Option<OwnedFd>,
}

/// The place of operation `op` among those the ring holds: unique among the operations in
/// flight (a small number, reused once the operation completes), for a caller's table of
/// them.
pub fn slot(op: u64) -> usize {
    (op & 0xffff_ffff) as usize
}

/// `-EPIPE`: what a caller may count a linked send that sent less than all as.
pub const BROKEN_PIPE: i32 = -libc::EPIPE;

/// The result of an operation [`Ring::cancel`] cancelled.
pub const CANCELED: i32 = -libc::ECANCELED;

/// An `eventfd`: another thread [`EventFd::signal`]s it to wake a thread waiting in its
/// ring on a [`Ring::read`] of it.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A blocking one: a ring's read of it waits in the ring (one opened `O_NONBLOCK` may
    /// complete at once with `-EAGAIN` instead, on kernels that honour the flag there);
    /// [`EventFd::signal`] never blocks (only a count at its maximum would).
    pub fn new() -> io::Result<EventFd> {
        EventFd::with_flags(libc::EFD_CLOEXEC)
    }

    fn with_flags(flags: libc::c_int) -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor.
        let fd = crate::cvt(unsafe { libc::eventfd(0, flags) })?;
        // SAFETY: `fd` was just created and is owned by nothing else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds one to its count: a pending read of it completes.
    pub fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a local array of 8.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Starts a non-blocking connect of a new TCP socket to `addr` (close-on-exec): the
/// socket, and whether it is connected already. Otherwise the connect goes on in the
/// kernel; the socket becomes writable when it ends ([`Ring::poll`] with `POLLOUT`), and
/// `take_error` says how.
pub fn connect_started(addr: SocketAddr) -> io::Result<(std::net::TcpStream, bool)> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let kind = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: socket takes no pointers; a non-negative result is a new descriptor.
    let fd = crate::cvt(unsafe { libc::socket(family, kind, 0) })?;
    // SAFETY: `fd` was just created and is owned by nothing else.
    let stream = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a socket address of `len` bytes for the call's length.
    let r = unsafe { libc::connect(fd, (&raw const storage).cast(), len) };
    if r == 0 {
        return Ok((stream, true));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EINPROGRESS) {
        return Ok((stream, false));
    }
    Err(e)
}

fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all zeroes is a valid `sockaddr_storage`.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a `sockaddr_in` fits in a `sockaddr_storage`, which is aligned for it.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for a `sockaddr_in6`.
            unsafe { std::ptr::write((&raw mut storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

impl Ring {
    /// A ring of `entries` queue places, with an `eventfd` it signals on completions.
    pub fn new(entries: u32) -> io::Result<Ring> {
        let ring: IoUring = IoUring::builder().setup_coop_taskrun().build(entries)?;
        // Non-blocking: read by an `epoll` loop.
        let eventfd = EventFd::with_flags(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?.0;
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        Ok(Ring::around(ring, Some(eventfd)))
    }

    /// A ring that is the event loop of the thread that makes it: only that thread may
    /// queue, submit and wait on it (`SINGLE_ISSUER`), and the kernel does the work of
    /// its completions when that thread waits ([`Ring::wait`], `DEFER_TASKRUN`).
    pub fn waited_in(entries: u32) -> io::Result<Ring> {
        let ring: IoUring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_coop_taskrun()
            .setup_cqsize(entries.saturating_mul(4))
            .build(entries)?;
        Ok(Ring::around(ring, None))
    }

    fn around(ring: IoUring, eventfd: Option<OwnedFd>) -> Ring {
        Ring {
            ring,
            held: Vec::new(),
            free: Vec::new(),
            queued: 0,
            issued: 0,
            eventfd,
        }
    }

    /// The descriptor that becomes readable when operations complete (a ring from
    /// [`Ring::new`]).
    pub fn eventfd(&self) -> Option<BorrowedFd<'_>> {
        self.eventfd.as_ref().map(AsFd::as_fd)
    }

    /// Takes the `eventfd`'s count (so it is readable again only for later completions).
    pub fn clear_eventfd(&self) {
        let Some(fd) = &self.eventfd else { return };
        let mut n = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a local array of 8.
        let _ = unsafe { libc::read(fd.as_raw_fd(), n.as_mut_ptr().cast(), 8) };
    }

    /// Queues a receive from `fd` into `buf`'s spare capacity (appended to what it holds);
    /// gives the operation's number. The kernel takes `fd` by its number when the queue is
    /// handed over ([`Ring::submit`]): it must stay open until then (once handed over, the
    /// kernel holds the socket itself).
    pub fn recv(&mut self, fd: BorrowedFd<'_>, mut buf: Vec<u8>) -> io::Result<u64> {
        let spare = buf.spare_capacity_mut();
        let len = u32::try_from(spare.len()).unwrap_or(u32::MAX);
        let ptr = spare.as_mut_ptr().cast::<u8>();
        let op = self.hold(buf, true);
        let e = opcode::Recv::new(types::Fd(fd.as_raw_fd()), ptr, len)
            .build()
            .user_data(op);
        self.push(e)?;
        Ok(op)
    }

    /// Queues a read of `fd` (not a socket: an `eventfd`) into `buf`'s spare capacity, as
    /// [`Ring::recv`].
    pub fn read(&mut self, fd: BorrowedFd<'_>, mut buf: Vec<u8>) -> io::Result<u64> {
        let spare = buf.spare_capacity_mut();
        let len = u32::try_from(spare.len()).unwrap_or(u32::MAX);
        let ptr = spare.as_mut_ptr().cast::<u8>();
        let op = self.hold(buf, true);
        let e = opcode::Read::new(types::Fd(fd.as_raw_fd()), ptr, len)
            .offset(u64::MAX)
            .build()
            .user_data(op);
        self.push(e)?;
        Ok(op)
    }

    /// Queues a send of `buf[from..to]` to `fd` (with `MSG_NOSIGNAL`); gives the
    /// operation's number.
    pub fn send(
        &mut self,
        fd: BorrowedFd<'_>,
        buf: Vec<u8>,
        from: usize,
        to: usize,
    ) -> io::Result<u64> {
        self.queue_send(fd, buf, (from, to), false)
    }

    /// Queues a send of all of `buf[from..to]` to `fd` (`MSG_WAITALL`: the kernel sends on
    /// until all went or the socket failed) that the next operation queued waits for: it
    /// starts only once this one has sent everything, and completes with `-ECANCELED` when
    /// this one fails or sends less. A receive of the answer queued behind the request it
    /// answers costs no turn of the loop between them.
    pub fn send_linked(
        &mut self,
        fd: BorrowedFd<'_>,
        buf: Vec<u8>,
        from: usize,
        to: usize,
    ) -> io::Result<u64> {
        self.queue_send(fd, buf, (from, to), true)
    }

    fn queue_send(
        &mut self,
        fd: BorrowedFd<'_>,
        buf: Vec<u8>,
        (from, to): (usize, usize),
        linked: bool,
    ) -> io::Result<u64> {
        if from > to || to > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "send range out of the buffer",
            ));
        }
        let ptr = buf[from..].as_ptr();
        let len = u32::try_from(to - from).unwrap_or(u32::MAX);
        if linked {
            // A link that ends a submission is cut there: the kernel would run the send
            // alone and the operation behind it regardless of how the send ends. So the
            // send goes in only with room behind it for that operation.
            let sq = self.ring.submission();
            if sq.capacity() - sq.len() < 2 {
                drop(sq);
                self.ring.submit()?;
                self.queued = 0;
            }
        }
        let op = self.hold(buf, false);
        let (flags, link) = match linked {
            true => (
                libc::MSG_NOSIGNAL | libc::MSG_WAITALL,
                squeue::Flags::IO_LINK,
            ),
            false => (libc::MSG_NOSIGNAL, squeue::Flags::empty()),
        };
        let e = opcode::Send::new(types::Fd(fd.as_raw_fd()), ptr, len)
            .flags(flags)
            .build()
            .flags(link)
            .user_data(op);
        self.push(e)?;
        Ok(op)
    }

    /// Queues a one-shot wait for `fd` to be writable (a connect in progress has ended);
    /// its result is the events that came (positive), or `-errno`.
    pub fn poll_writable(&mut self, fd: BorrowedFd<'_>) -> io::Result<u64> {
        let op = self.hold(Vec::new(), false);
        let e = opcode::PollAdd::new(types::Fd(fd.as_raw_fd()), libc::POLLOUT as u32)
            .build()
            .user_data(op);
        self.push(e)?;
        Ok(op)
    }

    /// Queues the cancellation of operation `op`: it completes (with `-ECANCELED`, or as
    /// it was) and gives its buffer back; the cancellation's own completion follows.
    pub fn cancel(&mut self, op: u64) -> io::Result<u64> {
        let id = self.hold(Vec::new(), false);
        let e = opcode::AsyncCancel::new(op).build().user_data(id);
        self.push(e)?;
        Ok(id)
    }

    /// Hands every queued operation to the kernel (one `io_uring_enter`; none if nothing
    /// is queued).
    pub fn submit(&mut self) -> io::Result<()> {
        if self.queued > 0 {
            self.ring.submit()?;
            self.queued = 0;
        }
        Ok(())
    }

    /// Hands every queued operation to the kernel and waits until at least one has
    /// completed or `timeout` has passed: one `io_uring_enter`.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        let ts = types::Timespec::from(timeout);
        let args = types::SubmitArgs::new().timespec(&ts);
        let r = self.ring.submitter().submit_with_args(1, &args);
        self.queued = 0;
        match r {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Moves every completion the kernel has posted into `out`, with its buffer.
    pub fn complete(&mut self, out: &mut Vec<Completion>) {
        for c in self.ring.completion() {
            let op = c.user_data();
            let slot = slot(op);
            if let Some(Held { mut buf, fills }) = self.held.get_mut(slot).and_then(Option::take) {
                self.free.push(slot);
                let result = c.result();
                if fills && result > 0 {
                    let n = (result as usize).min(buf.capacity() - buf.len());
                    // SAFETY: the kernel wrote `result` bytes into the spare capacity the
                    // operation was given (never more than its length), so they are
                    // initialised.
                    unsafe { buf.set_len(buf.len() + n) };
                }
                out.push(Completion { op, result, buf });
            }
        }
    }

    /// Keeps `buf` until its operation completes; gives the operation's number (its slot
    /// in the low 32 bits, the count of operations in the high).
    fn hold(&mut self, buf: Vec<u8>, fills: bool) -> u64 {
        self.issued = self.issued.wrapping_add(1);
        let held = Some(Held { buf, fills });
        let slot = match self.free.pop() {
            Some(s) => {
                self.held[s] = held;
                s
            }
            None => {
                self.held.push(held);
                self.held.len() - 1
            }
        };
        (u64::from(self.issued) << 32) | slot as u64
    }

    fn push(&mut self, e: squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: the entry's buffer is held in `self.held` until its completion is
            // taken (`complete`), and the ring is dropped before any held buffer is freed
            // only with the buffers leaked (`Drop`).
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                self.queued += 1;
                return Ok(());
            }
            self.ring.submit()?;
            self.queued = 0;
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // The kernel cancels what the ring holds once it is closed, but not necessarily
        // before this returns: buffers still held are leaked, not freed under it.
        for held in self.held.drain(..).flatten() {
            held.buf.leak();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// Waits in `ring` until operation `op` completes; other completions are kept in
    /// `seen`.
    fn until(ring: &mut Ring, op: u64, seen: &mut Vec<Completion>) -> Completion {
        for _ in 0..100 {
            ring.wait(Duration::from_millis(50)).unwrap();
            ring.complete(seen);
            if let Some(at) = seen.iter().position(|c| c.op == op) {
                return seen.remove(at);
            }
        }
        panic!("operation {op} did not complete");
    }

    /// A ring waited in: a receive appends to its buffer, a send sends the range asked, a
    /// connect started here completes through a poll, an `eventfd` read completes when
    /// another thread signals it, and a cancelled receive comes back cancelled.
    #[test]
    fn a_waited_in_ring_moves_bytes_connects_wakes_and_cancels() {
        let mut ring = match Ring::waited_in(64) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("SKIPPED: this kernel has no io_uring with DEFER_TASKRUN: {e}");
                return;
            }
        };
        let mut seen = Vec::new();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let (ours, connected) = connect_started(listener.local_addr().unwrap()).unwrap();
        let (mut theirs, _) = listener.accept().unwrap();
        if !connected {
            let op = ring.poll_writable(ours.as_fd()).unwrap();
            let c = until(&mut ring, op, &mut seen);
            assert!(c.result > 0, "poll: {}", c.result);
            assert!(ours.take_error().unwrap().is_none());
        }

        theirs.write_all(b"hello").unwrap();
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(b">");
        let op = ring.recv(ours.as_fd(), buf).unwrap();
        let c = until(&mut ring, op, &mut seen);
        assert_eq!((c.result, &c.buf[..]), (5, &b">hello"[..]));

        let op = ring.send(ours.as_fd(), c.buf, 1, 4).unwrap();
        let c = until(&mut ring, op, &mut seen);
        assert_eq!(c.result, 3);
        let mut got = [0u8; 3];
        theirs.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hel");
        assert!(
            ring.send(ours.as_fd(), c.buf, 4, 99).is_err(),
            "a range past the buffer"
        );

        let wake = std::sync::Arc::new(EventFd::new().unwrap());
        let op = ring.read(wake.as_fd(), Vec::with_capacity(8)).unwrap();
        // Still pending after a wait in the ring: nothing signalled it yet.
        ring.wait(Duration::from_millis(20)).unwrap();
        ring.complete(&mut seen);
        assert!(
            seen.iter().all(|c| c.op != op),
            "the read completed unsignalled"
        );
        let w = wake.clone();
        let signaller = std::thread::spawn(move || w.signal());
        let c = until(&mut ring, op, &mut seen);
        assert_eq!((c.result, c.buf.len()), (8, 8));
        signaller.join().unwrap();

        let op = ring.recv(ours.as_fd(), Vec::with_capacity(16)).unwrap();
        ring.cancel(op).unwrap();
        let c = until(&mut ring, op, &mut seen);
        assert_eq!((c.result, c.buf.len()), (CANCELED, 0));
    }

    /// A send linked ahead of a receive, queued when the submission queue has one place
    /// left, stays linked: when the send fails, the receive behind it is cancelled rather
    /// than run (here it would read the end of the stream).
    #[test]
    fn a_linked_pair_is_not_cut_by_a_full_queue() {
        let mut ring = match Ring::waited_in(4) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("SKIPPED: this kernel has no io_uring with DEFER_TASKRUN: {e}");
                return;
            }
        };
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(theirs);
        // Three places of four taken (cancellations of nothing, which end at once).
        for _ in 0..3 {
            ring.cancel(u64::MAX).unwrap();
        }
        let mut seen = Vec::new();
        let send = ring.send_linked(ours.as_fd(), b"x".to_vec(), 0, 1).unwrap();
        let recv = ring.recv(ours.as_fd(), Vec::with_capacity(8)).unwrap();
        let r = until(&mut ring, recv, &mut seen);
        let s = until(&mut ring, send, &mut seen);
        assert_eq!(s.result, -libc::EPIPE);
        assert_eq!(r.result, CANCELED, "the receive ran alone");
    }
}
