//! A `sockmap` tunnel, watched until it ends: FINs passed on once acknowledged, resets
//! passed on, skbs the program could not redirect, bytes that never reached the
//! destination, idleness.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use splicer_bpf::Sockmap;
use splicer_sys::sock::{outq_bytes, set_linger_zero, shutdown_write};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::counts::{info, real_error, woken, Dir, Woke};
use super::held::{self, Step};
use super::setup::Spliced;
use super::{outcome, Limits, LOST_AFTER};
use crate::outcome::End;
use crate::outcome::TunnelOutcome;

/// What a direction may hold in the kernel beyond its gate's bound before the tunnel is
/// reset as a gate that did not hold: the held bytes on the source's receive side (at most
/// its receive buffer, autotuned to a few MiB) and one skb past the bound.
pub(super) const GATE_SLACK: u64 = 64 << 20;

/// How often counters are looked at while a FIN waits for acknowledgements.
const TICK: Duration = Duration::from_millis(20);
/// How often otherwise (idleness, progress): two `TCP_INFO` calls per tunnel each time, so
/// not every 20 ms for thousands of quiet tunnels.
const SLOW_TICK: Duration = Duration::from_millis(500);

/// A tunnel's share of the redirect queues' sum (`SockmapStats::queued`): set at each
/// look, taken back out when the watch ends, however it ends.
struct Queued<'a> {
    total: &'a AtomicU64,
    mine: u64,
}

