//! Metrics in the Prometheus/OpenMetrics text format, served by the admin listener at
//! `/metrics` (docs/operations.md lists them).
//!
//! Two kinds:
//! - events, counted as they happen ([`Events`], process-wide): connections accepted and
//!   refused, requests by status class, cache results, fallbacks, and the durations of
//!   a request's phases. Most are counted once per request, from its access record
//!   ([`Events::record`]), so the figures and the access log cannot disagree.
//! - state, read at each scrape (`state`): the relay's per-engine counters, the kernel
//!   engines' maps, the pools, the cache's stores, the edge's servers, the process.
//!
//! # Layout
//! - this file: the event metrics and the registry a scrape encodes.
//! - `state`: the figures read at a scrape from what the server shares.
//! - `admin`: the admin listener.

use std::sync::{Arc, LazyLock, OnceLock, Weak};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::access::Record;
use crate::config::Front;
use crate::shared::Shared;

pub(crate) mod admin;
mod seconds;
mod state;

use seconds::Seconds;

pub use admin::Admin;

/// A label set of fixed names.
type Labels<const N: usize> = [(&'static str, &'static str); N];
/// Histograms of durations in seconds (100 µs to about 26 s, doubling), per front end.
type Durations = Family<Labels<1>, Seconds>;

/// What is counted as it happens, in every front end and connection task.
#[derive(Debug)]
pub struct Events {
    accepted: Family<Labels<1>, Counter>,
    open: Family<Labels<1>, Gauge>,
    refused: Family<Labels<2>, Counter>,
    requests: Family<Labels<2>, Counter>,
    failed: Family<Labels<2>, Counter>,
    cache: Family<Labels<1>, Counter>,
    /// Engine and reason class (`crate::metrics::fallback_labels`): both are bounded sets.
    fallbacks: Family<[(&'static str, String); 2], Counter>,
    reloads: Family<Labels<1>, Counter>,
    head_read: Durations,
    first_byte: Durations,
    duration: Durations,
    connect: Seconds,
    /// Handles into the families above for what every request counts, per front end:
    /// found in a family once (a lock and a hash of the labels) instead of per request.
    /// Made at first use, so that a series appears when first counted, as in the family.
    per_front: [PerFront; 3],
    /// Handles into `cache`, by [`RESULTS`] index.
    cache_results: [OnceLock<Counter>; RESULTS.len()],
}

/// One front end's handles (clones share the family's series).
#[derive(Debug, Default)]
struct PerFront {
    /// By [`CLASSES`] index.
    requests: [OnceLock<Counter>; CLASSES.len()],
    head_read: OnceLock<Seconds>,
    first_byte: OnceLock<Seconds>,
    duration: OnceLock<Seconds>,
}

/// Every value [`status_class`] gives.
const CLASSES: [&str; 9] = [
    "1xx",
    "2xx",
    "3xx",
    "4xx",
    "5xx",
    "none",
    "tunnelled",
    "failed",
    "rejected",
];

/// The cache results counted with a handle found once ([`Events::cache_results`]): the
/// access-log words of `splicer_cache::CacheResult` and `purge`. A word not here is still
/// counted, found in the family each time.
const RESULTS: [&str; 13] = [
    "hit",
    "stale-hit",
    "stale-if-error",
    "refresh",
    "refresh-modified",
    "miss",
    "vary-miss",
    "refresh-request",
    "collapsed",
    "bypass",
    "method",
    "only-if-cached",
    "purge",
];

/// The process's event metrics.
pub fn events() -> &'static Events {
    static EVENTS: LazyLock<Events> = LazyLock::new(|| {
        let e = new_events();
        // Both results are shown from the start (at 0), so an alert on refusals has a
        // series to watch before the first one.
        for result in ["taken", "refused"] {
            drop(e.reloads.get_or_create(&[("result", result)]));
        }
        e
    });
    &EVENTS
}

fn new_events() -> Events {
    Events {
        accepted: Family::default(),
        open: Family::default(),
        refused: Family::default(),
        requests: Family::default(),
        failed: Family::default(),
        cache: Family::default(),
        fallbacks: Family::default(),
        reloads: Family::default(),
        head_read: Family::default(),
        first_byte: Family::default(),
        duration: Family::default(),
        connect: Seconds::default(),
        per_front: Default::default(),
        cache_results: Default::default(),
    }
}

impl Events {
    /// A connection accepted on `front`'s listener; the guard counts it open until dropped.
    pub fn accepted(&self, front: &'static str) -> Open {
        self.accepted.get_or_create(&[("front", front)]).inc();
        let gauge = self.open.get_or_create(&[("front", front)]).clone();
        gauge.inc();
        Open(gauge)
    }

