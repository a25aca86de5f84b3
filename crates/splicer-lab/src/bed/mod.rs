//! Building a scenario as namespaces and veth links, running processes in its hosts, and
//! removing everything again: on drop (so also while a panic unwinds), on request, and for
//! leftovers of runs that were killed (`splicer-lab clean`).
//!
//! Names: host `h` of the run by process `P` is the namespace `splab-P-h`; link `i` between
//! `a` and `b` is the veth pair `v{i}{b}` (in `a`) and `v{i}{a}` (in `b`), subnet
//! `10.231.i.0/24`, `a` = `.1`, `b` = `.2`. That range is used only inside these namespaces.
//!
//! # Layout
//! - this file: the bed itself.
//! - [`scenario`]: the scenario file (TOML): hosts and links, validated with key names.
//! - [`emulator`]: one direction of a link over NFQUEUE: delay, rate, queue, two-state loss.
//! - [`cpulimit`]: a CPU budget for a process of a run (a cgroup quota).
//! - [`napi`]: a host's receive work in threads of its own, so that its CPU can be counted.

pub mod cpulimit;
pub mod emulator;
pub mod napi;
pub mod scenario;
pub mod steal;

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::Context;

use crate::bed::scenario::Scenario;

/// What `tbf` lets through at once on a link of `rate_mbit`, and how much it queues. Up to
/// 100 Mbit/s the burst is two full frames, so `tbf` cuts the veth's large (GSO) packets
/// into wire-size frames and a receiver sees them one by one, as on a real wire; above, the
/// burst is 64 KiB and large packets pass whole: cutting them costs every host on this 2-CPU
/// machine more than a faster wire can carry (a 1 Gbit/s link of frames ran at 0.4–0.65
/// Gbit/s with the CPUs busy). The queue holds 150 full frames, the interface queue seed
/// 003 set on its proxy, or two bursts.
pub fn link_tbf(rate_mbit: u32) -> (u32, u32) {
    const FRAME: u32 = 1514;
    let burst = if rate_mbit <= 100 {
        2 * FRAME
    } else {
        64 * 1024
    };
    (burst, (150 * FRAME).max(2 * burst))
}

/// Prefix of every namespace the lab creates.
pub const PREFIX: &str = "splab-";

/// A built scenario. Dropping it kills its processes and deletes its namespaces (which
/// takes their links, addresses and routes with them).
pub struct Bed {
    run: String,
    scenario: Scenario,
    children: Vec<Child>,
    namespaces: Vec<String>,
    emulators: Vec<u32>,
    /// Receive threads of the hosts with `napi_threads`: (host, PID).
    napi: Vec<(String, u32)>,
    /// Where the emulators write their stats files.
    stats_dir: std::path::PathBuf,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("cannot run `ip` (iproute2)")?;
    anyhow::ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// The address of one end of link `i` (`a` is end 1, `b` end 2).
pub fn link_addr(i: usize, end: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 231, i as u8, end)
}

impl Bed {
    /// Builds the scenario. Needs root (network namespaces); on any failure, what was built
    /// so far is removed again. A scenario with `[[emulate]]` entries needs
    /// [`Bed::build_with_emulators`].
    pub fn build(scenario: Scenario) -> anyhow::Result<Bed> {
        anyhow::ensure!(
            scenario.emulations.is_empty(),
            "[[emulate]] needs the splicer-lab binary: use build_with_emulators"
        );
        Bed::build_with_emulators(scenario, Path::new("splicer-lab"))
    }

    /// Builds the scenario and starts one `LAB emulate` process per `[[emulate]]` entry in
    /// its router host, fed by an iptables NFQUEUE rule for that direction.
    pub fn build_with_emulators(scenario: Scenario, lab: &Path) -> anyhow::Result<Bed> {
        let run = format!("{PREFIX}{}", std::process::id());

        let mut bed = Bed {
            scenario,
            children: Vec::new(),
            namespaces: Vec::new(),
            emulators: Vec::new(),
            napi: Vec::new(),
            stats_dir: std::env::temp_dir().join(&run),
            run,
        };
        bed.create().context("building the test bed")?;
        bed.start_emulators(lab)
            .context("starting the link emulators")?;
        Ok(bed)
    }

    /// The device of `host` on its link to `other`.
    fn device(&self, host: &str, other: &str) -> Option<String> {
        self.scenario.links.iter().enumerate().find_map(|(i, l)| {
            ((l.a == host && l.b == other) || (l.b == host && l.a == other))
                .then(|| format!("v{i}{other}"))
        })
    }

