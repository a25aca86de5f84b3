//! An `io_uring` that owns the buffers of its operations, for code that runs on another
//! event loop (tokio's): receives and sends are queued here, handed to the kernel together
//! with [`Ring::submit`] (one `io_uring_enter` for all of them), and come back from
//! [`Ring::complete`] with their buffers. The ring signals its `eventfd` when operations
//! complete, so the loop that waits on `epoll` is woken for them. Safe to use: a buffer
//! is the ring's from the call that queues it until its completion is taken, so the
//! kernel never writes into memory that is freed or borrowed elsewhere.
//!
//! A measurement for now (`splicer-bench relay-floor --io tokio-ring`): whether the
//! per-request path gains `io_uring`'s batching while keeping tokio for the rest.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use io_uring::{opcode, squeue, types, IoUring};

/// One finished operation: what [`Ring::recv`] or [`Ring::send`] returned for it, the
/// kernel's result (bytes moved, 0 at a receive's end of stream, or `-errno`), and its
/// buffer back.
#[derive(Debug)]
pub struct Completion {
    pub op: u64,
    pub result: i32,
    pub buf: Box<[u8]>,
}

pub struct Ring {
    ring: IoUring,
    /// Buffers of operations the kernel may hold, by slot (the `user_data` of the entry).
    held: Vec<Option<Box<[u8]>>>,
    free: Vec<usize>,
    queued: usize,
    /// Counts operations, so that an operation's number is not given again soon after
    /// its slot is reused.
    issued: u32,
    eventfd: OwnedFd,
}

impl Ring {
    /// A ring of `entries` queue places, with an `eventfd` it signals on completions.
    pub fn new(entries: u32) -> io::Result<Ring> {
        let ring: IoUring = IoUring::builder().setup_coop_taskrun().build(entries)?;
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor.
        let fd = crate::cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` was just created and is owned by nothing else.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        Ok(Ring {
            ring,
            held: Vec::new(),
            free: Vec::new(),
            queued: 0,
            issued: 0,
            eventfd,
        })
    }

    /// The descriptor that becomes readable when operations complete.
    pub fn eventfd(&self) -> BorrowedFd<'_> {
        self.eventfd.as_fd()
    }

    /// Takes the `eventfd`'s count (so it is readable again only for later completions).
    pub fn clear_eventfd(&self) {
        let mut n = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a local array of 8.
        let _ = unsafe { libc::read(self.eventfd.as_raw_fd(), n.as_mut_ptr().cast(), 8) };
    }

    /// Queues a receive from `fd` into `buf`; gives the operation's number. The kernel
    /// takes `fd` by its number when the queue is handed over ([`Ring::submit`]): it must
    /// stay open until then (once handed over, the kernel holds the socket itself).
    pub fn recv(&mut self, fd: BorrowedFd<'_>, mut buf: Box<[u8]>) -> io::Result<u64> {
        let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        let ptr = buf.as_mut_ptr();
        let op = self.hold(buf);
        let e = opcode::Recv::new(types::Fd(fd.as_raw_fd()), ptr, len)
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
        buf: Box<[u8]>,
        from: usize,
        to: usize,
    ) -> io::Result<u64> {
        if from > to || to > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "send range out of the buffer",
            ));
        }
        let ptr = buf[from..].as_ptr();
        let len = u32::try_from(to - from).unwrap_or(u32::MAX);
        let op = self.hold(buf);
        let e = opcode::Send::new(types::Fd(fd.as_raw_fd()), ptr, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(op);
        self.push(e)?;
        Ok(op)
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

    /// Moves every completion the kernel has posted into `out`, with its buffer.
    pub fn complete(&mut self, out: &mut Vec<Completion>) {
        for c in self.ring.completion() {
            let op = c.user_data();
            let slot = (op & 0xffff_ffff) as usize;
            if let Some(buf) = self.held.get_mut(slot).and_then(Option::take) {
                self.free.push(slot);
                out.push(Completion {
                    op,
                    result: c.result(),
                    buf,
                });
            }
        }
    }

    /// Keeps `buf` until its operation completes; gives the operation's number (its slot
    /// in the low 32 bits, the count of operations in the high).
    fn hold(&mut self, buf: Box<[u8]>) -> u64 {
        self.issued = self.issued.wrapping_add(1);
        let slot = match self.free.pop() {
            Some(s) => {
                self.held[s] = Some(buf);
                s
            }
            None => {
                self.held.push(Some(buf));
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
        for buf in self.held.drain(..).flatten() {
            Box::leak(buf);
        }
    }
}
