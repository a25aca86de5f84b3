//! Policy: the rule set shared by both front ends, and user authentication.
//!
//! Rules are tried in order and the first match decides; when none matches, the configured
//! default applies. When Splicer listens beyond loopback, destinations on the proxy host
//! itself (its own addresses and loopback) are denied unless a rule explicitly allows them,
//! so an exposed proxy cannot be used to reach services bound to localhost.

use std::collections::HashMap;
use std::net::IpAddr;

use base64::Engine as _;

use crate::config::{Action, Config, Rule};

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

/// The rule set and the user table.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
    default: Action,
    guard_self: bool,
    local: Vec<IpAddr>,
    users: HashMap<String, String>,
}

impl Policy {
    /// `local` are the proxy host's addresses (guarded when listening beyond loopback).
    pub fn new(config: &Config, local: Vec<IpAddr>) -> Policy {
        Policy {
            rules: config.acl.rule.clone(),
            default: config.acl.default,
            guard_self: config.listens_beyond_loopback(),
            local,
            users: config
                .users
                .iter()
                .map(|u| (u.name.clone(), u.password.clone()))
                .collect(),
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
        !self.users.is_empty()
    }

    /// Checks a name and password; compares in constant time for equal lengths.
    pub fn check_password(&self, user: &[u8], pass: &[u8]) -> Option<String> {
        let name = std::str::from_utf8(user).ok()?;
        let expected = self.users.get(name)?;
        let ok = expected.len() == pass.len()
            && expected
                .bytes()
                .zip(pass)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        ok.then(|| name.to_string())
    }

    /// Checks an HTTP `Proxy-Authorization: Basic …` value; returns the user.
    pub fn check_basic(&self, header: Option<&[u8]>) -> Option<String> {
        let value = std::str::from_utf8(header?).ok()?.trim();
        let (scheme, token) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("basic") {
            return None;
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(token.trim())
            .ok()?;
        let colon = decoded.iter().position(|&b| b == b':')?;
        self.check_password(&decoded[..colon], &decoded[colon + 1..])
    }
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
            "[socks]\nlisten = [\"0.0.0.0:1\"]\n[[acl.rule]]\naction = \"allow\"\nclients = [\"10.0.0.0/8\"]\n",
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
            "[socks]\nlisten = [\"0.0.0.0:1\"]\n[[acl.rule]]\naction = \"allow\"\ndestinations = [\"127.0.0.0/8\"]\n",
        );
        assert!(explicit.allows(&req("10.0.0.1", None, "127.0.0.1", 22)));
    }

    #[test]
    fn users_and_basic_auth() {
        let p = policy(
            "[socks]\nlisten = [\"127.0.0.1:1\"]\n[[users]]\nname = \"alice\"\npassword = \"pw\"\n",
        );
        assert!(p.auth_required());
        assert_eq!(p.check_password(b"alice", b"pw").as_deref(), Some("alice"));
        assert_eq!(p.check_password(b"alice", b"pX"), None);
        assert_eq!(p.check_password(b"bob", b"pw"), None);
        // "alice:pw"
        assert_eq!(
            p.check_basic(Some(b"Basic YWxpY2U6cHc=")).as_deref(),
            Some("alice")
        );
        assert_eq!(p.check_basic(Some(b"Basic !!!")), None);
        assert_eq!(p.check_basic(Some(b"Bearer YWxpY2U6cHc=")), None);
        assert_eq!(p.check_basic(None), None);
        assert!(suffix_match("a.b.example.org", "example.org"));
        assert!(!suffix_match("badexample.org", "example.org"));
    }
}
