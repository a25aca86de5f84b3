//! The `edge` front end's routing: which upstream group a request goes to (the first route
//! whose hosts and path prefix match), and in which order the group's servers are tried.
//! No I/O here but resolving servers given by name at start (`Edge::new`; again later in
//! `crate::upstream::resolve`), so each rule is unit-tested; the requests themselves are
//! handled by the edge front end (`crate::front::edge`).

use std::net::SocketAddr;

use splicer_wire::http::Authority;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::dial::Destination;
use crate::config::{Balance, EdgeConfig, HealthConfig, Protocol, ServerName};

/// The routing table and upstream groups of the `[edge]` section.
#[derive(Debug)]
pub struct Edge {
    routes: Vec<Route>,
    groups: Vec<Group>,
    /// How often servers given by name are resolved again.
    pub resolve_every: Duration,
}

#[derive(Debug)]
struct Route {
    /// Empty: any host.
    hosts: Vec<HostMatch>,
    prefix: String,
    group: usize,
}

#[derive(Debug)]
enum HostMatch {
    Exact(String),
    /// `*.example.org`, kept as `.example.org`.
    Below(String),
}

impl HostMatch {
    /// Whether `host` (a name as [`host_name`] gives it, in any case) is this one: names
    /// are compared without regard to ASCII case (the configured ones are kept in lower
    /// case), so a request's name is never copied to be lowered.
    fn matches(&self, host: &str) -> bool {
        match self {
            HostMatch::Exact(h) => h.eq_ignore_ascii_case(host),
            HostMatch::Below(suffix) => {
                let (host, suffix) = (host.as_bytes(), suffix.as_bytes());
                host.len() > suffix.len()
                    && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            }
        }
    }
}

/// An upstream group: its servers, which are up, and where its round-robin stands.
#[derive(Debug)]
pub struct Group {
    pub name: String,
    /// The servers as configured: addresses, and names whose addresses are servers.
    pub configured: Vec<ServerName>,
    /// The servers now: replaced whole when a name resolves to other addresses.
    members: RwLock<Arc<Members>>,
    /// What each name resolved to at start (what it keeps if it stops resolving).
    pub resolved_at_start: HashMap<ServerName, Vec<SocketAddr>>,
    pub health: Option<HealthConfig>,
    /// Idle connections kept open to each server (`min_idle`).
    pub min_idle: usize,
    balance: Balance,
    next: AtomicUsize,
    /// Requests in flight per connection (1: no pipelining), and the largest body a
    /// pipelined connection reads into memory (`crate::upstream::lines`).
    pub pipeline: usize,
    pub cutoff: u64,
    /// HTTP/1.1, or HTTP/2 with prior knowledge (`crate::upstream::h2c`).
    pub protocol: Protocol,
}

/// A group's servers at one time: addresses, how requests name each, which are up.
#[derive(Debug)]
pub struct Members {
    pub servers: Vec<SocketAddr>,
    /// Per server: how requests name it, made once rather than per request (its key in the
    /// pool must be the one the warm pool fills).
    names: Vec<Arc<Destination>>,
    /// Per server: whether its health checks pass (always, without checks).
    up: Vec<AtomicBool>,
}

impl Members {
    /// `servers`, each up unless `was` (the members they replace) had it down.
    fn new(servers: Vec<SocketAddr>, was: Option<&Members>) -> Members {
        let up = servers
            .iter()
            .map(|s| AtomicBool::new(was.and_then(|w| w.is_up(*s)).unwrap_or(true)))
            .collect();
        Members {
            names: servers
                .iter()
                .map(|&s| Arc::new(Destination::new(Group::authority(s))))
                .collect(),
            servers,
            up,
        }
    }

    fn position(&self, server: SocketAddr) -> Option<usize> {
        self.servers.iter().position(|s| *s == server)
    }

    /// Whether `server` passes its health checks; `None` when it is not a member.
    pub fn is_up(&self, server: SocketAddr) -> Option<bool> {
        self.position(server)
            .map(|k| self.up[k].load(Ordering::Relaxed))
    }
}

/// What resolving a group's configured servers gave.
#[derive(Debug, Default)]
pub struct Resolved {
    /// Every server, in the configured order, each once.
    pub servers: Vec<SocketAddr>,
    /// Per name, its addresses (the last ones it had, when it did not resolve now).
    pub by_name: HashMap<ServerName, Vec<SocketAddr>>,
    /// The names that did not resolve, and why.
    pub failed: Vec<(ServerName, std::io::Error)>,
}

