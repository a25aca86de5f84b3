//! The `ipsplice` engine: a whole tunnel handed to the TC program of `splicer-bpf`, which
//! rewrites each packet of one TCP connection into the other and forwards it like a router
//! (seed 003). The endpoints then talk TCP end to end: losses are recovered by them, not by
//! the proxy, and the proxy's sockets see nothing more.
//!
//! Taking over a tunnel (kernel-notes has the traps):
//! 1. Check what cannot be bridged: IPv6, a peer on this host, a leg already half-closed,
//!    timestamps or ECN on one leg only, a leg whose MSS the other cannot take. The engine
//!    declines and the caller runs `pipe`, with the reason in the access log.
//! 2. OBSERVE: the program passes both legs' packets to the sockets and records each
//!    peer's last TSval (no socket option tells it) while the proxy relays in user space
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

use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use splicer_bpf::ipsplice::{
    monotonic_ns, Flow, FlowKey, Mode, FLAG_FIN, FLAG_RST, SEEN_ACK, SEEN_TSVAL,
};
use splicer_bpf::Ipsplice;
use splicer_sys::repair::{self, Queue};
use splicer_sys::sock::{outq_bytes, readable_bytes, set_linger_zero, tcp_info, TcpInfo};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::splice::{End, Outcome};
use crate::tunnel::TunnelOutcome;
use crate::Engine;

const TCP_ESTABLISHED: u8 = 1;
pub(crate) const OPT_TIMESTAMPS: u8 = 1;
const OPT_ECN: u8 = 8;
/// `TCPI_OPT_USEC_TS`: TSvals in µs (a route attribute); the clock learning of the early
/// take-over counts in ms.
const OPT_USEC_TS: u8 = 64;
/// Bytes of TCP options in every segment when timestamps are on.
pub(crate) const TS_OPTION: u32 = 12;

/// Pause before a second forced attempt (doubled before the third): a bulk tunnel is frozen
/// at once, and again only after the user-space relay has run this long.
const RETRY_AFTER: Duration = Duration::from_millis(200);
/// Buffers (64 KiB) moved per direction between two looks at the take-over's conditions.
const PUMP_READS: usize = 4;
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
/// With no packet seen from a peer after this, ask it for one (a keepalive probe).
const NUDGE_AFTER: Duration = Duration::from_millis(100);
/// How often a spliced pair's entries are looked at.
const WATCH_TICK: Duration = Duration::from_millis(100);
/// How long entries stay after a FIN both ways or a reset, for the last ACKs and resent
/// FINs to pass.
const LINGER: Duration = Duration::from_secs(1);
/// How often the entries are looked at while the client has not acknowledged the reply
/// written at an early take-over: the client socket is forgotten as soon as it has, well
/// before its retransmission timer (200 ms at least) would resend the reply.
const REPLY_TICK: Duration = Duration::from_millis(2);

/// Why the engine declined; see `sockmap::Declined`.
#[derive(Debug)]
pub(crate) struct Declined {
    pub reason: String,
    /// Bytes already moved in user space during the take-over (prefix included).
    pub up: u64,
    pub down: u64,
    /// Whether the engine already wrote the reply owed to the client.
    pub reply_sent: bool,
}

fn declined(reason: impl Into<String>) -> Declined {
    Declined {
        reason: format!("ipsplice: {}", reason.into()),
        up: 0,
        down: 0,
        reply_sent: false,
    }
}

fn v4(a: io::Result<SocketAddr>) -> Option<SocketAddrV4> {
    match a.ok()? {
        SocketAddr::V4(a) => Some(a),
        SocketAddr::V6(a) => a
            .ip()
            .to_ipv4_mapped()
            .map(|ip| SocketAddrV4::new(ip, a.port())),
    }
}

/// The two legs' addresses and interfaces, once eligibility is checked.
struct Legs {
    /// Client leg: the client's and the proxy's address, the interface toward the client.
    client: SocketAddrV4,
    client_local: SocketAddrV4,
    client_if: u32,
    upstream: SocketAddrV4,
    upstream_local: SocketAddrV4,
    upstream_if: u32,
    a: TcpInfo,
    b: TcpInfo,
}

