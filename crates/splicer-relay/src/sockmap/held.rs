//! Back-pressure for a `sockmap` direction: the bytes the program's gate held on the
//! source's receive side (its redirect queue had reached the bound), relayed by the proxy
//! in order once that queue has drained.
//!
//! The kernel's redirect takes every skb off the source's receive queue as it arrives, so
//! the source's window never closes and the redirect queue toward a slow destination grows
//! without bound (1.7 GiB in 3 s toward a server that did not read). With a bound, the
//! verdict program stops redirecting past it: later skbs wait on the source's own receive
//! side, charged to its receive buffer, so its window closes as TCP's back-pressure does.
//! Those bytes come after everything redirected, so the proxy relays them only once the
//! redirect queue is empty (every redirected byte in the destination's TCP), then tells
//! the program how many it relayed; when that equals what it held at the next skb, the
//! program redirects again (`splicer-bpf`'s `gate`).
//!
//! Catching up. A source that streams on refills its window as soon as the proxy reads,
//! so an skb used to arrive between the proxy's last read and its report, and the gate
//! stayed closed for the rest of the transfer: the proxy relayed it all in user space (a
//! 256 MiB tunnel after one closing, at a tenth of a CPU: 127 Mbit/s against 625 with the
//! gate open). So once the destination has room for everything held, the proxy *peeks* it
//! rather than reading it: peeked bytes stay charged to the source's receive buffer, so no
//! window update goes out, and with that buffer full the source cannot send more. The
//! proxy writes them, reports them relayed (the count equals what was held unless a byte
//! came anyway: then it tries again), and only then consumes them, which reopens the
//! window: the next skb finds the gate ready to open. Held bytes are at most what the
//! source's receive buffer holds, and the peek at most what the destination takes at once,
//! so the proxy's buffer lives for one write.
//!

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use splicer_bpf::sockmap::Pair;
use splicer_bpf::Sockmap;
use splicer_sys::sock::{outq_bytes, peek_now, recv_now, send_buffer};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::counts::{handed, info, Dir};
use crate::outcome::End;

/// The most read from the source at once while it streams on (read bytes are consumed,
/// and the window they free lets the source send again).
const CHUNK: usize = 64 * 1024;

/// The most a direction peeks to catch up: what its source's receive side holds, which
/// the kernel bounds by its receive buffer (a few MiB autotuned; 4.5 MiB for an answer's
/// upstream with the default gate). Held bytes past this are read in chunks as before.
const CATCH_UP_MAX: u64 = 8 << 20;

/// How long held bytes may take to reach a source's receive side after its end of stream
/// before the direction is given up: they wait behind the other direction's redirected
/// bytes to that socket, which go as fast as its peer reads.
const HELD_LATE: Duration = Duration::from_secs(10);

/// One direction's held bytes, as the proxy relays them.
#[derive(Debug)]
pub(super) struct Held {
    /// The direction's source in the order the pair was given to the map.
    pub side: usize,
    /// Bytes the program passed to the source's side past a one-way splice's bound (kept
    /// up to date by its watch): like held ones, they are not in the redirect queue.
    pub beyond: u64,
    /// Bytes of the held ones written to the destination so far.
    pub relayed: u64,
    /// The gate to cap the source's autotuned receive buffer for, at the first held read
    /// (a tunnel's source whose buffers the operator did not fix; `room::cap`).
    pub cap_buffer: Option<u64>,
    /// Bytes read from the source and not yet written (`buf[start..]`).
    buf: Vec<u8>,
    start: usize,
    /// `buf` was peeked: its bytes are still on the source's receive side, to be consumed
    /// once written and reported.
    peeked: bool,
    /// The redirect queue was seen empty since the gate last closed: with the gate closed
    /// nothing more is redirected, so it stays empty until the proxy resumes.
    drained: bool,
    /// Since when the source has been at its end with held bytes still to come.
    late_since: Option<Instant>,
}

/// What a step of relaying found.
pub(super) enum Step {
    /// Some progress, or nothing to do yet (the redirect queue still drains): look again.
    Again,
    /// The source sent its FIN and every byte before it was read.
    Fin,
    /// The direction failed: the end to record for it.
    Failed(End),
}

impl Held {
    pub(super) fn new(side: usize) -> Held {
        Held {
            side,
            beyond: 0,
            relayed: 0,
            cap_buffer: None,
            buf: Vec::new(),
            start: 0,
            peeked: false,
            drained: false,
            late_since: None,
        }
    }

    /// Held bytes not yet in the destination's TCP: still on the source's receive side or
    /// in the proxy's buffer. Read after the counters the caller compares it with.
    pub(super) fn unrelayed(&self, map: &Sockmap, pair: Pair) -> u64 {
        map.gate(pair, self.side)
            .map_or(0, |g| g.held.saturating_sub(self.relayed))
    }