/// Resolves `configured` with `resolve`; a name that does not resolve (or resolves to no
/// address) keeps its addresses in `last`, as HAProxy's and nginx's resolvers do.
pub fn resolve_all(
    configured: &[ServerName],
    resolve: impl Fn(&str, u16) -> std::io::Result<Vec<SocketAddr>>,
    last: &HashMap<ServerName, Vec<SocketAddr>>,
) -> Resolved {
    let mut r = Resolved::default();
    for s in configured {
        let addrs = match s {
            ServerName::Addr(a) => vec![*a],
            ServerName::Name { host, port } => {
                let now = resolve(host, *port).and_then(|mut a| {
                    a.sort();
                    a.dedup();
                    match a.is_empty() {
                        true => Err(std::io::Error::other("no address")),
                        false => Ok(a),
                    }
                });
                let addrs = now.unwrap_or_else(|e| {
                    r.failed.push((s.clone(), e));
                    last.get(s).cloned().unwrap_or_default()
                });
                r.by_name.insert(s.clone(), addrs.clone());
                addrs
            }
        };
        for a in addrs {
            if !r.servers.contains(&a) {
                r.servers.push(a);
            }
        }
    }
    r
}

impl Group {
    /// The servers now.
    pub fn members(&self) -> Arc<Members> {
        self.members
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes `servers` as the group's servers (those that stay keep their health); returns
    /// the servers added and removed.
    pub fn set_servers(&self, servers: Vec<SocketAddr>) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
        let mut m = self.members.write().unwrap_or_else(|e| e.into_inner());
        let added = servers
            .iter()
            .filter(|s| m.position(**s).is_none())
            .copied()
            .collect();
        let removed = m
            .servers
            .iter()
            .filter(|s| !servers.contains(s))
            .copied()
            .collect();
        let next = Arc::new(Members::new(servers, Some(&m)));
        *m = next;
        (added, removed)
    }

    /// Whether some server was given by name (it is resolved again on a schedule).
    pub fn has_names(&self) -> bool {
        self.configured
            .iter()
            .any(|s| matches!(s, ServerName::Name { .. }))
    }

    /// The servers to try for one request, in order: the balance's choice first, then the
    /// others (a server that cannot be reached passes the request on to the next). Servers
    /// the health checks took out are left out, unless all are out: then all are tried, as
    /// a check may be wrong where a request is not. None while a group's only name has
    /// never resolved.
    pub fn order(&self) -> impl Iterator<Item = SocketAddr> {
        self.order_named().map(|(server, _)| server)
    }

    /// [`Group::order`], each server with how requests name it. Not collected (a list per
    /// request was an allocation per request): whether a server is up is read when the
    /// iteration comes to it, so one the health checks take out meanwhile is skipped.
    pub fn order_named(&self) -> impl Iterator<Item = (SocketAddr, Arc<Destination>)> {
        let m = self.members();
        let n = m.servers.len();
        let first = match (self.balance, n) {
            (_, 0) | (Balance::First, _) => 0,
            (Balance::RoundRobin, _) => self.next.fetch_add(1, Ordering::Relaxed) % n,
        };
        let any_up = m.up.iter().any(|u| u.load(Ordering::Relaxed));
        (0..n).filter_map(move |i| {
            let k = (first + i) % n;
            (!any_up || m.up[k].load(Ordering::Relaxed)).then(|| (m.servers[k], m.names[k].clone()))
        })
    }

    /// How requests name `server` upstream; its text is the server's key in the pool, which
    /// the requests and the warm pool must agree on.
    pub fn authority(server: SocketAddr) -> Authority {
        Authority {
            host: server.ip().to_string(),
            port: server.port(),
        }
    }

    /// Whether `server` passes its health checks (always, without checks); `false` once
    /// it is no longer one of the group's servers.
    pub fn is_up(&self, server: SocketAddr) -> bool {
        self.members().is_up(server).unwrap_or(false)
    }

    /// Whether `server` is one of the group's servers now.
    pub fn has(&self, server: SocketAddr) -> bool {
        self.members().position(server).is_some()
    }

    /// The health checks' verdict on `server`; returns whether it changed.
    pub fn set_up(&self, server: SocketAddr, up: bool) -> bool {
        let m = self.members();
        m.position(server)
            .is_some_and(|k| m.up[k].swap(up, Ordering::Relaxed) != up)
    }
}

