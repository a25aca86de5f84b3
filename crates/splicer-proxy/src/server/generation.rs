//! What connections share, made from a configuration: at start, and again at each reload
//! from the new file with what outlives a reload taken from the running one (the relay and
//! its kernel programs, the cache, the idle upstream connections).

use std::net::IpAddr;
use std::sync::Arc;

use splicer_relay::Relay;
use tokio::sync::watch;

use super::BindError;
use crate::config::{Config, HttpConfig};
use crate::policy::Policy;
use crate::shared::Shared;
use crate::upstream::{Dial, Pool, Upstreams};

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

/// Whether the configuration wants a cache (the HTTP front end, with `[cache] enabled`).
fn wants_cache(config: &Config) -> bool {
    config.http.is_some() && config.cache.enabled
}

/// The idle pool's settings (`[http]`'s, or their defaults without it).
pub(crate) fn pool_settings(config: &Config) -> ((usize, usize), std::time::Duration) {
    let timeout = config.http.as_ref().map_or_else(
        || HttpConfig::default().pool_idle_timeout,
        |h| h.pool_idle_timeout,
    );
    (config.pool_bounds(), timeout)
}

/// What connections share, for `config`; `running` is the generation it replaces, whose
/// relay, cache and idle pool it keeps. `local` is this host's addresses (the rules guard
/// them).
pub(super) fn make(
    config: Config,
    running: Option<&Shared>,
    local: Vec<IpAddr>,
    (shutdown, cut): (watch::Receiver<bool>, watch::Receiver<bool>),
) -> Result<Shared, BindError> {
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
    let relay = match running {
        Some(r) => r.relay.clone(),
        None => {
            let relay = Relay::new(config.relay.clone());
            if relay.prepare().is_ok() && config.relay.engine != splicer_relay::EngineChoice::Auto {
                tracing::info!(engine = %config.relay.engine, "relay engine ready");
            }
            relay
        }
    };
    // Idle upstream connections outlive a reload when the pool's settings do.
    let ((per_origin, max_idle), idle_timeout) = pool_settings(&config);
    let pool = match running {
        Some(r) if pool_settings(&r.config) == ((per_origin, max_idle), idle_timeout) => {
            r.upstreams.pool.clone()
        }
        _ => Arc::new(Pool::new(per_origin, idle_timeout).with_max_idle(max_idle)),
    };
    let budget = config.edge.as_ref().map_or(64 << 20, |e| e.buffer_memory);
    let lines =
        crate::upstream::lines::Pipelines::new(usize::try_from(budget).unwrap_or(usize::MAX));
    let cache = match (wants_cache(&config), running.and_then(|r| r.cache.as_ref())) {
        (false, _) => None,
        (true, Some(kept)) => Some(kept.clone()),
        (true, None) => Some(open_cache(&config)?),
    };
    let upstreams = Arc::new(Upstreams {
        pool,
        lines,
        h2: Default::default(),
        edge: config.edge.as_ref().map(crate::upstream::groups::Edge::new),
        dial: Dial::new(&config.limits, Default::default()),
        max_head: config.limits.max_header_size,
    });
    // The relay is shared with the running generation: what it takes from this one is
    // set only once nothing here can fail, so that a refused reload changes nothing.
    relay.set_fixed_buffers(config.limits.receive_buffer != 0);
    let pacing = config.pacing();
    if pacing != relay.pacing() {
        log_pacing(&config, &pacing);
    }
    // Running splices follow the new setting (a reload): docs/pacer.md.
    relay.set_pacing(pacing);
    Ok(Shared {
        config,
        relay,
        policy,
        upstreams,
        cache,
        shutdown,
        cut,
    })
}

