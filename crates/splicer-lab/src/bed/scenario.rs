//! Scenario files: which hosts exist and which links join them, the link conditions, and
//! the experiment `splicer-lab run` performs on them: processes per host, loads, variants.

use std::collections::{BTreeMap, HashSet};

use anyhow::Context;
use serde::Deserialize;

mod expand;
pub use expand::{expand, BadPlaceholder};

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
    #[serde(default)]
    pub experiment: Experiment,
    /// What is compared side by side: each variant is one run of the loads, with its own
    /// placeholder values and processes. None: one variant named `run`.
    #[serde(rename = "variant", default)]
    pub variants: Vec<Variant>,
    /// Processes started, in order, before a variant's loads and stopped after them.
    #[serde(rename = "process", default)]
    pub processes: Vec<Process>,
    /// Load generators run together; each prints one JSON report.
    #[serde(rename = "load", default)]
    pub loads: Vec<Load>,
    /// Files written into the results directory, named by `{file:NAME}` in commands
    /// (e.g. a proxy's configuration).
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

/// Settings of `splicer-lab run`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    #[serde(default = "default_name")]
    pub name: String,
    /// Each round runs every variant once, in order (interleaved, docs/design.md "Measuring").
    #[serde(default = "default_rounds")]
    pub rounds: usize,
    /// The host whose TCP counters stand for "the server" in the summary.
    #[serde(default)]
    pub server: Option<String>,
    /// Sample the TCP sockets of the proxy's host (the host of the `role = "proxy"`
    /// process) with `ss` every this many milliseconds during the loads: what the proxy's
    /// kernel holds (0: not sampled; sampling costs CPU, so benchmarks of CPU leave it off).
    #[serde(default)]
    pub proxy_sockets_ms: u64,
    /// Count the proxy process's system calls during the loads (`perf stat`; each costs
    /// the proxy a little more, so CPU benchmarks leave it off).
    #[serde(default)]
    pub proxy_syscalls: bool,
    /// More `perf` events to count on the proxy process during the loads (`perf stat -e`:
    /// software events such as `context-switches` and tracepoints such as
    /// `io_uring:io_uring_complete`; this VM has no hardware counters), reported per
    /// operation with the time its threads waited for a CPU.
    #[serde(default)]
    pub proxy_events: Vec<String>,
    /// Count the TCP segments the proxy's host receives during the loads, by interface and
    /// by the state of the socket that takes each (an eBPF program on its interfaces:
    /// seed 002's packets in `FIN_WAIT_1`).
    #[serde(default)]
    pub proxy_tcp_states: bool,
}

impl Default for Experiment {
    fn default() -> Self {
        Experiment {
            name: default_name(),
            rounds: default_rounds(),
            server: None,
            proxy_sockets_ms: 0,
            proxy_syscalls: false,
            proxy_events: Vec::new(),
            proxy_tcp_states: false,
        }
    }
}

fn default_name() -> String {
    "experiment".into()
}

fn default_rounds() -> usize {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    /// The variant this one's ratios are computed against (default: the first).
    #[serde(default)]
    pub baseline: Option<String>,
    /// Values of `{NAME}` placeholders in this variant's commands.
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
}

/// A process living for one variant's run, e.g. an origin or the proxy under test.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    pub host: String,
    /// Program and arguments. `lab` is this splicer-lab binary, `splicer` the Splicer binary
    /// next to it (or on PATH); anything else is looked up on PATH.
    pub command: Vec<String>,
    /// `proxy`: the process whose CPU the summary reports; `server`: processes whose CPU
    /// is reported per operation with the server host's connections (all of them summed).
    #[serde(default)]
    pub role: Option<String>,
    /// An `IP:PORT` the process listens on; the run waits until it accepts connections.
    #[serde(default)]
    pub wait_for: Option<String>,
    /// Variants this process belongs to; empty: all.
    #[serde(default)]
    pub variants: Vec<String>,
    /// Percent of one CPU the process may use (a cgroup quota, see `cpulimit`); none: no
    /// limit. Makes a proxy the bottleneck, as the papers' slow proxies were.
    #[serde(default)]
    pub cpu_limit: Option<f64>,
    /// Milliseconds to wait after starting the process, for one that cannot be waited for
    /// with `wait_for` (e.g. a packet capture, ready once it opened its socket).
    #[serde(default)]
    pub settle_ms: u64,
    /// Milliseconds to wait after the loads before stopping the process (a capture, to
    /// take in what the kernel still holds for it).
    #[serde(default)]
    pub drain_ms: u64,
}

/// A load generator run (a `lab` subcommand printing a JSON report).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Load {
    pub host: String,
    pub command: Vec<String>,
    #[serde(default)]
    pub variants: Vec<String>,
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
    /// Each client's own cap in bits per second, before the shared link (seed 000's modem
    /// clients: 56000 down, 28000 up); a client is one connection. Absent or 0: none.
    #[serde(default)]
    pub per_client_rate_bps: u64,
    /// Microseconds before each release the emulator stops sleeping and yield-waits: less
    /// is cheaper in CPU and less accurate on a VM (see docs/lab.md).
    #[serde(default = "default_spin_us")]
    pub spin_us: u64,
    /// The CPUs (a `taskset` list) the emulator runs on; none: any.
    #[serde(default)]
    pub cpus: Option<String>,
}

