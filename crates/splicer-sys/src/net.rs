//! The host's own addresses, so the proxy can refuse to be used against itself, and
//! interface indexes.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::cvt;

/// Every IPv4 and IPv6 address configured on this host's interfaces (`getifaddrs(3)`).
pub fn local_addresses() -> io::Result<Vec<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    cvt(unsafe { libc::getifaddrs(&mut head) })?;
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list returned by getifaddrs and not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr whose family says which struct it is.
            let family = unsafe { (*ifa.ifa_addr).sa_family } as libc::c_int;
            if family == libc::AF_INET {
                // SAFETY: the family is AF_INET, so the address is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))));
            } else if family == libc::AF_INET6 {
                // SAFETY: the family is AF_INET6, so the address is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                out.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Index of the interface called `name` in this network namespace (`if_nametoindex(3)`).
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c =
        std::ffi::CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid NUL-terminated name.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(i)
}

/// Interface names of the calling thread's network namespace (`if_nameindex(3)`, not
/// `/sys/class/net`, which shows the namespace sysfs was mounted in).
pub fn interfaces() -> Vec<String> {
    let mut out = Vec::new();
    // SAFETY: if_nameindex returns an array ended by a zero entry, freed below once.
    unsafe {
        let head = libc::if_nameindex();
        if head.is_null() {
            return out;
        }
        let mut cur = head;
        while (*cur).if_index != 0 && !(*cur).if_name.is_null() {
            out.push(
                std::ffi::CStr::from_ptr((*cur).if_name)
                    .to_string_lossy()
                    .into_owned(),
            );
            cur = cur.add(1);
        }
        libc::if_freenameindex(head);
    }
    out
}

/// The name of interface `ifindex` (`if_indextoname(3)`).
pub fn ifname(ifindex: u32) -> io::Result<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: the buffer has IF_NAMESIZE bytes, as if_indextoname requires.
    let p = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr()) };
    if p.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success the buffer holds a NUL-terminated name.
    Ok(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

/// Moves the calling thread into the network namespace `name` (as `ip netns` names it,
/// under `/run/netns`). Sockets the thread creates afterwards live there; other threads are
/// not affected. For tests that play a client or a server inside a lab host.
pub fn enter_netns(name: &str) -> io::Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{name}"))?;
    // SAFETY: setns on an open namespace file; it affects only this thread.
    cvt(unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_is_local() {
        let addrs = super::local_addresses().unwrap();
        assert!(addrs.contains(&"127.0.0.1".parse().unwrap()), "{addrs:?}");
        assert_eq!(super::ifindex("lo").unwrap(), 1);
        assert!(super::ifindex("no-such-if0").is_err());
    }
}
