//! The server: its listeners, the connection limit, configuration reloads and graceful
//! shutdown.
//!
//! # Layout
//! - this file: binding, the run loop (reloads, the stop, the grace), the relay's counters.
//! - `generation`: what connections share, made from a configuration (at start and at
//!   each reload, keeping what outlives a reload).
//! - `listeners`: listening sockets, the accept loop under the connection limit, refusals.
//! - `on_wake`: a wait for the stop polled again only when the stop woke it.
//!
//! # Reloads
//! A new configuration is swapped in whole: each connection is served to its end by the
//! configuration current when it was accepted (the accept loops read it per connection
//! from a `watch`), so nothing open is cut or changed under it. Listeners whose address
//! stays keep their socket (no client is refused meanwhile); new ones are bound before
//! anything is swapped, so a reload that cannot bind changes nothing. What a running
//! proxy cannot change (`generation::keep_what_needs_a_restart`) is kept and named.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use splicer_relay::Relay;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;

use crate::config::{Config, ConnectionThreads, Front, Io};
use crate::shared::Shared;
use crate::threads::Threads;

mod generation;
mod on_wake;
pub(crate) use generation::pool_settings;
pub(crate) use on_wake::OnWake;
mod listeners;

/// Bound listeners, ready to run.
pub struct Server {
    /// Each front end's listeners, by the address the configuration gives (port 0 included).
    listeners: Vec<(Front, SocketAddr, TcpListener)>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    cut: watch::Sender<bool>,
    /// Per-leg TCP tuning, when configured (kept loaded while the server lives).
    tuning: Option<Arc<crate::tuning::Legs>>,
    /// The admin listener (`/metrics`), when configured.
    admin: Option<crate::metrics::Admin>,
    /// This host's addresses, which the rules guard.
    local: Vec<IpAddr>,
    /// The threads that serve the client connections.
    threads: Arc<Threads>,
}

