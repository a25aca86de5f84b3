//! The load generators' flags (each prints one JSON report) and the parameters they make.

use std::net::SocketAddr;

use clap::Args;
use splicer_lab::load::{self, Via};

use super::{seconds, BadValue};

#[derive(Args)]
pub struct Sclient {
    #[arg(long)]
    pub origin: SocketAddr,
    #[arg(long, default_value = "direct")]
    pub via: Via,
    #[arg(long, default_value_t = 20)]
    pub clients: usize,
    #[arg(long, default_value_t = 1024)]
    pub size: u64,
    #[arg(long)]
    pub cacheable: bool,
    /// Emulate the SSL handshake before the GET (needs `direct` or `connect://`).
    #[arg(long)]
    pub ssl: bool,
    /// Share of abbreviated SSL handshakes (seed 000: 60%).
    #[arg(long, default_value_t = 0.6)]
    pub abbreviated: f64,
    #[arg(long, default_value_t = 60.0, value_parser = seconds)]
    pub duration: f64,
    #[arg(long, default_value_t = 20.0, value_parser = seconds)]
    pub warmup: f64,
    #[arg(long, default_value_t = 20.0, value_parser = seconds)]
    pub cooldown: f64,
    #[arg(long, default_value_t = 60.0, value_parser = seconds)]
    pub timeout: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Requests one after the other on one kept-alive connection per client instead of a
    /// new connection per request.
    #[arg(long)]
    pub keep_alive: bool,
    /// With --keep-alive, requests per connection (0: no bound); the last is HTTP/1.0, so
    /// the server closes after it.
    #[arg(long, default_value_t = 0)]
    pub per_connection: u32,
    /// Think time after each request, seconds.
    #[arg(long, default_value_t = 0.0, value_parser = seconds)]
    pub pause: f64,
}

/// `wrk` with the s-clients' flags (no SSL, no think time, no cool-down).
#[derive(Args)]
pub struct Wrk {
    #[arg(long)]
    pub origin: SocketAddr,
    /// direct or http://PROXY.
    #[arg(long, default_value = "direct")]
    pub via: Via,
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
    /// wrk's threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    #[arg(long, default_value_t = 1024)]
    pub size: u64,
    #[arg(long)]
    pub cacheable: bool,
    #[arg(long, default_value_t = 10.0, value_parser = seconds)]
    pub duration: f64,
    /// Seconds of a first wrk run whose latencies are not counted.
    #[arg(long, default_value_t = 2.0, value_parser = seconds)]
    pub warmup: f64,
    #[arg(long, default_value_t = 10.0, value_parser = seconds)]
    pub timeout: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Kept-alive connections; without it every request asks `Connection: close`.
    #[arg(long)]
    pub keep_alive: bool,
}

impl Wrk {
    /// The generator's parameters.
    pub fn params(self) -> load::wrk::Params {
        load::wrk::Params {
            origin: self.origin,
            via: self.via,
            clients: self.clients,
            threads: self.threads,
            size: self.size,
            cacheable: self.cacheable,
            seed: self.seed,
            duration_s: self.duration,
            warmup_s: self.warmup,
            timeout_s: self.timeout,
            keep_alive: self.keep_alive,
        }
    }
}

#[derive(Args)]
pub struct Surge {
    #[arg(long)]
    pub origin: SocketAddr,
    #[arg(long, default_value = "direct")]
    pub via: Via,
    #[arg(long, default_value_t = 100)]
    pub users: usize,
    #[arg(long, default_value_t = 2000)]
    pub files: u64,
    #[arg(long, default_value_t = 16 << 20)]
    pub max_size: u64,
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    #[arg(long, default_value_t = 60.0, value_parser = seconds)]
    pub duration: f64,
    #[arg(long, default_value_t = 10.0, value_parser = seconds)]
    pub warmup: f64,
    #[arg(long, default_value_t = 10.0, value_parser = seconds)]
    pub cooldown: f64,
    #[arg(long, default_value_t = 60.0, value_parser = seconds)]
    pub timeout: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Args)]
pub struct Loadclient {
    #[arg(long)]
    pub sink: SocketAddr,
    #[arg(long, default_value = "direct")]
    pub via: Via,
    #[arg(long, default_value_t = 1)]
    pub conns: usize,
    #[arg(long, default_value_t = 1 << 30)]
    pub bytes: u64,
    #[arg(long)]
    pub both_ways: bool,
    #[arg(long, default_value_t = 600.0, value_parser = seconds)]
    pub timeout: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Args)]
pub struct Persist {
    #[arg(long)]
    pub origin: SocketAddr,
    #[arg(long, default_value = "direct")]
    pub via: Via,
    /// Requests per second.
    #[arg(long, default_value_t = 10.0)]
    pub rate: f64,
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    #[arg(long, default_value_t = 50_000)]
    pub size: u64,
    /// The round trip the latencies are compared with (default: the TCP connect time).
    #[arg(long)]
    pub rtt_ms: Option<f64>,
    /// Requests due in the first this many seconds are counted apart as well (the
    /// connection's window opening): the report gives the slow ones of all requests and of
    /// those after.
    #[arg(long, default_value_t = 0.0)]
    pub warmup_secs: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Args)]
