//! The figures read at each scrape from what the server shares: the relay's per-engine
//! counters and the kernel engines' state, the pools, the cache's stores, the edge's
//! servers, and the process. Nothing here is counted per request.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Weak;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use splicer_relay::Engine;

use crate::config::Protocol;
use crate::shared::Shared;

/// The state of one server, read at a scrape (nothing once it is gone).
#[derive(Debug)]
pub(super) struct State(pub(super) Weak<Shared>);

const ENGINES: [Engine; 4] = [
    Engine::Copy,
    Engine::Pipe,
    Engine::Sockmap,
    Engine::Ipsplice,
];

/// One metric: its samples, each with its labels.
fn family<L: EncodeLabelSet, M: EncodeMetric>(
    enc: &mut DescriptorEncoder<'_>,
    (name, help, kind): (&str, &str, MetricType),
    samples: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, metric) in samples {
        metric.encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// One gauge without labels.
fn gauge(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: f64) -> fmt::Result {
    let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

/// One counter without labels (named without `_total`, which the encoder adds).
fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> fmt::Result {
    let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}

fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl Collector for State {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        let Some(shared) = self.0.upgrade() else {
            return Ok(());
        };
        relay(&mut enc, &shared)?;
        upstreams(&mut enc, &shared)?;
        cache(&mut enc, &shared)?;
        process(&mut enc)
    }
}

/// Per engine: tunnels, one-way splices, bytes, declines; the kernel engines' maps; the
/// relay's pools.
fn relay(enc: &mut DescriptorEncoder<'_>, shared: &Shared) -> fmt::Result {
    let relay = &shared.relay;
    let per = |i: usize| {
        ENGINES.iter().map(move |e| {
            let c = relay.counters().get(*e);
            let v = [c.0, c.1, c.2, c.3][i];
            ([("engine", e.name())], ConstCounter::new(v))
        })
    };
    let c = MetricType::Counter;
    family(
        enc,
        ("splicer_engine_tunnels", "Tunnels run, per engine", c),
        per(0),
    )?;
    family(
        enc,
        (
            "splicer_engine_splices",
            "One-way splices run (HTTP bodies), per engine",
            c,
        ),
        per(1),
    )?;
    family(
        enc,
        ("splicer_engine_bytes", "Bytes moved, per engine", c),
        per(2),
    )?;
    family(
        enc,
        (
            "splicer_engine_declined",
            "Tunnels and splices a kernel engine declined",
            c,
        ),
        per(3),
    )?;
    // The kernel engines' figures are there (as 0) when a program is not loaded, so a
    // dashboard's panels stay; `splicer_engine_loaded` tells the two apart.
    let entries = relay.ipsplice_entries();
    let sockmap = relay.sockmap_stats();
    family(
        enc,
        (
            "splicer_engine_loaded",
            "Whether a kernel engine's program is loaded (copy and pipe need none)",
            MetricType::Gauge,
        ),
        [
            ("sockmap", sockmap.is_some()),
            ("ipsplice", entries.is_some()),
        ]
        .map(|(e, l)| ([("engine", e)], ConstGauge::new(i64::from(l)))),
    )?;
    gauge(
        enc,
        "splicer_ipsplice_flow_entries",
        "Entries in the ipsplice flow map (two per spliced tunnel, lingering ones included)",
        entries.unwrap_or(0) as f64,
    )?;
    pacer(enc, relay)?;
    let s = sockmap.unwrap_or_default();
    gauge(
        enc,
        "splicer_sockmap_queued_bytes",
        "Bytes in the running sockmap tunnels' redirect queues, as their watches last saw",
        s.queued as f64,
    )?;
    counter(
        enc,
        "splicer_sockmap_gate_closings",
        "Times a sockmap direction's redirect queue reached sockmap_max_queue and its \
         source was held back",
        s.gate_closings,
    )?;
    counter(
        enc,
        "splicer_sockmap_trimmed_bytes",
        "Bytes the sockmap program cut off retransmissions that overlapped consumed ones",
        s.trimmed_bytes,
    )?;
    counter(
        enc,
        "splicer_sockmap_failed_trims",
        "Cuts the sockmap program could not make (their tunnels were reset)",
        s.failed_trims,
    )?;
    let pools = relay.pool_stats();
    gauge(
        enc,
        "splicer_relay_idle_pipes",
        "Pipes kept idle for the pipe engine",
        pools.idle_pipes as f64,
    )?;
    gauge(
        enc,
        "splicer_relay_idle_buffers",
        "Buffers kept idle for the copy engine",
        pools.idle_buffers as f64,
    )
}

/// The idle pool, the edge's pipelined lines, warm pools and servers.
fn upstreams(enc: &mut DescriptorEncoder<'_>, shared: &Shared) -> fmt::Result {
    let up = &shared.upstreams;
    gauge(
        enc,
        "splicer_upstream_idle_connections",
        "Idle upstream HTTP connections kept for reuse",
        up.pool.len() as f64,
    )?;
    let Some(edge) = &up.edge else {
        return Ok(());
    };
    gauge(
        enc,
        "splicer_edge_pipelined_lines",
        "The edge's pipelined upstream connections open",
        up.lines.lines() as f64,
    )?;
    let servers: Vec<(String, String, bool, i64)> = edge
        .groups()
        .iter()
        .flat_map(|g| {
            let members = g.members();
            let servers = members.servers.clone();
            servers.into_iter().map(move |s| {
                let shortfall = match g.protocol {
                    Protocol::Http1 => {
                        let origin = crate::upstream::groups::Group::authority(s).to_string();
                        g.min_idle.saturating_sub(up.pool.idle_for(&origin))
                    }
                    Protocol::H2c => usize::from(g.min_idle > 0 && !up.h2.is_open(s)),
                };
                let shortfall = i64::try_from(shortfall).unwrap_or(i64::MAX);
                let is_up = members.is_up(s).unwrap_or(false);
                (g.name.clone(), s.to_string(), is_up, shortfall)
            })
        })
        .collect();
    let labels = |g: &str, s: &str| [("group", g.to_string()), ("server", s.to_string())];
    family(
        enc,
        (
            "splicer_edge_server_up",
            "Whether an edge server passes its health checks (1; always 1 without checks)",
            MetricType::Gauge,
        ),
        servers
            .iter()
            .map(|(g, s, u, _)| (labels(g, s), ConstGauge::new(i64::from(*u)))),
    )?;
    family(
        enc,
        (
            "splicer_edge_warm_shortfall",
            "Warm connections an edge server lacks to reach its group's min_idle",
            MetricType::Gauge,
        ),
        servers
            .iter()
            .map(|(g, s, _, n)| (labels(g, s), ConstGauge::new(*n))),
    )
}

/// The cache's stores and what its fills did.
fn cache(enc: &mut DescriptorEncoder<'_>, shared: &Shared) -> fmt::Result {
    let Some(cache) = &shared.cache else {
        return Ok(());
    };
    let mem = cache.memory();
    let mut tiers = vec![("memory", mem.len(), mem.bytes(), mem.capacity())];
    if let Some(d) = cache.disk() {
        let size = cache.settings().disk.as_ref().map_or(0, |s| s.size);
        tiers.push(("disk", d.len(), d.bytes(), size));
    }
    let g = MetricType::Gauge;
    family(
        enc,
        ("splicer_cache_objects", "Responses stored, per tier", g),
        tiers
            .iter()
            .map(|(t, n, _, _)| ([("tier", *t)], ConstGauge::new(*n as f64))),
    )?;
    family(
        enc,
        ("splicer_cache_bytes", "Bytes stored, per tier", g),
        tiers
            .iter()
            .map(|(t, _, b, _)| ([("tier", *t)], ConstGauge::new(*b as f64))),
    )?;
    family(
        enc,
        ("splicer_cache_capacity_bytes", "Each tier's capacity", g),
        tiers
            .iter()
            .map(|(t, _, _, c)| ([("tier", *t)], ConstGauge::new(*c as f64))),
    )?;
    let c = cache.counters();
    counter(
        enc,
        "splicer_cache_stored",
        "Responses stored",
        load(&c.stored),
    )?;
    counter(
        enc,
        "splicer_cache_collapsed",
        "Misses that waited for another request's fill instead of going upstream",
        load(&c.collapsed),
    )?;
    counter(
        enc,
        "splicer_cache_fills_failed",
        "Fills given up (client gone and too much left, too large, origin failed)",
        load(&c.fills_failed),
    )?;
    counter(
        enc,
        "splicer_cache_invalidated",
        "Stored responses invalidated by unsafe methods or purges",
        load(&c.invalidated),
    )
}

/// The pacer, per front end and class: how long paced splices waited, how often they
/// deferred to the proxy's own work, and the kernel splices running (a class's `total` is
/// shared over them).
fn pacer(enc: &mut DescriptorEncoder<'_>, relay: &splicer_relay::Relay) -> fmt::Result {
    use splicer_relay::{Class, Front};
    let each = || {
        Front::ALL.into_iter().flat_map(move |f| {
            Class::ALL.into_iter().map(move |c| {
                (
                    [("front", f.name()), ("class", c.name())],
                    relay.pacer_stats(f, c),
                )
            })
        })
    };
    family(
        enc,
        (
            "splicer_pacer_wait_seconds",
            "Time the copy and pipe engines' splices waited for their cap or the proxy's work",
            MetricType::Counter,
        ),
        each().map(|(l, s)| (l, ConstCounter::new(s.waited.as_secs_f64()))),
    )?;
    family(
        enc,
        (
            "splicer_pacer_holds",
            "Reads of the copy and pipe engines' splices that deferred to the proxy's work",
            MetricType::Counter,
        ),
        each().map(|(l, s)| (l, ConstCounter::new(s.holds))),
    )?;
    family(
        enc,
        (
            "splicer_pacer_kernel_splices",
            "Kernel engine splices running, paced or not",
            MetricType::Gauge,
        ),
        each().map(|(l, s)| (l, ConstGauge::new(s.kernel_splices as i64))),
    )
}

/// The process's resources, under the names Prometheus's own clients give them.
fn process(enc: &mut DescriptorEncoder<'_>) -> fmt::Result {
    if let Ok(cpu) = splicer_sys::process::cpu_time() {
        let m = enc.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time spent",
            None,
            MetricType::Counter,
        )?;
        ConstCounter::new(cpu.as_secs_f64()).encode(m)?;
    }
    if let Some(rss) = resident_bytes() {
        gauge(
            enc,
            "process_resident_memory_bytes",
            "Resident memory size",
            rss as f64,
        )?;
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        gauge(
            enc,
            "process_open_fds",
            "Open file descriptors",
            fds.count() as f64,
        )?;
    }
    if let Some(max) = max_fds() {
        gauge(enc, "process_max_fds", "The open-file limit", max as f64)?;
    }
    Ok(())
}

/// `VmRSS` of /proc/self/status, in bytes.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The soft limit of `Max open files` in /proc/self/limits.
fn max_fds() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_figures_are_read() {
        assert!(resident_bytes().is_some_and(|b| b > 1 << 20));
        assert!(max_fds().is_some_and(|n| n >= 64));
    }
}
