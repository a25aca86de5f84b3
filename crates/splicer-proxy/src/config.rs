//! The configuration model: what `splicer.toml` may contain, its defaults, and the checks
//! that need more than one key. Every key is documented in docs/configuration.md.

use std::net::SocketAddr;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use splicer_relay::EngineChoice;

mod cache;
mod edge;
mod locate;
mod tcp;
pub use cache::{parse_size, CacheConfig};
pub use edge::{Balance, EdgeConfig, HealthConfig, Protocol, RouteConfig, UpstreamGroupConfig};
pub use tcp::TcpTuning;

/// The whole configuration. In a file, a front end runs only when its section is present.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default = "Config::file_defaults")]
pub struct Config {
    pub log: LogConfig,
    pub relay: RelaySection,
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
}

impl Config {
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
            relay: RelaySection::default(),
            limits: Limits::default(),
            socks: Some(SocksConfig::default()),
            http: Some(HttpConfig::default()),
            edge: None,
            users: Vec::new(),
            acl: AclConfig::default(),
            cache: CacheConfig::default(),
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
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: "info".into(),
        }
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
pub struct RelaySection {
    #[serde(deserialize_with = "engine")]
    pub engine: EngineChoice,
    pub buffer_size: usize,
    pub pipe_size: usize,
    pub small_threshold: u64,
    pub pool_idle: usize,
    pub sockmap_max_queue: u64,
    /// No longer needed (it was required with `engine = "sockmap"` until the program cut
    /// partly overlapping retransmissions, docs/engines.md); still accepted so that
    /// configurations written then keep loading. It changes nothing.
    pub experimental_sockmap: bool,
}

impl Default for RelaySection {
    fn default() -> Self {
        let r = splicer_relay::RelayConfig::default();
        RelaySection {
            engine: r.engine,
            buffer_size: r.buffer_size,
            pipe_size: r.pipe_size,
            small_threshold: r.small_threshold,
            pool_idle: r.pool_idle,
            sockmap_max_queue: r.sockmap_max_queue,
            experimental_sockmap: false,
        }
    }
}

impl RelaySection {
    pub fn to_relay_config(&self) -> splicer_relay::RelayConfig {
        splicer_relay::RelayConfig {
            engine: self.engine,
            buffer_size: self.buffer_size,
            pipe_size: self.pipe_size,
            small_threshold: self.small_threshold,
            pool_idle: self.pool_idle,
            sockmap_max_queue: self.sockmap_max_queue,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Most client connections at once, all front ends together; beyond it new clients are
    /// refused (HTTP gets a 503, SOCKS a closed connection).
    pub max_connections: usize,
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

/// Largest `limits.receive_buffer`: the kernel doubles the value into an `int`.
pub const MAX_RECEIVE_BUFFER: usize = 1 << 30;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
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
}

impl Default for SocksConfig {
    fn default() -> Self {
        SocksConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 1080))],
            client_tcp: None,
        }
    }
}

/// `[http] pool_per_origin` when not set (the edge's pool too, without an `[http]`).
pub const DEFAULT_POOL_PER_ORIGIN: usize = 256;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    pub listen: Vec<SocketAddr>,
    /// Ports CONNECT may reach (Squid's `SSL_ports`).
    pub connect_ports: Vec<u16>,
    /// Name this proxy gives itself in `Via`.
    pub via: String,
    /// Idle upstream connections kept per origin for reuse.
    pub pool_per_origin: usize,
    /// How long an idle upstream connection is kept.
    #[serde(deserialize_with = "duration")]
    pub pool_idle_timeout: Duration,
    /// TCP tuning of the connections accepted on `listen`.
    pub client_tcp: Option<TcpTuning>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 3128))],
            connect_ports: vec![443],
            via: "splicer".into(),
            pool_per_origin: DEFAULT_POOL_PER_ORIGIN,
            pool_idle_timeout: Duration::from_secs(30),
            client_tcp: None,
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

/// A configuration error that names the key at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