impl Edge {
    /// Built from a validated section (every route names a group that exists). Servers
    /// given by name are resolved here with the system's resolver (/etc/hosts, then DNS,
    /// as nsswitch says); a name that does not resolve is logged, and its group starts
    /// without it (`crate::upstream::resolve` tries again).
    pub fn new(c: &EdgeConfig) -> Edge {
        let groups: Vec<Group> = c
            .upstream
            .iter()
            .map(|g| {
                let r = resolve_all(&g.servers, system_resolve, &HashMap::new());
                for (name, e) in &r.failed {
                    tracing::warn!(
                        group = %g.name, server = %name,
                        "cannot resolve an edge server's name ({e}); it is tried again every {:?}",
                        c.resolve_every
                    );
                }
                Group {
                    name: g.name.clone(),
                    configured: g.servers.clone(),
                    members: RwLock::new(Arc::new(Members::new(r.servers, None))),
                    resolved_at_start: r.by_name,
                    health: g.health.clone(),
                    min_idle: g.min_idle,
                    balance: g.balance,
                    next: AtomicUsize::new(0),
                    pipeline: g.pipeline,
                    cutoff: g.cutoff,
                    protocol: g.protocol,
                }
            })
            .collect();
        let routes = c
            .route
            .iter()
            // `Config::validate` refuses a route to a group that does not exist.
            .filter_map(|r| {
                let group = groups.iter().position(|g| g.name == r.upstream)?;
                Some(Route {
                    hosts: r
                        .hosts
                        .iter()
                        .map(|h| {
                            let h = h.to_ascii_lowercase();
                            match h.strip_prefix('*') {
                                Some(below) => HostMatch::Below(below.to_string()),
                                None => HostMatch::Exact(h.trim_end_matches('.').to_string()),
                            }
                        })
                        .collect(),
                    prefix: r.path_prefix.clone(),
                    group,
                })
            })
            .collect();
        Edge {
            routes,
            groups,
            resolve_every: c.resolve_every,
        }
    }

    /// Every upstream group.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The group for a request to `host` (its `Host`, port and all; empty when it had none)
    /// and `path` (the origin-form target, query and all): the first route that matches.
    pub fn route(&self, host: &str, path: &str) -> Option<&Group> {
        let name = host_name(host);
        let path = path.split('?').next().unwrap_or("");
        self.routes
            .iter()
            .find(|r| {
                (r.hosts.is_empty() || r.hosts.iter().any(|m| m.matches(name)))
                    && path.starts_with(&r.prefix)
            })
            .map(|r| &self.groups[r.group])
    }
}

/// Resolves `host:port` with the system's resolver (blocking: at start and in
/// `crate::upstream::resolve`'s blocking task).
pub fn system_resolve(host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    std::net::ToSocketAddrs::to_socket_addrs(&(host, port)).map(Iterator::collect)
}

/// A `Host` value's name: without the port and without a trailing dot, in the case it came
/// in ([`HostMatch::matches`] ignores case: a lowered copy per request was the edge's last
/// allocation on its steady path).
fn host_name(host: &str) -> &str {
    let name = if host.starts_with('[') {
        host.find(']').map_or(host, |end| &host[..=end])
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        }
    };
    name.trim_end_matches('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(toml: &str) -> Edge {
        let c = crate::Config::from_toml(toml).unwrap();
        Edge::new(c.edge.as_ref().unwrap())
    }

    const TABLE: &str = r#"
