//! Steps 2 and 3 of a take-over, early or late: freeze, snapshot both sockets in repair
//! mode, install the active entries. A late take-over relays in user space meanwhile
//! (`pump`), and forces a bulk tunnel that is never quiet (`drain`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use splicer_bpf::ipsplice::{Flow, FlowKey, Mode, SEEN_TSVAL};
use splicer_bpf::Ipsplice;
use splicer_sys::process::monotonic_ns;
use splicer_sys::repair::{self, Queue};
use splicer_sys::sock::{outq_bytes, readable_bytes, set_linger_zero};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::cleanup::{reset_both, Torn};
use super::eligible::Legs;
use super::mapping::{mapping, proxy_echo_delta, Snapshot};
use super::pump::{pump_both, quiet};
use super::Stop;
use crate::outcome::End;
use crate::tcp::{OPT_TIMESTAMPS, OPT_USEC_TS};

/// Pause before a second forced attempt (doubled before the third): a bulk tunnel is frozen
/// at once, and again only after the user-space relay has run this long.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// How long a frozen tunnel may take to drain before the attempt is abandoned.
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// Bytes relayed during the take-over beyond which a tunnel counts as bulk and may be
/// frozen without a quiet moment. A request/response tunnel that never pauses is not: the
/// exchange in flight would be dropped and wait for a retransmission timeout.
const BULK: u64 = 256 * 1024;

/// Forced attempts before the engine gives up on a tunnel.
const ATTEMPTS: u32 = 3;

/// The whole take-over, at most; then the tunnel stays with `pipe`.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// With no packet seen from an endpoint after this, ask it for one (a keepalive probe).
const NUDGE_AFTER: Duration = Duration::from_millis(100);

/// Sets both entries' mode, keeping what the program recorded.
pub(super) fn set_mode(ip: &Ipsplice, keys: (FlowKey, FlowKey), mode: Mode) {
    for k in [keys.0, keys.1] {
        if let Some(mut f) = ip.get(&k) {
            f.set_mode(mode);
            let _ = ip.set(k, f);
        }
    }
}

fn observed(ip: &Ipsplice, k: &FlowKey) -> bool {
    ip.get(k).is_some_and(|f| f.seen & SEEN_TSVAL != 0)
}

/// Steps 2 and 3, early or late; `Ok(Some(end))` when spliced early, with the end of the
/// reply written then.
#[allow(clippy::too_many_arguments)]
pub(super) async fn splice(
    ip: &Ipsplice,
    legs: &Legs,
    client: &TcpStream,
    upstream: &TcpStream,
    reply: &[u8],
    reply_sent: &mut bool,
    client_prefix: &[u8],
    moved: &mut (u64, u64),
) -> Result<Option<u32>, Stop> {
    let usec_ts = (legs.a.options | legs.b.options) & OPT_USEC_TS != 0;
    if !*reply_sent && client_prefix.is_empty() && !usec_ts {
        if let Some(end) = early(ip, legs, client, upstream, reply).await? {
            *reply_sent = true;
            return Ok(Some(end));
        }
    }
    if !*reply_sent {
        crate::io::write_all(client, reply)
            .await
            .map_err(|e| Stop::End(false, End::Destination(e.kind())))?;
        *reply_sent = true;
    }
    take_over(ip, legs, client, upstream, client_prefix, moved).await?;
    Ok(None)
}

