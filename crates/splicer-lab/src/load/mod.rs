//! Load generators. Each is event-driven (one tokio runtime drives thousands of emulated
//! clients), runs on a client host, and prints one JSON [`Report`]: throughput, errors by
//! kind, and latency from an HDR histogram, plus a timeline and a CDF for plots.
//!
//! - [`sclient`]: closed-loop s-clients of seed 000 (connect, optional CONNECT and SSL
//!   emulation, HTTP/1.0 GET, read, close).
//! - [`surge`]: SURGE-like open-loop users (seed 002's workload model): Zipf popularity,
//!   lognormal/Pareto sizes, Pareto idle times, embedded objects.
//! - [`bulk`]: seed 003's loadclient/loadserver: connections pushing data as fast as
//!   they can into a sink that counts and checks every byte.
//! - [`persist`]: seed 004's stress test of one persistent connection at a fixed rate.
//! - [`queries`]: seed 004's sessions of queries on new connections, each split into
//!   connect, first byte and transfer.
//! - [`windows`]: seed 004's Table 1, a sender's window round trip by round trip, from
//!   the bursts a receiver reads.
//! - [`pingpong`]: one-byte request/response round trips on one connection.
//! - [`slowread`]: one client reading a body at a fixed rate (a download to a phone), for
//!   what the proxy holds behind it.
//! - [`wrk`]: `wrk` asking for the s-clients' object, for benchmarks whose clients must
//!   cost the bed little CPU.
//! - [`scrape`]: a Prometheus server's scrapes of Splicer's `/metrics`, beside a load
//!   (what metrics cost under load).
//!
//! Shared pieces: [`dial`] (direct, HTTP proxy, CONNECT or SOCKS5), [`http`] (an HTTP/1
//! GET that checks the deterministic body), [`Stats`] and [`Report`].

pub mod bulk;
pub mod dial;
pub mod http;
pub mod persist;
pub mod pingpong;
pub mod queries;
pub mod sclient;
pub mod scrape;
pub mod slowread;
pub mod surge;
pub mod windows;
pub mod wrk;

/// Parameters of a load that cannot go together; the message names the flags.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadParams(pub &'static str);

pub use dial::Via;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::measure::hist::{Latency, Summary};

/// When the statistics count: after the warm-up and before the cool-down (seed 000 excluded
/// 20 s at each end).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub start: Instant,
    pub warmup: Duration,
    pub duration: Duration,
    pub cooldown: Duration,
}

impl Window {
    pub fn new(duration: Duration, warmup: Duration, cooldown: Duration) -> Window {
        Window {
            start: Instant::now(),
            warmup,
            duration,
            cooldown,
        }
    }
    pub fn end(&self) -> Instant {
        self.start + self.duration
    }
    /// Whether an operation that began at `began` and ended at `ended` is counted.
    pub fn counts(&self, began: Instant, ended: Instant) -> bool {
        began >= self.start + self.warmup && ended + self.cooldown <= self.end()
    }
    /// Seconds of the measured interval.
    pub fn measured(&self) -> f64 {
        self.duration
            .saturating_sub(self.warmup + self.cooldown)
            .as_secs_f64()
    }
}

/// One second of a run: operations completed and bytes moved in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Second {
    pub t_s: u64,
    pub completed: u64,
    pub bytes: u64,
}

/// Results gathered by a generator's tasks.
#[derive(Default)]
pub struct Stats {
    pub latency: Latency,
    pub completed: u64,
    pub bytes: u64,
    pub errors: BTreeMap<String, u64>,
    /// The first message of each kind of error.
    pub first_errors: BTreeMap<String, String>,
    pub timeline: Vec<Second>,
}

/// [`Stats`] shared by a generator's tasks.
pub type Shared = Arc<Mutex<Stats>>;

impl Stats {
    pub fn shared() -> Shared {
        Arc::new(Mutex::new(Stats::default()))
    }

    /// Counts a completed operation in the timeline, and in the statistics if `counted`.
    pub fn done(&mut self, since: Instant, began: Instant, bytes: u64, counted: bool) {
        let now = Instant::now();
        let sec = now.saturating_duration_since(since).as_secs();
        while self.timeline.len() as u64 <= sec {
            let t_s = self.timeline.len() as u64;
            self.timeline.push(Second {
                t_s,
                ..Default::default()
            });
        }
        let s = &mut self.timeline[sec as usize];
        s.completed += 1;
        s.bytes += bytes;
        if counted {
            self.latency.record(now - began);
            self.completed += 1;
            self.bytes += bytes;
        }
    }

    pub fn error(&mut self, kind: &str) {
        *self.errors.entry(kind.to_string()).or_default() += 1;
    }

    /// Counts a failure and keeps its message if it is the first of its kind.
    pub fn failed(&mut self, f: &dial::Failed) {
        self.error(f.kind);
        self.first_errors
            .entry(f.kind.to_string())
            .or_insert_with(|| f.error.to_string());
    }
}

/// What a generator prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub generator: String,
    /// The generator's settings, as given.
    pub params: serde_json::Value,
    /// Seconds over which `completed`, `bytes` and `latency` were counted.
    pub measured_s: f64,
    pub completed: u64,
    pub bytes: u64,
    pub per_second: f64,
    pub mbit_per_second: f64,
    /// Errors over the whole run (warm-up and cool-down included), by kind.
    pub errors: BTreeMap<String, u64>,
    /// The first message of each kind of error.
    #[serde(default)]
    pub first_errors: BTreeMap<String, String>,
    pub latency: Summary,
    /// Generator-specific figures.
    pub extra: serde_json::Value,
    /// Runs before 2026-11-27 kept neither the timeline nor the distribution
    /// (docs/experiments/rosu-mixed/fig17-pool-off); their reports use neither.
    #[serde(default)]
    pub timeline: Vec<Second>,
    /// (milliseconds, fraction at or below) points of the latency distribution.
    #[serde(default)]
    pub cdf: Vec<(f64, f64)>,
}

impl Report {
    pub fn new(
        generator: &str,
        params: serde_json::Value,
        stats: &Stats,
        measured_s: f64,
    ) -> Report {
        let secs = measured_s.max(1e-9);
        Report {
            generator: generator.to_string(),
            params,
            measured_s,
            completed: stats.completed,
            bytes: stats.bytes,
            per_second: stats.completed as f64 / secs,
            mbit_per_second: stats.bytes as f64 * 8.0 / secs / 1e6,
            errors: stats.errors.clone(),
            first_errors: stats.first_errors.clone(),
            latency: stats.latency.summary(),
            extra: serde_json::Value::Null,
            timeline: stats.timeline.clone(),
            cdf: stats.latency.cdf(),
        }
    }

    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }

    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("plain data")
    }
}

/// A multi-threaded runtime for a generator, with the descriptor limit raised so one
/// process can hold thousands of connections.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let _ = splicer_sys::process::raise_nofile_limit();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}