/// Why the server could not start, or a reload was refused.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("cannot listen on {addr} ({front}): {source}")]
    Listen {
        addr: SocketAddr,
        front: &'static str,
        source: std::io::Error,
    },
    #[error("{0}")]
    Admin(#[source] std::io::Error),
    #[error("per-leg TCP tuning: {0}")]
    Tuning(#[source] crate::tuning::TuningError),
    #[error("cannot start the connection threads: {0}")]
    Threads(#[source] std::io::Error),
    #[error("cannot start the rings of limits.io = \"ring\" (io_uring with DEFER_TASKRUN, Linux 6.1 or later): {0}")]
    Rings(#[source] std::io::Error),
    #[error("cannot open the cache's disk tier at {path}: {source}")]
    Disk {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Every front end's listening addresses, in the configuration's order.
fn front_addresses(config: &Config) -> Vec<(Front, SocketAddr)> {
    let fronts = [
        (Front::Socks, config.socks.as_ref().map(|s| &s.listen)),
        (Front::Http, config.http.as_ref().map(|h| &h.listen)),
        (Front::Edge, config.edge.as_ref().map(|e| &e.listen)),
    ];
    fronts
        .into_iter()
        .flat_map(|(f, l)| l.into_iter().flatten().map(move |a| (f, *a)))
        .collect()
}

/// Binds `wanted`'s listeners, all or none.
async fn bind_all(
    wanted: &[(Front, SocketAddr)],
) -> Result<Vec<(Front, SocketAddr, TcpListener)>, BindError> {
    let mut bound = Vec::new();
    for (front, addr) in wanted {
        let l = listeners::listen(*addr)
            .await
            .map_err(|source| BindError::Listen {
                addr: *addr,
                front: front.name(),
                source,
            })?;
        bound.push((*front, *addr, l));
    }
    Ok(bound)
}

/// The admin listener `config` asks for, bound.
async fn bind_admin(config: &Config) -> Result<Option<crate::metrics::Admin>, BindError> {
    match &config.admin {
        Some(a) => Ok(Some(
            crate::metrics::Admin::bind(&a.listen)
                .await
                .map_err(BindError::Admin)?,
        )),
        None => Ok(None),
    }
}

impl Server {
    /// Binds every configured listener.
    pub async fn bind(config: Config) -> Result<Server, BindError> {
        let listeners = bind_all(&front_addresses(&config)).await?;
        let admin = bind_admin(&config).await?;
        let bound: Vec<(Front, SocketAddr)> = listeners
            .iter()
            .filter_map(|(f, _, l)| l.local_addr().ok().map(|a| (*f, a)))
            .collect();
        let tuning = crate::tuning::start(&config, &bound)
            .map_err(BindError::Tuning)?
            .map(Arc::new);
        let local = splicer_sys::net::local_addresses().unwrap_or_else(|e| {
            tracing::warn!("cannot list this host's addresses ({e}); only loopback is guarded");
            Vec::new()
        });
        let (stop, shutdown) = watch::channel(false);
        let (cut_tx, cut) = watch::channel(false);
        let threads = match config.limits.threads {
            ConnectionThreads::Count(n) => {
                let t = Threads::start(crate::threads::count(n)).map_err(BindError::Threads)?;
                tracing::info!(threads = t.len(), "connection threads started");
                if config.limits.io() == Io::Ring {
                    let (bounds, idle) = pool_settings(&config);
                    match crate::ring::Rings::start(t.len(), bounds, idle) {
                        Ok(rings) => {
                            tracing::info!(rings = t.len(), "rings started (limits.io = \"ring\")");
                            t.with_rings(rings)
                        }
                        // Asked for: the operator is told at start.
                        Err(e) if config.limits.io.is_some() => return Err(BindError::Rings(e)),
                        Err(e) => {
                            tracing::warn!(
                                "the kernel refuses the rings ({e}): requests are served by \
                                 the connection threads' runtimes (limits.io = \"runtime\")"
                            );
                            t
                        }
                    }
                } else {
                    t
                }
            }
            ConnectionThreads::Shared => {
                tracing::info!("client connections served by the shared runtime");
                Threads::none()
            }
        };
        let shared = generation::make(config, None, local.clone(), (shutdown, cut))?;
        Ok(Server {
            threads: Arc::new(threads),
            listeners,
            shared: Arc::new(shared),
            stop,
            cut: cut_tx,
            tuning,
            admin,
            local,
        })
    }

    /// The bound addresses (useful with port 0).
    pub fn local_addrs(&self) -> Vec<(Front, SocketAddr)> {
        self.listeners
            .iter()
            .filter_map(|(f, _, l)| l.local_addr().ok().map(|a| (*f, a)))
            .collect()
    }

    /// The relay (for the binary's signal handlers).
    pub fn relay(&self) -> Relay {
        self.shared.relay.clone()
    }

    /// Serves until `stop` completes, taking each configuration `reloads` brings (checked
    /// already: `Config::from_toml`); then stops accepting and gives open connections up to
    /// `limits.shutdown_grace` to finish.
    pub async fn run(
        self,
        stop: impl std::future::Future<Output = ()>,
        mut reloads: mpsc::Receiver<Config>,
    ) {
        let max = self.shared.config.limits.max_connections;
        let slots = Arc::new(Semaphore::new(max));
        let (current_tx, current) = watch::channel(self.shared.clone());
        let mut running = Running {
            shared: self.shared.clone(),
            current: current_tx,
            accepts: HashMap::new(),
            admin: Vec::new(),
            background: Vec::new(),
            slots: slots.clone(),
            local: self.local.clone(),
            tuned: self.tuning.is_some(),
            threads: self.threads.clone(),
        };
        for (front, configured, listener) in self.listeners {
            running.accept(front, configured, listener, &current);
        }
        if let Some(admin) = self.admin {
            running.admin = admin.spawn(&current);
        }
        running.background = background(&running.shared);
        let refusals = self.tuning.clone().map(|t| tokio::spawn(t.report()));
        // Idle upstream connections are swept on a timer, not only when one is given back
        // (the current generation's pool: a reload may keep it or start another).
        let sweeper = {
            let current = current.clone();
            let every = self.shared.upstreams.pool.sweep_every();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let pool = current.borrow().upstreams.pool.clone();
                    pool.sweep();
                }
            })
        };
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                Some(config) = reloads.recv() => {
                    let taken = running.reload(config, &current).await;
                    crate::metrics::events().reloaded(taken.is_ok());
                    if let Err(e) = taken {
                        tracing::error!(
                            "configuration reload refused: {e}; the running configuration is kept"
                        );
                    }
                }
            }
        }
        let grace = running.shared.config.limits.shutdown_grace;
        let open = max - slots.available_permits();
        tracing::info!(
            open,
            grace_s = grace.as_secs_f64(),
            "stopping: no new connections"
        );
        running.accepts.values().for_each(|(_, t)| t.abort());
        for (_, (_, task)) in running.accepts.drain() {
            let _ = task.await;
        }
        let _ = self.stop.send(true);
        let all = u32::try_from(max).unwrap_or(u32::MAX);
        let finished = tokio::time::timeout(grace, slots.acquire_many(all))
            .await
            .is_ok();
        match finished {
            true => tracing::info!("all connections finished"),
            false => {
                let left = max - slots.available_permits();
                tracing::warn!(left, "grace period over; closing remaining connections");
                // Each cut connection still writes its access line (end =
                // "internal:shutdown-grace"). The relay is cut first: every splice and
                // tunnel ends with what it moved, and its connection logs those bytes; a
                // connection still open a moment later (reading a head, dialling) has its
                // task dropped, and its record says so as it goes.
                crate::access::cutting_at_shutdown();
                running.shared.relay.cut();
                let logged = slots.acquire_many(all);
                if tokio::time::timeout(Duration::from_secs(1), logged)
                    .await
                    .is_err()
                {
                    let _ = self.cut.send(true);
                    let _ =
                        tokio::time::timeout(Duration::from_secs(2), slots.acquire_many(all)).await;
                }
            }
        }
        sweeper.abort();
        refusals.iter().for_each(JoinHandle::abort);
        running.admin.iter().for_each(JoinHandle::abort);
        running.background.iter().for_each(JoinHandle::abort);
        log_relay_counters(&running.shared.relay);
        // The connection threads end last, with what is left on them (every connection
        // has ended or been cut by now); joining them blocks this worker for at most
        // their blocking work's grace.
        drop(running);
        drop(self.threads);
    }
}