fn default_spin_us() -> u64 {
    crate::bed::emulator::SPIN.as_micros() as u64
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
    /// Network-namespace sysctls set when the host is made, e.g.
    /// `{ "net.ipv4.tcp_slow_start_after_idle" = "0" }`.
    #[serde(default)]
    pub sysctl: BTreeMap<String, String>,
    /// The initial congestion window, in segments, on every route of the host (`ip route
    /// ... initcwnd`): what its connections send in their first round trip. None: the
    /// kernel's 10. Seed 004's 2009 stacks started at 2 (its Table 1).
    #[serde(default)]
    pub initcwnd: Option<u32>,
    /// The kernel's receive work for this host's links in threads of its own (threaded
    /// NAPI; GRO on its ends, TSO off on the peers'), whose CPU a run counts: what a
    /// proxy's kernel engines do shows there and nowhere else (`bed::napi`, docs/lab.md).
    #[serde(default)]
    pub napi_threads: bool,
    /// The CPUs (a `taskset` list such as `"1"` or `"0-1"`) the host's receive threads run
    /// on: with the proxy's process pinned there too, its kernel work competes with it for
    /// the same CPU, as a splice in the interrupt path did on seed 001's proxy.
    #[serde(default)]
    pub napi_cpus: Option<String>,
}

/// A veth link between two hosts, its own /24 subnet.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    pub a: String,
    pub b: String,
    /// A wire speed, Mbit/s, in each direction: a `tbf` qdisc on both ends' egress (none:
    /// the veth's own speed). Seed 003's 100 Mbit/s Ethernet, for instance.
    #[serde(default)]
    pub rate_mbit: Option<u32>,
    /// The MTU of both ends, bytes (none: the veth's 1500). Seed 002's clients had 536.
    #[serde(default)]
    pub mtu: Option<u32>,
}