impl Legs {
    /// Packets from the client, and from the upstream, as they reach the proxy.
    fn keys(&self) -> (FlowKey, FlowKey) {
        (
            FlowKey::new(self.client, self.client_local),
            FlowKey::new(self.upstream, self.upstream_local),
        )
    }
}

/// Step 1: what cannot be bridged, and where each leg's packets arrive.
fn eligible(client: &TcpStream, upstream: &TcpStream) -> Result<Legs, Declined> {
    let (Some(c), Some(cl), Some(u), Some(ul)) = (
        v4(client.peer_addr()),
        v4(client.local_addr()),
        v4(upstream.peer_addr()),
        v4(upstream.local_addr()),
    ) else {
        return Err(declined("IPv6 is not supported yet"));
    };
    // Loopback first: it needs no look at the interfaces.
    let local = if c.ip().is_loopback() || u.ip().is_loopback() {
        Vec::new()
    } else {
        splicer_sys::net::local_addresses().unwrap_or_default()
    };
    for p in [c.ip(), u.ip()] {
        if p.is_loopback() || local.contains(&std::net::IpAddr::V4(*p)) {
            return Err(declined(format!(
                "peer {p} is on this host (no interface to splice on)"
            )));
        }
    }
    let routes = crate::route::routes().map_err(|e| declined(format!("routes: {e}")))?;
    let iface = |p: &std::net::Ipv4Addr| -> Result<u32, Declined> {
        let r = crate::route::lookup(&routes, *p)
            .ok_or_else(|| declined(format!("no route to {p}")))?;
        splicer_sys::net::ifindex(&r.iface)
            .map_err(|e| declined(format!("interface {}: {e}", r.iface)))
    };
    let (client_if, upstream_if) = (iface(c.ip())?, iface(u.ip())?);
    let (a, b) = match (tcp_info(client.as_fd()), tcp_info(upstream.as_fd())) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return Err(declined(format!("TCP_INFO: {e}"))),
    };
    if a.state != TCP_ESTABLISHED || b.state != TCP_ESTABLISHED {
        return Err(declined("a side already half-closed before the splice"));
    }
    if (a.options ^ b.options) & OPT_TIMESTAMPS != 0 {
        return Err(declined("TCP timestamps on one leg only"));
    }
    if (a.options ^ b.options) & OPT_ECN != 0 {
        return Err(declined("ECN on one leg only"));
    }
    // Each endpoint sends segments as large as the proxy's leg allowed it: the other leg
    // must take them (the MSS cannot change in flight; seed 003 §3.4).
    let opt = if a.options & OPT_TIMESTAMPS != 0 {
        TS_OPTION
    } else {
        0
    };
    if a.snd_mss + opt < b.advmss || b.snd_mss + opt < a.advmss {
        return Err(declined(format!(
            "MSS differs between legs (client leg sends {} and takes {}, upstream leg sends {} and takes {})",
            a.snd_mss, a.advmss, b.snd_mss, b.advmss
        )));
    }
    Ok(Legs {
        client: c,
        client_local: cl,
        client_if,
        upstream: u,
        upstream_local: ul,
        upstream_if,
        a,
        b,
    })
}

/// Nothing unread, unacknowledged or out of order on the socket, and still established.
fn quiet(s: &TcpStream) -> bool {
    let fd = s.as_fd();
    readable_bytes(fd).is_ok_and(|n| n == 0)
        && outq_bytes(fd).is_ok_and(|n| n == 0)
        && repair::rmem_alloc(fd).is_ok_and(|n| n == 0)
        && tcp_info(fd).is_ok_and(|i| i.state == TCP_ESTABLISHED)
}

/// What the user-space part of the take-over ran into.
enum Pumped {
    Moved(u64),
    /// The source sent FIN (after this many bytes): the tunnel can no longer be spliced.
    Eof(u64),
    /// Reading the source failed.
    Source(io::Error),
    /// Writing the destination failed.
    Destination(io::Error),
}

