//! Policy: the rule set shared by both front ends, and user authentication.
//!
//! Rules are tried in order and the first match decides; when none matches, the configured
//! default applies. When Splicer listens beyond loopback, destinations on the proxy host
//! itself (its own addresses and loopback) are denied unless a rule explicitly allows them,
//! so an exposed proxy cannot be used to reach services bound to localhost.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;

use crate::config::{Action, Config, Rule};
use crate::credentials::Credentials;

/// What a rule is checked against.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub client: IpAddr,
    pub user: Option<&'a str>,
    /// The name the client asked for, when it gave one.
    pub domain: Option<&'a str>,
    /// The address Splicer would connect to.
    pub destination: IpAddr,
    pub port: u16,
}

/// The outcome of a login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// The user, logged in.
    Ok(String),
    /// No credentials were given (HTTP: no `Proxy-Authorization`); not a failure.
    Missing,
    /// Wrong name or password, or credentials that cannot be read.
    Failed,
    /// Too many failures from this client address lately: refused without a check.
    Throttled,
}

/// Failed logins per client address and user name within the current window: one client
/// guessing one user's password is stopped without locking out the other users behind the
/// same address (a NAT, a shared proxy).
#[derive(Debug)]
struct Failures {
    max: u32,
    window: Duration,
    by_login: Mutex<HashMap<Login, (u32, Instant)>>,
}

/// A client address and the user name it logs in as (bytes: any the client sent).
type Login = (IpAddr, Vec<u8>);

/// Logins tracked before expired entries are swept (bounds the table's memory).
const FAILURE_TABLE_SWEEP: usize = 4096;

impl Failures {
    fn throttled(&self, client: IpAddr, user: &[u8]) -> bool {
        if self.max == 0 {
            return false;
        }
        let table = self.by_login.lock().unwrap_or_else(|e| e.into_inner());
        table
            .get(&(client, user.to_vec()))
            .is_some_and(|&(n, since)| n >= self.max && since.elapsed() < self.window)
    }
    fn record(&self, client: IpAddr, user: &[u8], ok: bool) {
        if self.max == 0 {
            return;
        }
        let mut table = self.by_login.lock().unwrap_or_else(|e| e.into_inner());
        let login = (client, user.to_vec());
        if ok {
            table.remove(&login);
            return;
        }
        let now = Instant::now();
        if table.len() >= FAILURE_TABLE_SWEEP {
            let window = self.window;
            table.retain(|_, (_, since)| now.duration_since(*since) < window);
        }
        let entry = table.entry(login).or_insert((0, now));
        if now.duration_since(entry.1) >= self.window {
            *entry = (0, now);
        }
        entry.0 += 1;
        if entry.0 == self.max {
            let user = String::from_utf8_lossy(user);
            tracing::warn!(%client, %user, failures = entry.0, window_s = self.window.as_secs(), "too many failed logins; refusing this client's logins as this user for the window");
        }
    }
}

/// The rule set and the user table.
#[derive(Debug)]
pub struct Policy {
    rules: Vec<Rule>,
    default: Action,
    guard_self: bool,
    local: Vec<IpAddr>,
    credentials: Credentials,
    failures: Failures,
}

impl Policy {
    /// `local` are the proxy host's addresses (guarded when listening beyond loopback).
    pub fn new(config: &Config, local: Vec<IpAddr>) -> Policy {
        Policy {
            rules: config.acl.rule.clone(),
            default: config.acl.default,
            guard_self: config.listens_beyond_loopback(),
            local,
            credentials: Credentials::new(&config.users),
            failures: Failures {
                max: config.limits.auth_failures,
                window: config.limits.auth_failure_window,
                by_login: Mutex::new(HashMap::new()),
            },
        }
    }

    /// Whether the request may go through.
    pub fn allows(&self, r: &Request<'_>) -> bool {
        let dest = canonical(r.destination);
        let is_self = dest.is_loopback() || dest.is_unspecified() || self.local.contains(&dest);
        for rule in &self.rules {
            if matches(rule, r, dest) {
                // An allow rule lets a client reach the proxy host only when it names
                // such destinations explicitly.
                let explicit = rule.destinations.iter().any(|n| n.contains(&dest));
                return rule.action == Action::Allow && (!self.guard_self || !is_self || explicit);
            }
        }
        self.default == Action::Allow && !(self.guard_self && is_self)
    }

    pub fn auth_required(&self) -> bool {
        !self.credentials.is_empty()
    }

    /// The users whose password the configuration holds in clear text.
    pub fn clear_text_users(&self) -> impl Iterator<Item = &str> {
        self.credentials.clear_text_users()
    }