/// The edge's health checks, warm pools and name resolution of a generation. They hold its upstreams weakly:
/// a generation replaced by a reload keeps its own while connections still use it.
fn background(shared: &Arc<Shared>) -> Vec<JoinHandle<()>> {
    let mut tasks = crate::upstream::health::spawn(&shared.upstreams);
    tasks.extend(crate::upstream::warm::spawn(&shared.upstreams));
    tasks.extend(crate::upstream::resolve::spawn(&shared.upstreams));
    tasks
}

/// The server while it runs: the current generation and what serves it.
struct Running {
    shared: Arc<Shared>,
    current: watch::Sender<Arc<Shared>>,
    /// Accept loops by front end and configured address, with the address bound.
    accepts: HashMap<(Front, SocketAddr), (SocketAddr, JoinHandle<()>)>,
    /// The admin listener's tasks (it serves the current generation's figures).
    admin: Vec<JoinHandle<()>>,
    /// Every generation's health checks and warm pools (aborted at stop).
    background: Vec<JoinHandle<()>>,
    slots: Arc<Semaphore>,
    local: Vec<IpAddr>,
    /// Whether per-leg TCP tuning runs (it knows the listeners bound at start only).
    tuned: bool,
    threads: Arc<Threads>,
}

impl Running {
    fn accept(
        &mut self,
        front: Front,
        configured: SocketAddr,
        listener: TcpListener,
        current: &watch::Receiver<Arc<Shared>>,
    ) {
        let Ok(addr) = listener.local_addr() else {
            return;
        };
        tracing::info!(front = front.name(), %addr, "listening");
        let task = tokio::spawn(listeners::accept_loop(
            front,
            listener,
            current.clone(),
            self.slots.clone(),
            self.threads.clone(),
        ));
        self.accepts.insert((front, configured), (addr, task));
    }