/// Says at start-up and on a reload which classes are paced, and what cannot pace them.
fn log_pacing(config: &Config, pacing: &splicer_relay::Pacing) {
    use splicer_relay::{Class, Front};
    let running = [
        (Front::Socks, config.socks.is_some()),
        (Front::Http, config.http.is_some()),
        (Front::Edge, config.edge.is_some()),
    ];
    let mut any = false;
    for (front, on) in running {
        for class in Class::ALL {
            let p = pacing.get(front, class);
            if !on || !p.paced() {
                continue;
            }
            any = true;
            if p.mode.follows_demand() {
                tracing::info!(
                    front = front.name(),
                    class = class.name(),
                    mode = p.mode.name(),
                    hold_ms = p.hold.0.as_millis() as u64,
                    floor = p.floor_rate(),
                    "pacer: splices wait for the proxy's own work (copy, pipe: held before \
                     each read; sockmap, conservative: free for the share of its looks the \
                     proxy's threads wanted no CPU, else held at its part of the class \
                     floor, at most hold in a row; proportional: paced while the proxy \
                     works at its class's share of its free rate, at least its part of the \
                     floor; ipsplice: its windows clamped to those rates, at least two \
                     segments a round trip)"
                );
                continue;
            }
            tracing::info!(
                front = front.name(),
                class = class.name(),
                per_splice = p.per_splice,
                total = p.total,
                "pacer: rate mode (bytes a second; 0: no cap; ipsplice clamps its windows \
                 to the rate, and holds no less than two segments a round trip)"
            );
        }
    }
    if !any {
        tracing::info!("pacer: off for every front end");
    }
}

/// Sections a reload cannot change while the proxy runs, and why: the new file's values are
/// replaced by the running ones (so the running configuration says what is in force), and
/// each is named in a warning. Returns their names.
pub(super) fn keep_what_needs_a_restart(running: &Config, new: &mut Config) -> Vec<&'static str> {
    let mut kept = Vec::new();
    let differs =
        |a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| format!("{a:?}") != format!("{b:?}");
    if differs(&running.relay, &new.relay) {
        // The relay holds the kernel engines' programs, which running splices use.
        new.relay = running.relay.clone();
        kept.push("relay");
    }
    if differs(&running.log, &new.log) {
        // The logger is set up once, before anything runs.
        new.log = running.log.clone();
        kept.push("log");
    }
    if running.limits.max_connections != new.limits.max_connections {
        // The connection slots are counted across reloads (open connections hold them).
        new.limits.max_connections = running.limits.max_connections;
        kept.push("limits.max_connections");
    }
    if running.limits.threads != new.limits.threads {
        // The connection threads are started once (open connections run on them).
        new.limits.threads = running.limits.threads;
        kept.push("limits.threads");
    }
    if running.limits.io() != new.limits.io() {
        // The rings' threads are started once, with the connection threads.
        new.limits.io = running.limits.io;
        kept.push("limits.io");
    }
    if running.http.is_some() && new.http.is_some() && differs(&running.cache, &new.cache) {
        // The cache and what it stores are kept: its sizes and tiers are made once.
        new.cache = running.cache.clone();
        kept.push("cache");
    }
    if differs(&running.admin, &new.admin) {
        // Its listener is bound once (its port is the one monitoring scrapes).
        new.admin = running.admin.clone();
        kept.push("admin");
    }
    let tunings = |c: &Config| format!("{:?}", c.tcp_tunings());
    if tunings(running) != tunings(new) {
        // The sockops program is told each leg at start.
        kept.push("client_tcp/upstream_tcp (TCP tuning per leg)");
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_needs_a_restart_is_kept_and_named() {
        let running = Config::from_toml(
            "[relay]\nengine = \"pipe\"\n[http]\n[cache]\nmemory = \"64MiB\"\n[limits]\nmax_connections = 100\n",
        )
        .unwrap();
        let mut new = Config::from_toml(
            "[relay]\nengine = \"copy\"\n[http]\nvia = \"other\"\n[cache]\nmemory = \"32MiB\"\n\
             [limits]\nmax_connections = 5\nthreads = 3\nidle_timeout = \"7s\"\n",
        )
        .unwrap();
        let kept = keep_what_needs_a_restart(&running, &mut new);
        assert_eq!(
            kept,
            ["relay", "limits.max_connections", "limits.threads", "cache"]
        );
        assert_eq!(new.relay.engine, running.relay.engine);
        assert_eq!(new.limits.max_connections, 100);
        assert_eq!(
            new.limits.threads,
            crate::config::ConnectionThreads::Count(0)
        );
        assert_eq!(format!("{:?}", new.cache), format!("{:?}", running.cache));
        // The rest is the new file's.
        assert_eq!(new.http.unwrap().via, "other");
        assert_eq!(new.limits.idle_timeout, std::time::Duration::from_secs(7));
        let mut same = running.clone();
        assert!(keep_what_needs_a_restart(&running, &mut same).is_empty());
    }
}
