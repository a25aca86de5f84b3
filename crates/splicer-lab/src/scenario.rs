//! Scenario files: which hosts exist and which links join them.

use std::collections::HashSet;

use serde::Deserialize;

/// A scenario: hosts and the links between them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    #[serde(rename = "host")]
    pub hosts: Vec<Host>,
    #[serde(rename = "link", default)]
    pub links: Vec<Link>,
    /// Emulated link conditions, each on one direction through a router host.
    #[serde(rename = "emulate", default)]
    pub emulations: Vec<Emulate>,
}

/// Conditions applied by a router host to the packets it forwards from the link towards
/// `from` to the link towards `to` (one direction of a leg such as client — r1 — proxy).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Emulate {
    pub router: String,
    pub from: String,
    pub to: String,
    /// One-way delay added, in milliseconds.
    #[serde(default)]
    pub delay_ms: f64,
    /// Bandwidth cap in bits per second (framing counted); absent or 0: none.
    #[serde(default)]
    pub rate_bps: u64,
    /// Packets that may wait; more are dropped.
    #[serde(default = "default_queue_limit")]
    pub queue_limit: usize,
    /// Two-state loss: probability of a first loss, and of a loss right after a loss.
    #[serde(default)]
    pub loss_p: f64,
    #[serde(default)]
    pub loss_r: f64,
    #[serde(default = "default_seed")]
    pub seed: u64,
}

fn default_queue_limit() -> usize {
    1000
}

fn default_seed() -> u64 {
    1
}

/// A host: one network namespace.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Host {
    /// 1 to 11 characters of `[a-z0-9]`; used in interface names.
    pub name: String,
    /// Whether the host forwards IP packets between its links (a router or proxy host).
    #[serde(default)]
    pub forward: bool,
}

/// A veth link between two hosts, its own /24 subnet.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    pub a: String,
    pub b: String,
}

impl Scenario {
    /// Parses and validates; errors name the key at fault (and the line, for syntax).
    pub fn from_toml(text: &str) -> anyhow::Result<Scenario> {
        let s: Scenario = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        s.validate()?;
        Ok(s)
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.hosts.is_empty(),
            "host: a scenario needs at least one [[host]]"
        );
        anyhow::ensure!(self.links.len() <= 250, "link: at most 250 links");
        let mut names = HashSet::new();
        for (i, h) in self.hosts.iter().enumerate() {
            let ok = !h.name.is_empty()
                && h.name.len() <= 11
                && h.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
            anyhow::ensure!(
                ok,
                "host[{i}].name: {:?} must be 1 to 11 characters of a-z and 0-9",
                h.name
            );
            anyhow::ensure!(
                names.insert(h.name.as_str()),
                "host[{i}].name: {:?} is defined twice",
                h.name
            );
        }
        let mut pairs = HashSet::new();
        for (i, l) in self.links.iter().enumerate() {
            for (key, name) in [("a", &l.a), ("b", &l.b)] {
                anyhow::ensure!(
                    names.contains(name.as_str()),
                    "link[{i}].{key}: no host named {name:?}"
                );
            }
            anyhow::ensure!(l.a != l.b, "link[{i}]: a host cannot link to itself");
            let pair = if l.a < l.b {
                (&l.a, &l.b)
            } else {
                (&l.b, &l.a)
            };
            anyhow::ensure!(
                pairs.insert(pair),
                "link[{i}]: {} and {} are already linked",
                l.a,
                l.b
            );
        }
        Ok(())
    }

    /// Index of a host by name.
    pub fn host_index(&self, name: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAIN: &str = r#"
[[host]]
name = "client"
[[host]]
name = "proxy"
forward = true
[[host]]
name = "server"
[[link]]
a = "client"
b = "proxy"
[[link]]
a = "proxy"
b = "server"
"#;

    #[test]
    fn parses_a_chain() {
        let s = Scenario::from_toml(CHAIN).unwrap();
        assert_eq!(s.hosts.len(), 3);
        assert!(s.hosts[1].forward);
        assert_eq!(s.host_index("server"), Some(2));
    }

    #[test]
    fn errors_name_the_key() {
        let bad = CHAIN.replace("b = \"server\"", "b = \"sever\"");
        let e = Scenario::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("link[1].b") && e.contains("sever"), "{e}");
        let e = Scenario::from_toml(&CHAIN.replace("name = \"proxy\"", "name = \"Proxy-Host\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("host[1].name"), "{e}");
        let e = Scenario::from_toml(&CHAIN.replace("forward = true", "forwad = true"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("forwad") && e.contains("line"), "{e}");
        let e = Scenario::from_toml(&format!("{CHAIN}[[link]]\na = \"server\"\nb = \"proxy\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("link[2]") && e.contains("already linked"), "{e}");
    }
}