/// Moves what is readable now from `from` to `to` (the take-over's user-space relay), at
/// most [`PUMP_READS`] buffers, so that a stream that never pauses still lets the take-over
/// look at its conditions.
async fn pump(from: &TcpStream, to: &TcpStream, buf: &mut [u8]) -> Pumped {
    let mut moved = 0u64;
    for _ in 0..PUMP_READS {
        match from.try_read(buf) {
            Ok(0) => return Pumped::Eof(moved),
            Ok(n) => {
                let mut data = &buf[..n];
                while !data.is_empty() {
                    if let Err(e) = to.writable().await {
                        return Pumped::Destination(e);
                    }
                    match to.try_write(data) {
                        Ok(w) => data = &data[w..],
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Pumped::Destination(e),
                    }
                }
                moved += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Pumped::Moved(moved),
            Err(e) => return Pumped::Source(e),
        }
    }
    Pumped::Moved(moved)
}

/// The user-space relay of the take-over, both ways, once; `Err` is how the tunnel ends
/// or why it must be left to another engine.
async fn pump_both(
    client: &TcpStream,
    upstream: &TcpStream,
    buf: &mut [u8],
    moved: &mut (u64, u64),
) -> Result<(), Stop> {
    for (from, to, up) in [(client, upstream, true), (upstream, client, false)] {
        match pump(from, to, buf).await {
            Pumped::Moved(n) => {
                if up {
                    moved.0 += n
                } else {
                    moved.1 += n
                }
            }
            Pumped::Eof(n) => {
                if up {
                    moved.0 += n
                } else {
                    moved.1 += n
                }
                return Err(Stop::Decline(
                    "a side half-closed during the take-over".into(),
                ));
            }
            Pumped::Source(e) => {
                let _ = set_linger_zero(to.as_fd());
                return Err(Stop::End(up, End::Source(e.kind())));
            }
            Pumped::Destination(e) => {
                let _ = set_linger_zero(from.as_fd());
                return Err(Stop::End(up, End::Destination(e.kind())));
            }
        }
    }
    Ok(())
}

enum Stop {
    Decline(String),
    /// The direction (`true`: up) ended with this before the take-over.
    End(bool, End),
}

/// Sets both entries' mode, keeping what the program recorded.
fn set_mode(ip: &Ipsplice, keys: (FlowKey, FlowKey), mode: Mode) {
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

/// Step 3's end: snapshot both sockets in repair mode and install the active mappings.
/// `Ok(false)`: not quiet after all (the caller unfreezes and carries on). `Err`: the
/// mappings were installed but a byte slipped into a socket meanwhile; both sides must be
/// reset.
fn activate(
    ip: &Ipsplice,
    legs: &Legs,
    client: &TcpStream,
    upstream: &TcpStream,
) -> Result<bool, String> {
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
    let mut up = mapping(fa, &leg_a, &leg_b, legs.upstream_if);
    up.rewrite_to(legs.upstream_local, legs.upstream);
    let mut down = mapping(fb, &leg_b, &leg_a, legs.client_if);
    down.rewrite_to(legs.client_local, legs.client);
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
        return Err("bytes reached the proxy's socket during the snapshot".into());
    }
    Ok(true)
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

/// One leg's state at the snapshot.
struct Snapshot {
    /// Next sequence number expected from the peer, and the next one to send to it.
    rcv: u32,
    snd: u32,
    /// The proxy socket's TSval now, and the last TSval seen from the peer.
    ts: u32,
    peer_ts: u32,
    info: TcpInfo,
}

/// The active entry for packets arriving on leg `from` and sent on leg `to` (`observed`
/// is the entry as the program left it). The sender's bytes continue the proxy's stream
/// on `to`; its ACKs and SACK edges acknowledge what `to`'s peer sent; its TSvals continue
/// the proxy's clock on `to`, and its echoes go back to `to`'s peer's clock (the inverse of
/// the other direction's TSval mapping); its windows are rescaled from its own scale to
/// the one `to`'s peer expects from the proxy.
fn mapping(observed: Flow, from: &Snapshot, to: &Snapshot, oif: u32) -> Flow {
    let mut f = observed;
    f.oif = oif;
    f.seq_delta = to.snd.wrapping_sub(from.rcv);
    f.ack_delta = to.rcv.wrapping_sub(from.snd);
    f.tsval_delta = to.ts.wrapping_sub(from.peer_ts);
    f.tsecr_delta = to.peer_ts.wrapping_sub(from.ts);
    f.wscale_in = from.info.snd_wscale;
    f.wscale_out = to.info.rcv_wscale;
    // Bytes are counted, and idleness measured, from here on (an early take-over has seen
    // no packet yet).
    f.last_ns = monotonic_ns();
    f.seq_max = from.rcv;
    f.seen |= splicer_bpf::ipsplice::SEEN_SEQ;
    f.bytes = 0;
    f.flags = 0;
    f.set_mode(Mode::Active);
    f
}

fn outcome(bytes: u64, end: End) -> Outcome {
    Outcome {
        engine: Engine::Ipsplice,
        fallback: None,
        bytes,
        end,
    }
}

/// Removes both entries now.
fn remove(ip: &Ipsplice, keys: (FlowKey, FlowKey)) {
    ip.remove(&keys.0);
    ip.remove(&keys.1);
}

/// Removes a tunnel's entries when dropped while armed.
struct Guard<'a> {
    ip: &'a Ipsplice,
    keys: (FlowKey, FlowKey),
    armed: bool,
}

impl Guard<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if self.armed {
            remove(self.ip, self.keys);
        }
    }
}

