//! A one-way `sockmap` splice: an HTTP response body handed to the kernel after its head,
//! and the connections handed back to the proxy after exactly its length (seed 000: "the
//! proxy can regain the control of the two connections when the current transfer is
//! completed").
//!
//! The source (the upstream) goes into the spliced map with a bound, the body's length;
//! the destination (the client) into a map no program runs for, so what the client sends
//! meanwhile (its next request, a pipelined one) stays on its own receive queue, unread.
//! The verdict program redirects skbs while they fit in the bound; the skb that would
//! cross it is passed whole to the source's own receive side, and so is everything after
//! it (`splicer-bpf`'s `bounds`). Once every redirected byte is in the client's TCP, the
//! proxy reads the body's last bytes from the upstream socket and writes them itself, then
//! takes both sockets out of the maps. What the upstream sent beyond the body cannot stay
//! unread (the kernel drops a socket's map-side queue when it leaves the map), so the
//! splice is only for sources after whose bound nothing is expected
//! ([`crate::Trailing::Surplus`]): such bytes are counted, and the upstream connection is
//! shut so that no pool reuses it.
//!
//! The gate bounds what the kernel holds behind a slow client, as for tunnels (`held`).

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use splicer_bpf::sockmap::{Bound, Pair};
use splicer_bpf::Sockmap;
use splicer_sys::sock::{outq_bytes, recv_now, set_rcvlowat, shutdown_both};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::counts::{baseline_handed, handed, info, real_error, snapshot, Dir, Seen};
use super::held::{self, Held, Step};
use super::{declined, outcome, Limits};
use crate::engine::Declined;
use crate::outcome::{End, Outcome};
use crate::tcp::{TCP_CLOSE, TCP_ESTABLISHED};

/// Longest wait between looks while the body flows. The body's end wakes the watch (the
/// program passes the skb that reaches the bound to the source's own side, which makes it
/// readable), and so do the gate's held bytes and the source's end of stream: the looks in
/// between only catch what raises nothing here, a client's reset or an idle source. On a
/// WAN a body takes round trips, and looks every few milliseconds cost more of the
/// proxy's CPU than the relay's reads would have (seed 000's sweep, 2026-11-27: a 64 KB
/// body through `sockmap` at twice `copy`'s CPU per request).
const TICK: Duration = Duration::from_millis(250);
/// The wait between looks while the gate's held bytes wait for the redirect queue to drain.
const HELD_TICK: Duration = Duration::from_millis(20);
/// The wait once the bound is met, for the redirect queue to drain.
const FINISH_TICK: Duration = Duration::from_millis(1);
/// How long the bytes a failed source sent before its failure may take to reach the
/// client's TCP, with nothing moving, before the failure is reported anyway.
const LATE_AFTER_FAILURE: Duration = Duration::from_secs(1);
/// How long the body's tail may take to show up on the source's receive side once the
/// program counted it (it is queued there synchronously; this is a guard).
const TAIL_LATE: Duration = Duration::from_secs(5);

/// Runs a one-way splice from `from` to `to`: `prefix` first (written by the proxy), then
/// the source's bytes in the kernel, `max` bytes in all (`None`: to the end of stream).
/// Declines what the kernel cannot take before it redirected anything (`prefix_sent`
/// says whether the prefix was written by then).
pub(crate) async fn splice(
    map: &Sockmap,
    (from, to): (&TcpStream, &TcpStream),
    prefix: &[u8],
    max: Option<u64>,
    limits: Limits<'_>,
    cut: impl std::future::Future<Output = ()>,
) -> Result<Outcome, Declined> {
    let ((f0, f_queued), t0) = match (snapshot(from).await, info(to)) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(e), _) | (_, Err(e)) => return Err(declined(e, 0)),
    };
    // A socket that got a FIN cannot enter a sockmap.
    if f0.state != TCP_ESTABLISHED || t0.state != TCP_ESTABLISHED {
        return Err(declined("a side already half-closed before the splice", 0));
    }
    let written = prefix.len() as u64;
    if let Err(e) = crate::io::write_all(to, prefix).await {
        return Ok(outcome(0, End::Destination(e.kind())));
    }
    let body = max.map(|m| m.saturating_sub(written));
    if body == Some(0) {
        return Ok(outcome(written, End::Max));
    }
    // The acknowledgements' baseline: everything the proxy handed `to` itself, the prefix
    // included. Bytes queued unread on `from` are redirected once it is in the map: they
    // count as arriving after the start.
    let base_acked = baseline_handed(to).await.map_err(|e| Declined {
        prefix_sent: prefix.len(),
        ..declined(e, 0)
    })?;
    let fallback = |e: splicer_bpf::Error| Declined {
        prefix_sent: prefix.len(),
        ..declined(e, 0)
    };
    // The gate goes in with the rest, before the source: a failure after the program
    // redirected something could no longer be handed to `pipe`. Its source gets the room
    // it needs to keep its window open meanwhile.
    let gate = super::room::fit(&[from], limits.max_queue, !limits.fixed_buffers);
    let (pair, kept) = map
        .splice_one_way(from.as_fd(), to.as_fd(), body, gate)
        .map_err(fallback)?;
    // Lowering the mark makes the kernel hand the bytes queued before the insertion to the
    // program (docs/kernel-notes.md).
    let _ = set_rcvlowat(from.as_fd(), 1);
    let mut d = Dir {
        to,
        base_received: f0.bytes_received - f_queued,
        base_acked,
        written: 0,
        fin: false,
        seen: Seen::default(),
        end: None,
        held: Held::new(0),
    };
    let end = if kept > 0 {
        // The destination is in its map before the source: nothing can be kept. A guard.
        End::Source(io::ErrorKind::InvalidData)
    } else {
        watch(map, pair, from, &mut d, limits, cut).await
    };
    let bytes = match end {
        End::Max => max.unwrap_or(0),
        _ => {
            map.unsplice(pair);
            written + handed(to).map_or(0, |h| h.saturating_sub(base_acked))
        }
    };
    Ok(outcome(bytes, end))
}