    fn start_emulators(&mut self, lab: &Path) -> anyhow::Result<()> {
        if !self.scenario.emulations.is_empty() {
            std::fs::create_dir_all(&self.stats_dir)?;
        }
        for (i, e) in self.scenario.emulations.clone().iter().enumerate() {
            let (Some(from_dev), Some(to_dev)) = (
                self.device(&e.router, &e.from),
                self.device(&e.router, &e.to),
            ) else {
                anyhow::bail!("emulate[{i}]: not linked")
            };
            let queue = i.to_string();
            let rule = [
                "-A",
                "FORWARD",
                "-i",
                &from_dev,
                "-o",
                &to_dev,
                "-j",
                "NFQUEUE",
                "--queue-num",
                &queue,
            ];
            let st = self
                .command(&e.router, "iptables")
                .args(rule)
                .status()
                .context("cannot run iptables")?;
            anyhow::ensure!(st.success(), "iptables {}", rule.join(" "));
            let lab = lab.to_str().unwrap_or("splicer-lab");
            let mut cmd = match &e.cpus {
                Some(cpus) => {
                    let mut c = self.command(&e.router, "taskset");
                    c.args(["-c", cpus, lab]);
                    c
                }
                None => self.command(&e.router, lab),
            };
            cmd.args(["emulate", "--queue", &queue])
                .args([
                    "--delay-ms",
                    &e.delay_ms.to_string(),
                    "--rate-bps",
                    &e.rate_bps.to_string(),
                ])
                .args([
                    "--queue-limit",
                    &e.queue_limit.to_string(),
                    "--seed",
                    &e.seed.to_string(),
                ])
                .args([
                    "--loss-p",
                    &e.loss_p.to_string(),
                    "--loss-r",
                    &e.loss_r.to_string(),
                    "--per-client-rate-bps",
                    &e.per_client_rate_bps.to_string(),
                ])
                .args(["--spin-us", &e.spin_us.to_string()])
                .arg("--stats")
                .arg(self.stats_dir.join(format!("emulate{i}.json")))
                .stdout(Stdio::null());
            let pid = self.spawn(&mut cmd)?;
            self.emulators.push(pid);
        }
        Ok(())
    }

    fn create(&mut self) -> anyhow::Result<()> {
        for h in self.scenario.hosts.clone() {
            let ns = self.netns(&h.name);
            ip(&["netns", "add", &ns])?;
            self.namespaces.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            let forward = if h.forward { "1" } else { "0" };
            ip(&[
                "netns",
                "exec",
                &ns,
                "sysctl",
                "-qw",
                &format!("net.ipv4.ip_forward={forward}"),
            ])?;
            // The lab's clients open thousands of connections a second (seed 000's
            // connection per request), and so does a proxy upstream. With the kernel's
            // defaults the sockets they close first wait in TIME_WAIT for a minute on one
            // of 28,232 ports: after a few seconds connect() searches the range for a free
            // port, and that search, not the proxy, becomes the load (a connection-per-
            // request s-client at 180% of the two CPUs, 75 ms a request, every run after
            // the first, 2026-11-27). A wide range, and TIME_WAIT ports reused for new
            // outgoing connections (safe with timestamps, which every host here has), as a
            // fleet of clients would never run out; a host's own `sysctl` may differ.
            for kv in [
                "net.ipv4.ip_local_port_range=1024 65535",
                "net.ipv4.tcp_tw_reuse=1",
            ] {
                ip(&["netns", "exec", &ns, "sysctl", "-qw", kv])?;
            }
            for (k, v) in &h.sysctl {
                ip(&["netns", "exec", &ns, "sysctl", "-qw", &format!("{k}={v}")])?;
            }
        }
        for (i, l) in self.scenario.links.clone().iter().enumerate() {
            let (na, nb) = (self.netns(&l.a), self.netns(&l.b));
            let (da, db) = (format!("v{i}{}", l.b), format!("v{i}{}", l.a));
            ip(&[
                "link", "add", &da, "netns", &na, "type", "veth", "peer", "name", &db, "netns", &nb,
            ])?;
            for (ns, dev, end, host) in [(&na, &da, 1, &l.a), (&nb, &db, 2, &l.b)] {
                let addr = link_addr(i, end).to_string();
                ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
                if let Some(mtu) = l.mtu {
                    ip(&["-n", ns, "link", "set", dev, "mtu", &mtu.to_string()])?;
                }
                ip(&["-n", ns, "link", "set", dev, "up"])?;
                if let Some(w) = self.initcwnd(host) {
                    // The link's own subnet: the route the address brought, with the window.
                    let subnet = format!("10.231.{i}.0/24");
                    ip(&[
                        "-n", ns, "route", "replace", &subnet, "dev", dev, "proto", "kernel",
                        "scope", "link", "src", &addr, "initcwnd", &w,
                    ])?;
                }
                if let Some(rate) = l.rate_mbit {
                    let (burst, limit) = link_tbf(rate);
                    let (rate, burst, limit) =
                        (format!("{rate}mbit"), burst.to_string(), limit.to_string());
                    let args = [
                        "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", &rate,
                        "burst", &burst, "limit", &limit,
                    ];
                    let out = Command::new("tc").args(args).output();
                    let ok = out.as_ref().is_ok_and(|o| o.status.success());
                    anyhow::ensure!(
                        ok,
                        "link[{i}].rate_mbit: tc {} failed: {}",
                        args.join(" "),
                        out.map_or_else(
                            |e| e.to_string(),
                            |o| String::from_utf8_lossy(&o.stderr).trim().to_string()
                        )
                    );
                }
            }
            // The receive threads, once both ends are up (a down veth has no NAPI).
            self.thread_link(i, [(&l.a, &na, &da), (&l.b, &nb, &db)])?;
        }
        self.add_routes()
    }