    /// Whether the proxy has held bytes to relay (the watch then lets `step` read the
    /// source instead of waiting for its end of stream).
    pub(super) fn active(&self, map: &Sockmap, pair: Pair) -> bool {
        self.active_with(map.gate(pair, self.side).map_or(0, |g| g.held))
    }

    /// [`Held::active`] with the gate's `held` count already read.
    pub(super) fn active_with(&self, held: u64) -> bool {
        self.start < self.buf.len() || held.saturating_sub(self.relayed) > 0
    }
}

/// One step of relaying `d`'s held bytes from `from`: writes what was read, or reads more
/// once the redirect queue is empty, or waits for the source. Returns when something
/// happened, or after `tick` when it waits for the redirect queue to drain. Bytes written
/// are added to `relayed` (the relay's count over every tunnel) as well.
pub(super) async fn step(
    map: &Sockmap,
    pair: Pair,
    from: &TcpStream,
    d: &mut Dir<'_>,
    (tick, relayed): (Duration, &AtomicU64),
) -> Step {
    let source = |e: io::Error| Step::Failed(End::Source(e.kind()));
    let h = &mut d.held;
    if h.start < h.buf.len() {
        if let Err(e) = d.to.writable().await {
            return Step::Failed(End::Destination(e.kind()));
        }
        match d.to.try_write(&h.buf[h.start..]) {
            Ok(n) => {
                h.start += n;
                h.relayed += n as u64;
                relayed.fetch_add(n as u64, Ordering::Relaxed);
                if h.start == h.buf.len() {
                    if let Err(end) = written(map, pair, from, h) {
                        return Step::Failed(end);
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Step::Failed(End::Destination(e.kind())),
        }
        return Step::Again;
    }
    let held = map.gate(pair, h.side).map_or(0, |g| g.held);
    if held > h.relayed {
        // Bytes still in the redirect queue go to the destination before any held one.
        if !d.held.drained {
            match redirect_queue(d, from, held + d.held.beyond) {
                Ok(0) => d.held.drained = true,
                Ok(_) => {
                    tokio::time::sleep(tick).await;
                    return Step::Again;
                }
                Err(e) => return source(e),
            }
        }
        let h = &mut d.held;
        if let Some(gate) = h.cap_buffer.take() {
            super::room::cap(from, gate);
        }
        let pending = held - h.relayed;
        if h.peeked {
            // Catching up, and more was held since the last peek: peek again, further.
            return match extend(from, h, pending) {
                Ok(()) => Step::Again,
                Err(e) => source(e),
            };
        }
        // Caught up by peeking (see the module's "Catching up") when what is held is not
        // too much to keep and the destination takes a good part of it at once; behind a
        // slow reader the proxy reads and writes a chunk at a time.
        let peek = pending <= CATCH_UP_MAX && room(d.to) >= pending / 4;
        let want = if peek {
            pending
        } else {
            pending.min(CHUNK as u64)
        } as usize;
        h.buf.resize(want, 0);
        // Straight to the socket, not through tokio's readiness: `closed` may have cleared
        // it after the edge these bytes raised, and with the source's window closed no
        // other edge would come.
        let got = if peek {
            peek_now(from.as_fd(), &mut h.buf)
        } else {
            recv_now(from.as_fd(), &mut h.buf)
        };
        match got {
            Ok(0) => {
                // End of stream, with held bytes not yet on the receive side: the kernel
                // queues a held skb behind the other direction's redirected ones when that
                // queue is not empty (the same psock list), and hands it over once those
                // are sent. They come before the end: wait for them, within a bound.
                h.buf.clear();
                let since = *h.late_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= HELD_LATE {
                    tracing::warn!(
                        held,
                        relayed = h.relayed,
                        "sockmap: the source ended and its held bytes did not come"
                    );
                    return Step::Failed(End::Source(io::ErrorKind::UnexpectedEof));
                }
                tokio::time::sleep(tick).await;
                return Step::Again;
            }
            Ok(n) => {
                h.late_since = None;
                h.buf.truncate(n);
                h.peeked = peek;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                h.buf.clear();
                // Held but not yet on the receive side (the kernel's work queue has it):
                // it shows up as readable, and is looked for again after a tick anyway.
                if let Ok(Err(e)) = tokio::time::timeout(tick, from.readable()).await {
                    return source(e);
                }
            }
            Err(e) => {
                h.buf.clear();
                return source(e);
            }
        }
        return Step::Again;
    }
    // Nothing held beyond what was relayed: wait for more, or for the end of stream (a
    // tick at most: an edge cleared by `closed` is not raised again).
    let r = match tokio::time::timeout(tick, from.ready(Interest::READABLE)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return source(e),
        Err(_) => return Step::Again,
    };
    if r.is_read_closed() && d.held.unrelayed(map, pair) == 0 {
        return Step::Fin;
    }
    if d.held.unrelayed(map, pair) == 0 {
        // Readable without anything held: a wake-up for bytes the program redirected.
        let _ = from.try_io(Interest::READABLE, || {
            Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
        });
    }
    Step::Again
}

/// Free room in `to`'s send buffer, as far as the two counts can tell (the buffer counts
/// the kernel's overhead too: an estimate on the high side); 0 when they cannot be read.
fn room(to: &TcpStream) -> u64 {
    match (send_buffer(to.as_fd()), outq_bytes(to.as_fd())) {
        (Ok(b), Ok(q)) => b.saturating_sub(q) as u64,
        _ => 0,
    }
}

/// Everything in the buffer was written: tells the program if that was every held byte.
/// Read bytes are done with. Peeked ones are consumed only once the program was told (the
/// read that sends the source its window comes after); until then the buffer is kept and
/// the next step peeks further.
fn written(map: &Sockmap, pair: Pair, from: &TcpStream, h: &mut Held) -> Result<(), End> {
    let caught_up = resume_if_caught_up(map, pair, h).map_err(|e| End::Destination(e.kind()))?;
    if h.peeked {
        if !caught_up {
            return Ok(());
        }
        consume(from, &h.buf).map_err(|e| End::Source(e.kind()))?;
        h.peeked = false;
        // A peek's buffer: as large as what was held, kept no longer.
        h.buf = Vec::new();
    }
    h.buf.clear();
    h.start = 0;
    Ok(())
}

/// Peeks again while catching up: the bytes already written (the buffer, still at the head
/// of the source's receive side) and the `pending` held since. When that would pass
/// `CATCH_UP_MAX`, or nothing new is on the receive side yet, the written bytes are
/// consumed instead and the proxy goes back to reading: a held skb can wait in the
/// kernel's backlog for room in the source's receive buffer, which peeked bytes keep
/// taken (waiting for it there hung 1 GiB answers).
fn extend(from: &TcpStream, h: &mut Held, pending: u64) -> io::Result<()> {
    let have = h.buf.len();
    let want = have as u64 + pending;
    let mut n = have;
    if want <= CATCH_UP_MAX {
        h.buf.resize(want as usize, 0);
        n = match peek_now(from.as_fd(), &mut h.buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        if n < have {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "sockmap: bytes peeked before were no longer there",
            ));
        }
    }
    h.buf.truncate(n);
    if n == have {
        consume(from, &h.buf)?;
        h.peeked = false;
        h.buf = Vec::new();
        h.start = 0;
        return Ok(());
    }
    h.start = have;
    Ok(())
}

/// Reads from `from` the bytes peeked into `peeked` (still at the head of its receive
/// side), checking they are those: the proxy is the only reader, so anything else is a
/// fault, and the direction fails rather than go on out of step.
fn consume(from: &TcpStream, peeked: &[u8]) -> io::Result<()> {
    let mut scratch = vec![0u8; peeked.len().min(CHUNK)];
    let mut done = 0;
    while done < peeked.len() {
        let want = (peeked.len() - done).min(scratch.len());
        let n = recv_now(from.as_fd(), &mut scratch[..want])?;
        if n == 0 || scratch[..n] != peeked[done..done + n] {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "sockmap: the bytes peeked were not those read",
            ));
        }
        done += n;
    }
    Ok(())
}