[edge]
listen = ["127.0.0.1:8080"]
[[edge.upstream]]
name = "api"
servers = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]
[[edge.upstream]]
name = "static"
servers = ["10.0.1.1:80", "10.0.1.2:80"]
balance = "first"
[[edge.upstream]]
name = "other"
servers = ["10.0.2.1:80"]
[[edge.route]]
hosts = ["Example.org", "*.example.org"]
path_prefix = "/api/"
upstream = "api"
[[edge.route]]
hosts = ["example.org", "*.example.org"]
upstream = "static"
[[edge.route]]
upstream = "other"
"#;

    #[test]
    fn the_first_matching_route_decides() {
        let e = edge(TABLE);
        let g = |host: &str, path: &str| e.route(host, path).map(|g| g.name.as_str());
        assert_eq!(g("example.org", "/api/x?y"), Some("api"));
        assert_eq!(g("EXAMPLE.org:8080", "/api/"), Some("api"), "case and port");
        assert_eq!(
            g("WWW.Example.ORG", "/api/"),
            Some("api"),
            "below, in any case"
        );
        assert_eq!(
            g("ÉXAMPLE.org", "/api/"),
            Some("other"),
            "only ASCII case is folded"
        );
        assert_eq!(
            g("www.example.org.", "/api/v1"),
            Some("api"),
            "below, trailing dot"
        );
        assert_eq!(
            g("example.org", "/api"),
            Some("static"),
            "a prefix is a prefix"
        );
        assert_eq!(
            g("example.org", "/?api/"),
            Some("static"),
            "the query is not the path"
        );
        assert_eq!(
            g("badexample.org", "/api/"),
            Some("other"),
            "not below example.org"
        );
        assert_eq!(
            g("", "/"),
            Some("other"),
            "no Host: only routes for any host"
        );
        assert_eq!(g("[::1]:80", "/"), Some("other"));
        let only = edge(
            "[edge]\nlisten = [\"127.0.0.1:1\"]\n[[edge.upstream]]\nname = \"a\"\n\
             servers = [\"10.0.0.1:80\"]\n[[edge.route]]\nhosts = [\"a.test\"]\nupstream = \"a\"\n",
        );
        assert!(only.route("b.test", "/").is_none(), "no route");
        assert!(only.route("a.test", "/").is_some());
    }

    #[test]
    fn round_robin_takes_turns_and_first_stays_first() {
        let e = edge(TABLE);
        let api = e.route("example.org", "/api/").unwrap();
        let firsts: Vec<_> = (0..6).map(|_| api.order().next().unwrap()).collect();
        let ip = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            firsts,
            [
                "10.0.0.1:80",
                "10.0.0.2:80",
                "10.0.0.3:80",
                "10.0.0.1:80",
                "10.0.0.2:80",
                "10.0.0.3:80"
            ]
            .map(ip)
        );
        // Every server is offered once per request, the chosen one first.
        let all: Vec<_> = api.order().collect();
        assert_eq!(all, ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"].map(ip));
        let st = e.route("example.org", "/").unwrap();
        for _ in 0..3 {
            let order: Vec<_> = st.order().collect();
            assert_eq!(order, ["10.0.1.1:80", "10.0.1.2:80"].map(ip));
        }
    }

    #[test]
    fn servers_taken_out_are_skipped_unless_all_are() {
        let e = edge(TABLE);
        let api = e.route("example.org", "/api/").unwrap();
        let ip = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(api.set_up(ip("10.0.0.2:80"), false));
        assert!(!api.set_up(ip("10.0.0.2:80"), false), "no change");
        for _ in 0..4 {
            let order: Vec<_> = api.order().collect();
            assert_eq!(order.len(), 2);
            assert!(!order.contains(&ip("10.0.0.2:80")), "{order:?}");
        }
        api.set_up(ip("10.0.0.1:80"), false);
        api.set_up(ip("10.0.0.3:80"), false);
        assert_eq!(api.order().count(), 3, "all out: all tried");
        api.set_up(ip("10.0.0.2:80"), true);
        assert_eq!(api.order().collect::<Vec<_>>(), [ip("10.0.0.2:80")]);
    }

    #[test]
    fn bad_sections_are_refused_with_their_key() {
        let base = "[edge]\nlisten = [\"127.0.0.1:1\"]\n";
        let group = "[[edge.upstream]]\nname = \"a\"\nservers = [\"10.0.0.1:80\"]\n";
        let cases = [
            (format!("{base}{group}"), "edge.route"),
            (
                format!("{base}{group}[[edge.route]]\nupstream = \"b\"\n"),
                "edge.route[0].upstream",
            ),
            (
                format!("{base}{group}{group}[[edge.route]]\nupstream = \"a\"\n"),
                "line 7: edge.upstream[1].name",
            ),
            (
                format!(
                    "{base}[[edge.upstream]]\nname = \"a\"\nservers = []\n\
                     [[edge.route]]\nupstream = \"a\"\n"
                ),
                "edge.upstream[0].servers",
            ),
            (
                format!("{base}{group}[[edge.route]]\nupstream = \"a\"\npath_prefix = \"api\"\n"),
                "edge.route[0].path_prefix",
            ),
            (
                format!("{base}{group}[[edge.route]]\nupstream = \"a\"\nhosts = [\"a b\"]\n"),
                "edge.route[0].hosts",
            ),
            (
                format!("[edge]\nlisten = []\n{group}[[edge.route]]\nupstream = \"a\"\n"),
                "edge.listen",
            ),
            (
                format!("{base}{group}pipeline = 0\n[[edge.route]]\nupstream = \"a\"\n"),
                "edge.upstream[0].pipeline",
            ),
            (
                format!("{base}{group}pipeline = 65\n[[edge.route]]\nupstream = \"a\"\n"),
                "edge.upstream[0].pipeline",
            ),
            (
                format!(
                    "{base}buffer_memory = 1000000\n{group}cutoff = 1000001\n\
                     [[edge.route]]\nupstream = \"a\"\n"
                ),
                "edge.upstream[0].cutoff",
            ),
            (
                format!("{base}buffer_memory = 1000\n{group}[[edge.route]]\nupstream = \"a\"\n"),
                "edge.buffer_memory",
            ),
            (
                format!(
                    "{base}[[edge.upstream]]\nname = \"a\"\nservers = [\"10.0.0.1:80\"]\n\
                     balance = \"x\"\n[[edge.route]]\nupstream = \"a\"\n"
                ),
                "unknown variant",
            ),
        ];
        for (toml, key) in cases {
            let e = crate::Config::from_toml(&toml).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