/// The problems a check finds: all of them, not only the first.
#[derive(Debug, Default)]
pub struct Problems(Vec<ConfigError>);

impl Problems {
    pub fn add(&mut self, key: impl Into<String>, message: String) {
        self.0.push(ConfigError {
            key: key.into(),
            message,
        });
    }

    fn into_result(self) -> Result<(), Vec<ConfigError>> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(self.0)
        }
    }
}

impl Config {
    /// Parses TOML. Errors from `toml` already carry the line, column and key (the first
    /// only: past a value of the wrong type the rest cannot be read as a configuration);
    /// the checks that follow report every problem, one a line, each at the line of its
    /// own key (`locate`).
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text).map_err(|e| plain_types(&e.to_string()))?;
        config.validate().map_err(|errors| {
            let lines: Vec<String> = (errors.iter())
                .map(|e| match locate::line(text, &e.key) {
                    Some(line) => format!("line {line}: {e}"),
                    None => e.to_string(),
                })
                .collect();
            lines.join("\n")
        })?;
        Ok(config)
    }

    /// Every listening address, of every front end.
    pub fn all_listen_addresses(&self) -> impl Iterator<Item = &SocketAddr> {
        let edge = self.edge.iter().flat_map(|e| e.listen.iter());
        self.listen_addresses().chain(edge)
    }

    /// Listeners that could not all be bound: one address twice (in one front end or two),
    /// or a wildcard and another address of its family on one port (the kernel refuses the
    /// second bind). `[::]` listeners are IPv6-only (`IPV6_V6ONLY`), so `0.0.0.0:P` and
    /// `[::]:P` go together, as nginx users write them.
    fn check_listeners(&self, p: &mut Problems) {
        let fronts = [
            ("socks.listen", self.socks.as_ref().map(|s| &s.listen)),
            ("http.listen", self.http.as_ref().map(|h| &h.listen)),
            ("edge.listen", self.edge.as_ref().map(|e| &e.listen)),
        ];
        let all: Vec<(&str, SocketAddr)> = (fronts.iter())
            .flat_map(|(key, l)| l.iter().flat_map(|l| l.iter()).map(move |a| (*key, *a)))
            .collect();
        for (i, (key, a)) in all.iter().enumerate() {
            let clash = all[..i].iter().find(|(_, b)| {
                a.port() == b.port()
                    && a.is_ipv4() == b.is_ipv4()
                    && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
            });
            if let Some((other, b)) = clash {
                let what = if a == b {
                    format!("{a} is given twice (also in {other})")
                } else {
                    format!("{a} and {b} (in {other}) cannot both be bound: one is the wildcard of the other's port")
                };
                p.add(*key, what);
            }
        }
    }

    /// Whether some listener accepts connections from beyond loopback.
    pub fn listens_beyond_loopback(&self) -> bool {
        self.listen_addresses().any(|a| !a.ip().is_loopback())
    }

    pub fn listen_addresses(&self) -> impl Iterator<Item = &SocketAddr> {
        let socks = self.socks.iter().flat_map(|s| s.listen.iter());
        socks.chain(self.http.iter().flat_map(|h| h.listen.iter()))
    }

    /// The first way through an exposed listener that nothing limits to some clients or
    /// users: the config key at fault and why. `None` on loopback only, with users (everyone
    /// must log in), or with `acl.open_proxy`. Rules' `clients` are judged together: the
    /// networks of every allowing rule without `users`, merged, must not cover all of IPv4
    /// or all of IPv6 (`0.0.0.0/1` and `128.0.0.0/1` are a catch-all in two halves).
    pub fn open_path(&self) -> Option<(String, String)> {
        if !self.listens_beyond_loopback() || !self.users.is_empty() || self.acl.open_proxy {
            return None;
        }
        let unlimited = |r: &Rule| r.action == Action::Allow && r.users.is_empty();
        if let Some(i) = self
            .acl
            .rule
            .iter()
            .position(|r| unlimited(r) && r.clients.is_empty())
        {
            return Some((
                format!("acl.rule[{i}]"),
                format!(
                    "allow rule {} is not limited to some clients or users",
                    i + 1
                ),
            ));
        }
        let allowed: Vec<IpNet> = (self.acl.rule.iter())
            .filter(|r| unlimited(r))
            .flat_map(|r| r.clients.iter().copied())
            .collect();
        if let Some(all) = IpNet::aggregate(&allowed)
            .into_iter()
            .find(|n| n.prefix_len() == 0)
        {
            let rules: Vec<usize> = (self.acl.rule.iter().enumerate())
                .filter(|(_, r)| unlimited(r) && r.clients.iter().any(|c| all.contains(c)))
                .map(|(i, _)| i)
                .collect();
            let first = rules.first().copied().unwrap_or_default();
            let rules: Vec<String> = rules.iter().map(|i| (i + 1).to_string()).collect();
            return Some((
                format!("acl.rule[{first}].clients"),
                format!(
                    "the clients of allow rule(s) {} together are every address ({all})",
                    rules.join(", ")
                ),
            ));
        }
        (self.acl.default == Action::Allow).then(|| {
            (
                "acl.default".to_string(),
                "requests no rule matches are allowed (acl.default = \"allow\")".to_string(),
            )
        })
    }

    /// Checks that need more than one key: every problem found, each with its key
    /// (`[i]` names the i-th table of an array of tables: `acl.rule[1].users`).
    pub fn validate(&self) -> Result<(), Vec<ConfigError>> {
        let mut p = Problems::default();
        self.check_listeners(&mut p);
        if let Err(why) = check_log_level(&self.log.level) {
            p.add("log.level", why);
        }
        if self.socks.is_none() && self.http.is_none() && self.edge.is_none() {
            p.add(
                "socks",
                "no front end configured: add a [socks], [http] or [edge] section".into(),
            );
        }
        let pool_cap = self
            .http
            .as_ref()
            .map_or(DEFAULT_POOL_PER_ORIGIN, |h| h.pool_per_origin);
        if let Some(e) = &self.edge {
            e.validate(pool_cap, &mut p);
        }
        for (section, tuning) in self.tcp_tunings() {
            if let Err((key, message)) = tuning.validate() {
                p.add(format!("{section}.{key}"), message);
            }
        }
        for (key, listen) in [
            ("socks.listen", self.socks.as_ref().map(|s| &s.listen)),
            ("http.listen", self.http.as_ref().map(|h| &h.listen)),
        ] {
            if listen.is_some_and(|l| l.is_empty()) {
                p.add(key, "needs at least one address".into());
            }
        }
        if let Some((key, why)) = self.open_path() {
            let addr = self
                .listen_addresses()
                .find(|a| !a.ip().is_loopback())
                .expect("open_path checks for one");
            p.add(
                key,
                format!(
                    "listening on {addr} beyond loopback, {why}: that is an open proxy. Limit \
                     every allowing [[acl.rule]] (and an allowing acl.default) by `clients` or \
                     `users`, add [[users]], listen on 127.0.0.1, or set [acl] open_proxy = true"
                ),
            );
        }
        self.cache.validate(&mut p);
        if self.limits.max_connections == 0 {
            p.add("limits.max_connections", "must be at least 1".into());
        }
        if self.limits.max_header_size < 256 {
            p.add(
                "limits.max_header_size",
                "must be at least 256 bytes".into(),
            );
        }
        if !(1..=splicer_wire::http::MAX_HEADERS).contains(&self.limits.max_headers) {
            p.add(
                "limits.max_headers",
                format!("must be 1 to {}", splicer_wire::http::MAX_HEADERS),
            );
        }
        let rcvbuf = self.limits.receive_buffer;
        if rcvbuf != 0 && !(4096..=MAX_RECEIVE_BUFFER).contains(&rcvbuf) {
            p.add(
                "limits.receive_buffer",
                format!("must be 0 (kernel autotuning) or 4096 to {MAX_RECEIVE_BUFFER} bytes"),
            );
        }
        if self.limits.auth_failures > 0 && self.limits.auth_failure_window.is_zero() {
            p.add(
                "limits.auth_failure_window",
                "must be longer than 0 while limits.auth_failures is on".into(),
            );
        }
        if self.relay.buffer_size < 1024 {
            p.add("relay.buffer_size", "must be at least 1024 bytes".into());
        }
        if self.relay.pipe_size < 4096 {
            p.add("relay.pipe_size", "must be at least 4096 bytes".into());
        }
        if self.relay.sockmap_max_queue < 65536 {
            p.add(
                "relay.sockmap_max_queue",
                "must be at least 65536 bytes".into(),
            );
        }
        let mut names = std::collections::HashSet::new();
        for (i, u) in self.users.iter().enumerate() {
            if u.name.is_empty()
                || u.name.len() > 255
                || u.password.is_empty()
                || u.password.len() > 255
            {
                p.add(
                    format!("users[{i}].name"),
                    format!(
                        "user {:?}: name and password must be 1 to 255 bytes",
                        u.name
                    ),
                );
            }
            if !names.insert(&u.name) {
                p.add(
                    format!("users[{i}].name"),
                    format!("user {:?} is defined twice", u.name),
                );
            }
        }
        for (i, r) in self.acl.rule.iter().enumerate() {
            for u in &r.users {
                if !names.contains(u) {
                    p.add(
                        format!("acl.rule[{i}].users"),
                        format!("unknown user {u:?}"),
                    );
                }
            }
            if let Some(d) = r.domains.iter().find(|d| d.trim_matches('.').is_empty()) {
                p.add(
                    format!("acl.rule[{i}].domains"),
                    format!("empty domain suffix {d:?}"),
                );
            }
        }
        p.into_result()
    }
}

