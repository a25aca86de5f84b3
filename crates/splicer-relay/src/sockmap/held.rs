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

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use splicer_bpf::sockmap::Pair;
use splicer_bpf::Sockmap;
use splicer_sys::sock::recv_now;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::counts::{handed, info, Dir};
use crate::outcome::End;

/// The most read from the source at once.
const CHUNK: usize = 64 * 1024;

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
    /// Bytes read from the source and not yet written (`buf[start..]`).
    buf: Vec<u8>,
    start: usize,
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
            buf: Vec::new(),
            start: 0,
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
/// happened, or after `tick` when it waits for the redirect queue to drain.
pub(super) async fn step(
    map: &Sockmap,
    pair: Pair,
    from: &TcpStream,
    d: &mut Dir<'_>,
    tick: Duration,
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
                if h.start == h.buf.len() {
                    h.buf.clear();
                    h.start = 0;
                    if let Err(e) = resume_if_caught_up(map, pair, h) {
                        return Step::Failed(End::Destination(e.kind()));
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
        let want = (held - h.relayed).min(CHUNK as u64) as usize;
        h.buf.resize(want, 0);
        // Straight to the socket, not through tokio's readiness: `closed` may have cleared
        // it after the edge these bytes raised, and with the source's window closed no
        // other edge would come.
        match recv_now(from.as_fd(), &mut h.buf) {
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

/// Tells the program once every byte it held was relayed, so it can redirect again.
fn resume_if_caught_up(map: &Sockmap, pair: Pair, h: &mut Held) -> io::Result<()> {
    let held = map.gate(pair, h.side).map_or(0, |g| g.held);
    if held == h.relayed {
        map.resume(pair, h.side, h.relayed)
            .map_err(|e| io::Error::other(e.to_string()))?;
        tracing::trace!(
            relayed = h.relayed,
            "sockmap: held bytes relayed; the gate may open"
        );
        // The program may redirect again from the next skb: the queue is to be watched.
        h.drained = false;
    }
    Ok(())
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
