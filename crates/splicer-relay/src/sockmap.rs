//! The `sockmap` engine: a whole tunnel handed to the kernel. Both sockets go into the
//! SOCKHASH of `splicer-bpf`, whose verdict program redirects every arriving byte to the
//! other socket's send queue; the proxy only waits for the ends. The traps kernel-notes
//! records, and how this handles them:
//! - bytes queued before insertion are not forwarded until another packet arrives: after
//!   insertion `SO_RCVLOWAT` is set, which makes the kernel process the queue;
//! - a spliced socket can look readable while `recv` has nothing: only end-of-stream
//!   (`RDHUP`) and errors are acted upon, readable readiness is cleared;
//! - forwarding is asynchronous, so a FIN is passed on (`shutdown(SHUT_WR)`) only once the
//!   destination's peer has acknowledged every byte redirected to it (`tcpi_bytes_acked`
//!   against `tcpi_bytes_received`, from baselines taken at the start).

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use splicer_bpf::Sockmap;
use splicer_sys::sock::{
    outq_bytes, readable_bytes, receive_buffer, recv_now, set_linger_zero, set_rcvlowat,
    shutdown_write, tcp_info, TcpInfo,
};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::splice::{End, Outcome};
use crate::tunnel::TunnelOutcome;
use crate::Engine;

/// How often counters are looked at while a FIN waits for acknowledgements.
const TICK: Duration = Duration::from_millis(20);
/// How often otherwise (idleness, progress): two `TCP_INFO` calls per tunnel each time, so
/// not every 20 ms for thousands of quiet tunnels.
const SLOW_TICK: Duration = Duration::from_millis(500);

const TCP_ESTABLISHED: u8 = 1;
/// How long bytes may be missing from the destination socket while a FIN waits before the
/// tunnel is reset: the redirect queue drains in milliseconds when the socket has room.
const LOST_AFTER: Duration = Duration::from_secs(1);

/// One direction of the tunnel.
struct Dir<'a> {
    to: &'a TcpStream,
    /// `from`'s bytes received and `to`'s bytes acknowledged when the splice began.
    base_received: u64,
    base_acked: u64,
    /// Bytes written by the proxy itself before the splice (the prefix).
    written: u64,
    /// The source sent FIN; waiting for the destination's acknowledgements to pass it on.
    fin: bool,
    /// Since when, while a FIN waits, bytes were missing from the destination's TCP: not
    /// acknowledged and not in its send queue either.
    missing_since: Option<Instant>,
    end: Option<End>,
}

impl Dir<'_> {
    /// Data bytes that arrived on `from` since the start (a received FIN counts one in
    /// the kernel's figure and is taken off).
    fn arrived(&self, from: &TcpInfo) -> u64 {
        let fin = u64::from(self.fin && from.state != TCP_ESTABLISHED);
        from.bytes_received
            .saturating_sub(self.base_received)
            .saturating_sub(fin)
    }
    fn bytes(&self, from: &TcpInfo) -> u64 {
        self.written + self.arrived(from)
    }
}

/// Raises `SO_RCVLOWAT` so the kernel does not hand `s`'s queue to the verdict program
/// while its pair is being set up. The mark stays well under the receive buffer: the kernel
/// grows the buffer (and clamps the window) for a mark it could not hold, and that change
/// would outlive the set-up. `queued` bytes are already there and must not reach it.
fn hold_back(s: &TcpStream, queued: u64) {
    let buffer = receive_buffer(s.as_fd()).unwrap_or(0) as u64;
    let mark = (buffer / 8).max(queued + 1).min(i32::MAX as u64);
    let _ = set_rcvlowat(s.as_fd(), mark as i32);
}

/// `TCP_INFO` and the bytes queued unread, taken at one moment: the pair is read again
/// while bytes keep arriving in between (nothing reads the socket meanwhile, so an
/// unchanged queue means no byte arrived). Without that, a byte arriving between the two
/// calls is counted in one and not the other, and the FIN is passed on too early or never.
fn snapshot(s: &TcpStream) -> io::Result<(TcpInfo, u64)> {
    for _ in 0..100 {
        let before = readable_bytes(s.as_fd())?;
        let i = info(s)?;
        if readable_bytes(s.as_fd())? == before && i.bytes_received >= before as u64 {
            return Ok((i, before as u64));
        }
    }
    Err(io::Error::other(
        "TCP_INFO: bytes kept arriving while it was read",
    ))
}

fn info(s: &TcpStream) -> io::Result<TcpInfo> {
    tcp_info(s.as_fd())
}

/// Waits for end of stream or an error on `s`; plain readable readiness is cleared.
async fn closed(s: &TcpStream) -> io::Result<()> {
    loop {
        let r = s.ready(Interest::READABLE).await?;
        if r.is_read_closed() || r.is_error() {
            return Ok(());
        }
        let _ = s.try_io(Interest::READABLE, || {
            Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
        });
    }
}

