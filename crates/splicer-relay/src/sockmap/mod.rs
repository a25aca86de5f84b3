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

mod counts;
mod setup;
mod watch;

use std::time::Duration;

use splicer_bpf::Sockmap;
use tokio::net::TcpStream;

use crate::splice::{End, Outcome};
use crate::tunnel::TunnelOutcome;
use crate::Engine;
use setup::Setup;

/// How long bytes may be missing from the destination socket while a FIN waits before the
/// tunnel is reset: the redirect queue drains in milliseconds when the socket has room.
const LOST_AFTER: Duration = Duration::from_secs(1);

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
    match setup::start(map, client, upstream, reply, client_prefix).await? {
        Setup::Ended(o) => Ok(o),
        Setup::Spliced(s) => Ok(watch::run(map, client, upstream, s, idle).await),
    }
}

fn outcome(bytes: u64, end: End) -> Outcome {
    Outcome {
        engine: Engine::Sockmap,
        fallback: None,
        bytes,
        end,
    }
}
