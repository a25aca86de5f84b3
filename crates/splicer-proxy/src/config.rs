//! The configuration model: what `splicer.toml` may contain and its defaults. Every key is
//! documented in docs/configuration.md.
//!
//! # Layout
//! - this file: the sections and their defaults, the value parsers serde uses.
//! - `check`: reading a file and the checks that need more than one key (every problem,
//!   each with its key); `locate`: the line of a key in the file.
//! - `cache`, `edge`, `tcp`: those sections and their own checks.
//! - `retired`: keys still accepted that no longer mean anything.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use splicer_relay::{PacerConfig, Pacing, RelayConfig};

mod cache;
mod check;
mod edge;
mod locate;
mod retired;
mod tcp;
pub use cache::{parse_size, CacheConfig};
pub use check::{ConfigError, ConfigErrors, Problems};
pub use edge::{
    Balance, EdgeConfig, HealthConfig, Protocol, RouteConfig, ServerName, UpstreamGroupConfig,
};
pub use tcp::TcpTuning;

/// The whole configuration. In a file, a front end runs only when its section is present.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default = "Config::file_defaults")]
pub struct Config {
    pub log: LogConfig,
    /// The relay's configuration, used as it is.
    #[serde(deserialize_with = "retired::relay_section")]
    pub relay: RelayConfig,
    pub limits: Limits,
    /// The SOCKS5 front end; absent means not running.
    pub socks: Option<SocksConfig>,
    /// The HTTP forward proxy front end; absent means not running.
    pub http: Option<HttpConfig>,
    /// The reverse proxy near clients; absent means not running.
    pub edge: Option<EdgeConfig>,
    /// Users for SOCKS5 username/password and HTTP Basic proxy authentication.
    pub users: Vec<User>,
    pub acl: AclConfig,
    /// The HTTP front end's cache.
    pub cache: CacheConfig,
    /// The admin listener (`/metrics`); absent means not running.
    pub admin: Option<AdminConfig>,
    /// How fast splices may run, per class (docs/pacer.md); a front end's own `pacer`
    /// table replaces it for that front end.
    pub pacer: PacerConfig,
}

impl Config {
    /// How the relay paces each front end: its own `pacer` table, or `[pacer]`.
    pub fn pacing(&self) -> Pacing {
        let mut p = Pacing::default();
        let own = [
            (Front::Socks, self.socks.as_ref().and_then(|s| s.pacer)),
            (Front::Http, self.http.as_ref().and_then(|h| h.pacer)),
            (Front::Edge, self.edge.as_ref().and_then(|e| e.pacer)),
        ];
        for (front, table) in own {
            p.set(front, table.unwrap_or(self.pacer));
        }
        p
    }

    /// The idle upstream pool's bounds: per origin and in all (`[http] pool_per_origin` and
    /// `pool_max_idle`, each `limits.max_connections` when unset: a client connection holds
    /// at most one upstream connection at a time, so a pool that size never closes a
    /// connection the load will ask for again).
    pub fn pool_bounds(&self) -> (usize, usize) {
        let http = self.http.as_ref();
        let clients = self.limits.max_connections;
        (
            http.and_then(|h| h.pool_per_origin).unwrap_or(clients),
            http.and_then(|h| h.pool_max_idle).unwrap_or(clients),
        )
    }

    /// Defaults for keys a file leaves out: no front end unless its section is there.
    fn file_defaults() -> Config {
        Config {
            socks: None,
            http: None,
            ..Config::default()
        }
    }
}