/// Why the engine declined, before the kernel redirected anything: the caller runs another
/// engine (and logs the reason) for the rest.
#[derive(Debug)]
pub(crate) struct Declined {
    pub reason: String,
    /// How much of the client prefix was already written upstream.
    pub prefix_sent: usize,
    /// Whether the reply owed to the client was written.
    pub reply_sent: bool,
}

fn declined(reason: String, prefix_sent: usize) -> Declined {
    Declined {
        reason,
        prefix_sent,
        reply_sent: false,
    }
}

/// Runs the tunnel in the kernel. `reply` (owed to the client before the tunnel) is written
/// once the upstream is in the map and before the client is, when the client has sent
/// nothing beyond its request (it waits for the reply, so it cannot send while the pair
/// is being set up). Otherwise it is written first. `Declined` says whether it was.
pub(crate) async fn tunnel(
    map: &Sockmap,
    client: &TcpStream,
    upstream: &TcpStream,
    reply: &[u8],
    client_prefix: &[u8],
    idle: Option<Duration>,
) -> Result<TunnelOutcome, Declined> {
    // Bytes already received but not read are redirected once the socket is in the map:
    // they count as arriving after the start.
    let ((c0, c_queued), (u0, u_queued)) = match (snapshot(client), snapshot(upstream)) {
        (Ok(c), Ok(u)) => (c, u),
        (Err(e), _) | (_, Err(e)) => return Err(declined(format!("sockmap: {e}"), 0)),
    };
    // A socket that already got a FIN cannot enter a sockmap; find out before the other one
    // goes in (a socket taken out of the map again was seen to fail the fallback engine).
    if c0.state != TCP_ESTABLISHED || u0.state != TCP_ESTABLISHED {
        return Err(declined(
            "sockmap: a side already half-closed before the splice".into(),
            0,
        ));
    }
    let reply_after = !reply.is_empty() && client_prefix.is_empty() && c_queued == 0;
    if !reply_after {
        if let Err(e) = crate::io::write_all(client, reply).await {
            let _ = set_linger_zero(upstream.as_fd());
            return Ok(TunnelOutcome {
                up: outcome(0, End::Aborted),
                down: outcome(0, End::Destination(e.kind())),
            });
        }
    }
    // Bytes the proxy itself wrote before (the SOCKS reply, the CONNECT 200) and not yet
    // acknowledged will be acknowledged later: they are not redirected bytes.
    let in_flight = |s: &TcpStream| outq_bytes(s.as_fd()).unwrap_or(0) as u64;
    let (c_flight, u_flight) = (in_flight(client), in_flight(upstream));
    let mut up = Dir {
        to: upstream,
        base_received: c0.bytes_received - c_queued,
        base_acked: u0.bytes_acked + u_flight,
        written: client_prefix.len() as u64,
        fin: false,
        missing_since: None,
        end: None,
    };
    // The reply, when written after the insertion, is acknowledged later too.
    let reply_later = if reply_after { reply.len() as u64 } else { 0 };
    let mut down = Dir {
        to: client,
        base_received: u0.bytes_received - u_queued,
        base_acked: c0.bytes_acked + c_flight + reply_later,
        written: 0,
        fin: false,
        missing_since: None,
        end: None,
    };
    // The prefix goes in user space first, so it precedes every byte the kernel redirects.
    if let Err(e) = crate::io::write_all(upstream, client_prefix).await {
        // Nothing redirected yet, but the upstream failed: that is the tunnel's end.
        let _ = set_linger_zero(client.as_fd());
        return Ok(TunnelOutcome {
            up: outcome(0, End::Destination(e.kind())),
            down: outcome(0, End::Aborted),
        });
    }
    // While only one socket is in the map, bytes the program handles on it cannot be
    // redirected (their peer is missing) and would have to be kept for the proxy, and the
    // pair reset to keep their order. Order: the upstream first, then the reply owed, then
    // the client. What the client sends waits in its queue until it is in (it waits for the
    // reply anyway). What the server sends after the upstream is in is kept from the
    // program until the pair is complete: the kernel hands a socket's queue to it only once
    // `SO_RCVLOWAT` bytes are there (or a FIN, or memory pressure), and the flush below
    // lowers that to 1. A server that sends and half-closes meanwhile has its bytes taken
    // over (`take_over_tail`). Left: a server that sends more than the mark in the
    // microseconds between the two insertions, and keeps its connection open (reset).
    hold_back(upstream, u_queued);
    let mut reply_written = !reply_after;
    let mut write_reply = || {
        if !reply_after {
            return Ok(());
        }
        let n = client.try_write(reply)?;
        reply_written = true;
        if n < reply.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "reply cut short"));
        }
        Ok(())
    };
    let spliced = map.splice_with(upstream.as_fd(), client.as_fd(), &mut write_reply);
    // Done with or without the pair: the fallback engines need the mark back at 1 too.
    // Lowering it makes the kernel look at the queues again, which also flushes the bytes
    // that arrived before the insertion (kernel-notes).
    let _ = set_rcvlowat(client.as_fd(), 1);
    let _ = set_rcvlowat(upstream.as_fd(), 1);
    let (pair, kept) = match spliced {
        Ok(p) => p,
        Err(splicer_bpf::Error::KeptThenFailed { kept, source }) => {
            // The server's bytes went with the upstream socket's map-side queue: neither
            // this engine nor another can deliver them now.
            tracing::warn!(
                kept,
                "sockmap: {source} during set-up, with bytes kept; tunnel reset"
            );
            return Ok(reset_both(client, upstream, up.written));
        }
        Err(e) => {
            return Err(Declined {
                reply_sent: reply_written,
                ..declined(format!("sockmap: {e}"), client_prefix.len())
            })
        }
    };
    // Skbs kept so far, left out of the check in the loop once taken over.
    let mut kept_before = 0;
    if kept > 0 {
        match take_over_tail(map, pair, client, upstream, &mut down).await {
            Some(n) => {
                tracing::debug!(
                    bytes = n,
                    "sockmap: the server's last bytes, sent during set-up, relayed by the proxy"
                );
                kept_before = kept;
            }
            None => {
                // Bytes arrived on the upstream in the microseconds between the two
                // insertions and were kept for the proxy, and more may follow: the order
                // cannot be guaranteed, so both sides see a reset rather than wrong data.
                map.unsplice(pair);
                tracing::warn!("sockmap: bytes arrived during set-up; tunnel reset to keep order");
                return Ok(reset_both(client, upstream, up.written));
            }
        }
    }
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
        // Bytes the program could not redirect (a failed cut, a peer gone from the map)
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
    Ok(TunnelOutcome {
        up: outcome(up.bytes(&ci), up.end.unwrap_or(End::Aborted)),
        down: outcome(down.bytes(&ui), down.end.unwrap_or(End::Aborted)),
    })
}

