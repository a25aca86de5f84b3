//! Edge servers given by DNS name, resolved again every `[edge] resolve_every` (as HAProxy's
//! resolvers and nginx's `resolve` do): each address a name resolves to is a server of its
//! group; an address that appears gets its health checks and warm connections, one that
//! goes is no longer chosen (requests already on it finish). A name that stops resolving
//! keeps its last addresses, and says so in the log once until it resolves again.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use super::groups::{resolve_all, system_resolve};
use super::state::Upstreams;
use crate::config::ServerName;

/// Starts a task per group with a server given by name. They hold the upstreams weakly and
/// end when it goes; the caller aborts them at stop.
pub fn spawn(upstreams: &Arc<Upstreams>) -> Vec<tokio::task::JoinHandle<()>> {
    let Some(edge) = &upstreams.edge else {
        return Vec::new();
    };
    edge.groups()
        .iter()
        .enumerate()
        .filter(|(_, g)| g.has_names())
        .map(|(g, _)| tokio::spawn(follow(Arc::downgrade(upstreams), g)))
        .collect()
}

/// Resolves group `g`'s names every `resolve_every` until the proxy goes.
async fn follow(weak: Weak<Upstreams>, g: usize) {
    let mut last: HashMap<ServerName, Vec<std::net::SocketAddr>> = HashMap::new();
    let mut failing: Vec<ServerName> = Vec::new();
    loop {
        let (configured, every) = {
            let Some(upstreams) = weak.upgrade() else {
                return;
            };
            let Some(edge) = &upstreams.edge else { return };
            let Some(group) = edge.groups().get(g) else {
                return;
            };
            // What start resolved is what a name that fails now keeps.
            if last.is_empty() {
                last = group.resolved_at_start.clone();
            }
            (group.configured.clone(), edge.resolve_every)
        };
        tokio::time::sleep(every).await;
        // getaddrinfo blocks: off the runtime's threads.
        let before = last.clone();
        let Ok(r) =
            tokio::task::spawn_blocking(move || resolve_all(&configured, system_resolve, &before))
                .await
        else {
            continue;
        };
        let Some(upstreams) = weak.upgrade() else {
            return;
        };
        let Some(group) = upstreams.edge.as_ref().and_then(|e| e.groups().get(g)) else {
            return;
        };
        for (name, e) in &r.failed {
            if !failing.contains(name) {
                tracing::warn!(
                    group = %group.name, server = %name,
                    "an edge server's name does not resolve ({e}); its last addresses are kept"
                );
                failing.push(name.clone());
            }
        }
        failing.retain(|n| {
            let back = !r.failed.iter().any(|(f, _)| f == n);
            if back {
                tracing::info!(group = %group.name, server = %n, "an edge server's name resolves again");
            }
            !back
        });
        last = r.by_name;
        if r.servers == group.members().servers {
            continue;
        }
        let (added, removed) = group.set_servers(r.servers);
        tracing::info!(
            group = %group.name,
            added = ?added,
            removed = ?removed,
            "edge servers changed with their names' addresses"
        );
        for server in removed {
            upstreams
                .pool
                .keep_warm(super::groups::Group::authority(server).to_string(), 0);
        }
        for server in added {
            // They end by themselves when the server leaves or the proxy goes.
            drop(super::health::spawn_one(&upstreams, g, server));
            drop(super::warm::spawn_one(&upstreams, g, server));
        }
    }
}