    /// Static routes: every host reaches every subnet through the neighbour that is first
    /// on a shortest path towards it.
    fn add_routes(&self) -> anyhow::Result<()> {
        let hosts = &self.scenario.hosts;
        let links = &self.scenario.links;
        let idx = |n: &str| self.scenario.host_index(n).expect("validated");
        for h in 0..hosts.len() {
            // Breadth-first search from h, remembering for each host the first link taken.
            let mut first: Vec<Option<usize>> = vec![None; hosts.len()];
            let mut seen = vec![false; hosts.len()];
            seen[h] = true;
            let mut queue = VecDeque::from([h]);
            while let Some(u) = queue.pop_front() {
                for (li, l) in links.iter().enumerate() {
                    let (a, b) = (idx(&l.a), idx(&l.b));
                    let v = if a == u {
                        b
                    } else if b == u {
                        a
                    } else {
                        continue;
                    };
                    if !seen[v] {
                        seen[v] = true;
                        first[v] = if u == h { Some(li) } else { first[u] };
                        queue.push_back(v);
                    }
                }
            }
            for (j, l) in links.iter().enumerate() {
                let (a, b) = (idx(&l.a), idx(&l.b));
                if a == h || b == h {
                    continue;
                }
                // The nearer end of link j decides the way; both ends share its subnet.
                let Some(via_link) = first[a].or(first[b]) else {
                    continue;
                };
                let vl = &links[via_link];
                let gateway = if idx(&vl.a) == h {
                    link_addr(via_link, 2)
                } else {
                    link_addr(via_link, 1)
                };
                let ns = self.netns(&hosts[h].name);
                let (subnet, gateway) = (format!("10.231.{j}.0/24"), gateway.to_string());
                let mut args = vec!["-n", &ns, "route", "add", &subnet, "via", &gateway];
                let window = self.initcwnd(&hosts[h].name);
                if let Some(w) = &window {
                    args.extend(["initcwnd", w]);
                }
                ip(&args)?;
            }
        }
        Ok(())
    }

    /// A host's `initcwnd`, as `ip route` takes it.
    fn initcwnd(&self, host: &str) -> Option<String> {
        let i = self.scenario.host_index(host)?;
        self.scenario.hosts[i].initcwnd.map(|w| w.to_string())
    }

    /// The namespace of a host.
    pub fn netns(&self, host: &str) -> String {
        format!("{}-{host}", self.run)
    }

    /// A host's address on its first link.
    pub fn addr(&self, host: &str) -> Option<Ipv4Addr> {
        self.scenario.links.iter().enumerate().find_map(|(i, l)| {
            if l.a == host {
                Some(link_addr(i, 1))
            } else if l.b == host {
                Some(link_addr(i, 2))
            } else {
                None
            }
        })
    }

