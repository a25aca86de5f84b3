//! Where a request served on a ring goes, and the request as it goes there: the `edge`'s
//! route to its group's servers in turn, or the forward proxy's target (an address the rules
//! allow, or a name, resolved later when no idle connection to it is at hand). `None`:
//! the runtimes serve the request (it is handed off with its head, and they answer what a
//! ring does not: no route, a refusal, a user to authenticate, the cache).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use splicer_wire::forward;
use splicer_wire::http::{self as wire, Framing, RequestHead};

use super::Conn;
use crate::access::Record;
use crate::config::{Front, Protocol};
use crate::upstream::Destination;

/// A request's upstream, and its head rewritten for it.
pub(super) struct Aimed {
    /// `None`: a name, resolved when no idle connection to it is at hand.
    pub server: Option<SocketAddr>,
    /// How requests name the server (its key in the runtimes' pool).
    pub name: Arc<Destination>,
    pub out: forward::Request,
}

impl Conn {
    /// Aims `head`, framed as `framing`; `rec` gets what the access line says of the route.
    pub(super) fn aim(
        &mut self,
        head: RequestHead,
        framing: &Framing,
        rec: &mut Record,
    ) -> Option<Aimed> {
        match self.front {
            Front::Edge => self.aim_edge(head, framing, rec),
            Front::Http => self.aim_forward(head, framing),
            Front::Socks => None,
        }
    }

    /// The edge's route (`crate::front::edge::aim`, as the runtimes take it), to the first
    /// server of an HTTP/1.1 group without pipelining in the group's order; the others
    /// follow in `others`, tried when it cannot be reached (`Conn::unreachable`).
    fn aim_edge(
        &mut self,
        mut head: RequestHead,
        framing: &Framing,
        rec: &mut Record,
    ) -> Option<Aimed> {
        let shared = self.shared.clone();
        let (config, edge) = (
            shared.config.edge.as_ref()?,
            shared.upstreams.edge.as_ref()?,
        );
        self.host.clear();
        let (group, path) = crate::front::edge::aim(edge, &mut head, &mut self.host, rec).ok()?;
        if group.protocol != Protocol::Http1 || group.pipeline > 1 {
            return None;
        }
        let mut order = group.order_named();
        let (server, name) = order.next()?;
        let server = Some(server);
        self.others.extend(order);
        let forwarded_for = config.forwarded.then_some(self.addr.ip());
        let out =
            forward::reverse_request(head, framing, &self.host, path, &config.via, forwarded_for);
        Some(Aimed { server, name, out })
    }

    /// The forward proxy's absolute-form target, with no user to authenticate and no
    /// cache to ask: the runtimes' `forward::handle` for that case. An address the rules
    /// refuse this client goes to the runtimes (their 403); a name's addresses are checked
    /// when it is resolved or an idle connection to it is taken ([`Conn::allows`]).
    fn aim_forward(&mut self, mut head: RequestHead, framing: &Framing) -> Option<Aimed> {
        let shared = self.shared.clone();
        let http = shared.config.http.as_ref()?;
        // A reload may have added users or the cache since the connection was placed.
        if !crate::ring::serves(Front::Http, &shared) {
            return None;
        }
        let (name, authority_end) = {
            let (written, rest) = wire::absolute_form(&head.target).ok()?;
            let name = match &self.named {
                Some(last) if last.is_named_by(written) => last.clone(),
                _ => Arc::new(Destination::new(
                    wire::Authority::parse(written, Some(80)).ok()?,
                )),
            };
            (name, head.target.len() - rest.len())
        };
        let server = match name.authority.host.parse::<IpAddr>() {
            Ok(ip) => {
                let server = SocketAddr::new(ip, name.authority.port);
                if !self.allows_to(&name, server) {
                    return None;
                }
                Some(server)
            }
            Err(_) => None,
        };
        self.named = Some(name.clone());
        let path = wire::into_origin_form(std::mem::take(&mut head.target), authority_end);
        let keep = head.keep_alive();
        let asked = (framing, keep);
        let out =
            crate::exchange::outgoing_to(&shared, head, asked, &name.authority, path, &http.via);
        Some(Aimed { server, name, out })
    }

    /// Whether the request in hand may go to `addr` (an address its name resolved to, or
    /// an idle connection's): the rules, for a forward-proxy request to a name; an
    /// address the client wrote was checked when aimed, an edge server is configured.
    pub(super) fn allows(&self, addr: SocketAddr) -> bool {
        match (&self.ride, self.front) {
            (Some(ride), Front::Http) if ride.name.authority.host.parse::<IpAddr>().is_err() => {
                self.allows_to(&ride.name, addr)
            }
            _ => true,
        }
    }

    /// The rules' word on this client reaching `addr` as `name`.
    fn allows_to(&self, name: &Destination, addr: SocketAddr) -> bool {
        let host = name.authority.host.as_str();
        let domain = host.parse::<IpAddr>().is_err().then_some(host);
        self.shared.policy.allows(&crate::policy::Request {
            client: self.addr.ip(),
            user: None,
            domain,
            destination: addr.ip(),
            port: addr.port(),
        })
    }
}