/// Tells the program once every byte it held was relayed, so it can redirect again;
/// whether it did.
fn resume_if_caught_up(map: &Sockmap, pair: Pair, h: &mut Held) -> io::Result<bool> {
    let held = map.gate(pair, h.side).map_or(0, |g| g.held);
    if held != h.relayed {
        return Ok(false);
    }
    map.resume(pair, h.side, h.relayed)
        .map_err(|e| io::Error::other(e.to_string()))?;
    tracing::trace!(
        relayed = h.relayed,
        "sockmap: held bytes relayed; the gate may open"
    );
    // The program may redirect again from the next skb: the queue is to be watched.
    h.drained = false;
    Ok(true)
}

/// Bytes the program redirected toward `d.to` that are not yet in its TCP: everything that
/// arrived on `from` less what was held, against what the destination was handed since
/// the start (its own bytes, the redirected and the relayed ones). `held` is read before
/// the counters, so a byte held in between counts as still queued (a look too many, never
/// one too few).
fn redirect_queue(d: &Dir<'_>, from: &TcpStream, held: u64) -> io::Result<u64> {
    let fi = info(from)?;
    let arrived = fi
        .bytes_received
        .saturating_sub(d.base_received)
        .saturating_sub(u64::from(crate::tcp::fin_received(fi.state)));
    let handed = handed(d.to)?.saturating_sub(d.base_acked);
    let redirected = d.written + arrived.saturating_sub(held) + d.held.relayed;
    Ok(redirected.saturating_sub(handed))
}
