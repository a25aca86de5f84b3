//! The `[edge]` section: the reverse proxy near clients (seeds 002 and 004). Listeners,
//! upstream groups (origin addresses and how one is chosen) and routes (by `Host` and path
//! prefix) to them. Documented in docs/edge.md and docs/configuration.md.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeConfig {
    pub listen: Vec<SocketAddr>,
    /// Name this proxy gives itself in `Via`.
    #[serde(default = "default_via")]
    pub via: String,
    /// Whether the client's address goes upstream in `X-Forwarded-For` and `Forwarded`
    /// (with `X-Forwarded-Proto`).
    #[serde(default = "yes")]
    pub forwarded: bool,
    /// Upstream groups, by name.
    #[serde(default)]
    pub upstream: Vec<UpstreamGroupConfig>,
    /// Routes in order; the first that matches a request decides its upstream group.
    #[serde(default)]
    pub route: Vec<RouteConfig>,
    /// TCP tuning of the connections accepted on `listen` (the client leg).
    pub client_tcp: Option<super::TcpTuning>,
    /// This front end's pacing, in place of `[pacer]`.
    pub pacer: Option<splicer_relay::PacerConfig>,
    /// Bytes of response bodies held in memory at once for clients slower than their
    /// pipelined upstream connection (all groups together); past it, lines wait.
    #[serde(default = "default_buffer_memory")]
    pub buffer_memory: u64,
    /// How often servers given by DNS name are resolved again (they are resolved at start
    /// too); at least 1 s.
    #[serde(
        default = "default_resolve_every",
        deserialize_with = "super::duration"
    )]
    pub resolve_every: Duration,
}

fn default_resolve_every() -> Duration {
    Duration::from_secs(30)
}

/// A server of an upstream group: an address, or a DNS name and a port, whose addresses
/// are each a server of the group (resolved at start and every `resolve_every`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ServerName {
    Addr(SocketAddr),
    Name { host: String, port: u16 },
}

impl std::fmt::Display for ServerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerName::Addr(a) => write!(f, "{a}"),
            ServerName::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

impl std::str::FromStr for ServerName {
    type Err = String;

    /// `10.0.0.7:80`, `[2001:db8::7]:80` or `origin.example:80`.
    fn from_str(s: &str) -> Result<ServerName, String> {
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(ServerName::Addr(a));
        }
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err(format!("{s:?} needs a port (host:port)"));
        };
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{s:?}: {port:?} is not a port"))?;
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
            return Err(format!(
                "{s:?} is neither an address nor a DNS name with a port"
            ));
        }
        Ok(ServerName::Name { host, port })
    }
}

impl<'de> Deserialize<'de> for ServerName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ServerName, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

fn default_buffer_memory() -> u64 {
    64 << 20
}

fn default_pipeline() -> usize {
    1
}

fn default_cutoff() -> u64 {
    64 << 10
}

fn default_via() -> String {
    "splicer".into()
}

fn yes() -> bool {
    true
}

/// An upstream group: the origin addresses a route sends to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamGroupConfig {
    pub name: String,
    /// Addresses, or DNS names with a port (`ServerName`).
    pub servers: Vec<ServerName>,
    #[serde(default)]
    pub balance: Balance,
    /// Active health checks; none when absent (a server that cannot be reached is still
    /// passed over per request).
    pub health: Option<HealthConfig>,
    /// TCP tuning of the connections opened to `servers` (the upstream leg).
    pub tcp: Option<super::TcpTuning>,
    /// Idle connections kept open to each server before requests need them, and kept past
    /// `[http] pool_idle_timeout` (a warm pool; 0: connections are opened on demand).
    #[serde(default)]
    pub min_idle: usize,
    /// Requests in flight per upstream connection (HTTP/1.1 pipelining, seed 002): 1 sends
    /// each request on a connection of its own. Only `GET` and `HEAD` without a body are
    /// pipelined.
    #[serde(default = "default_pipeline")]
    pub pipeline: usize,
    /// On a pipelined connection, the largest response body read into memory for its
    /// client; a larger one (or one of unknown length) is spliced to its client on the
    /// connection, which leaves the pipeline (the requests behind it are sent again).
    #[serde(default = "default_cutoff")]
    pub cutoff: u64,
    /// How requests reach the servers: `http/1.1`, or `h2c` (HTTP/2 over TCP with prior
    /// knowledge, RFC 9113 §3.3): requests to a server as streams of a few shared connections.
    #[serde(default)]
    pub protocol: Protocol,
}

/// The protocol an upstream group's servers are spoken to in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum Protocol {
    #[default]
    #[serde(rename = "http/1.1")]
    Http1,
    #[serde(rename = "h2c")]
    H2c,
}

/// An HTTP health check of each server of a group (HAProxy's `option httpchk` with its
/// `inter`, `fall` and `rise` defaults).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// Asked with `GET`; a 2xx or 3xx status passes.
    pub path: String,
    #[serde(deserialize_with = "super::duration")]
    pub interval: Duration,
    /// Connecting and the whole answer's head must come within it.
    #[serde(deserialize_with = "super::duration")]
    pub timeout: Duration,
    /// Failed checks in a row that take a server out.
    pub fall: u32,
    /// Passed checks in a row that bring it back.
    pub rise: u32,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            path: "/".into(),
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            fall: 3,
            rise: 2,
        }
    }
}

/// How a group's server is chosen for a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balance {
    /// Each server in turn (HAProxy's `roundrobin`, nginx's default).
    #[default]
    RoundRobin,
    /// The first server, the others only when it cannot be reached (HAProxy's `first`
    /// with backups).
    First,
}