    /// Logs `client` in with a name and password ([`Credentials::check`]: known and unknown
    /// names take the same path). Failures count against the client address and the name
    /// together (`limits.auth_failures`).
    pub async fn authenticate(&self, client: IpAddr, user: &[u8], pass: &[u8]) -> Auth {
        if self.failures.throttled(client, user) {
            return Auth::Throttled;
        }
        let name = std::str::from_utf8(user).ok();
        let ok = self.credentials.check(name, pass).await;
        self.failures.record(client, user, ok);
        match name {
            Some(n) if ok => Auth::Ok(n.to_string()),
            _ => Auth::Failed,
        }
    }

    /// Logs in with an HTTP `Proxy-Authorization: Basic …` value.
    pub async fn check_basic(&self, client: IpAddr, header: Option<&[u8]>) -> Auth {
        let Some(header) = header else {
            return Auth::Missing;
        };
        match basic_credentials(header) {
            Some((user, pass)) => self.authenticate(client, &user, &pass).await,
            // Not a credential at all: counted as a failure of no name.
            None if self.failures.throttled(client, b"") => Auth::Throttled,
            None => {
                self.failures.record(client, b"", false);
                Auth::Failed
            }
        }
    }
}

/// The name and password of a `Basic` credential.
fn basic_credentials(header: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let value = std::str::from_utf8(header).ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some((decoded[..colon].to_vec(), decoded[colon + 1..].to_vec()))
}

/// IPv4-mapped IPv6 addresses are checked as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn matches(rule: &Rule, r: &Request<'_>, dest: IpAddr) -> bool {
    let client = canonical(r.client);
    (rule.clients.is_empty() || rule.clients.iter().any(|n| n.contains(&client)))
        && (rule.destinations.is_empty() || rule.destinations.iter().any(|n| n.contains(&dest)))
        && (rule.domains.is_empty()
            || r.domain
                .is_some_and(|d| rule.domains.iter().any(|s| suffix_match(d, s))))
        && (rule.ports.is_empty()
            || rule
                .ports
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&r.port)))
        && (rule.users.is_empty() || r.user.is_some_and(|u| rule.users.iter().any(|x| x == u)))
}