    /// A connection or request refused, with the reason its access line gives
    /// (`connection-limit`, `auth-failed`, `denied`, …).
    fn refused(&self, front: &'static str, reason: &'static str) {
        self.refused
            .get_or_create(&[("front", front), ("reason", reason)])
            .inc();
    }

    /// A configuration reload (SIGHUP): taken, or refused (the running one kept).
    pub fn reloaded(&self, taken: bool) {
        let result = if taken { "taken" } else { "refused" };
        self.reloads.get_or_create(&[("result", result)]).inc();
    }

    /// An upstream connection opened in `took`.
    pub fn connected(&self, took: Duration) {
        self.connect.observe(took);
    }

    /// Counts a finished exchange from its access record.
    pub fn record(&self, rec: &Record, total: Duration) {
        let front = rec.front.name();
        let class = status_class(rec);
        let mine = &self.per_front[front_index(rec.front)];
        let labels = [("front", front), ("class", class)];
        match CLASSES.iter().position(|c| *c == class) {
            Some(i) => mine.requests[i]
                .get_or_init(|| self.requests.get_or_create(&labels).clone())
                .inc(),
            // A class [`CLASSES`] lacks is still counted, found in the family each time.
            None => self.requests.get_or_create(&labels).inc(),
        };
        let durations = [
            (&mine.duration, &self.duration, Some(total)),
            (&mine.head_read, &self.head_read, rec.head_read),
            (&mine.first_byte, &self.first_byte, rec.first_byte),
        ];
        for (cell, family, took) in durations {
            if let Some(d) = took {
                cell.get_or_init(|| family.get_or_create(&[("front", front)]).clone())
                    .observe(d);
            }
        }
        if let Some(result) = rec.cache {
            let labels = [("result", result)];
            match RESULTS.iter().position(|r| *r == result) {
                Some(i) => self.cache_results[i]
                    .get_or_init(|| self.cache.get_or_create(&labels).clone())
                    .inc(),
                None => self.cache.get_or_create(&labels).inc(),
            };
        }
        if let Some(reason) = &rec.fallback {
            let (engine, why) = fallback_labels(reason);
            self.fallbacks
                .get_or_create(&[("engine", engine.to_string()), ("reason", why)])
                .inc();
        }
        match rec.failure() {
            Some((_, Some(reason))) => self.refused(front, reason),
            Some((side, None)) => {
                self.failed
                    .get_or_create(&[("front", front), ("side", side)])
                    .inc();
            }
            None => {}
        }
    }
}

/// Counts a connection as open while it lives.
#[derive(Debug)]
pub struct Open(Gauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// `front`'s place in [`Events::per_front`].
fn front_index(front: Front) -> usize {
    match front {
        Front::Socks => 0,
        Front::Http => 1,
        Front::Edge => 2,
    }
}

/// An exchange's status class (one of [`CLASSES`]): `1xx` … `5xx` for HTTP (`none` when
/// no response was written); for SOCKS `tunnelled` (a tunnel ran), `rejected` (a reply other than
/// success) or `failed` (the handshake ended before any reply).
fn status_class(rec: &Record) -> &'static str {
    if rec.front == Front::Socks {
        return match (rec.engine.is_some(), rec.status) {
            (true, _) => "tunnelled",
            (false, 0) => "failed",
            (false, _) => "rejected",
        };
    }
    match rec.status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "none",
    }
}

/// A fallback's labels: the engine that declined (the reason's `engine:` prefix) and the
/// reason's class: its words up to the first `:` or `(`, less those with a digit (an
/// address, a count), so that `no route to 10.0.0.7` and `no route to 10.0.0.8` count
/// together and the label set stays bounded.
pub fn fallback_labels(reason: &str) -> (&str, String) {
    let (engine, rest) = reason.split_once(": ").unwrap_or(("-", reason));
    let end = rest.find([':', '(']).unwrap_or(rest.len());
    let words: Vec<&str> = rest[..end]
        .split_whitespace()
        .filter(|w| !w.contains(|c: char| c.is_ascii_digit()))
        .collect();
    let mut class: String = words.join(" ").chars().take(64).collect();
    if class.is_empty() {
        class.push('-');
    }
    (engine, class)
}

