//! Setting a `sockmap` tunnel up: baselines, the prefix, the two insertions with the reply
//! between them, and what the kernel kept for the proxy meanwhile.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use splicer_bpf::sockmap::Pair;
use splicer_bpf::Sockmap;
use splicer_sys::sock::{receive_buffer, recv_now, set_linger_zero, set_rcvlowat, TcpInfo};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::counts::Seen;
use super::counts::{baseline_handed, info, snapshot, Dir};
use super::held::Held;
use super::{declined, outcome, LOST_AFTER};
use crate::engine::Declined;
use crate::outcome::End;
use crate::outcome::TunnelOutcome;
use crate::tcp::TCP_ESTABLISHED;
use crate::tunnel::Start;

/// How a set-up went, when the engine did not decline.
pub(super) enum Setup<'a> {
    /// Both sockets are in the map: the watch goes on from here.
    Spliced(Box<Spliced<'a>>),
    /// The tunnel ended during set-up.
    Ended(TunnelOutcome),
}

/// A tunnel in the kernel.
pub(super) struct Spliced<'a> {
    pub pair: Pair,
    pub up: Dir<'a>,
    pub down: Dir<'a>,
    /// Skbs kept for the proxy during set-up and relayed by it (`take_over_tail`): the watch
    /// acts on kept skbs beyond these.
    pub kept_before: u64,
    /// Both sockets' counters at the start (client, upstream).
    pub start: (TcpInfo, TcpInfo),
}

