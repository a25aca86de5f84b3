//! Listeners, the connection limit and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use splicer_relay::Relay;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::config::Config;
use crate::config::Front;
use crate::front::{http, socks};
use crate::policy::Policy;
use crate::shared::Shared;
use crate::upstream::{Dial, Pool, Upstreams};

/// Bound listeners, ready to run.
pub struct Server {
    listeners: Vec<(Front, TcpListener)>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    cut: watch::Sender<bool>,
    /// Per-leg TCP tuning, when configured (kept loaded while the server lives).
    tuning: Option<Arc<crate::tuning::Legs>>,
    /// The admin listener (`/metrics`), when configured, and its bound addresses.
    admin: Option<(crate::metrics::Admin, Vec<SocketAddr>)>,
}

/// Why the server could not start.
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
    #[error("cannot open the cache's disk tier at {path}: {source}")]
    Disk {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// The HTTP cache, its disk tier loaded (which reads every entry's head: it may take a
/// moment for a large tier).
fn open_cache(config: &Config) -> Result<splicer_cache::Cache, BindError> {
    let settings = config.cache.settings();
    let cache = splicer_cache::Cache::new(settings.clone()).map_err(|source| BindError::Disk {
        path: settings.disk.map(|d| d.path).unwrap_or_default(),
        source,
    })?;
    tracing::info!(
        memory = settings.memory,
        max_object = settings.max_object,
        "cache in memory"
    );
    if let Some(d) = cache.disk() {
        let c = d.counters();
        tracing::info!(
            path = %d.path().display(),
            entries = c.loaded.load(std::sync::atomic::Ordering::Relaxed),
            damaged_removed = c.rejected.load(std::sync::atomic::Ordering::Relaxed),
            bytes = d.bytes(),
            "cache disk tier loaded"
        );
    }
    Ok(cache)
}

/// A listener on `addr`. An IPv6 one is IPv6-only, so that `0.0.0.0:P` and `[::]:P` (as
/// nginx users write them) both bind; with the kernel's default (`bindv6only = 0`) the
/// second bind failed.
async fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    if addr.is_ipv4() {
        return TcpListener::bind(addr).await;
    }
    let s = tokio::net::TcpSocket::new_v6()?;
    splicer_sys::sock::set_only_v6(std::os::fd::AsFd::as_fd(&s))?;
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    // The kernel caps it at net.core.somaxconn, as for the IPv4 listeners.
    s.listen(4096)
}

impl Server {
    /// Binds every configured listener.
    pub async fn bind(config: Config) -> Result<Server, BindError> {
        let mut listeners = Vec::new();
        let fronts = [
            (
                Front::Socks,
                config.socks.as_ref().map(|s| s.listen.clone()),
            ),
            (Front::Http, config.http.as_ref().map(|h| h.listen.clone())),
            (Front::Edge, config.edge.as_ref().map(|e| e.listen.clone())),
        ];
        for (front, addrs) in fronts {
            for addr in addrs.unwrap_or_default() {
                let l = listen(addr).await.map_err(|source| BindError::Listen {
                    addr,
                    front: front.name(),
                    source,
                })?;
                listeners.push((front, l));
            }
        }
        let admin = match &config.admin {
            Some(a) => Some(
                crate::metrics::Admin::bind(&a.listen)
                    .await
                    .map_err(BindError::Admin)?,
            ),
            None => None,
        };
        let bound: Vec<(Front, SocketAddr)> = listeners
            .iter()
            .filter_map(|(f, l)| l.local_addr().ok().map(|a| (*f, a)))
            .collect();
        let tuning = crate::tuning::start(&config, &bound)
            .map_err(BindError::Tuning)?
            .map(Arc::new);
        let local = splicer_sys::net::local_addresses().unwrap_or_else(|e| {
            tracing::warn!("cannot list this host's addresses ({e}); only loopback is guarded");
            Vec::new()
        });
        if config.acl.open_proxy && config.listens_beyond_loopback() {
            tracing::warn!(
                "OPEN PROXY: [acl] open_proxy = true and a listener beyond loopback: anyone who \
                 can reach this proxy may use it"
            );
        }
        let policy = Policy::new(&config, local);
        let mut clear: Vec<&str> = policy.clear_text_users().collect();
        if !clear.is_empty() {
            clear.sort_unstable();
            tracing::warn!(
                users = %clear.join(","),
                "passwords in clear text in the configuration: store `splicer hash-password`'s \
                 Argon2 hashes in their place"
            );
        }
        let relay = Relay::new(config.relay.clone());
        if relay.prepare().is_ok() && config.relay.engine != splicer_relay::EngineChoice::Auto {
            tracing::info!(engine = %config.relay.engine, "relay engine ready");
        }
        let http = config.http.clone().unwrap_or_default();
        let pool = Arc::new(Pool::new(http.pool_per_origin, http.pool_idle_timeout));
        let budget = config.edge.as_ref().map_or(64 << 20, |e| e.buffer_memory);
        let lines =
            crate::upstream::lines::Pipelines::new(usize::try_from(budget).unwrap_or(usize::MAX));
        let cache = match config.http.is_some() && config.cache.enabled {
            true => Some(open_cache(&config)?),
            false => None,
        };
        let upstreams = Arc::new(Upstreams {
            pool,
            lines,
            h2: Default::default(),
            edge: config.edge.as_ref().map(crate::upstream::groups::Edge::new),
            dial: Dial::new(&config.limits, Default::default()),
            max_head: config.limits.max_header_size,
        });
        let (stop, shutdown) = watch::channel(false);
        let (cut_tx, cut) = watch::channel(false);
        Ok(Server {
            listeners,
            shared: Arc::new(Shared {
                config,
                relay,
                policy,
                upstreams,
                cache,
                shutdown,
                cut,
            }),
            stop,
            cut: cut_tx,
            tuning,
            admin,
        })
    }