/// The registry a scrape encodes: the event metrics and the state of `shared`'s server.
pub(crate) fn registry(shared: Weak<Shared>) -> Registry {
    let e = events();
    let mut r = Registry::default();
    r.register(
        "splicer_connections_accepted",
        "Connections accepted, per front end",
        e.accepted.clone(),
    );
    r.register(
        "splicer_connections_open",
        "Connections open now, per front end",
        e.open.clone(),
    );
    r.register(
        "splicer_refused",
        "Connections (SOCKS) and requests (HTTP) refused, per front end and reason \
         (as the access log's end: connection-limit, auth-failed, denied, ...)",
        e.refused.clone(),
    );
    r.register(
        "splicer_requests",
        "Requests (HTTP) and connections (SOCKS) finished, per front end and status class",
        e.requests.clone(),
    );
    r.register(
        "splicer_failures",
        "Exchanges that failed, per front end and the side that failed \
         (client, upstream, internal)",
        e.failed.clone(),
    );
    r.register(
        "splicer_cache_results",
        "What the cache did for a request (hit, miss, refresh, bypass, collapsed, ...)",
        e.cache.clone(),
    );
    r.register(
        "splicer_engine_fallbacks",
        "Splices and tunnels a kernel engine declined, per engine and reason class",
        e.fallbacks.clone(),
    );
    r.register(
        "splicer_config_reloads",
        "Configuration reloads (SIGHUP), taken or refused (the running configuration kept)",
        e.reloads.clone(),
    );
    r.register(
        "splicer_head_read_seconds",
        "From a request's first byte to its head read",
        e.head_read.clone(),
    );
    r.register(
        "splicer_upstream_connect_seconds",
        "Opening an upstream connection (new ones only)",
        e.connect.clone(),
    );
    r.register(
        "splicer_first_byte_seconds",
        "From a request's first byte to the upstream's response head",
        e.first_byte.clone(),
    );
    r.register(
        "splicer_request_duration_seconds",
        "From a request's first byte (a SOCKS connection's accept) to its end",
        e.duration.clone(),
    );
    r.register_collector(Box::new(state::State(shared)));
    r
}

/// The metrics of `shared`'s server as OpenMetrics text.
pub fn encode(shared: &Arc<Shared>) -> String {
    let mut out = String::with_capacity(16 << 10);
    // Writing to a String cannot fail; an encoder's error would be a bug in a collector,
    // and the text up to it is still what can be served.
    if let Err(e) =
        prometheus_client::encoding::text::encode(&mut out, &registry(Arc::downgrade(shared)))
    {
        tracing::warn!("metrics: encoding stopped: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_reasons_are_classed_without_their_details() {
        assert_eq!(
            fallback_labels("ipsplice: no route to 10.0.0.7"),
            ("ipsplice", "no route to".into())
        );
        assert_eq!(
            fallback_labels("ipsplice: interface veth0: No such device (os error 19)"),
            ("ipsplice", "interface".into())
        );
        assert_eq!(
            fallback_labels("sockmap: Operation not permitted (os error 1)"),
            ("sockmap", "Operation not permitted".into())
        );
        assert_eq!(
            fallback_labels("ipsplice: TCP timestamps on one leg only"),
            ("ipsplice", "TCP timestamps on one leg only".into())
        );
        assert_eq!(
            fallback_labels("ipsplice: 127.0.0.1 is on this host (no interface to splice on)"),
            ("ipsplice", "is on this host".into())
        );
        assert_eq!(fallback_labels("odd"), ("-", "odd".into()));
        assert_eq!(fallback_labels("pipe: 42"), ("pipe", "-".into()));
    }

    #[test]
    fn status_classes() {
        let client = "127.0.0.1:1".parse().expect("an address");
        let mut rec = Record::new(Front::Http, client);
        for (status, class) in [(0, "none"), (204, "2xx"), (404, "4xx"), (503, "5xx")] {
            rec.status = status;
            assert_eq!(status_class(&rec), class);
        }
        let mut rec = Record::new(Front::Socks, client);
        assert_eq!(status_class(&rec), "failed");
        rec.status = 2;
        assert_eq!(status_class(&rec), "rejected");
        rec.engine = Some("pipe");
        assert_eq!(status_class(&rec), "tunnelled");
        rec.finish("ok");
    }
}