impl Default for Config {
    /// The built-in default: SOCKS5 on 127.0.0.1:1080 and HTTP on 127.0.0.1:3128, engine
    /// `auto`, no authentication, every destination allowed (loopback only serves the
    /// local user).
    fn default() -> Self {
        Config {
            log: LogConfig::default(),
            relay: RelayConfig::default(),
            limits: Limits::default(),
            socks: Some(SocksConfig::default()),
            http: Some(HttpConfig::default()),
            edge: None,
            users: Vec::new(),
            acl: AclConfig::default(),
            cache: CacheConfig::default(),
            admin: None,
            pacer: PacerConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` (human-readable) or `json`.
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `splicer_proxy=debug`.
    pub level: String,
    /// Where the log goes: a file, appended to and reopened on SIGUSR2 (for logrotate);
    /// unset, standard error.
    pub file: Option<PathBuf>,
    /// Where the access lines go, apart from the rest of the log: a file, appended to and
    /// reopened on SIGUSR2. Unset, they stay in the log. Written whatever `level` says.
    pub access_file: Option<PathBuf>,
    /// The access lines' format: `text` or `json` (as the log), `squid` (Squid's native
    /// `access.log`) or `combined` (the NCSA combined log format). Unset, `format`.
    pub access_format: Option<AccessFormat>,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: "info".into(),
            file: None,
            access_file: None,
            access_format: None,
        }
    }
}

/// How access lines are written ([`LogConfig::access_format`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessFormat {
    Text,
    Json,
    /// Squid's native format, which its log analysers read (Calamaris, SARG, lightsquid).
    Squid,
    /// The NCSA combined log format (Apache's and nginx's `combined`: GoAccess, AWStats).
    Combined,
}

impl LogConfig {
    /// The access lines' format, `format` when none is given.
    pub fn access_format(&self) -> AccessFormat {
        self.access_format.unwrap_or(match self.format {
            LogFormat::Text => AccessFormat::Text,
            LogFormat::Json => AccessFormat::Json,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Most client connections at once, all front ends together; beyond it new clients are
    /// refused (HTTP gets a 503, SOCKS a closed connection).
    pub max_connections: usize,
    /// Who serves client connections: connection threads, each connection on one to its
    /// end (a count; 0, the default, is one per CPU the process may use, as HAProxy's
    /// `nbthread`), or `"shared"`, the process's work-stealing runtime. `crate::threads`
    /// says why.
    pub threads: ConnectionThreads,
    /// How the `edge`'s and the forward proxy's kept-alive requests are served: `"ring"`,
    /// by a loop on `io_uring` per connection thread that serves plain requests itself and
    /// hands every other connection to the runtimes (`crate::ring`, docs/edge.md), or
    /// `"runtime"`, by the connection threads' runtimes. Unset: [`Limits::io`].
    pub io: Option<Io>,
    /// Time a client has to complete its SOCKS handshake or its first request head.
    #[serde(deserialize_with = "duration")]
    pub handshake_timeout: Duration,
    /// Time allowed to connect upstream.
    #[serde(deserialize_with = "duration")]
    pub connect_timeout: Duration,
    /// A tunnel or body transfer ends after this long without a byte either way.
    #[serde(deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// How long a kept-alive HTTP client connection may wait for its next request.
    #[serde(deserialize_with = "duration")]
    pub keepalive_timeout: Duration,
    /// Largest HTTP head (request line or status line plus headers).
    pub max_header_size: usize,
    /// Most HTTP header fields.
    pub max_headers: usize,
    /// On SIGINT/SIGTERM, how long open connections may go on before the process exits
    /// (zero: they are cut at once).
    #[serde(deserialize_with = "duration_or_zero")]
    pub shutdown_grace: Duration,
    /// Bytes of receive buffer fixed on every client and upstream socket (`SO_RCVBUF`), or 0
    /// to leave it to the kernel's autotuning. A bound on what the proxy's receive queues
    /// may hold: with many bulk tunnels and the proxy short of CPU, autotuned buffers (up to
    /// `net.ipv4.tcp_rmem`'s maximum, 32 MiB on Linux 6.18) can push the host's TCP memory
    /// past `net.ipv4.tcp_mem`, where the kernel drops packets (docs/engines.md).
    pub receive_buffer: usize,
    /// Failed logins (SOCKS5 username/password or HTTP Basic) one client address may make
    /// within `auth_failure_window`; beyond it, its logins are refused unchecked until the
    /// window has passed (HTTP answers 429). 0 turns the limit off.
    pub auth_failures: u32,
    /// Zero only while `auth_failures` is 0 (the limit off).
    #[serde(deserialize_with = "duration_or_zero")]
    pub auth_failure_window: Duration,
}

impl Limits {
    /// What serves the plain requests: `io` as configured; unset, the rings beside
    /// connection threads (they carried 1.03–1.14× HAProxy's rate where the runtimes
    /// carried 0.95–1.02×, docs/benchmarks.md), the runtimes with `threads = "shared"`
    /// (the rings run beside connection threads only). A kernel that refuses the rings
    /// leaves an unset `io` on the runtimes, with a warning (`crate::server`).
    pub fn io(&self) -> Io {
        match (self.io, self.threads) {
            (Some(io), _) => io,
            (None, ConnectionThreads::Shared) => Io::Runtime,
            (None, ConnectionThreads::Count(_)) => Io::Ring,
        }
    }
}

/// Largest `limits.receive_buffer`: the kernel doubles the value into an `int`.
pub const MAX_RECEIVE_BUFFER: usize = 1 << 30;

/// Most `limits.threads`: more threads than that serve no machine Splicer runs on better
/// than one per CPU, and a typo (`threads = 10000`) would start them all.
pub const MAX_THREADS: usize = 1024;

/// `limits.io`: what serves the `edge`'s and the forward proxy's plain requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Io {
    /// The connection threads' tokio runtimes, on `epoll`.
    Runtime,
    /// A completion-driven loop on `io_uring` per connection thread (`crate::ring`).
    Ring,
}

/// `limits.threads`: what serves client connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionThreads {
    /// That many connection threads, each a single-threaded runtime (0: one per CPU the
    /// process may use).
    Count(usize),
    /// The process's shared work-stealing runtime (`threads = "shared"`).
    Shared,
}

impl Default for ConnectionThreads {
    /// One connection thread per CPU: on the per-request path it carried HAProxy's rate
    /// where the shared runtime carried about 0.8 of it, and no less of a mixed load
    /// (docs/benchmarks.md, "Connection threads").
    fn default() -> Self {
        ConnectionThreads::Count(0)
    }
}

impl<'de> Deserialize<'de> for ConnectionThreads {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ConnectionThreads, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ConnectionThreads;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a count of threads (0: one per CPU) or \"shared\"")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<ConnectionThreads, E> {
                // Past usize is past MAX_THREADS too: the check names the bound.
                Ok(ConnectionThreads::Count(
                    usize::try_from(n).unwrap_or(usize::MAX),
                ))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<ConnectionThreads, E> {
                u64::try_from(n)
                    .map_err(|_| E::custom("a count of threads is not negative"))
                    .and_then(|n| self.visit_u64(n))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<ConnectionThreads, E> {
                match s {
                    "shared" => Ok(ConnectionThreads::Shared),
                    _ => Err(E::custom(format!(
                        "{s:?} is neither a count of threads nor \"shared\""
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
            threads: ConnectionThreads::default(),
            io: None,
            handshake_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            keepalive_timeout: Duration::from_secs(60),
            max_header_size: 32 * 1024,
            max_headers: 100,
            shutdown_grace: Duration::from_secs(10),
            receive_buffer: 0,
            auth_failures: 10,
            auth_failure_window: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SocksConfig {
    pub listen: Vec<SocketAddr>,
    /// TCP tuning of the connections accepted on `listen`.
    pub client_tcp: Option<TcpTuning>,
    /// This front end's pacing, in place of `[pacer]`.
    pub pacer: Option<PacerConfig>,
}

impl Default for SocksConfig {
    fn default() -> Self {
        SocksConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 1080))],
            client_tcp: None,
            pacer: None,
        }
    }
}

/// The admin listener: Prometheus/OpenMetrics text at `/metrics` (docs/operations.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Where it listens; loopback unless `allow_remote`.
    pub listen: Vec<SocketAddr>,
    /// Allows an address beyond loopback: the figures name this proxy's upstreams and its
    /// load, which an operator may not want anyone who can reach the host to read.
    pub allow_remote: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 9180))],
            allow_remote: false,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    pub listen: Vec<SocketAddr>,
    /// Ports CONNECT may reach (Squid's `SSL_ports`).
    pub connect_ports: Vec<u16>,
    /// Name this proxy gives itself in `Via`.
    pub via: String,
    /// Idle upstream connections kept per origin for reuse ([`Config::pool_bounds`]).
    pub pool_per_origin: Option<usize>,
    /// Idle upstream connections kept over all origins ([`Config::pool_bounds`]).
    pub pool_max_idle: Option<usize>,
    /// How long an idle upstream connection is kept.
    #[serde(deserialize_with = "duration")]
    pub pool_idle_timeout: Duration,
    /// TCP tuning of the connections accepted on `listen`.
    pub client_tcp: Option<TcpTuning>,
    /// This front end's pacing, in place of `[pacer]`.
    pub pacer: Option<PacerConfig>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 3128))],
            connect_ports: vec![443],
            via: "splicer".into(),
            pool_per_origin: None,
            pool_max_idle: None,
            pool_idle_timeout: Duration::from_secs(30),
            client_tcp: None,
            pacer: None,
        }
    }
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    pub name: String,
    pub password: String,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Deny,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AclConfig {
    /// What happens when no rule matches.
    pub default: Action,
    /// Allows a listener beyond loopback whose rules let anyone through (an open proxy that
    /// anyone who can reach it may use). Without it such a configuration is refused.
    pub open_proxy: bool,
    /// Rules in order; the first that matches decides.
    pub rule: Vec<Rule>,
}

impl Default for AclConfig {
    fn default() -> Self {
        AclConfig {
            default: Action::Allow,
            open_proxy: false,
            rule: Vec::new(),
        }
    }
}

/// One rule: every criterion given must match (an empty list matches anything).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub action: Action,
    #[serde(default)]
    pub clients: Vec<IpNet>,
    #[serde(default)]
    pub destinations: Vec<IpNet>,
    /// Domain suffixes: `example.org` matches `example.org` and `www.example.org`.
    #[serde(default)]
    pub domains: Vec<String>,
    /// Ports or inclusive ranges: `443` or `"1024-65535"`.
    #[serde(default, deserialize_with = "ports")]
    pub ports: Vec<(u16, u16)>,
    #[serde(default)]
    pub users: Vec<String>,
}

/// A value that a key cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadValue {
    #[error("{0:?} needs a unit (ms, s, m, h)")]
    NoUnit(String),
    #[error("{0:?} is not a duration")]
    NotADuration(String),
    #[error("{0:?} is not a size")]
    NotASize(String),
    #[error("{text:?}: unknown unit {unit:?} (use {expected})")]
    UnknownUnit {
        text: String,
        unit: String,
        expected: &'static str,
    },
    #[error("{0:?} is too large")]
    TooLarge(String),
    #[error("is empty: give a level (trace, debug, info, warn, error, off)")]
    NoLevel,
    #[error(
        "{0:?} is not a level (trace, debug, info, warn, error, off) nor a target=level directive"
    )]
    NotALevel(String),
}

/// Parses durations such as `250ms`, `10s`, `5m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, BadValue> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| BadValue::NoUnit(s.to_string()))?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| BadValue::NotADuration(s.to_string()))?;
    let ms = match unit {
        "ms" => n,
        "s" => n.saturating_mul(1000),
        "m" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        _ => {
            return Err(BadValue::UnknownUnit {
                text: s.to_string(),
                unit: unit.to_string(),
                expected: "ms, s, m or h",
            })
        }
    };
    Ok(Duration::from_millis(ms))
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let d = duration_or_zero(d)?;
    if d.is_zero() {
        return Err(serde::de::Error::custom("must be longer than zero"));
    }
    Ok(d)
}

/// A duration where zero means "off".
fn duration_or_zero<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    parse_duration(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

fn ports<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u16, u16)>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Port {
        One(u16),
        Range(String),
    }
    let mut out = Vec::new();
    for p in Vec::<Port>::deserialize(d)? {
        out.push(match p {
            Port::One(p) => (p, p),
            Port::Range(r) => {
                let bad = || {
                    serde::de::Error::custom(format!(
                        "bad port range {r:?} (expected \"LOW-HIGH\")"
                    ))
                };
                let (lo, hi) = r.split_once('-').ok_or_else(bad)?;
                let (lo, hi): (u16, u16) = (
                    lo.trim().parse().map_err(|_| bad())?,
                    hi.trim().parse().map_err(|_| bad())?,
                );
                if lo > hi {
                    return Err(bad());
                }
                (lo, hi)
            }
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

/// Which front end a listener serves (the relay paces each front end's splices apart).
pub use splicer_relay::Front;