    /// The bound addresses (useful with port 0).
    pub fn local_addrs(&self) -> Vec<(Front, SocketAddr)> {
        self.listeners
            .iter()
            .filter_map(|(f, l)| l.local_addr().ok().map(|a| (*f, a)))
            .collect()
    }

    /// The admin listener's bound addresses (none when it is off).
    pub fn admin_addrs(&self) -> Vec<SocketAddr> {
        self.admin
            .as_ref()
            .map_or_else(Vec::new, |(_, a)| a.clone())
    }

    /// Serves until `stop` completes, then stops accepting and gives open connections up to
    /// `limits.shutdown_grace` to finish.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        let limits = &self.shared.config.limits;
        let max = limits.max_connections;
        let slots = Arc::new(Semaphore::new(max));
        let mut accepts = tokio::task::JoinSet::new();
        for (front, listener) in self.listeners {
            if let Ok(addr) = listener.local_addr() {
                tracing::info!(front = front.name(), %addr, "listening");
            }
            accepts.spawn(accept_loop(
                front,
                listener,
                self.shared.clone(),
                slots.clone(),
            ));
        }
        let admin = self
            .admin
            .map_or_else(Vec::new, |(a, _)| a.spawn(&self.shared));
        let checks = crate::upstream::health::spawn(&self.shared.upstreams);
        let warmers = crate::upstream::warm::spawn(&self.shared.upstreams);
        let refusals = self.tuning.clone().map(|t| tokio::spawn(t.report()));
        // Idle upstream connections are swept on a timer, not only when one is given back.
        let weak = Arc::downgrade(&self.shared);
        let every = self.shared.upstreams.pool.sweep_every();
        let sweeper = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(shared) => shared.upstreams.pool.sweep(),
                    None => return,
                }
            }
        });
        stop.await;
        let grace = limits.shutdown_grace;
        let open = max - slots.available_permits();
        tracing::info!(
            open,
            grace_s = grace.as_secs_f64(),
            "stopping: no new connections"
        );
        accepts.shutdown().await;
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
                self.shared.relay.cut();
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
        admin.iter().for_each(tokio::task::JoinHandle::abort);
        checks.iter().for_each(tokio::task::JoinHandle::abort);
        refusals.iter().for_each(tokio::task::JoinHandle::abort);
        warmers.iter().for_each(tokio::task::JoinHandle::abort);
        log_relay_counters(&self.shared.relay);
    }

    /// The relay (for the binary's signal handlers).
    pub fn relay(&self) -> Relay {
        self.shared.relay.clone()
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

async fn accept_loop(
    front: Front,
    listener: TcpListener,
    shared: Arc<Shared>,
    slots: Arc<Semaphore>,
) {
    loop {
        let (stream, client_addr) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Typically EMFILE: back off instead of spinning; the backlog waits.
                tracing::warn!(front = front.name(), "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse(front, stream, client_addr));
            continue;
        };
        let open = crate::metrics::events().accepted(front.name());
        crate::sockbuf::apply(&stream, shared.config.limits.receive_buffer);
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut cut = shared.cut.clone();
            let serve = async {
                match front {
                    Front::Socks => socks::serve(&shared, stream, client_addr).await,
                    Front::Http => http::serve(&shared, stream, client_addr).await,
                    Front::Edge => http::serve_edge(&shared, stream, client_addr).await,
                }
            };
            // Cut at the end of the shutdown grace: the connection's future is dropped
            // here, while the runtime and the log still run.
            tokio::select! {
                () = serve => {}
                _ = cut.wait_for(|c| *c) => {}
            }
            drop(open);
            drop(slot);
        });
    }
}

/// Over the connection limit: HTTP clients get a 503, SOCKS clients a closed connection
/// (RFC 1928 has no reply before the greeting).
async fn refuse(front: Front, mut stream: TcpStream, client_addr: SocketAddr) {
    let mut rec = crate::access::Record::new(front.name(), client_addr);
    rec.fail(&crate::error::Error::new(
        crate::error::Side::Internal,
        crate::error::Kind::Refused("connection-limit"),
    ));
    if front != Front::Socks {
        rec.status = 503;
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            stream.write_all(crate::exchange::overload_response()),
        )
        .await;
        let _ = stream.shutdown().await;
    }
    rec.emit();
}

#[cfg(test)]
mod tests {
    /// Issue 34, item 15: `0.0.0.0:P` and `[::]:P` both bind, in either order (the `[::]`
    /// listener is IPv6-only); with the kernel's default dual-stack `[::]`, the second bind
    /// failed with "address in use" after `check` had said OK.
    #[tokio::test]
    async fn both_families_bind_one_port() {
        if std::net::TcpListener::bind("[::1]:0").is_err() {
            eprintln!("SKIPPED: this host has no IPv6 loopback");
            return;
        }
        let free = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        let v6 = super::listen(([0u16; 8], port).into()).await.unwrap();
        let v4 = super::listen(([0, 0, 0, 0], port).into()).await.unwrap();
        assert_eq!(
            v4.local_addr().unwrap().port(),
            v6.local_addr().unwrap().port()
        );
        // Each takes its own family's clients.
        let c4 = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let (a4, _) = v4.accept().await.unwrap();
        let c6 = tokio::net::TcpStream::connect(("::1", port)).await.unwrap();
        let (a6, _) = v6.accept().await.unwrap();
        assert_eq!(a4.peer_addr().unwrap(), c4.local_addr().unwrap());
        assert_eq!(a6.peer_addr().unwrap(), c6.local_addr().unwrap());
    }
}