/// Placeholders a command has besides the hosts: the results directory and the run's tag.
const RESERVED: [&str; 2] = ["out", "run"];

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
                !RESERVED.contains(&h.name.as_str()),
                "host[{i}].name: {:?} is a placeholder of its own ({RESERVED:?})",
                h.name
            );
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
            for (k, v) in &h.sysctl {
                let plain = |t: &str, dots: bool| {
                    !t.is_empty()
                        && t.bytes().all(|b| {
                            b.is_ascii_alphanumeric()
                                || b == b'_'
                                || b == b'-'
                                || (dots && b == b'.')
                        })
                };
                anyhow::ensure!(
                    k.starts_with("net.")
                        && plain(k, true)
                        && v.split(' ').all(|w| plain(w, false)),
                    "host[{i}].sysctl: {k:?} = {v:?}: a net.* name and a plain value \
                     (words joined by single spaces, e.g. \"4096 16384 16384\")"
                );
            }
            if let Some(w) = h.initcwnd {
                anyhow::ensure!(
                    (1..=1024).contains(&w),
                    "host[{i}].initcwnd: {w} is not 1 to 1024 segments"
                );
            }
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
            if let Some(r) = l.rate_mbit {
                anyhow::ensure!(
                    (1..=100_000).contains(&r),
                    "link[{i}].rate_mbit: 1 to 100000 (got {r})"
                );
            }
            if let Some(m) = l.mtu {
                // Below 256 the TCP segments' payloads fall under the kernel's least MSS
                // (and IPv4's 68 is the floor of any MTU); a veth takes up to 65535.
                anyhow::ensure!(
                    (256..=65_535).contains(&m),
                    "link[{i}].mtu: 256 to 65535 bytes (got {m})"
                );
            }
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
        self.validate_experiment(&names)?;
        for h in &self.hosts {
            if let Some(c) = &h.napi_cpus {
                anyhow::ensure!(
                    h.napi_threads,
                    "host {}: napi_cpus needs napi_threads = true",
                    h.name
                );
                check_cpus(c).with_context(|| format!("host {}: napi_cpus", h.name))?;
            }
        }
        for (i, e) in self.emulations.iter().enumerate() {
            for (key, name) in [("router", &e.router), ("from", &e.from), ("to", &e.to)] {
                anyhow::ensure!(
                    names.contains(name.as_str()),
                    "emulate[{i}].{key}: no host named {name:?}"
                );
            }
            anyhow::ensure!(
                e.delay_ms.is_finite() && (0.0..=10_000.0).contains(&e.delay_ms),
                "emulate[{i}].delay_ms: {} is not within 0 to 10000",
                e.delay_ms
            );
            for (key, v) in [("loss_p", e.loss_p), ("loss_r", e.loss_r)] {
                anyhow::ensure!(
                    (0.0..=1.0).contains(&v),
                    "emulate[{i}].{key}: {v} is not a probability (0 to 1)"
                );
            }
            anyhow::ensure!(e.spin_us <= 10_000, "emulate[{i}].spin_us: at most 10000");
            if let Some(c) = &e.cpus {
                check_cpus(c).with_context(|| format!("emulate[{i}].cpus"))?;
            }
            anyhow::ensure!(
                e.queue_limit > 0,
                "emulate[{i}].queue_limit: must be at least 1"
            );
        }
        Ok(())
    }

    /// The variants to run: those given, or one named `run`.
    pub fn variants(&self) -> Vec<Variant> {
        if self.variants.is_empty() {
            vec![Variant {
                name: "run".into(),
                baseline: None,
                vars: BTreeMap::new(),
            }]
        } else {
            self.variants.clone()
        }
    }

    /// Looks up a placeholder for `variant`: its vars (which may name hosts), host
    /// addresses via `addr`, and `file:NAME`.
    pub fn lookup(
        &self,
        variant: &Variant,
        addr: &dyn Fn(&str) -> Option<String>,
        file: &dyn Fn(&str) -> Option<String>,
        name: &str,
    ) -> Option<String> {
        if let Some(f) = name.strip_prefix("file:") {
            return self.files.contains_key(f).then(|| file(f)).flatten();
        }
        if let Some(v) = variant.vars.get(name) {
            // A var's value may itself hold host placeholders.
            return expand(v, &|n| addr(n)).ok();
        }
        addr(name)
    }

    fn validate_experiment(&self, names: &HashSet<&str>) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=100).contains(&self.experiment.rounds),
            "experiment.rounds: 1 to 100"
        );
        if let Some(s) = &self.experiment.server {
            anyhow::ensure!(
                names.contains(s.as_str()),
                "experiment.server: no host named {s:?}"
            );
        }
        let mut vnames = HashSet::new();
        for (i, v) in self.variants.iter().enumerate() {
            anyhow::ensure!(
                !v.name.is_empty() && vnames.insert(v.name.as_str()),
                "variant[{i}].name: empty or defined twice"
            );
        }
        for (i, v) in self.variants.iter().enumerate() {
            if let Some(b) = &v.baseline {
                anyhow::ensure!(
                    vnames.contains(b.as_str()),
                    "variant[{i}].baseline: no variant named {b:?}"
                );
            }
        }
        let check = |what: &str, i: usize, host: &str, cmd: &[String], variants: &[String]| {
            anyhow::ensure!(
                names.contains(host),
                "{what}[{i}].host: no host named {host:?}"
            );
            anyhow::ensure!(!cmd.is_empty(), "{what}[{i}].command: empty");
            for v in variants {
                anyhow::ensure!(
                    vnames.contains(v.as_str()),
                    "{what}[{i}].variants: no variant named {v:?}"
                );
            }
            for v in self.variants() {
                if !variants.is_empty() && !variants.contains(&v.name) {
                    continue;
                }
                // `{out}` and `{run}` are given by the run (experiment.rs).
                let addr = |n: &str| {
                    (names.contains(n) || RESERVED.contains(&n)).then(|| "10.0.0.1".to_string())
                };
                let file = |_: &str| Some("/file".to_string());
                for arg in cmd {
                    expand(arg, &|n| self.lookup(&v, &addr, &file, n)).map_err(|e| {
                        anyhow::anyhow!("{what}[{i}].command (variant {}): {e}", v.name)
                    })?;
                }
            }
            Ok(())
        };
        for (i, p) in self.processes.iter().enumerate() {
            check("process", i, &p.host, &p.command, &p.variants)?;
            if let Some(r) = &p.role {
                anyhow::ensure!(
                    r == "proxy" || r == "server",
                    "process[{i}].role: only \"proxy\" and \"server\" are known"
                );
            }
            if let Some(c) = p.cpu_limit {
                // The kernel's smallest quota is 1 ms and its longest period 1 s.
                anyhow::ensure!(
                    (0.1..=100_000.0).contains(&c),
                    "process[{i}].cpu_limit: percent of one CPU, from 0.1 (got {c})"
                );
            }
        }
        for (i, l) in self.loads.iter().enumerate() {
            check("load", i, &l.host, &l.command, &l.variants)?;
        }
        Ok(())
    }

    /// Index of a host by name.
    pub fn host_index(&self, name: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.name == name)
    }
}

/// A CPU list as `taskset -c` takes it: numbers, ranges and commas (`"1"`, `"0,2-3"`).
fn check_cpus(list: &str) -> anyhow::Result<()> {
    let ok = !list.is_empty()
        && list.split(',').all(|part| {
            let mut ends = part.splitn(2, '-');
            ends.all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
    anyhow::ensure!(
        ok,
        "{list:?} is not a CPU list (such as \"1\" or \"0,2-3\")"
    );
    Ok(())
}

#[cfg(test)]
mod tests;