/// Until the body ends (`End::Max`: then both sockets are out of the maps), the source's
/// end of stream with every byte delivered (`End::Eof`), or a failure.
async fn watch(
    map: &Sockmap,
    pair: Pair,
    from: &TcpStream,
    d: &mut Dir<'_>,
    limits: Limits<'_>,
    cut: impl std::future::Future<Output = ()>,
) -> End {
    tokio::pin!(cut);
    let ceiling = limits.max_queue.saturating_add(super::watch::GATE_SLACK);
    let mut last_counts = (0, 0);
    let mut last_move = Instant::now();
    let mut drain_looks = 0u32;
    // The source failed (a reset): its end, once what came before is delivered.
    let mut failed: Option<End> = None;
    loop {
        // Five system calls a look. What was passed to the proxy (held, beyond) is read
        // before the counters: a byte passed in between counts as still queued, a look too
        // many, never one too few.
        let b = map.bound_of(pair).unwrap_or_default();
        d.held.beyond = b.beyond;
        let gate_held = map.gate(pair, 0).map_or(0, |g| g.held);
        let held_active = d.held.active_with(gate_held);
        let (fi, ti, outq) = match (info(from), info(d.to), outq_bytes(d.to.as_fd())) {
            (Ok(f), Ok(t), Ok(q)) => (f, t, q as u64),
            (Err(e), _, _) => return End::Source(e.kind()),
            (_, Err(e), _) | (_, _, Err(e)) => return End::Destination(e.kind()),
        };
        if ti.state == TCP_CLOSE {
            // Reset by the client (or it timed out).
            let e = d.to.take_error().ok().flatten();
            return End::Destination(e.map_or(io::ErrorKind::ConnectionReset, |e| e.kind()));
        }
        // A FIN received counts one in `bytes_received`, whether or not the watch saw it.
        let arrived = fi
            .bytes_received
            .saturating_sub(d.base_received)
            .saturating_sub(u64::from(crate::tcp::fin_received(fi.state)));
        // Redirected and not yet in the client's TCP. An acknowledgement between the two
        // reads of `to` only makes it look larger (the bytes leave the send queue after
        // `bytes_acked` was read): a look too many again.
        let redirected =
            (d.written + arrived + d.held.relayed).saturating_sub(gate_held + b.beyond);
        let handed = (ti.bytes_acked + outq).saturating_sub(d.base_acked);
        let queued = redirected.saturating_sub(handed);
        if !held_active && queued == 0 {
            if b.reached {
                return finish(map, pair, from, d.to, b).await;
            }
            if d.fin {
                return failed.unwrap_or(End::Eof);
            }
        }
        if failed.is_some_and(|_| last_move.elapsed() >= LATE_AFTER_FAILURE) {
            return failed.unwrap_or(End::Aborted);
        }
        if queued > ceiling {
            tracing::warn!(
                queued,
                most = ceiling,
                "sockmap: the kernel holds more of this body than its gate allows; reset"
            );
            return End::Destination(io::ErrorKind::OutOfMemory);
        }
        let counts = (fi.bytes_received, ti.bytes_acked);
        if counts != last_counts {
            last_counts = counts;
            last_move = Instant::now();
        } else if let Some(e) = d.to.take_error().ok().flatten() {
            // Nothing moved: the kernel's redirect may have failed on the client (it
            // records the error there and stops sending).
            return End::Destination(e.kind());
        }
        if limits.idle.is_some_and(|i| last_move.elapsed() >= i) {
            return End::Idle;
        }
        // What to wait for: the gate's held bytes to relay; while the body flows, the
        // skb the program passes at the bound (bytes on the source's own side make it
        // readable; redirected ones raise nothing), or the end of stream, looking again
        // after a tick; once the bound is met, the kernel's backlog worker moving the last
        // redirected bytes into the client's TCP, which raises nothing either: a few
        // yields first, then 1 ms sleeps. An edge cleared below after the program passed
        // the bound's skb is not lost: it set `reached` first, which the next look reads.
        let draining = b.reached || d.fin;
        let tick = if draining { FINISH_TICK } else { TICK };
        drain_looks = if draining { drain_looks + 1 } else { 0 };
        tracing::trace!(
            remaining = b.remaining,
            beyond = b.beyond,
            reached = b.reached,
            gate_held,
            queued,
            arrived,
            fin = d.fin,
            ?tick,
            "sockmap: a body's look"
        );
        tokio::select! {
            step = held::step(map, pair, from, d, HELD_TICK), if held_active => match step {
                Step::Again => {}
                Step::Fin => d.fin = true,
                Step::Failed(end) => return end,
            },
            r = tokio::time::timeout(tick, from.ready(Interest::READABLE)), if !held_active && !draining => {
                match r {
                    Err(_) => {}
                    Ok(Ok(r)) if r.is_read_closed() || r.is_error() => {
                        match real_error(from, false) {
                            // What came before the failure goes on to the client
                            // first, as `pipe` would have written it.
                            Some(e) => {
                                failed = Some(End::Source(e.kind()));
                                d.fin = true;
                            }
                            None => d.fin = true,
                        }
                    }
                    // Readable: bytes passed at the bound (or a stale edge); they are
                    // read on the bound's count, and the edge is consumed.
                    Ok(Ok(_)) => {
                        let _ = from.try_io(Interest::READABLE, || {
                            Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
                        });
                    }
                    Ok(Err(e)) => return End::Source(e.kind()),
                }
            }
            () = drain_wait(drain_looks), if !held_active && draining => {}
            () = &mut cut => return End::Cut,
        }
    }
}

