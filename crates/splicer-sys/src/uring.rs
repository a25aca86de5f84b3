//! A TCP relay on one `io_uring` per thread: the measurement of what `io_uring` would buy
//! the per-request path (issue 40's "io_uring if it measures better"), not a part of the
//! proxy. Each accepted connection is paired with a new connection to one upstream and
//! bytes are moved both ways, each direction a `recv` into its own buffer and then `send`s
//! of what came, with no parsing: the least a user-space proxy can do per request. Every
//! turn of the loop hands the kernel all new operations and takes all completions in one
//! `io_uring_enter`, where an `epoll` proxy makes one system call per read, per write and
//! per wait (`splicer-bench relay-floor` runs it beside the same relay on tokio, and its
//! tests check both). Unlike those, it closes a pair at the first end or error of either
//! direction (no half-close is passed on): enough for kept-alive request and answer
//! exchanges, the load it measures.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

/// Bytes read at most per `recv`, per direction of a connection.
const BUFFER: usize = 16 * 1024;
/// The `user_data` of the listener's multishot accept.
const ACCEPT: u64 = u64::MAX;
/// How long one wait lasts before `stop` is looked at again.
const TICK: Duration = Duration::from_millis(100);

/// One relayed pair: direction 0 reads the client and writes upstream, direction 1 the
/// other way. Its buffers live until no operation the kernel holds points into them.
struct Pair {
    fds: [RawFd; 2],
    bufs: [Box<[u8]>; 2],
    /// Per direction: bytes received and not yet all sent, and how many of them are sent.
    pending: [usize; 2],
    sent: [usize; 2],
    /// Operations submitted and not completed.
    in_flight: u32,
    closing: bool,
    generation: u32,
}

/// `user_data` of an operation: the pair's slot and generation (a completion that comes
/// for a slot since reused is told apart), the direction, and whether it is a send.
fn tag(slot: usize, generation: u32, dir: usize, send: bool) -> u64 {
    (u64::from(generation) << 32) | ((slot as u64) << 2) | ((dir as u64) << 1) | u64::from(send)
}

fn untag(ud: u64) -> (usize, u32, usize, bool) {
    (
        ((ud & 0xffff_ffff) >> 2) as usize,
        (ud >> 32) as u32,
        ((ud >> 1) & 1) as usize,
        ud & 1 == 1,
    )
}

/// Relays every connection `listener` accepts to a new connection to `upstream`, on this
/// thread, until `stop` is set (looked at least every 100 ms). Several threads may serve
/// one listener (each with a clone): the kernel hands each connection to one of them.
pub fn relay(listener: &TcpListener, upstream: SocketAddr, stop: &AtomicBool) -> io::Result<()> {
    let mut ring: IoUring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_coop_taskrun()
        .setup_cqsize(16_384)
        .build(4096)?;
    let mut pairs: Vec<Option<Pair>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut next_generation = 0u32;
    let mut done: Vec<(u64, i32, u32)> = Vec::with_capacity(1024);
    let lfd = listener.as_raw_fd();
    arm_accept(&mut ring, lfd)?;
    let tick = types::Timespec::from(TICK);
    while !stop.load(Ordering::Relaxed) {
        let args = types::SubmitArgs::new().timespec(&tick);
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR)) => {}
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(
            ring.completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for &(ud, res, flags) in &done {
            if ud == ACCEPT {
                if res >= 0 {
                    // SAFETY: a completed accept gives a new descriptor that nothing else owns.
                    let client = unsafe { <TcpStream as std::os::fd::FromRawFd>::from_raw_fd(res) };
                    next_generation = next_generation.wrapping_add(1);
                    if let Some(slot) =
                        open(&mut pairs, &mut free, client, upstream, next_generation)
                    {
                        for dir in 0..2 {
                            recv(&mut ring, &mut pairs, slot, dir)?;
                        }
                    }
                }
                if !cqueue::more(flags) {
                    arm_accept(&mut ring, lfd)?;
                }
                continue;
            }
            complete(&mut ring, &mut pairs, &mut free, ud, res)?;
        }
    }
    // The ring goes first. The kernel cancels what it held once it is closed, but not
    // necessarily before `drop` returns: the buffers of a pair with an operation still
    // out are leaked, not freed under it.
    drop(ring);
    for pair in pairs.into_iter().flatten() {
        for fd in pair.fds {
            // SAFETY: the pair owns both descriptors and no ring refers to them any more.
            unsafe { libc::close(fd) };
        }
        if pair.in_flight > 0 {
            for buf in pair.bufs {
                Box::leak(buf);
            }
        }
    }
    Ok(())
}

