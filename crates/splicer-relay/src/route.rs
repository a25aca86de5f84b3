//! Which interface leads to an IPv4 address: the longest-prefix match over the main routing
//! table (`/proc/net/route`, this network namespace's). The `ipsplice` engine attaches its
//! program to the interface each leg's packets arrive on, and sends each leg's rewritten
//! packets out of the other one, so it assumes routes are symmetric.

use std::net::Ipv4Addr;

/// One route: destination, mask, interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    dest: u32,
    mask: u32,
    pub iface: String,
}

/// Parses `/proc/net/route`. The kernel prints each address's raw `__be32` as a native
/// integer in hex; [`lookup`] compares the address in the same form.
pub(crate) fn parse(text: &str) -> Vec<Route> {
    let raw = |s: &str| u32::from_str_radix(s, 16).ok();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            // Flags: RTF_UP = 1.
            let flags = u32::from_str_radix(f[3], 16).ok()?;
            if flags & 1 == 0 {
                return None;
            }
            Some(Route {
                iface: f[0].to_string(),
                dest: raw(f[1])?,
                mask: raw(f[7])?,
            })
        })
        .collect()
}

/// The interface of the most specific route to `addr`.
pub(crate) fn lookup(routes: &[Route], addr: Ipv4Addr) -> Option<&Route> {
    let p = u32::from_ne_bytes(addr.octets());
    routes
        .iter()
        .filter(|r| p & r.mask == r.dest)
        .max_by_key(|r| r.mask.count_ones())
}

/// Reads this namespace's routes.
pub(crate) fn routes() -> std::io::Result<Vec<Route>> {
    Ok(parse(&std::fs::read_to_string("/proc/net/route")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t0102000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
eth0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
veth1\t0001E70A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
down0\t0005E70A\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";

    #[test]
    fn longest_prefix_wins() {
        let r = parse(TABLE);
        assert_eq!(r.len(), 3, "the route that is not up is skipped");
        let at = |a: &str| lookup(&r, a.parse().unwrap()).map(|r| r.iface.as_str());
        assert_eq!(at("10.231.1.7"), Some("veth1"));
        assert_eq!(at("10.0.2.9"), Some("eth0"));
        assert_eq!(at("192.0.2.1"), Some("eth0"), "default route");
        assert_eq!(at("10.231.5.1"), Some("eth0"), "down route ignored");
        assert!(lookup(&parse(&TABLE[..100]), "10.1.1.1".parse().unwrap()).is_none());
    }
}
