//! Step 1 of a take-over: what cannot be bridged, and where each leg's packets arrive.

use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::AsFd;

use crate::engine::Declined;
use splicer_bpf::ipsplice::FlowKey;
use splicer_sys::sock::{tcp_info, TcpInfo};
use tokio::net::TcpStream;

use super::declined;
use crate::tcp::{OPT_ECN, OPT_TIMESTAMPS, TCP_ESTABLISHED, TS_OPTION};

fn v4(a: io::Result<SocketAddr>) -> Option<SocketAddrV4> {
    match a.ok()? {
        SocketAddr::V4(a) => Some(a),
        SocketAddr::V6(a) => a
            .ip()
            .to_ipv4_mapped()
            .map(|ip| SocketAddrV4::new(ip, a.port())),
    }
}

/// The two legs' addresses and interfaces, once eligibility is checked.
pub(super) struct Legs {
    /// Client leg: the client's and the proxy's address, the interface toward the client.
    pub client: SocketAddrV4,
    pub client_local: SocketAddrV4,
    pub client_if: u32,
    pub upstream: SocketAddrV4,
    pub upstream_local: SocketAddrV4,
    pub upstream_if: u32,
    pub a: TcpInfo,
    pub b: TcpInfo,
}

impl Legs {
    /// Packets from the client, and from the upstream, as they reach the proxy.
    pub(super) fn keys(&self) -> (FlowKey, FlowKey) {
        (
            FlowKey::new(self.client, self.client_local),
            FlowKey::new(self.upstream, self.upstream_local),
        )
    }
}

/// What cannot be bridged, and where each leg's packets arrive.
pub(super) fn eligible(client: &TcpStream, upstream: &TcpStream) -> Result<Legs, Declined> {
    let (Some(c), Some(cl), Some(u), Some(ul)) = (
        v4(client.peer_addr()),
        v4(client.local_addr()),
        v4(upstream.peer_addr()),
        v4(upstream.local_addr()),
    ) else {
        return Err(declined("IPv6 is not supported yet"));
    };
    // Loopback first: it needs no system call.
    for p in [c.ip(), u.ip()] {
        if p.is_loopback() {
            return Err(declined(format!(
                "{p} is on this host (no interface to splice on)"
            )));
        }
    }
    let (a, b) = match (tcp_info(client.as_fd()), tcp_info(upstream.as_fd())) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return Err(declined(format!("TCP_INFO: {e}"))),
    };
    if a.state != TCP_ESTABLISHED || b.state != TCP_ESTABLISHED {
        return Err(declined("a side already half-closed before the splice"));
    }
    if (a.options ^ b.options) & OPT_TIMESTAMPS != 0 {
        return Err(declined("TCP timestamps on one leg only"));
    }
    if (a.options ^ b.options) & OPT_ECN != 0 {
        return Err(declined("ECN on one leg only"));
    }
    // Each endpoint sends segments as large as the proxy's leg allowed it: the other leg
    // must take them (the MSS cannot change in flight; seed 003 §3.4).
    let opt = if a.options & OPT_TIMESTAMPS != 0 {
        TS_OPTION
    } else {
        0
    };
    if a.snd_mss + opt < b.advmss || b.snd_mss + opt < a.advmss {
        return Err(declined(format!(
            "MSS differs between legs (client leg sends {} and takes {}, upstream leg sends {} and takes {})",
            a.snd_mss, a.advmss, b.snd_mss, b.advmss
        )));
    }
    // The interfaces and routes last: reading them costs a dozen system calls, and the
    // checks above decline most answers that cannot be taken (a small answer whose FIN
    // reached the proxy before the hand-off) for two `TCP_INFO` calls.
    let local = splicer_sys::net::local_addresses().unwrap_or_default();
    for p in [c.ip(), u.ip()] {
        if local.contains(&std::net::IpAddr::V4(*p)) {
            return Err(declined(format!(
                "{p} is on this host (no interface to splice on)"
            )));
        }
    }
    let routes = crate::route::routes().map_err(|e| declined(format!("routes: {e}")))?;
    let iface = |p: &std::net::Ipv4Addr| -> Result<u32, Declined> {
        let r = crate::route::lookup(&routes, *p)
            .ok_or_else(|| declined(format!("no route to {p}")))?;
        splicer_sys::net::ifindex(&r.iface)
            .map_err(|e| declined(format!("interface {}: {e}", r.iface)))
    };
    let (client_if, upstream_if) = (iface(c.ip())?, iface(u.ip())?);
    Ok(Legs {
        client: c,
        client_local: cl,
        client_if,
        upstream: u,
        upstream_local: ul,
        upstream_if,
        a,
        b,
    })
}
