//! Reading a configuration file and checking it: every problem found, each with the key
//! at fault and the line of that key, so that `check` and `run` refuse the same files.

use std::net::SocketAddr;

use ipnet::IpNet;

use super::{
    locate, AccessFormat, Action, BadValue, Config, ConnectionThreads, Io, Rule,
    MAX_RECEIVE_BUFFER, MAX_THREADS,
};

/// A configuration error that names the key at fault, and the line of that key in the file
/// when it was read from one. A file that is not TOML at all has no key: its message says
/// where (`toml`'s own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub line: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        match self.key.as_str() {
            "" => f.write_str(&self.message),
            key => write!(f, "{key}: {}", self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why a configuration was refused: every problem found. Displayed one a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// The problems a check finds: all of them, not only the first.
#[derive(Debug, Default)]
pub struct Problems(Vec<ConfigError>);

impl Problems {
    pub fn add(&mut self, key: impl Into<String>, message: String) {
        self.0.push(ConfigError {
            key: key.into(),
            line: None,
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
    pub fn from_toml(text: &str) -> Result<Config, ConfigErrors> {
        let config: Config = toml::from_str(text).map_err(|e| {
            ConfigErrors(vec![ConfigError {
                key: String::new(),
                line: None,
                message: plain_types(&e.to_string()),
            }])
        })?;
        config.validate().map_err(|mut errors| {
            for e in &mut errors {
                e.line = locate::line(text, &e.key);
            }
            ConfigErrors(errors)
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
            ("admin.listen", self.admin.as_ref().map(|a| &a.listen)),
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
            p.add("log.level", why.to_string());
        }
        self.check_log_files(&mut p);
        if self.socks.is_none() && self.http.is_none() && self.edge.is_none() {
            p.add(
                "socks",
                "no front end configured: add a [socks], [http] or [edge] section".into(),
            );
        }
        if let Some(e) = &self.edge {
            e.validate(self.pool_bounds(), &mut p);
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
            // `open_path` finds a path only when a listener is beyond loopback.
            #[allow(clippy::expect_used)]
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
        if let Some(admin) = &self.admin {
            if admin.listen.is_empty() {
                p.add("admin.listen", "needs at least one address".into());
            }
            if let Some(a) = admin.listen.iter().find(|a| !a.ip().is_loopback()) {
                if !admin.allow_remote {
                    p.add(
                        "admin.listen",
                        format!(
                            "{a} is beyond loopback: the metrics name this proxy's upstreams and \
                             its load; listen on 127.0.0.1 (and scrape through a tunnel), or set \
                             [admin] allow_remote = true"
                        ),
                    );
                }
            }
        }
        if self.limits.max_connections == 0 {
            p.add("limits.max_connections", "must be at least 1".into());
        }
        if matches!(self.limits.threads, ConnectionThreads::Count(n) if n > MAX_THREADS) {
            p.add(
                "limits.threads",
                format!("must be \"shared\" or 0 (one per CPU) to {MAX_THREADS}"),
            );
        }
        if self.limits.io == Some(Io::Ring) && self.limits.threads == ConnectionThreads::Shared {
            p.add(
                "limits.io",
                "\"ring\" runs beside the connection threads: limits.threads must not be \"shared\""
                    .into(),
            );
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
        self.check_pacers(&mut p);
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
            if crate::credentials::is_hash(&u.password) {
                if let Err(e) = crate::credentials::check_hash(&u.password) {
                    p.add(format!("users[{i}].password"), e.to_string());
                }
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

impl Config {
    /// Log files in directories that exist, not one file for both streams, and the
    /// formats that only make sense in a file of their own given one.
    /// Every pacing table: `[pacer]` and the front ends' own, class by class.
    fn check_pacers(&self, p: &mut Problems) {
        let tables = [
            ("pacer", Some(&self.pacer)),
            (
                "socks.pacer",
                self.socks.as_ref().and_then(|s| s.pacer.as_ref()),
            ),
            (
                "http.pacer",
                self.http.as_ref().and_then(|h| h.pacer.as_ref()),
            ),
            (
                "edge.pacer",
                self.edge.as_ref().and_then(|e| e.pacer.as_ref()),
            ),
        ];
        for (section, table) in tables {
            let Some(table) = table else { continue };
            for c in splicer_relay::Class::ALL {
                if let Err(why) = table.class(c).check() {
                    p.add(format!("{section}.{}", c.name()), why);
                }
            }
        }
    }

    fn check_log_files(&self, p: &mut Problems) {
        let log = &self.log;
        for (key, path) in [
            ("log.file", &log.file),
            ("log.access_file", &log.access_file),
        ] {
            let Some(path) = path else { continue };
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => std::path::Path::new("."),
            };
            if path.as_os_str().is_empty() || path.is_dir() {
                p.add(key, format!("{} is not a file name", path.display()));
            } else if !dir.is_dir() {
                p.add(
                    key,
                    format!(
                        "directory {} does not exist (Splicer creates the file, not its directory)",
                        dir.display()
                    ),
                );
            }
        }
        if log.file.is_some() && log.file == log.access_file {
            p.add(
                "log.access_file",
                "is log.file too: leave it unset to keep the access lines in the log".into(),
            );
        }
        if log.access_file.is_none()
            && matches!(
                log.access_format,
                Some(AccessFormat::Squid | AccessFormat::Combined)
            )
        {
            p.add(
                "log.access_format",
                "squid and combined are for a file of access lines only: set log.access_file"
                    .into(),
            );
        }
    }
}

/// A `log.level` the logger takes: a level, or `target=level` directives separated by
/// commas (`info,splicer_proxy=debug`). A bare word that is no level would be read as a
/// target to log everything of, and nothing else: a typo (`verbose`) that silences the log.
fn check_log_level(level: &str) -> Result<(), BadValue> {
    const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];
    let is_level = |l: &str| LEVELS.iter().any(|x| x.eq_ignore_ascii_case(l.trim()));
    if level.trim().is_empty() {
        return Err(BadValue::NoLevel);
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
            return Err(BadValue::NotALevel(d.to_string()));
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
