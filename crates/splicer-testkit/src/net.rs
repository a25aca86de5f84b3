//! Where a test's servers and its proxy meet. On loopback for every engine but `ipsplice`:
//! it forwards packets between interfaces, so with its peers on the proxy's own host it
//! declines every tunnel. For it a test gets a namespace pair: the proxy in a network
//! namespace of its own, joined to the test's by a veth pair, the test's clients and
//! servers on the test's end of it. Both legs of a tunnel then cross the veth, as they
//! cross a wire.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::engines::{moved_by, Moved, MovedBy};

/// The addresses a test uses: loopback, or a namespace pair it owns (removed on drop, after
/// the proxy in it: declare the `Net` before the `Proxy`).
pub struct Net {
    pair: Option<Pair>,
}

/// A network namespace for the proxy and the veth pair to it.
struct Pair {
    netns: String,
    /// The test's end of the veth pair.
    link: String,
    host: Ipv4Addr,
    proxy: Ipv4Addr,
}

impl Net {
    /// Client, proxy and servers on this host's loopback.
    pub fn loopback() -> Net {
        Net { pair: None }
    }

    /// What `engine` needs: a namespace pair for `ipsplice` (which the kernel engines'
    /// tests run as root), loopback for the others.
    pub fn for_engine(engine: &str) -> Net {
        if engine == "ipsplice" {
            Net::pair()
        } else {
            Net::loopback()
        }
    }

    /// A namespace for the proxy, joined to the test's by a veth pair on a /30 of its own
    /// (`10.251.N.M`, a range nothing else here uses). Needs root.
    pub fn pair() -> Net {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let pid = std::process::id();
        // A leftover of a killed run may hold a name or a subnet: take the next one.
        for _ in 0..64 {
            let n = NEXT.fetch_add(1, Ordering::SeqCst) % 16_384;
            let (third, fourth) = ((n / 64) as u8, (n % 64 * 4) as u8);
            let pair = Pair {
                netns: format!("splicer-net{pid}-{n}"),
                link: format!("spn{}-{n}", pid % 100_000),
                host: Ipv4Addr::new(10, 251, third, fourth + 1),
                proxy: Ipv4Addr::new(10, 251, third, fourth + 2),
            };
            if pair.build() {
                return Net { pair: Some(pair) };
            }
        }
        panic!("no namespace pair could be built (ip netns, veth)");
    }

    /// Where the test's servers listen, and the proxy reaches them.
    pub fn host(&self) -> IpAddr {
        self.pair
            .as_ref()
            .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |p| IpAddr::V4(p.host))
    }

    /// Where the proxy listens.
    pub fn proxy(&self) -> IpAddr {
        self.pair
            .as_ref()
            .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |p| IpAddr::V4(p.proxy))
    }

    /// The command prefix that runs a program in the proxy's namespace, if it has one.
    pub fn exec_prefix(&self) -> Option<Vec<String>> {
        self.pair.as_ref().map(|p| {
            ["ip", "netns", "exec", &p.netns]
                .iter()
                .map(|s| s.to_string())
                .collect()
        })
    }

    /// Configuration a proxy listening here needs: beyond loopback, Splicer refuses to run
    /// as an open proxy, so only the test's end of the pair is allowed in.
    pub fn acl(&self) -> String {
        match &self.pair {
            None => String::new(),
            Some(p) => format!(
                "[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"{}/30\"]\n",
                p.host
            ),
        }
    }

    /// What moves `what` for a proxy started with `engine` on this net: [`moved_by`], but
    /// in a pair `ipsplice` takes the tunnels it declines on loopback.
    pub fn moved_by(&self, engine: &str, what: Moved) -> MovedBy {
        if self.pair.is_some()
            && engine == "ipsplice"
            && !matches!(what, Moved::Body | Moved::LineBody)
        {
            return MovedBy {
                engine: "ipsplice",
                because: None,
            };
        }
        moved_by(engine, what)
    }
}

impl Pair {
    /// Creates the namespace and the link; `false` (with what was made removed) when a
    /// step fails.
    fn build(&self) -> bool {
        let host = format!("{}/30", self.host);
        let proxy = format!("{}/30", self.proxy);
        let peer = format!("{}p", self.link);
        let ns = self.netns.as_str();
        let steps: [&[&str]; 7] = [
            &["netns", "add", ns],
            &[
                "link", "add", &self.link, "type", "veth", "peer", "name", &peer, "netns", ns,
            ],
            &["addr", "add", &host, "dev", &self.link],
            &["link", "set", &self.link, "up"],
            &["-n", ns, "addr", "add", &proxy, "dev", &peer],
            &["-n", ns, "link", "set", &peer, "up"],
            &["-n", ns, "link", "set", "lo", "up"],
        ];
        for step in steps {
            let ok = Command::new("ip")
                .args(step)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                self.remove();
                return false;
            }
        }
        true
    }

    fn remove(&self) {
        // Deleting the namespace deletes its end of the veth pair, and so both ends.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.remove();
    }
}
