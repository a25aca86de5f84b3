//! The `ipsplice` engine: a whole tunnel handed to the TC program of `splicer-bpf`, which
//! rewrites each packet of one TCP connection into the other and forwards it like a router
//! (seed 003). The endpoints then talk TCP end to end: losses are recovered by them, not by
//! the proxy, and the proxy's sockets see nothing more.
//!
//! Taking over a tunnel (docs/kernel-notes.md has the traps):
//! 1. Check what cannot be bridged: IPv6, an endpoint on this host, a leg already half-closed,
//!    timestamps or ECN on one leg only, a leg whose MSS the other cannot take. The engine
//!    declines and the caller runs `pipe`, with the reason in the access log.
//! 2. OBSERVE: the program passes both legs' packets to the sockets and records each
//!    endpoint's last TSval (no socket option tells it) while the proxy relays in user space
//!    whatever arrives (a request, a banner).
//! 3. When both sockets are *quiet* — nothing unread, nothing unacknowledged, no
//!    out-of-order data — FREEZE (the program drops new data), check again, snapshot the
//!    sequence numbers and TSvals with `TCP_REPAIR`, and install the ACTIVE mappings. A
//!    bulk tunnel that is never quiet (bulk from the first byte) is frozen until its queues
//!    drain: the data dropped meanwhile is resent by the endpoints, once. A request/response
//!    tunnel that never pauses (one exchange always in flight) is not frozen: after 5 s it
//!    stays with `pipe`.
//! 4. The sockets stay open in repair mode, so their ports stay reserved and closing them
//!    later sends nothing. The proxy watches the entries for FIN, RST and idleness,
//!    reports the bytes each way, and removes them a moment after the end.
//!
//! In parts: `eligible` (step 1), `pump` (the user-space relay meanwhile), `takeover` (steps
//! 2 and 3, early and late), `mapping` (the deltas the program applies: pure arithmetic),
//! `watch` (step 4), `cleanup` (the entries' removal, resets) and `pace` (the pacer's
//! window clamps).

mod cleanup;
mod eligible;
mod mapping;
mod pace;
mod pump;
mod takeover;
mod watch;

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use splicer_bpf::ipsplice::Flow;
use splicer_bpf::Ipsplice;
use splicer_sys::repair;
use tokio::net::TcpStream;

use crate::engine::Declined;
use crate::outcome::TunnelOutcome;
use crate::outcome::{End, Outcome};
use crate::Engine;
use cleanup::{remove, Guard};
use eligible::eligible;
pub(crate) use pace::Pace;
use pace::{Path, Slots};
use takeover::splice;

/// The engine declines before doing anything.
fn declined(reason: impl std::fmt::Display) -> Declined {
    Declined::at_once(Engine::Ipsplice, reason)
}

/// Why a take-over stopped short of splicing.
pub(super) enum Stop {
    /// Leave the tunnel to another engine, for this reason.
    Decline(String),
    /// The direction (`true`: up) ended with this before the take-over.
    End(bool, End),
}

fn outcome(bytes: u64, end: End) -> Outcome {
    Outcome {
        engine: Engine::Ipsplice,
        fallback: None,
        bytes,
        end,
    }
}

/// Runs the tunnel in the kernel, with whether it was spliced before the reply; `Err` when
/// the engine declined (the caller carries on in user space, the bytes already moved
/// counted, and writes `reply` unless it was sent).
/// `reply` is what the client still waits for (the SOCKS reply, `200 Connection
/// established`): with nothing else in flight the tunnel is spliced before it is written
/// (the early take-over), otherwise it is written first and the tunnel taken over later.
/// `pace` gets the entries once they are active, so that the pacer's caps reach them.
pub(crate) async fn tunnel(
    ip: &Arc<Ipsplice>,
    pace: &Pace,
    client: &TcpStream,
    upstream: &TcpStream,
    (reply, client_prefix): (&[u8], &[u8]),
    idle: Option<Duration>,
    cut: impl std::future::Future<Output = ()>,
) -> Result<(TunnelOutcome, bool), Declined> {
    let legs = eligible(client, upstream)?;
    for i in [legs.client_if, legs.upstream_if] {
        ip.attach(i)
            .map_err(|e| declined(format!("attaching to interface {i}: {e}")))?;
    }
    let keys = legs.keys();
    if ip.get(&keys.0).is_some() || ip.get(&keys.1).is_some() {
        return Err(declined("a flow with these addresses is still spliced"));
    }
    // Every tunnel gets its window clamps' slots, paced or not, so that a class paced
    // later (a reload) reaches it. Dropped after `guard` (declared later): the entries go
    // before their slots.
    let slots = Slots::take(ip);
    let observing = |slot| {
        let mut f = Flow::observing();
        f.pace = slot;
        f
    };
    if let Err(e) = ip
        .set(keys.0, observing(slots.ids[0]))
        .and_then(|()| ip.set(keys.1, observing(slots.ids[1])))
    {
        remove(ip, keys);
        return Err(declined(format!("flow map: {e}")));
    }
    // Should this future be dropped (the connection's task cancelled), the entries go with
    // it rather than stay in the kernel for the process's life.
    let guard = Guard {
        ip,
        keys,
        armed: true,
    };
    let mut moved = (0u64, 0u64);
    let mut reply_sent = reply.is_empty();
    let r = splice(
        ip,
        &legs,
        client,
        upstream,
        reply,
        &mut reply_sent,
        client_prefix,
        &mut moved,
    )
    .await;
    let _ = repair::set_keepalive(client.as_fd(), None);
    let _ = repair::set_keepalive(upstream.as_fd(), None);
    // The end of the reply written at an early take-over, until the client acknowledged it.
    let reply_end = match r {
        Ok(end) => end,
        Err(Stop::Decline(reason)) => {
            remove(ip, keys);
            // Only the late take-over declines, and it wrote the whole prefix first (its
            // bytes are counted in `moved`).
            return Err(Declined {
                prefix_sent: client_prefix.len(),
                moved,
                reply_sent,
                ..declined(reason)
            });
        }
        Err(Stop::End(up, end)) => {
            remove(ip, keys);
            let (mine, other) = (outcome(0, end), outcome(0, End::Aborted));
            let (mut u, mut d) = if up { (mine, other) } else { (other, mine) };
            (u.bytes, d.bytes) = moved;
            return Ok((TunnelOutcome { up: u, down: d }, false));
        }
    };
    let early = reply_end.is_some();
    tracing::debug!(
        client = %legs.client,
        upstream = %legs.upstream,
        user_space_bytes = moved.0 + moved.1,
        early,
        "ipsplice: spliced"
    );
    pace.attach(ip, keys, &slots, Path::of(&legs));
    let ended = watch::watch(ip, keys, client, reply_end, idle, cut).await;
    pace.detach();
    guard.disarm();
    let ending = match ended.up {
        End::Idle => cleanup::Ending::Idle,
        End::Eof => cleanup::Ending::Fins,
        _ => cleanup::Ending::Other,
    };
    cleanup::release(ip, keys, ending, slots);
    let o = TunnelOutcome {
        up: outcome(moved.0 + ended.client.bytes, ended.up),
        down: outcome(moved.1 + ended.upstream.bytes, ended.down),
    };
    Ok((o, early))
}