/// Sets the tunnel up; `reply` and `client_prefix` as for [`super::tunnel`].
pub(super) async fn start<'a>(
    map: &Sockmap,
    start: Start,
    client: &'a TcpStream,
    upstream: &'a TcpStream,
    reply: &[u8],
    client_prefix: &[u8],
    (gate, may_raise): (u64, bool),
) -> Result<Setup<'a>, Declined> {
    // Bytes already received but not read are redirected once the socket is in the map:
    // they count as arriving after the start.
    let ((c0, c_queued), (u0, u_queued)) = match (snapshot(client).await, snapshot(upstream).await)
    {
        (Ok(c), Ok(u)) => (c, u),
        (Err(e), _) | (_, Err(e)) => return Err(declined(e, 0)),
    };
    // A socket that already got a FIN cannot enter a sockmap; find out before the other one
    // goes in (a socket taken out of the map again was seen to fail the fallback engine).
    if c0.state != TCP_ESTABLISHED || u0.state != TCP_ESTABLISHED {
        return Err(declined("a side already half-closed before the splice", 0));
    }
    let reply_after =
        start == Start::Tunnel && !reply.is_empty() && client_prefix.is_empty() && c_queued == 0;
    if !reply_after {
        if let Err(e) = crate::io::write_all(client, reply).await {
            let _ = set_linger_zero(upstream.as_fd());
            return Ok(Setup::Ended(TunnelOutcome {
                up: outcome(0, End::Aborted),
                down: outcome(0, End::Destination(e.kind())),
            }));
        }
    }
    // Baselines of the acknowledgements: what the proxy itself handed to each socket before
    // the redirect (the reply written above, the prefix written below, and the reply when it
    // is written during the insertions).
    let (c_handed, u_handed) = match (
        baseline_handed(client).await,
        baseline_handed(upstream).await,
    ) {
        (Ok(c), Ok(u)) => (c, u),
        (Err(e), _) | (_, Err(e)) => {
            return Err(Declined {
                reply_sent: !reply_after,
                ..declined(e, 0)
            })
        }
    };
    // Each socket's place in the pair: the one inserted first is 0.
    let client_side = match start {
        Start::Tunnel => 1,
        Start::Answer => 0,
    };
    let up = Dir {
        to: upstream,
        base_received: c0.bytes_received - c_queued,
        base_acked: u_handed,
        written: client_prefix.len() as u64,
        fin: false,
        seen: Seen::default(),
        end: None,
        held: Held::new(client_side),
    };
    // The reply, when written after the insertion, is the proxy's own too.
    let reply_later = if reply_after { reply.len() as u64 } else { 0 };
    let mut down = Dir {
        to: client,
        base_received: u0.bytes_received - u_queued,
        base_acked: c_handed + reply_later,
        written: 0,
        fin: false,
        seen: Seen::default(),
        end: None,
        held: Held::new(1 - client_side),
    };
    // The prefix goes in user space first, so it precedes every byte the kernel redirects.
    if let Err(e) = crate::io::write_all(upstream, client_prefix).await {
        // Nothing redirected yet, but the upstream failed: that is the tunnel's end.
        let _ = set_linger_zero(client.as_fd());
        return Ok(Setup::Ended(TunnelOutcome {
            up: outcome(0, End::Destination(e.kind())),
            down: outcome(0, End::Aborted),
        }));
    }
    // While only one socket is in the map, bytes the program handles on it cannot be
    // redirected (their partner is missing) and would have to be kept for the proxy, and the
    // pair reset to keep their order. An answer's upstream is sending its body at full speed
    // (more than any mark below holds back: such answers were reset), and its client waits
    // for it, so the client goes in first and the upstream's bytes wait in its queue until
    // it is in. A tunnel's order: the upstream first, then the reply owed, then
    // the client. What the client sends waits in its queue until it is in (it waits for the
    // reply anyway). What the server sends after the upstream is in is kept from the
    // program until the pair is complete: the kernel hands a socket's queue to it only once
    // `SO_RCVLOWAT` bytes are there (or a FIN, or memory pressure), and the flush below
    // lowers that to 1. A server that sends and half-closes meanwhile has its bytes taken
    // over (`take_over_tail`). Left: a server that sends more than the mark in the
    // microseconds between the two insertions, and keeps its connection open (reset).
    let (first, second) = match start {
        Start::Tunnel => {
            hold_back(upstream, u_queued);
            (upstream, client)
        }
        Start::Answer => (client, upstream),
    };
    // An answer's upstream gets room on its receive side for what the gate lets the
    // redirect queue hold: the origin filled its buffer while the proxy parsed the head
    // (`room`). A tunnel's sockets keep autotuning: nobody read them before the splice, and
    // with the raise SSL tunnels through a debug build held to 5% of a CPU (the lab's tiny
    // seed 000 grid) ran at 0.3–1.3 requests/s against 1.3–2.3 without (3 runs each): too
    // few runs to call, and no stall measured on tunnels to weigh against it.
    let gate = match start {
        Start::Tunnel => gate,
        Start::Answer => super::room::fit(&[upstream], gate, may_raise),
    };
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
    let spliced = map.splice_with(first.as_fd(), second.as_fd(), &mut write_reply);
    // Done with or without the pair: the fallback engines need the mark back at 1 too.
    // Lowering it makes the kernel look at the queues again, which also flushes the bytes
    // that arrived before the insertion (docs/kernel-notes.md).
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
            return Ok(Setup::Ended(reset_both(client, upstream, up.written)));
        }
        Err(e) => {
            return Err(Declined {
                reply_sent: reply_written,
                ..declined(e, client_prefix.len())
            })
        }
    };
    // The gates: from here on a destination slower than its source holds the source back.
    if let Err(e) = map.bound(pair, gate) {
        map.unsplice(pair);
        tracing::warn!("sockmap: the gate could not be set ({e}); tunnel reset");
        return Ok(Setup::Ended(reset_both(client, upstream, up.written)));
    }
    // Skbs kept so far, left out of the check in the loop once taken over.
    let mut kept_before = 0;
    if kept > 0 && start == Start::Answer {
        // The client sent while only it was in the map, though it waits for its answer.
        map.unsplice(pair);
        tracing::warn!("sockmap: the client sent during the answer's set-up; reset");
        return Ok(Setup::Ended(reset_both(client, upstream, up.written)));
    }
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
                return Ok(Setup::Ended(reset_both(client, upstream, up.written)));
            }
        }
    }
    Ok(Setup::Spliced(Box::new(Spliced {
        pair,
        up,
        down,
        kept_before,
        start: (c0, u0),
    })))
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
/// partner was not in the map yet, and keeps every later skb of it. After the FIN nothing more
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