impl Queued<'_> {
    fn set(&mut self, now: u64) {
        if now >= self.mine {
            self.total.fetch_add(now - self.mine, Ordering::Relaxed);
        } else {
            self.total.fetch_sub(self.mine - now, Ordering::Relaxed);
        }
        self.mine = now;
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// Watches the tunnel until both directions ended, then takes the pair out of the map.
pub(super) async fn run(
    map: &Sockmap,
    client: &TcpStream,
    upstream: &TcpStream,
    spliced: Spliced<'_>,
    limits: Limits<'_>,
    cut: impl std::future::Future<Output = ()>,
) -> TunnelOutcome {
    tokio::pin!(cut);
    let Spliced {
        pair,
        mut up,
        mut down,
        kept_before,
        start: (c0, u0),
    } = spliced;
    let idle = limits.idle;
    let ceiling = limits.max_queue.saturating_add(GATE_SLACK);
    let mut last_counts = (c0.bytes_received, u0.bytes_received);
    let mut last_move = Instant::now();
    let mut last_look = Instant::now();
    let mut queued = Queued {
        total: limits.queued,
        mine: 0,
    };
    let result = loop {
        let (ci, ui) = match (info(client), info(upstream)) {
            (Ok(c), Ok(u)) => (c, u),
            (Err(e), _) => break Some((Some(End::Source(e.kind())), None)),
            (_, Err(e)) => break Some((None, Some(End::Source(e.kind())))),
        };
        // How soon the fastest-filling direction could pass what the gate allows.
        let since = last_look.elapsed().as_secs_f64().max(1e-3);
        last_look = Instant::now();
        // Until a byte has moved no fill rate is known: look again soon (a tunnel's first
        // bytes usually come at once, so few tunnels tick this fast for long).
        let mut fill_in = if up.seen.bytes == 0 && down.seen.bytes == 0 {
            TICK
        } else {
            SLOW_TICK
        };
        for (d, fi, ti) in [(&mut up, &ci, &ui), (&mut down, &ui, &ci)] {
            if d.end.is_some() {
                continue;
            }
            let acked = ti.bytes_acked.saturating_sub(d.base_acked);
            let bytes = d.bytes(fi);
            let outq = outq_bytes(d.to.as_fd()).ok();
            // Looked at before the FIN is passed on: a look at everything acknowledged
            // clears a wait left by earlier looks (left standing on an ended direction, one
            // of a few ticks once reset healthy tunnels a second later).
            // Bytes the gate held and the proxy has not yet written are on the source's
            // side or in the proxy, not in the redirect queue: they are not looked for in
            // the destination yet (`held::step` bounds their wait).
            let unrelayed = d.held.unrelayed(map, pair);
            let seen = d.seen.look(
                d.fin,
                acked,
                bytes.saturating_sub(unrelayed),
                outq,
                Instant::now(),
            );
            let rate = seen.bytes.saturating_sub(d.seen.bytes) as f64 / since;
            if rate > 0.0 {
                let left = ceiling.saturating_sub(seen.queued) as f64;
                fill_in = fill_in.min(Duration::from_secs_f64(left / rate / 2.0));
            }
            d.seen = seen;
            // Pass a FIN on once everything before it is acknowledged.
            if d.fin && acked >= bytes {
                let _ = shutdown_write(d.to.as_fd());
                d.end = Some(End::Eof);
            }
        }
        queued.set(up.seen.queued + down.seen.queued);
        if up.end.is_some() && down.end.is_some() {
            break None;
        }
        // Bytes the program could not redirect (a failed cut, a partner gone from the map)
        // stay with the proxy, and nothing of that socket is redirected after them: what
        // the destination got is intact but cut short, so the tunnel cannot go on.
        let kept = map.kept(pair) - kept_before;
        let reset = (kept > 0)
            .then(|| {
                tracing::warn!(
                    kept,
                    "sockmap: bytes could not be redirected during the tunnel; tunnel reset"
                );
                (Some(End::Aborted), Some(End::Aborted))
            })
            .or_else(|| over_limit(&up, &down, ceiling))
            .or_else(|| lost(&up, &down));
        if let Some(ends) = reset {
            let _ = set_linger_zero(client.as_fd());
            let _ = set_linger_zero(upstream.as_fd());
            break Some(ends);
        }
        let counts = (ci.bytes_received, ui.bytes_received);
        if counts != last_counts {
            last_counts = counts;
            last_move = Instant::now();
        }
        if idle.is_some_and(|i| last_move.elapsed() >= i) {
            break Some((Some(End::Idle), Some(End::Idle)));
        }
        let waiting_fin = (up.fin && up.end.is_none()) || (down.fin && down.end.is_none());
        let tick = if waiting_fin {
            TICK
        } else {
            idle.map_or(SLOW_TICK, |i| (i / 4).clamp(TICK, SLOW_TICK))
                .min(fill_in.max(TICK))
        };
        // A direction whose gate held bytes is relayed by the proxy until they are all
        // through; its source's readiness is then for `held::step`, not `closed`.
        let (up_held, down_held) = (up.held.active(map, pair), down.held.active(map, pair));
        tokio::select! {
            step = held::step(map, pair, client, &mut up, TICK), if up_held => match step {
                Step::Again => {}
                Step::Fin => up.fin = true,
                Step::Failed(end) => break Some(blame(true, end)),
            },
            step = held::step(map, pair, upstream, &mut down, TICK), if down_held => match step {
                Step::Again => {}
                Step::Fin => down.fin = true,
                Step::Failed(end) => break Some(blame(false, end)),
            },
            // Bytes passed to a source's own side wake the watch at once: the gate began
            // to hold them, and the next look hands them to `held::step`. Waiting for the
            // tick instead stalled a direction up to 500 ms each time its gate closed
            // (kept-alive 1 MiB answers through a tunnel: p95 501 ms, 2026-11-27).
            r = woken(client), if !up.fin && !up_held => match r {
                Ok(Woke::Readable) => {}
                r => match r.ok().and(real_error(client, down.end.is_some())) {
                    Some(e) => break Some((Some(End::Source(e.kind())), None)),
                    None => up.fin = true,
                },
            },
            r = woken(upstream), if !down.fin && !down_held => match r {
                Ok(Woke::Readable) => {}
                r => match r.ok().and(real_error(upstream, up.end.is_some())) {
                    Some(e) => break Some((None, Some(End::Source(e.kind())))),
                    None => down.fin = true,
                },
            },
            _ = tokio::time::sleep(tick) => {}
            () = &mut cut => break Some((Some(End::Cut), Some(End::Cut))),
        }
    };
    map.unsplice(pair);
    tracing::debug!(
        peak_up = up.seen.peak,
        peak_down = down.seen.peak,
        "sockmap: most bytes seen in the redirect queues"
    );
    let (ci, ui) = (info(client).unwrap_or(c0), info(upstream).unwrap_or(u0));
    if let Some((up_end, down_end)) = result {
        // A reset on one side resets the other, as the other engines do; idle ends both.
        match (up_end, down_end) {
            (Some(End::Source(_)), _) => {
                let _ = set_linger_zero(upstream.as_fd());
            }
            (_, Some(End::Source(_))) => {
                let _ = set_linger_zero(client.as_fd());
            }
            _ => {}
        }
        let aborted = |e: Option<End>| e.unwrap_or(End::Aborted);
        up.end = up.end.or(Some(aborted(up_end)));
        down.end = down.end.or(Some(aborted(down_end)));
    }
    TunnelOutcome {
        up: outcome(up.bytes(&ci), up.end.unwrap_or(End::Aborted)),
        down: outcome(down.bytes(&ui), down.end.unwrap_or(End::Aborted)),
    }
}

/// Whether a direction holds more than `max` bytes between its source and its
/// destination's TCP: the gate should have held the source back well before (`max` is
/// its bound plus [`GATE_SLACK`]), so it did not hold, and nothing else bounds the kernel's
/// redirect queue. The ends for both directions if so.
fn over_limit(up: &Dir<'_>, down: &Dir<'_>, max: u64) -> Option<(Option<End>, Option<End>)> {
    let (is_up, d) = [(true, up), (false, down)]
        .into_iter()
        .find(|(_, d)| d.end.is_none() && d.seen.queued > max)?;
    tracing::warn!(
        direction = direction(is_up),
        queued = d.seen.queued,
        most = max,
        "sockmap: the kernel holds more of this direction than its gate allows \
         ([relay] sockmap_max_queue and the source's receive buffer); tunnel reset"
    );
    Some(blame(is_up, End::Destination(io::ErrorKind::OutOfMemory)))
}

/// Whether a direction's redirected bytes have been missing from the destination's TCP
/// for [`LOST_AFTER`] (`Seen::look`). The ends for both directions if so.
fn lost(up: &Dir<'_>, down: &Dir<'_>) -> Option<(Option<End>, Option<End>)> {
    let now = Instant::now();
    let (is_up, d) = [(true, up), (false, down)]
        .into_iter()
        .find(|(_, d)| d.end.is_none() && d.seen.missing_for(now) >= LOST_AFTER)?;
    tracing::warn!(
        direction = direction(is_up),
        lost = d.seen.queued,
        "sockmap: redirected bytes never reached the destination socket; tunnel reset"
    );
    Some(blame(is_up, End::Destination(io::ErrorKind::InvalidData)))
}

fn direction(is_up: bool) -> &'static str {
    if is_up {
        "client to server"
    } else {
        "server to client"
    }
}

/// The ends of a tunnel reset for a failure of one direction: that one's, and the other
/// aborted.
fn blame(is_up: bool, end: End) -> (Option<End>, Option<End>) {
    if is_up {
        (Some(end), Some(End::Aborted))
    } else {
        (Some(End::Aborted), Some(end))
    }
}