/// The wait between looks while the last redirected bytes drain into the client's TCP
/// (the kernel's backlog worker, usually within microseconds): yields first.
async fn drain_wait(looks: u32) {
    if looks <= 3 {
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(FINISH_TICK).await;
    }
}

/// The bound is met and every redirected byte is in the destination's TCP: the body's
/// last `b.remaining` bytes, passed to the source's own receive side, are written by the
/// proxy, and both sockets leave the maps. Bytes beyond the body make the source's
/// connection unusable: it is shut.
async fn finish(map: &Sockmap, pair: Pair, from: &TcpStream, to: &TcpStream, b: Bound) -> End {
    let mut tail = vec![0u8; b.remaining as usize];
    let mut got = 0;
    let since = Instant::now();
    while got < tail.len() {
        match recv_now(from.as_fd(), &mut tail[got..]) {
            Ok(0) => return End::Source(io::ErrorKind::UnexpectedEof),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if since.elapsed() >= TAIL_LATE {
                    tracing::warn!(
                        expected = b.remaining,
                        got,
                        "sockmap: the body's last bytes did not reach the proxy"
                    );
                    return End::Source(io::ErrorKind::UnexpectedEof);
                }
                tokio::time::sleep(FINISH_TICK).await;
            }
            Err(e) => return End::Source(e.kind()),
        }
    }
    if let Err(e) = crate::io::write_all(to, &tail).await {
        return End::Destination(e.kind());
    }
    // Anything more, read now or counted by the program until the sockets were out (the
    // `TCP_INFO` call waits for a verdict running on the socket), came after the body.
    let mut probe = [0u8; 1];
    let read_beyond = matches!(recv_now(from.as_fd(), &mut probe), Ok(1));
    map.take_out(pair);
    let _ = info(from);
    let beyond = map.bound_of(pair).map_or(0, |b| b.beyond);
    map.forget(pair);
    let surplus = beyond.saturating_sub(b.remaining);
    if read_beyond || surplus > 0 {
        tracing::debug!(
            surplus,
            "sockmap: the source sent bytes after the body; its connection is shut"
        );
        let _ = shutdown_both(from.as_fd());
    }
    End::Max
}