/// The early take-over, in seed 003's order (docs/kernel-notes.md): while the client waits for its
/// reply and the server for a request, snapshot both quiet sockets, install the mappings
/// counting the reply's bytes as already sent, take the client socket out of repair mode
/// without a window probe, and write the reply. The client's first byte then travels end
/// to end: nothing is relayed in user space and nothing is dropped. The endpoints' clocks
/// are not known yet; the program learns them from their first packets. `Ok(None)`: a
/// socket was not quiet (a server that speaks first); nothing was changed.
async fn early(
    ip: &Ipsplice,
    legs: &Legs,
    client: &TcpStream,
    upstream: &TcpStream,
    reply: &[u8],
) -> Result<Option<u32>, Stop> {
    let keys = legs.keys();
    // Nothing should arrive now; whatever does is dropped and resent by its sender.
    set_mode(ip, keys, Mode::Freeze);
    // A packet the program passed just before may still be on its way up.
    tokio::task::yield_now().await;
    let (a, b) = (client.as_fd(), upstream.as_fd());
    let not_now = || {
        // Quietly: leaving repair mode otherwise sends a window probe, in or out of it.
        let _ = repair::leave_repair_quietly(a);
        let _ = repair::leave_repair_quietly(b);
        set_mode(ip, keys, Mode::Observe);
        Ok(None)
    };
    if !quiet(client) || !quiet(upstream) {
        return not_now();
    }
    if repair::set_repair(a, true).is_err() || repair::set_repair(b, true).is_err() {
        return not_now();
    }
    let Ok([rcv_a, snd_a, rcv_b, snd_b, off_a, off_b]) = sequences(a, b, repair::timestamp_offset)
    else {
        return not_now();
    };
    if !quiet(client) || !quiet(upstream) {
        return not_now();
    }
    let (Some(fa), Some(fb)) = (ip.get(&keys.0), ip.get(&keys.1)) else {
        return not_now();
    };
    let reply_end = snd_a.wrapping_add(reply.len() as u32);
    let leg_a = Snapshot {
        rcv: rcv_a,
        snd: reply_end,
        ts: 0,
        peer_ts: 0,
        info: legs.a,
    };
    let leg_b = Snapshot {
        rcv: rcv_b,
        snd: snd_b,
        ts: 0,
        peer_ts: 0,
        info: legs.b,
    };
    let (mut up, mut down) = entries(legs, (fa, fb), &leg_a, &leg_b);
    if legs.a.options & OPT_TIMESTAMPS != 0 {
        // Until an endpoint's first packet tells its clock, echoes of the proxy's own
        // TSvals pass from one proxy socket's clock to the other's.
        up.learn_tsval(off_b);
        up.tsecr_delta = proxy_echo_delta(off_a, off_b);
        down.learn_tsval(off_a);
        down.tsecr_delta = proxy_echo_delta(off_b, off_a);
    }
    if ip.set(keys.0, up).is_err() || ip.set(keys.1, down).is_err() {
        return not_now();
    }
    let after = (
        repair::queue_seq(a, Queue::Recv),
        repair::queue_seq(b, Queue::Recv),
    );
    if after.0.ok() != Some(rcv_a) || after.1.ok() != Some(rcv_b) {
        return Err(reset_both(ip, keys, client, upstream, Torn::SnapshotRaced));
    }
    // The upstream socket stays in repair mode (its port reserved, silent at close); the
    // client socket sends the reply, and resends it if it is lost.
    if let Err(e) = repair::leave_repair_quietly(a) {
        return Err(reset_both(
            ip,
            keys,
            client,
            upstream,
            Torn::LeavingRepair(e),
        ));
    }
    match client.try_write(reply) {
        Ok(n) if n == reply.len() => Ok(Some(reply_end)),
        Ok(n) => Err(reset_both(
            ip,
            keys,
            client,
            upstream,
            Torn::ReplyCut {
                written: n,
                len: reply.len(),
            },
        )),
        Err(e) => Err(reset_both(ip, keys, client, upstream, Torn::Reply(e))),
    }
}