    /// Takes `config` in place of the running configuration: binds what is new, then swaps
    /// the generation, then closes the listeners it no longer has. On an error nothing has
    /// changed.
    async fn reload(
        &mut self,
        mut config: Config,
        current: &watch::Receiver<Arc<Shared>>,
    ) -> Result<(), BindError> {
        let kept = generation::keep_what_needs_a_restart(&self.shared.config, &mut config);
        if !kept.is_empty() {
            tracing::warn!(
                sections = %kept.join(", "),
                "configuration reload: these changes take effect at the next restart; \
                 the running values are kept"
            );
        }
        let wanted = front_addresses(&config);
        let new: Vec<(Front, SocketAddr)> = wanted
            .iter()
            .filter(|k| !self.accepts.contains_key(k))
            .copied()
            .collect();
        let bound = bind_all(&new).await?;
        let shared = Arc::new(generation::make(
            config,
            Some(&self.shared),
            self.local.clone(),
            (self.shared.shutdown.clone(), self.shared.cut.clone()),
        )?);
        // Swapped: connections accepted from here on are served by the new configuration.
        let _ = self.current.send(shared.clone());
        let old = std::mem::replace(&mut self.shared, shared);
        let added = bound.len();
        if added > 0 && self.tuned {
            tracing::warn!(
                "configuration reload: per-leg TCP tuning does not apply to listeners added \
                 by a reload until the next restart"
            );
        }
        for (front, configured, listener) in bound {
            self.accept(front, configured, listener, current);
        }
        let gone: Vec<(Front, SocketAddr)> = self
            .accepts
            .keys()
            .filter(|k| !wanted.contains(k))
            .copied()
            .collect();
        for key in &gone {
            if let Some((addr, task)) = self.accepts.remove(key) {
                task.abort();
                // An aborted task drops its listener when the runtime next gets to it, not
                // here: waiting for it means "reloaded" is only said once the port is
                // closed (a client refused, not accepted into a loop that is going away).
                let _ = task.await;
                tracing::info!(front = key.0.name(), %addr, "no longer listening");
            }
        }
        self.background.retain(|t| !t.is_finished());
        self.background.extend(background(&self.shared));
        drop(old);
        tracing::info!(
            listeners_added = added,
            listeners_removed = gone.len(),
            "configuration reloaded"
        );
        Ok(())
    }
}

/// Logs the relay's per-engine counters (at stop, and on SIGUSR1 in the binary).
pub fn log_relay_counters(relay: &Relay) {
    tracing::info!(
        counters = %relay.counters(),
        // Spliced flows still in the kernel (lingering ones included); "-" when the
        // ipsplice program is not loaded.
        ipsplice_entries = relay.ipsplice_entries().map_or("-".into(), |n| n.to_string()),
        // Skbs (and bytes) the sockmap program cut because they overlapped bytes already
        // consumed, cuts that failed, and FINs without data it dropped (the relay passes
        // FINs on itself); "-" when the program is not loaded.
        sockmap_trimmed = relay.sockmap_stats().map_or("-".into(), |s| format!(
            "{} skbs, {} bytes, {} failed, {} bare FINs",
            s.trimmed_skbs, s.trimmed_bytes, s.failed_trims, s.bare_fins
        )),
        // Times a sockmap direction's redirect queue reached `sockmap_max_queue` and its
        // source was held back (the proxy then relays what was held).
        sockmap_gate_closings = relay.sockmap_stats().map_or("-".into(), |s| s.gate_closings.to_string()),
        "relay counters"
    );
}