/// A `log.level` the logger takes: a level, or `target=level` directives separated by
/// commas (`info,splicer_proxy=debug`). A bare word that is no level would be read as a
/// target to log everything of, and nothing else: a typo (`verbose`) that silences the log.
fn check_log_level(level: &str) -> Result<(), String> {
    const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];
    let is_level = |l: &str| LEVELS.iter().any(|x| x.eq_ignore_ascii_case(l.trim()));
    if level.trim().is_empty() {
        return Err("is empty: give a level (trace, debug, info, warn, error, off)".into());
    }
    for d in level.split(',') {
        let d = d.trim();
        let ok = match d.split_once('=') {
            Some((target, l)) => {
                !target.is_empty()
                    && target
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_:-.".contains(&b))
                    && is_level(l)
            }
            None => is_level(d),
        };
        if !ok {
            return Err(format!(
                "{d:?} is not a level (trace, debug, info, warn, error, off) nor a \
                 target=level directive"
            ));
        }
    }
    Ok(())
}

/// A type error as a user reads it: "a whole number" where serde says `usize`.
fn plain_types(message: &str) -> String {
    let mut out = message.to_string();
    for (rust, plain) in [
        ("expected usize", "expected a whole number"),
        ("expected u64", "expected a whole number"),
        ("expected u32", "expected a whole number"),
        ("expected u16", "expected a whole number up to 65535"),
        ("expected u8", "expected a whole number up to 255"),
        ("expected i64", "expected a number"),
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
    ] {
        out = out.replace(rust, plain);
    }
    out
}

fn engine<'de, D: Deserializer<'de>>(d: D) -> Result<EngineChoice, D::Error> {
    String::deserialize(d)?
        .parse()
        .map_err(serde::de::Error::custom)
}

/// Parses durations such as `250ms`, `10s`, `5m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{s:?} needs a unit (ms, s, m, h)"))?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration"))?;
    let ms = match unit {
        "ms" => n,
        "s" => n.saturating_mul(1000),
        "m" => n.saturating_mul(60_000),
        "h" => n.saturating_mul(3_600_000),
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
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