/// Connects `client`'s pair upstream and gives its slot (none if the upstream cannot be
/// reached: the client's connection is closed). The connect blocks the loop: a measure of
/// kept-alive connections opens them once, before the measured interval.
fn open(
    pairs: &mut Vec<Option<Pair>>,
    free: &mut Vec<usize>,
    client: TcpStream,
    upstream: SocketAddr,
    generation: u32,
) -> Option<usize> {
    let server = TcpStream::connect(upstream).ok()?;
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let pair = Pair {
        fds: [client.into_raw_fd(), server.into_raw_fd()],
        bufs: [
            vec![0; BUFFER].into_boxed_slice(),
            vec![0; BUFFER].into_boxed_slice(),
        ],
        pending: [0; 2],
        sent: [0; 2],
        in_flight: 0,
        closing: false,
        generation,
    };
    let slot = match free.pop() {
        Some(s) => {
            pairs[s] = Some(pair);
            s
        }
        None => {
            pairs.push(Some(pair));
            pairs.len() - 1
        }
    };
    Some(slot)
}

/// Direction `dir` of the pair in `slot` reads again.
fn recv(ring: &mut IoUring, pairs: &mut [Option<Pair>], slot: usize, dir: usize) -> io::Result<()> {
    let Some(p) = pairs[slot].as_mut() else {
        return Ok(());
    };
    let e = opcode::Recv::new(
        types::Fd(p.fds[dir]),
        p.bufs[dir].as_mut_ptr(),
        BUFFER as u32,
    )
    .build()
    .user_data(tag(slot, p.generation, dir, false));
    p.in_flight += 1;
    push(ring, e)
}

/// Direction `dir` sends what it received and has not sent yet.
fn send(ring: &mut IoUring, p: &mut Pair, slot: usize, dir: usize) -> io::Result<()> {
    let rest = &p.bufs[dir][p.sent[dir]..p.pending[dir]];
    let e = opcode::Send::new(types::Fd(p.fds[1 - dir]), rest.as_ptr(), rest.len() as u32)
        .flags(libc::MSG_NOSIGNAL)
        .build()
        .user_data(tag(slot, p.generation, dir, true));
    p.in_flight += 1;
    push(ring, e)
}

/// One operation of a pair completed: the next one of its direction, or the pair's end.
fn complete(
    ring: &mut IoUring,
    pairs: &mut [Option<Pair>],
    free: &mut Vec<usize>,
    ud: u64,
    res: i32,
) -> io::Result<()> {
    let (slot, generation, dir, was_send) = untag(ud);
    let Some(p) = pairs.get_mut(slot).and_then(Option::as_mut) else {
        return Ok(());
    };
    if p.generation != generation {
        return Ok(());
    }
    p.in_flight -= 1;
    if res > 0 && !p.closing {
        let n = res as usize;
        if was_send {
            p.sent[dir] += n;
            if p.sent[dir] < p.pending[dir] {
                return send(ring, p, slot, dir);
            }
            return recv(ring, pairs, slot, dir);
        }
        p.pending[dir] = n;
        p.sent[dir] = 0;
        return send(ring, p, slot, dir);
    }
    // An end, an error, or an operation that completed after the pair began to close:
    // shut both sockets so every operation still held completes, then close them.
    if !p.closing {
        p.closing = true;
        for fd in p.fds {
            // SAFETY: shutdown on descriptors this pair owns; no memory is passed.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }
    if p.in_flight == 0 {
        for fd in p.fds {
            // SAFETY: the pair owns both descriptors and no operation refers to them now.
            unsafe { libc::close(fd) };
        }
        pairs[slot] = None;
        free.push(slot);
    }
    Ok(())
}

/// Accepts on `lfd` until the kernel ends the multishot accept (then armed again).
fn arm_accept(ring: &mut IoUring, lfd: RawFd) -> io::Result<()> {
    push(
        ring,
        opcode::AcceptMulti::new(types::Fd(lfd))
            .build()
            .user_data(ACCEPT),
    )
}

/// Queues `e`, handing the queue to the kernel first when it is full.
fn push(ring: &mut IoUring, e: squeue::Entry) -> io::Result<()> {
    loop {
        // SAFETY: every buffer an entry points into is a pair's, kept until the entry's
        // completion has been taken (`Pair::in_flight`).
        if unsafe { ring.submission().push(&e) }.is_ok() {
            return Ok(());
        }
        ring.submit()?;
    }
}