/// A route: requests whose `Host` is one of `hosts` (any host when empty) and whose path
/// starts with `path_prefix` go to the group `upstream`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Host names, without port, case-insensitive; `*.example.org` matches every name under
    /// `example.org` (not `example.org` itself).
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default = "root")]
    pub path_prefix: String,
    pub upstream: String,
}

fn root() -> String {
    "/".into()
}

impl EdgeConfig {
    /// The checks that need more than one key: `(key, message)`. `(pool_cap, pool_total)`:
    /// the most idle connections the pool keeps per server and in all
    /// ([`super::Config::pool_bounds`]).
    pub fn validate(&self, (pool_cap, pool_total): (usize, usize), p: &mut super::Problems) {
        // The warm pools' floors together: more than the pool keeps in all, and warming one
        // server closes another's.
        let warm: usize = self
            .upstream
            .iter()
            .map(|g| g.min_idle.saturating_mul(g.servers.len()))
            .fold(0, usize::saturating_add);
        if warm > pool_total {
            p.add(
                "edge.upstream",
                format!(
                    "the warm pools hold {warm} connections (min_idle for each server), more \
                     than the pool keeps in all ([http] pool_max_idle = {pool_total})"
                ),
            );
        }
        if self.listen.is_empty() {
            p.add("edge.listen", "needs at least one address".into());
        }
        if self.buffer_memory < 64 << 10 || self.buffer_memory > 1 << 40 {
            p.add(
                "edge.buffer_memory",
                format!("{} is not between 65536 and 2^40 bytes", self.buffer_memory),
            );
        }
        let mut names = std::collections::HashSet::new();
        for (i, g) in self.upstream.iter().enumerate() {
            if g.name.is_empty() {
                p.add(
                    format!("edge.upstream[{i}].name"),
                    "must not be empty".into(),
                );
            }
            if !names.insert(g.name.as_str()) {
                p.add(
                    format!("edge.upstream[{i}].name"),
                    format!("upstream group {:?} is defined twice", g.name),
                );
            }
            if let Some(h) = &g.health {
                if !h.path.starts_with('/') || h.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
                    p.add(
                        format!("edge.upstream[{i}].health.path"),
                        format!("{:?} must start with \"/\" and hold no space", h.path),
                    );
                }
                if h.fall == 0 || h.rise == 0 {
                    p.add(
                        format!("edge.upstream[{i}].health"),
                        "fall and rise must be at least 1".into(),
                    );
                }
            }
            if g.min_idle > pool_cap {
                p.add(
                    format!("edge.upstream[{i}].min_idle"),
                    format!(
                        "{} is more than the pool keeps per server ([http] pool_per_origin = \
                         {pool_cap})",
                        g.min_idle
                    ),
                );
            }
            if !(1..=64).contains(&g.pipeline) {
                p.add(
                    format!("edge.upstream[{i}].pipeline"),
                    format!("{} is not between 1 and 64", g.pipeline),
                );
            }
            if g.protocol == Protocol::H2c && g.pipeline != 1 {
                p.add(
                    format!("edge.upstream[{i}].pipeline"),
                    format!(
                        "group {:?} speaks h2c, which multiplexes its requests itself: \
                         pipeline is for HTTP/1.1 (leave it at 1)",
                        g.name
                    ),
                );
            }
            if g.protocol == Protocol::H2c && g.min_idle > 1 {
                p.add(
                    format!("edge.upstream[{i}].min_idle"),
                    format!(
                        "group {:?} speaks h2c: min_idle = 1 opens a server's first connection \
                         before clients need it, and more open as requests need them ({} \
                         asked)",
                        g.name, g.min_idle
                    ),
                );
            }
            if g.cutoff > self.buffer_memory {
                p.add(
                    format!("edge.upstream[{i}].cutoff"),
                    format!(
                        "{} is more than [edge] buffer_memory ({}): one response could not fit",
                        g.cutoff, self.buffer_memory
                    ),
                );
            }
            let named = g
                .servers
                .iter()
                .any(|s| matches!(s, ServerName::Name { .. }));
            if named && g.tcp.is_some() {
                p.add(
                    format!("edge.upstream[{i}].tcp"),
                    format!(
                        "group {:?} has servers given by name: per-leg TCP tuning is told \
                         addresses at start, so it needs its servers as addresses",
                        g.name
                    ),
                );
            }
            if g.servers.is_empty() {
                p.add(
                    format!("edge.upstream[{i}].servers"),
                    format!("upstream group {:?} needs at least one server", g.name),
                );
            }
        }
        if self.resolve_every < Duration::from_secs(1) {
            p.add(
                "edge.resolve_every",
                format!("{:?} is less than 1 s", self.resolve_every),
            );
        }
        if self.route.is_empty() {
            p.add(
                "edge.route",
                "needs at least one [[edge.route]]: without one every request is refused".into(),
            );
        }
        for (i, r) in self.route.iter().enumerate() {
            if !names.contains(r.upstream.as_str()) {
                p.add(
                    format!("edge.route[{i}].upstream"),
                    format!("no upstream group named {:?}", r.upstream),
                );
            }
            if !r.path_prefix.starts_with('/') {
                p.add(
                    format!("edge.route[{i}].path_prefix"),
                    format!("{:?} must start with \"/\"", r.path_prefix),
                );
            }
            for h in &r.hosts {
                let name = h.strip_prefix("*.").unwrap_or(h);
                let valid = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b));
                if !valid {
                    p.add(
                        format!("edge.route[{i}].hosts"),
                        format!("{h:?} is not a host name (or *.name)"),
                    );
                }
            }
        }
    }
}