/// Steps 2 and 3: relay in user space until both sockets can be snapshotted.
async fn take_over(
    ip: &Ipsplice,
    legs: &Legs,
    client: &TcpStream,
    upstream: &TcpStream,
    client_prefix: &[u8],
    moved: &mut (u64, u64),
) -> Result<(), Stop> {
    let keys = legs.keys();
    let timestamps = legs.a.options & OPT_TIMESTAMPS != 0;
    // The prefix goes first, through the proxy's own socket.
    let mut data = client_prefix;
    while !data.is_empty() {
        let w = upstream
            .writable()
            .await
            .and_then(|()| upstream.try_write(data));
        match w {
            Ok(n) => {
                data = &data[n..];
                moved.0 += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => {
                let _ = set_linger_zero(client.as_fd());
                return Err(Stop::End(true, End::Destination(e.kind())));
            }
        }
    }
    let mut buf = vec![0u8; 64 * 1024];
    let start = Instant::now();
    let rtt = Duration::from_micros(u64::from(legs.a.rtt_us.max(legs.b.rtt_us)));
    // Retries of a forced take-over back off; the first comes as soon as the tunnel is bulk.
    let mut forced_at = start;
    let mut attempts = 0;
    let mut nudged = false;
    loop {
        pump_both(client, upstream, &mut buf, moved).await?;
        let seen = !timestamps || (observed(ip, &keys.0) && observed(ip, &keys.1));
        if !seen && !nudged && start.elapsed() >= NUDGE_AFTER {
            // A silent endpoint sends nothing to learn its clock from: a keepalive probe makes
            // it answer within a second.
            for (s, k) in [(client, &keys.0), (upstream, &keys.1)] {
                if !observed(ip, k) {
                    let _ = repair::set_keepalive(s.as_fd(), Some(1));
                }
            }
            nudged = true;
        }
        if seen && quiet(client) && quiet(upstream) {
            set_mode(ip, keys, Mode::Freeze);
            // A packet the program passed just before may still be on its way up.
            tokio::task::yield_now().await;
            match activate(ip, legs, client, upstream) {
                Ok(true) => return Ok(()),
                Ok(false) => set_mode(ip, keys, Mode::Observe),
                Err(e) => return Err(reset_both(ip, keys, client, upstream, e)),
            }
        } else if seen
            && moved.0 + moved.1 >= BULK
            && Instant::now() >= forced_at
            && attempts < ATTEMPTS
        {
            attempts += 1;
            let t = Instant::now();
            let done = drain(ip, legs, client, upstream, &mut buf, moved, rtt).await?;
            tracing::debug!(
                attempt = attempts,
                after_ms = start.elapsed().as_millis() as u64,
                drain_ms = t.elapsed().as_millis() as u64,
                done,
                "ipsplice: forced take-over"
            );
            if done {
                return Ok(());
            }
            forced_at = Instant::now() + RETRY_AFTER * (1 << attempts);
        }
        if start.elapsed() >= SETTLE_LIMIT {
            let why = if seen {
                "the tunnel was never quiet enough to take over"
            } else {
                "no packet from an endpoint to learn its timestamp clock from"
            };
            return Err(Stop::Decline(why.into()));
        }
        tokio::select! {
            _ = client.readable() => {}
            _ = upstream.readable() => {}
            _ = tokio::time::sleep(Duration::from_millis(1)) => {}
        }
    }
}

/// A forced take-over: freeze (new data is dropped, the endpoints resend it later), relay
/// what the sockets already hold, and wait for their acknowledgements. `Ok(false)`: it did
/// not drain in time; the tunnel is unfrozen.
async fn drain(
    ip: &Ipsplice,
    legs: &Legs,
    client: &TcpStream,
    upstream: &TcpStream,
    buf: &mut [u8],
    moved: &mut (u64, u64),
    rtt: Duration,
) -> Result<bool, Stop> {
    let keys = legs.keys();
    set_mode(ip, keys, Mode::Freeze);
    let until = Instant::now() + DRAIN_WAIT + 4 * rtt;
    while Instant::now() < until {
        let before = *moved;
        if let Err(e) = pump_both(client, upstream, buf, moved).await {
            set_mode(ip, keys, Mode::Observe);
            return Err(e);
        }
        if quiet(client) && quiet(upstream) {
            match activate(ip, legs, client, upstream) {
                Ok(true) => return Ok(true),
                Ok(false) => {}
                Err(e) => return Err(reset_both(ip, keys, client, upstream, e)),
            }
        }
        // Keep pumping while the queues hold bytes; then wait for acknowledgements.
        if *moved == before {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    set_mode(ip, keys, Mode::Observe);
    let state = |s: &TcpStream| {
        let fd = s.as_fd();
        (
            readable_bytes(fd).unwrap_or(0),
            outq_bytes(fd).unwrap_or(0),
            repair::rmem_alloc(fd).unwrap_or(0),
        )
    };
    tracing::debug!(
        client = ?state(client),
        upstream = ?state(upstream),
        "ipsplice: a frozen tunnel did not drain in time (unread, unacked, rmem)"
    );
    Ok(false)
}

/// Step 3's end: snapshot both sockets in repair mode and install the active mappings.
/// `Ok(false)`: not quiet after all (the caller unfreezes and carries on). `Err`: the
/// mappings were installed but a byte slipped into a socket meanwhile; both sides must be
/// reset.
fn activate(
    ip: &Ipsplice,
    legs: &Legs,
    client: &TcpStream,
    upstream: &TcpStream,
) -> Result<bool, Torn> {
    let (a, b) = (client.as_fd(), upstream.as_fd());
    if repair::set_repair(a, true).is_err() {
        return Ok(false);
    }
    if repair::set_repair(b, true).is_err() {
        let _ = repair::set_repair(a, false);
        return Ok(false);
    }
    let undo = || {
        let _ = repair::set_repair(a, false);
        let _ = repair::set_repair(b, false);
    };
    let Ok([rcv_a, snd_a, rcv_b, snd_b, ts_a, ts_b]) = sequences(a, b, repair::timestamp) else {
        undo();
        return Ok(false);
    };
    if !quiet(client) || !quiet(upstream) {
        undo();
        return Ok(false);
    }
    let (ka, kb) = legs.keys();
    let (Some(fa), Some(fb)) = (ip.get(&ka), ip.get(&kb)) else {
        undo();
        return Ok(false);
    };
    let leg_a = Snapshot {
        rcv: rcv_a,
        snd: snd_a,
        ts: ts_a,
        peer_ts: fa.last_tsval,
        info: legs.a,
    };
    let leg_b = Snapshot {
        rcv: rcv_b,
        snd: snd_b,
        ts: ts_b,
        peer_ts: fb.last_tsval,
        info: legs.b,
    };
    let (up, down) = entries(legs, (fa, fb), &leg_a, &leg_b);
    if ip.set(ka, up).is_err() || ip.set(kb, down).is_err() {
        set_mode(ip, (ka, kb), Mode::Observe);
        undo();
        return Ok(false);
    }
    // A packet that passed the program just before the freeze could have reached a socket
    // after the snapshot: its bytes were acknowledged by the proxy and are not in the
    // mapping. Only a reset of both sides is honest then.
    let after = (
        repair::queue_seq(a, Queue::Recv),
        repair::queue_seq(b, Queue::Recv),
    );
    if after.0.ok() != Some(rcv_a) || after.1.ok() != Some(rcv_b) {
        return Err(Torn::SnapshotRaced);
    }
    Ok(true)
}

/// The active entries of both directions (packets from the client, from the upstream), from
/// the entries as the program left them and both legs at the snapshot.
fn entries(legs: &Legs, observed: (Flow, Flow), a: &Snapshot, b: &Snapshot) -> (Flow, Flow) {
    let now = monotonic_ns();
    let mut up = mapping(observed.0, a, b, legs.upstream_if, now);
    up.rewrite_to(legs.upstream_local, legs.upstream);
    let mut down = mapping(observed.1, b, a, legs.client_if, now);
    down.rewrite_to(legs.client_local, legs.client);
    (up, down)
}

/// Both sockets' receive and send sequence numbers and `clock` of each (in repair mode):
/// `[rcv_a, snd_a, rcv_b, snd_b, clock_a, clock_b]`.
fn sequences(
    a: BorrowedFd<'_>,
    b: BorrowedFd<'_>,
    clock: fn(BorrowedFd<'_>) -> io::Result<u32>,
) -> io::Result<[u32; 6]> {
    Ok([
        repair::queue_seq(a, Queue::Recv)?,
        repair::queue_seq(a, Queue::Send)?,
        repair::queue_seq(b, Queue::Recv)?,
        repair::queue_seq(b, Queue::Send)?,
        clock(a)?,
        clock(b)?,
    ])
}