/// Resets both sockets of a tunnel that cannot start: the upstream's bytes were kept.
fn reset_both(client: &TcpStream, upstream: &TcpStream, up_written: u64) -> TunnelOutcome {
    let _ = set_linger_zero(client.as_fd());
    let _ = set_linger_zero(upstream.as_fd());
    TunnelOutcome {
        up: outcome(up_written, End::Aborted),
        down: outcome(0, End::Source(io::ErrorKind::InvalidData)),
    }
}

/// The server sent its last bytes and half-closed in the microseconds between the two
/// insertions (a banner and a close): the program kept them on the upstream socket, whose
/// peer was not in the map yet, and keeps every later skb of it. After the FIN nothing more
/// can come, so the proxy relays them itself: it reads them from the socket (the kernel
/// serves them from its map-side queue) and writes them to the client, after the reply.
/// The client's direction goes on in the kernel. Returns the bytes relayed, or `None` when
/// that is not the case (the upstream is still open, or the client's bytes were kept).
async fn take_over_tail(
    map: &Sockmap,
    pair: splicer_bpf::sockmap::Pair,
    client: &TcpStream,
    upstream: &TcpStream,
    down: &mut Dir<'_>,
) -> Option<u64> {
    let [up_kept, client_kept] = map.kept_each(pair);
    let ui = info(upstream).ok()?;
    if client_kept > 0 || up_kept == 0 || ui.state == TCP_ESTABLISHED {
        return None;
    }
    down.fin = true;
    let expected = down.arrived(&ui);
    let deadline = Instant::now() + LOST_AFTER;
    let mut buf = vec![0u8; 64 * 1024];
    let mut relayed = 0u64;
    // Bounded: the bytes are all in the kernel already; a skb still on its way through the
    // map's work queue shows up within milliseconds.
    while relayed < expected {
        match recv_now(upstream.as_fd(), &mut buf) {
            Ok(n) if n > 0 => {
                crate::io::write_all(client, &buf[..n]).await.ok()?;
                relayed += n as u64;
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
        if relayed < expected {
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    Some(relayed)
}

/// The socket's pending error, if it is one. After the relay shut a socket's sending side
/// (every redirected byte acknowledged first), the kernel's redirect path may still try to
/// pass it the peer's zero-length FIN and record `EPIPE`: no data was lost, so that is
/// not an error.
fn real_error(s: &TcpStream, write_side_shut: bool) -> Option<io::Error> {
    let e = s.take_error().ok().flatten()?;
    (!(write_side_shut && e.kind() == io::ErrorKind::BrokenPipe)).then_some(e)
}

fn outcome(bytes: u64, end: End) -> Outcome {
    Outcome {
        engine: Engine::Sockmap,
        fallback: None,
        bytes,
        end,
    }
}