/// Runs the tunnel in the kernel, with whether it was spliced before the reply; `Err` when
/// the engine declined (the caller carries on in user space, the bytes already moved
/// counted, and writes `reply` unless it was sent).
/// `reply` is what the client still waits for (the SOCKS reply, `200 Connection
/// established`): with nothing else in flight the tunnel is spliced before it is written
/// (the early take-over), otherwise it is written first and the tunnel taken over later.
pub(crate) async fn tunnel(
    ip: &Arc<Ipsplice>,
    client: &TcpStream,
    upstream: &TcpStream,
    reply: &[u8],
    client_prefix: &[u8],
    idle: Option<Duration>,
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
    if let Err(e) = ip
        .set(keys.0, Flow::observing())
        .and_then(|()| ip.set(keys.1, Flow::observing()))
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
    let mut reply_end = match r {
        Ok(end) => end,
        Err(Stop::Decline(reason)) => {
            remove(ip, keys);
            let mut d = declined(reason);
            (d.up, d.down) = moved;
            d.reply_sent = reply_sent;
            return Err(d);
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
    // Step 4: watch the pair until it ends.
    let idle_ns = idle.map(|d| d.as_nanos() as u64);
    let (up_end, down_end, fa, fb) = loop {
        tokio::time::sleep(if reply_end.is_some() {
            REPLY_TICK
        } else {
            WATCH_TICK
        })
        .await;
        let (Some(fa), Some(fb)) = (ip.get(&keys.0), ip.get(&keys.1)) else {
            break (End::Aborted, End::Aborted, Flow::default(), Flow::default());
        };
        if let Some(end) = reply_end {
            // The client's ACKs go to the server now, so the proxy's socket never learns
            // that its reply arrived: once the program saw it acknowledged, the socket is
            // forgotten, or its timer would resend the reply. Until then it resends a lost
            // reply itself.
            if fa.seen & SEEN_ACK != 0 && !before(fa.ack_max, end) {
                let _ = repair::forget(client.as_fd());
                reply_end = None;
            }
        }
        if fa.flags & FLAG_RST != 0 {
            break (
                End::Source(io::ErrorKind::ConnectionReset),
                End::Aborted,
                fa,
                fb,
            );
        }
        if fb.flags & FLAG_RST != 0 {
            break (
                End::Aborted,
                End::Source(io::ErrorKind::ConnectionReset),
                fa,
                fb,
            );
        }
        if fa.flags & fb.flags & FLAG_FIN != 0 {
            break (End::Eof, End::Eof, fa, fb);
        }
        let last = fa.last_ns.max(fb.last_ns);
        if idle_ns.is_some_and(|i| monotonic_ns().saturating_sub(last) >= i) {
            break (End::Idle, End::Idle, fa, fb);
        }
    };
    if reply_end.is_some() {
        // Never acknowledged: closing the socket later must send nothing either.
        let _ = repair::forget(client.as_fd());
    }
    guard.disarm();
    if up_end == End::Idle {
        // Like a NAT's expiry: the mapping goes now; the endpoints' next packets reach
        // the proxy, which has no socket for them any more and answers with a reset.
        remove(ip, keys);
    } else {
        let ip = Arc::clone(ip);
        tokio::spawn(async move {
            tokio::time::sleep(LINGER).await;
            remove(&ip, keys);
        });
    }
    let o = TunnelOutcome {
        up: outcome(moved.0 + fa.bytes, up_end),
        down: outcome(moved.1 + fb.bytes, down_end),
    };
    Ok((o, early))
}

/// `a` comes before `b` in sequence space.
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Steps 2 and 3, early or late; `Ok(Some(end))` when spliced early, with the end of the
/// reply written then.
#[allow(clippy::too_many_arguments)]
async fn splice(
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

/// The early take-over, in seed 003's order (kernel-notes): while the client waits for its
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
    let mut up = mapping(fa, &leg_a, &leg_b, legs.upstream_if);
    up.rewrite_to(legs.upstream_local, legs.upstream);
    let mut down = mapping(fb, &leg_b, &leg_a, legs.client_if);
    down.rewrite_to(legs.client_local, legs.client);
    if legs.a.options & OPT_TIMESTAMPS != 0 {
        // Until an endpoint's first packet tells its clock, echoes of the proxy's own
        // TSvals pass from one proxy socket's clock to the other's.
        up.learn_tsval(off_b);
        up.tsecr_delta = off_b.wrapping_sub(off_a);
        down.learn_tsval(off_a);
        down.tsecr_delta = off_a.wrapping_sub(off_b);
    }
    if ip.set(keys.0, up).is_err() || ip.set(keys.1, down).is_err() {
        return not_now();
    }
    let after = (
        repair::queue_seq(a, Queue::Recv),
        repair::queue_seq(b, Queue::Recv),
    );
    if after.0.ok() != Some(rcv_a) || after.1.ok() != Some(rcv_b) {
        return Err(reset_both(
            ip,
            keys,
            client,
            upstream,
            "bytes reached the proxy's socket during the snapshot".into(),
        ));
    }
    // The upstream socket stays in repair mode (its port reserved, silent at close); the
    // client socket sends the reply, and resends it if it is lost.
    if let Err(e) = repair::leave_repair_quietly(a) {
        return Err(reset_both(
            ip,
            keys,
            client,
            upstream,
            format!("leaving repair mode: {e}"),
        ));
    }
    match client.try_write(reply) {
        Ok(n) if n == reply.len() => Ok(Some(reply_end)),
        Ok(n) => Err(reset_both(
            ip,
            keys,
            client,
            upstream,
            format!("reply cut short ({n} of {} bytes)", reply.len()),
        )),
        Err(e) => Err(reset_both(
            ip,
            keys,
            client,
            upstream,
            format!("writing the reply: {e}"),
        )),
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
            // A silent peer sends nothing to learn its clock from: a keepalive probe makes
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
                "no packet from a peer to learn its timestamp clock from"
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

/// The mappings were installed but bytes were acknowledged outside them: reset both ends
/// (out of repair mode, so closing sends RST) rather than deliver a stream with a hole.
fn reset_both(
    ip: &Ipsplice,
    keys: (FlowKey, FlowKey),
    client: &TcpStream,
    upstream: &TcpStream,
    why: String,
) -> Stop {
    remove(ip, keys);
    for s in [client, upstream] {
        let _ = repair::set_repair(s.as_fd(), false);
        let _ = set_linger_zero(s.as_fd());
    }
    tracing::warn!(reason = %why, "ipsplice: tunnel reset to keep the streams whole");
    Stop::End(true, End::Source(io::ErrorKind::InvalidData))
}