    /// A command that runs `program` inside `host`: in its network namespace only. (Not
    /// `ip netns exec`, whose own mount namespace remounts `/sys` and so hides the cgroup
    /// hierarchies, which a proxy attaching a cgroup eBPF program needs.)
    pub fn command(&self, host: &str, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.netns(host)))
            .arg("--")
            .arg(program);
        c
    }

    /// Starts a process that lives as long as the bed; returns its PID. (`nsenter` without
    /// `--fork` execs the program, so the PID is the program's.)
    pub fn spawn(&mut self, cmd: &mut Command) -> anyhow::Result<u32> {
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .context("cannot start a process in the bed")?;
        let pid = child.id();
        self.children.push(child);
        Ok(pid)
    }

    /// Serves `dir` (or the current directory) over HTTP from `host`, on its first address
    /// and `port`, for the bed's lifetime; returns the base URL. Uses Python's http.server,
    /// a real server that every machine of this kind has (scripts/setup.sh installs it).
    /// Also returns the server's PID.
    pub fn serve_http(
        &mut self,
        host: &str,
        port: u16,
        dir: Option<&Path>,
    ) -> anyhow::Result<(String, u32)> {
        let addr = self
            .addr(host)
            .with_context(|| format!("{host} has no link, so no address"))?;
        let mut cmd = self.command(host, "python3");
        cmd.args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            &addr.to_string(),
        ]);
        if let Some(d) = dir {
            cmd.arg("--directory").arg(d);
        }
        let pid = self.spawn(cmd.stdout(Stdio::null()).stderr(Stdio::null()))?;
        Ok((format!("http://{addr}:{port}/"), pid))
    }

    /// Waits (bounded by `within`) until curl in `client` gets a 200 from `url`.
    pub fn wait_http(
        &self,
        client: &str,
        url: &str,
        within: std::time::Duration,
    ) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + within;
        loop {
            let out = self
                .command(client, "curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--max-time",
                    "2",
                    url,
                ])
                .output()
                .context("cannot run curl")?;
            if out.stdout == b"200" {
                return Ok(());
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "{url} not reachable from {client} within {within:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// The latest stats each `[[emulate]]` entry's emulator wrote (once a second).
    pub fn emulator_stats(&self) -> Vec<Option<crate::bed::emulator::Stats>> {
        (0..self.scenario.emulations.len())
            .map(|i| {
                crate::bed::emulator::Stats::read(&self.stats_dir.join(format!("emulate{i}.json")))
            })
            .collect()
    }

    /// PIDs of the link emulators (their CPU is not the proxy host's).
    pub fn emulator_pids(&self) -> &[u32] {
        &self.emulators
    }

    /// Stops one process started with [`Bed::spawn`]: SIGTERM (so it can shut down
    /// cleanly), then SIGKILL after `grace`. Returns whether it was the bed's.
    pub fn stop(&mut self, pid: u32, grace: std::time::Duration) -> bool {
        let Some(i) = self.children.iter().position(|c| c.id() == pid) else {
            return false;
        };
        let mut c = self.children.swap_remove(i);
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if matches!(c.try_wait(), Ok(Some(_))) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        true
    }

    /// Kills the bed's processes (by PID) and deletes its namespaces.
    pub fn teardown(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.children.clear();
        for ns in self.namespaces.drain(..) {
            let _ = ip(&["netns", "del", &ns]);
        }
        let _ = std::fs::remove_dir_all(&self.stats_dir);
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Kills the processes inside a namespace (by PID, from `ip netns pids`), then deletes it:
/// a namespace's processes would otherwise outlive its name (an emulator of a killed run).
fn remove_namespace(name: &str) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(["netns", "pids", name])
        .output()
        .context("cannot run `ip netns pids`")?;
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if pid.parse::<u32>().is_ok() {
            let _ = Command::new("kill").args(["-KILL", pid]).status();
        }
    }
    ip(&["netns", "del", name])
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether SIGINT or SIGTERM arrived and the bed is being removed: the main thread, which
/// may fail meanwhile because its namespaces vanish, should then wait for the exit (130)
/// rather than exit first with its own error.
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Removes this process's bed (its namespaces and the processes in them) when SIGINT or
/// SIGTERM arrives, then exits with status 130: Ctrl-C on `splicer-lab run` or `up` leaves
/// nothing behind. Call once, before building a bed.
pub fn clean_up_on_interrupt() {
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async {
            let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            else {
                return;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
        INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
        let prefix = format!("{PREFIX}{}-", std::process::id());
        // Twice: the main thread may be creating a namespace while the first pass runs.
        for pass in 0..2 {
            if pass > 0 {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
                continue;
            };
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let name = line.split_whitespace().next().unwrap_or("");
                if name.starts_with(&prefix) {
                    let _ = remove_namespace(name);
                }
            }
        }
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(prefix.trim_end_matches('-')));
        eprintln!("interrupted: test bed removed");
        std::process::exit(130);
    });
}

/// Deletes namespaces left by lab runs whose process is gone (a crash, `kill -9`). Beds of
/// live processes are left alone. Returns the names deleted.
pub fn clean() -> anyhow::Result<Vec<String>> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .context("cannot run `ip netns list`")?;
    let mut removed = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            remove_namespace(name)?;
            removed.push(name.to_string());
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_links_cut_frames_up_to_100_mbit_and_queue_150() {
        assert_eq!(link_tbf(100), (3028, 227_100));
        assert_eq!(link_tbf(1000), (65_536, 227_100));
    }
}
