//! A `sockmap` tunnel, watched until it ends: FINs passed on once acknowledged, resets
//! passed on, skbs the program could not redirect, bytes that never reached the
//! destination, idleness.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use splicer_bpf::Sockmap;
use splicer_sys::sock::{outq_bytes, set_linger_zero, shutdown_write};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::counts::{closed, info, real_error};
use super::setup::Spliced;
use super::{outcome, LOST_AFTER};
use crate::outcome::End;
use crate::outcome::TunnelOutcome;

/// How often counters are looked at while a FIN waits for acknowledgements.
const TICK: Duration = Duration::from_millis(20);
/// How often otherwise (idleness, progress): two `TCP_INFO` calls per tunnel each time, so
/// not every 20 ms for thousands of quiet tunnels.
const SLOW_TICK: Duration = Duration::from_millis(500);

/// Watches the tunnel until both directions ended, then takes the pair out of the map.
pub(super) async fn run(
    map: &Sockmap,
    client: &TcpStream,
    upstream: &TcpStream,
    spliced: Spliced<'_>,
    idle: Option<Duration>,
) -> TunnelOutcome {
    let Spliced {
        pair,
        mut up,
        mut down,
        kept_before,
        start: (c0, u0),
    } = spliced;
    let mut last_counts = (c0.bytes_received, u0.bytes_received);
    let mut last_move = Instant::now();
    let result = loop {
        let (ci, ui) = match (info(client), info(upstream)) {
            (Ok(c), Ok(u)) => (c, u),
            (Err(e), _) => break Some((Some(End::Source(e.kind())), None)),
            (_, Err(e)) => break Some((None, Some(End::Source(e.kind())))),
        };
        for (d, fi, ti) in [(&mut up, &ci, &ui), (&mut down, &ui, &ci)] {
            if d.end.is_some() {
                continue;
            }
            let acked = ti.bytes_acked.saturating_sub(d.base_acked);
            // Pass a FIN on once everything before it is acknowledged.
            if d.fin && acked >= d.bytes(fi) {
                let _ = shutdown_write(d.to.as_fd());
                d.end = Some(End::Eof);
            }
            // Bytes the kernel took from the source but never put into the destination's
            // TCP would be waited for forever. Seen under loss before the program cut
            // partly overlapping retransmissions (docs/engines.md); kept as a safety net.
            let missing = d.end.is_none()
                && d.fin
                && acked < d.bytes(fi)
                && outq_bytes(d.to.as_fd()).is_ok_and(|q| q == 0);
            d.missing_since = missing.then(|| d.missing_since.unwrap_or_else(Instant::now));
        }
        if up.end.is_some() && down.end.is_some() {
            break None;
        }
        // Bytes the program could not redirect (a failed cut, a partner gone from the map)
        // stay with the proxy, and nothing of that socket is redirected after them: what
        // the destination got is intact but cut short, so the tunnel cannot go on.
        let kept = map.kept(pair) - kept_before;
        if kept > 0 {
            tracing::warn!(
                kept,
                "sockmap: bytes could not be redirected during the tunnel; tunnel reset"
            );
            let _ = set_linger_zero(client.as_fd());
            let _ = set_linger_zero(upstream.as_fd());
            break Some((Some(End::Aborted), Some(End::Aborted)));
        }
        if let Some(d) = [&up, &down]
            .into_iter()
            .find(|d| d.missing_since.is_some_and(|t| t.elapsed() >= LOST_AFTER))
        {
            let (fi, ti) = if std::ptr::eq(d, &up) {
                (&ci, &ui)
            } else {
                (&ui, &ci)
            };
            let lost = d
                .bytes(fi)
                .saturating_sub(ti.bytes_acked.saturating_sub(d.base_acked));
            tracing::warn!(
                lost,
                "sockmap: redirected bytes never reached the destination socket; tunnel reset"
            );
            let _ = set_linger_zero(client.as_fd());
            let _ = set_linger_zero(upstream.as_fd());
            let lost_end = Some(End::Destination(io::ErrorKind::InvalidData));
            break Some(if std::ptr::eq(d, &up) {
                (lost_end, Some(End::Aborted))
            } else {
                (Some(End::Aborted), lost_end)
            });
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
        };
        tokio::select! {
            r = closed(client), if !up.fin => {
                match r.ok().and(real_error(client, down.end.is_some())) {
                    Some(e) => break Some((Some(End::Source(e.kind())), None)),
                    None => up.fin = true,
                }
            }
            r = closed(upstream), if !down.fin => {
                match r.ok().and(real_error(upstream, up.end.is_some())) {
                    Some(e) => break Some((None, Some(End::Source(e.kind())))),
                    None => down.fin = true,
                }
            }
            _ = tokio::time::sleep(tick) => {}
        }
    };
    map.unsplice(pair);
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