/// `example.org` (or `.example.org`) matches `example.org` and any name below it.
fn suffix_match(name: &str, suffix: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let suffix = suffix.trim_matches('.').to_ascii_lowercase();
    name == suffix
        || name
            .strip_suffix(&suffix)
            .is_some_and(|rest| rest.ends_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(toml: &str) -> Policy {
        let c = Config::from_toml(toml).unwrap();
        Policy::new(&c, vec!["192.0.2.10".parse().unwrap()])
    }

    fn req<'a>(client: &str, domain: Option<&'a str>, dest: &str, port: u16) -> Request<'a> {
        Request {
            client: client.parse().unwrap(),
            user: None,
            domain,
            destination: dest.parse().unwrap(),
            port,
        }
    }

    #[test]
    fn first_match_wins_and_default() {
        let p = policy(
            r#"
            [socks]
            listen = ["127.0.0.1:1"]
            [acl]
            default = "deny"
            [[acl.rule]]
            action = "deny"
            domains = ["blocked.example"]
            [[acl.rule]]
            action = "allow"
            clients = ["10.0.0.0/8"]
            ports = [80, "8000-8099"]
            "#,
        );
        assert!(p.allows(&req("10.1.1.1", Some("ok.example"), "198.51.100.1", 8080)));
        assert!(!p.allows(&req(
            "10.1.1.1",
            Some("www.blocked.example"),
            "198.51.100.1",
            80
        )));
        assert!(p.allows(&req(
            "10.1.1.1",
            Some("notblocked.example"),
            "198.51.100.1",
            80
        )));
        assert!(
            !p.allows(&req("10.1.1.1", None, "198.51.100.1", 443)),
            "port not listed: default deny"
        );
        assert!(!p.allows(&req("172.16.0.1", None, "198.51.100.1", 80)));
    }

    #[test]
    fn loopback_listener_allows_self_but_exposed_one_does_not() {
        let local = policy("[socks]\nlisten = [\"127.0.0.1:1\"]\n");
        assert!(local.allows(&req("127.0.0.1", None, "127.0.0.1", 22)));
        let exposed = policy(
            "[socks]\nlisten = [\"0.0.0.0:1\"]\n[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"10.0.0.0/8\"]\n",
        );
        assert!(exposed.allows(&req("10.0.0.1", None, "198.51.100.1", 22)));
        assert!(!exposed.allows(&req("10.0.0.1", None, "127.0.0.1", 22)));
        assert!(
            !exposed.allows(&req("10.0.0.1", None, "192.0.2.10", 22)),
            "proxy's own address"
        );
        assert!(
            !exposed.allows(&req("10.0.0.1", None, "::ffff:127.0.0.1", 22)),
            "mapped loopback"
        );
        let explicit = policy(
            "[socks]\nlisten = [\"0.0.0.0:1\"]\n[acl]\nopen_proxy = true\n[[acl.rule]]\naction = \"allow\"\ndestinations = [\"127.0.0.0/8\"]\n",
        );
        assert!(explicit.allows(&req("10.0.0.1", None, "127.0.0.1", 22)));
    }

    #[tokio::test]
    async fn users_and_basic_auth() {
        let p = policy(
            "[socks]\nlisten = [\"127.0.0.1:1\"]\n[[users]]\nname = \"alice\"\npassword = \"pw\"\n",
        );
        let c: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(p.auth_required());
        assert_eq!(
            p.authenticate(c, b"alice", b"pw").await,
            Auth::Ok("alice".into())
        );
        assert_eq!(p.authenticate(c, b"alice", b"pX").await, Auth::Failed);
        assert_eq!(p.authenticate(c, b"alice", b"pww").await, Auth::Failed);
        assert_eq!(p.authenticate(c, b"alice", b"").await, Auth::Failed);
        assert_eq!(p.authenticate(c, b"bob", b"pw").await, Auth::Failed);
        assert_eq!(p.authenticate(c, b"\xff", b"pw").await, Auth::Failed);
        // "alice:pw"
        assert_eq!(
            p.check_basic(c, Some(b"Basic YWxpY2U6cHc=")).await,
            Auth::Ok("alice".into())
        );
        assert_eq!(p.check_basic(c, Some(b"Basic !!!")).await, Auth::Failed);
        assert_eq!(
            p.check_basic(c, Some(b"Bearer YWxpY2U6cHc=")).await,
            Auth::Failed
        );
        assert_eq!(p.check_basic(c, None).await, Auth::Missing);
        assert!(suffix_match("a.b.example.org", "example.org"));
        assert!(!suffix_match("badexample.org", "example.org"));
    }

    /// After `auth_failures` failures a login (an address and a name) is refused unchecked,
    /// even with the right password, until the window passes; other addresses, and other
    /// users at the same address, are not affected; a success clears the count.
    #[tokio::test]
    async fn failed_logins_are_limited_per_client_address_and_user() {
        let p = policy(
            "[socks]\nlisten = [\"127.0.0.1:1\"]\n[limits]\nauth_failures = 3\n\
             auth_failure_window = \"1h\"\n[[users]]\nname = \"alice\"\npassword = \"pw\"\n\
             [[users]]\nname = \"bob\"\npassword = \"pw2\"\n",
        );
        let (bad, good): (IpAddr, IpAddr) =
            ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        assert_eq!(p.authenticate(good, b"alice", b"x").await, Auth::Failed);
        assert_eq!(p.authenticate(good, b"alice", b"x").await, Auth::Failed);
        assert_eq!(
            p.authenticate(good, b"alice", b"pw").await,
            Auth::Ok("alice".into())
        );
        assert_eq!(p.authenticate(good, b"alice", b"x").await, Auth::Failed);
        assert_eq!(p.authenticate(good, b"alice", b"x").await, Auth::Failed);
        assert_eq!(
            p.authenticate(good, b"alice", b"pw").await,
            Auth::Ok("alice".into()),
            "a success clears the count"
        );
        for _ in 0..3 {
            assert_eq!(p.authenticate(bad, b"alice", b"guess").await, Auth::Failed);
        }
        assert_eq!(p.authenticate(bad, b"alice", b"pw").await, Auth::Throttled);
        assert_eq!(
            p.check_basic(bad, Some(b"Basic YWxpY2U6cHc=")).await,
            Auth::Throttled
        );
        assert_eq!(
            p.authenticate(good, b"alice", b"pw").await,
            Auth::Ok("alice".into())
        );
        // Another user behind the throttled address (a NAT) still logs in.
        assert_eq!(
            p.authenticate(bad, b"bob", b"pw2").await,
            Auth::Ok("bob".into())
        );
        let short = policy(
            "[socks]\nlisten = [\"127.0.0.1:1\"]\n[limits]\nauth_failures = 1\n\
             auth_failure_window = \"1ms\"\n[[users]]\nname = \"alice\"\npassword = \"pw\"\n",
        );
        assert_eq!(short.authenticate(bad, b"alice", b"x").await, Auth::Failed);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            short.authenticate(bad, b"alice", b"pw").await,
            Auth::Ok("alice".into()),
            "the window passed"
        );
    }
}
