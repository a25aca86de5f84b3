//! The `sockmap` engine: a whole tunnel handed to the kernel. Both sockets go into the
//! SOCKHASH of `splicer-bpf`, whose verdict program redirects every arriving byte to the
//! other socket's send queue; the proxy only waits for the ends. The traps docs/kernel-notes.md
//! records, and how this handles them:
//! - bytes queued before insertion are not forwarded until another packet arrives: after
//!   insertion `SO_RCVLOWAT` is set, which makes the kernel process the queue;
//! - a spliced socket can look readable while `recv` has nothing: only end-of-stream
//!   (`RDHUP`) and errors are acted upon, readable readiness is cleared;
//! - forwarding is asynchronous, so a FIN is passed on (`shutdown(SHUT_WR)`) only once every
//!   byte redirected to the destination socket is acknowledged by the other end
//!   (`tcpi_bytes_acked` against `tcpi_bytes_received`, from baselines taken at the start).
//!
//! In parts: `setup` (baselines, the insertions, what was kept meanwhile), `watch` (until
//! the ends) and `counts` (the kernel's counters and events both rely on).

mod body;
mod counts;
mod held;
mod room;
mod setup;
mod watch;

use std::time::Duration;

use splicer_bpf::Sockmap;
use tokio::net::TcpStream;

use crate::engine::Declined;
use crate::outcome::TunnelOutcome;
use crate::outcome::{End, Outcome};
use crate::tunnel::Start;
use crate::Engine;
use setup::Setup;

/// How long bytes may be missing from the destination socket while a FIN waits before the
/// tunnel is reset: the redirect queue drains in milliseconds when the socket has room.
const LOST_AFTER: Duration = Duration::from_secs(1);

/// What ends a tunnel besides its peers: `idle` with no byte moved either way, and more
/// than `max_queue` bytes of one direction waiting in the kernel between the source and
/// the destination's TCP. The verdict program takes every skb off the source's receive
/// queue at once, so the source's window never closes: when the destination drains
/// slower than the source sends, the kernel's redirect queue grows without bound (1.7 GiB
/// in 3 s toward a server that did not read, in the test that found it). Only a reset
/// bounds it; `pipe` and `ipsplice` keep TCP's back-pressure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits<'a> {
    pub idle: Option<Duration>,
    pub max_queue: u64,
    /// The operator fixed every socket's receive buffer (`limits.receive_buffer`): the
    /// gate is fitted to the buffers rather than the buffers raised (`room`).
    pub fixed_buffers: bool,
    /// The sum of every running tunnel's redirect queues, kept up to date by the watches.
    pub queued: &'a std::sync::atomic::AtomicU64,
}

/// The engine declines before the kernel redirected anything; `reason` without the
/// engine's name, `prefix_sent` bytes of the client prefix already written upstream.
fn declined(reason: impl std::fmt::Display, prefix_sent: usize) -> Declined {
    Declined {
        prefix_sent,
        moved: (prefix_sent as u64, 0),
        ..Declined::at_once(Engine::Sockmap, reason)
    }
}

/// Runs the tunnel in the kernel. For a [`Start::Tunnel`], `reply` (owed to the client
/// before the tunnel) is written once the upstream is in the map and before the client is,
/// when the client has sent nothing beyond its request (it waits for the reply, so it
/// cannot send while the pair is being set up); otherwise, and for a [`Start::Answer`], it
/// is written first. `Declined` says whether it was.
pub(crate) async fn tunnel(
    map: &Sockmap,
    start: Start,
    client: &TcpStream,
    upstream: &TcpStream,
    (reply, client_prefix): (&[u8], &[u8]),
    limits: Limits<'_>,
    cut: impl std::future::Future<Output = ()>,
) -> Result<TunnelOutcome, Declined> {
    match setup::start(
        map,
        start,
        client,
        upstream,
        reply,
        client_prefix,
        (limits.max_queue, !limits.fixed_buffers),
    )
    .await?
    {
        Setup::Ended(o) => Ok(o),
        Setup::Spliced(s) => Ok(watch::run(map, client, upstream, *s, limits, cut).await),
    }
}

pub(crate) use body::splice as body;

fn outcome(bytes: u64, end: End) -> Outcome {
    Outcome {
        engine: Engine::Sockmap,
        fallback: None,
        bytes,
        end,
    }
}