pub struct Windows {
    #[arg(long)]
    pub origin: SocketAddr,
    #[arg(long, default_value_t = 55_000)]
    pub size: u64,
    #[arg(long, default_value_t = 10)]
    pub count: u64,
    /// The path's round trip (reads more than half of it apart are different bursts).
    #[arg(long)]
    pub rtt_ms: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl Windows {
    /// The generator's parameters.
    pub fn params(self) -> load::windows::Params {
        load::windows::Params {
            origin: self.origin,
            size: self.size,
            count: self.count,
            rtt_ms: self.rtt_ms,
            seed: self.seed,
        }
    }
}

#[derive(Args)]
pub struct Slowread {
    #[arg(long)]
    pub origin: SocketAddr,
    #[arg(long, default_value = "direct")]
    pub via: Via,
    #[arg(long, default_value_t = 64 << 20)]
    pub size: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// HTTP/1.1, the connection kept open after the body (default: HTTP/1.0).
    #[arg(long)]
    pub keep_alive: bool,
    /// Bytes per second the client reads (125000: 1 Mbit/s).
    #[arg(long, default_value_t = 125_000)]
    pub rate: u64,
    /// Longest the client reads before it closes the connection.
    #[arg(long, default_value_t = 20.0)]
    pub seconds: f64,
}

impl Slowread {
    /// The generator's parameters.
    pub fn params(self) -> load::slowread::Params {
        load::slowread::Params {
            origin: self.origin,
            via: self.via,
            size: self.size,
            seed: self.seed,
            keep_alive: self.keep_alive,
            rate: self.rate,
            seconds: self.seconds,
        }
    }
}

/// Think time in milliseconds: `MS` or `LOW-HIGH`.
fn think_ms(s: &str) -> Result<(u64, u64), BadValue> {
    let ms = |v: &str| {
        v.parse::<u64>()
            .map_err(|_| BadValue::Milliseconds(s.to_string()))
    };
    match s.split_once('-') {
        Some((lo, hi)) => Ok((ms(lo)?, ms(hi)?)),
        None => Ok((ms(s)?, ms(s)?)),
    }
}

#[derive(Args)]
pub struct Queries {
    #[arg(long)]
    pub target: SocketAddr,
    #[arg(long, default_value_t = 10)]
    pub clients: usize,
    #[arg(long, default_value_t = 10)]
    pub sessions: usize,
    #[arg(long, default_value_t = 6)]
    pub queries: usize,
    /// The first queries of every session, not counted (the paper drops queries 1-2).
    #[arg(long, default_value_t = 2)]
    pub drop: usize,
    #[arg(long, default_value_t = 55_000)]
    pub size: u64,
    #[arg(long, default_value = "50-400", value_parser = think_ms)]
    pub think_ms: (u64, u64),
    #[arg(long, default_value_t = 30.0, value_parser = seconds)]
    pub timeout: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl Sclient {
    /// The generator's parameters.
    pub fn params(self) -> load::sclient::Params {
        load::sclient::Params {
            origin: self.origin,
            via: self.via,
            clients: self.clients,
            size: self.size,
            cacheable: self.cacheable,
            ssl: self.ssl,
            abbreviated: self.abbreviated,
            duration_s: self.duration,
            warmup_s: self.warmup,
            cooldown_s: self.cooldown,
            timeout_s: self.timeout,
            seed: self.seed,
            keep_alive: self.keep_alive,
            per_connection: self.per_connection,
            pause_s: self.pause,
        }
    }
}

impl Surge {
    /// The generator's parameters.
    pub fn params(self) -> load::surge::Params {
        load::surge::Params {
            origin: self.origin,
            via: self.via,
            users: self.users,
            files: self.files,
            max_size: self.max_size,
            time_scale: self.time_scale,
            duration_s: self.duration,
            warmup_s: self.warmup,
            cooldown_s: self.cooldown,
            timeout_s: self.timeout,
            seed: self.seed,
        }
    }
}

impl Loadclient {
    /// The generator's parameters.
    pub fn params(self) -> load::bulk::Params {
        load::bulk::Params {
            sink: self.sink,
            via: self.via,
            conns: self.conns,
            bytes: self.bytes,
            both_ways: self.both_ways,
            seed: self.seed,
            timeout_s: self.timeout,
        }
    }
}

impl Persist {
    /// The generator's parameters.
    pub fn params(self) -> load::persist::Params {
        load::persist::Params {
            origin: self.origin,
            via: self.via,
            rate: self.rate,
            count: self.count,
            size: self.size,
            rtt_ms: self.rtt_ms,
            warmup_secs: self.warmup_secs,
            seed: self.seed,
        }
    }
}

impl Queries {
    /// The generator's parameters.
    pub fn params(self) -> load::queries::Params {
        load::queries::Params {
            target: self.target,
            clients: self.clients,
            sessions: self.sessions,
            queries: self.queries,
            drop: self.drop,
            size: self.size,
            think_ms: self.think_ms,
            timeout_s: self.timeout,
            seed: self.seed,
        }
    }
}
