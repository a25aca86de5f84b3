//! Warm upstream connections of the `edge` front end (seeds 002 and 004): for each server
//! of a group with `min_idle`, a task keeps that many idle connections in the pool, opened
//! before any client needs one and opened again when the origin closes one, so a request
//! starts without a handshake. The pool keeps them past the idle timeout (`Pool::keep_warm`).
//! Whether their congestion windows survive idleness is the hosts' part
//! (`net.ipv4.tcp_slow_start_after_idle`, here and on the origins, which send the
//! responses; this host's is checked at start; docs/edge.md). For an `h2c` group's server
//! `min_idle = 1` keeps its first HTTP/2 connection open the same way (`crate::upstream::h2c`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::dial::connect_addr;
use super::groups::Group;
use super::state::Upstreams;
use crate::config::Protocol;

/// How often each server's warm connections are counted and made up.
const EVERY: Duration = Duration::from_millis(500);

/// Where the kernel says whether an idle connection restarts from the initial window.
const SLOW_START_AFTER_IDLE: &str = "/proc/sys/net/ipv4/tcp_slow_start_after_idle";

/// Starts a task per server of every group with `min_idle` (they hold the upstreams
/// weakly; the caller aborts them at stop).
pub fn spawn(upstreams: &Arc<Upstreams>) -> Vec<tokio::task::JoinHandle<()>> {
    let Some(edge) = &upstreams.edge else {
        return Vec::new();
    };
    let mut tasks = Vec::new();
    for (g, group) in edge.groups().iter().enumerate() {
        if group.min_idle == 0 {
            continue;
        }
        for server in group.members().servers.iter() {
            tasks.extend(spawn_one(upstreams, g, *server));
        }
        tracing::info!(group = %group.name, min_idle = group.min_idle, "edge warm pool");
    }
    if !tasks.is_empty() && slow_start_after_idle() == Some(true) {
        tracing::warn!(
            "{SLOW_START_AFTER_IDLE} is 1: a warm connection idle for longer than its \
             retransmission timeout starts again from the initial window; set it to 0 in \
             this network namespace, and on the origins, which send the responses \
             (docs/edge.md)"
        );
    }
    tasks
}

/// Keeps `server` of group `g` warm, when the group asks for warm connections (a server a
/// name resolved to later is started by `crate::upstream::resolve`).
pub(crate) fn spawn_one(
    upstreams: &Arc<Upstreams>,
    g: usize,
    server: std::net::SocketAddr,
) -> Option<tokio::task::JoinHandle<()>> {
    let group = upstreams.edge.as_ref()?.groups().get(g)?;
    if group.min_idle == 0 {
        return None;
    }
    if group.protocol == Protocol::Http1 {
        upstreams.pool.keep_warm(origin_key(server), group.min_idle);
    }
    Some(tokio::spawn(keep(Arc::downgrade(upstreams), g, server)))
}

/// The pool's key for a server, as the edge's requests name it.
fn origin_key(server: std::net::SocketAddr) -> String {
    Group::authority(server).to_string()
}

/// Whether a server has the warm connections its group asks for.
fn warm_enough(
    upstreams: &Upstreams,
    group: &Group,
    server: std::net::SocketAddr,
    origin: &str,
) -> bool {
    match group.protocol {
        Protocol::Http1 => upstreams.pool.idle_for(origin) >= group.min_idle,
        Protocol::H2c => upstreams.h2.is_open(server),
    }
}

/// The sysctl of this network namespace, when readable.
pub fn slow_start_after_idle() -> Option<bool> {
    let v = std::fs::read_to_string(SLOW_START_AFTER_IDLE).ok()?;
    Some(v.trim() != "0")
}

/// Keeps `server` of group `g` at its `min_idle` until the proxy goes or the server leaves
/// the group.
async fn keep(weak: Weak<Upstreams>, g: usize, server: std::net::SocketAddr) {
    let mut failing = false;
    loop {
        {
            let Some(upstreams) = weak.upgrade() else {
                return;
            };
            let Some(edge) = &upstreams.edge else { return };
            let group = &edge.groups()[g];
            if !group.has(server) {
                return;
            }
            let origin = origin_key(server);
            // A server the health checks took out gets no new connections.
            while group.is_up(server) && !warm_enough(&upstreams, group, server, &origin) {
                let dial = upstreams.dial;
                let opened = match group.protocol {
                    Protocol::Http1 => connect_addr(server, dial)
                        .await
                        .map(|s| upstreams.pool.put(&origin, s, server)),
                    // Its one connection, kept by `h2c`, not by the pool.
                    Protocol::H2c => upstreams
                        .h2
                        .get(server, dial, upstreams.max_head)
                        .await
                        .map(drop),
                };
                match opened {
                    Ok(()) => {
                        if failing {
                            tracing::info!(group = %group.name, %server, "warm connections open again");
                            failing = false;
                        }
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(group = %group.name, %server, "cannot open a warm connection: {e}");
                            failing = true;
                        }
                        break;
                    }
                }
            }
        }
        tokio::time::sleep(EVERY).await;
    }
}
