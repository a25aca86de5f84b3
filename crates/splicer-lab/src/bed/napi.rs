//! Receive threads for a host (`napi_threads = true`): the kernel work done for the packets
//! the host receives, counted as the CPU time of threads of its own.
//!
//! Without it, that work is a softirq, charged to whatever task it interrupted: on a veth
//! link the sender's, and here the sender is mostly a link emulator, whose whole CPU the lab
//! leaves out of the machine's figure. So a kernel engine's splice (the proxy's TCP receive,
//! `sockmap`'s verdicts, `ipsplice`'s rewriting and forwarding) showed in no figure at all.
//! With threaded NAPI each of the host's veth ends polls its packets in a kernel thread
//! (`napi/DEV-ID`), and the work is that thread's. A veth end takes its packets through
//! NAPI only with GRO on, and only packets its peer did not send as TCP segmentation
//! offload (`veth_skb_is_eligible_for_gro`): so the peer's end gets TSO off, and segments
//! the rare large packet itself. GRO on the host's ends is what a Linux host on a real NIC
//! has, and a difference from a host without it (fewer, larger skbs; fewer ACKs).

use std::collections::BTreeSet;

use anyhow::Context;

use super::Bed;

impl Bed {
    /// Gives the ends of link `i` (host, namespace, device: end a, then end b) whose host
    /// has `napi_threads` their receive threads.
    pub(super) fn thread_link(
        &mut self,
        i: usize,
        ends: [(&String, &String, &String); 2],
    ) -> anyhow::Result<()> {
        for (me, peer) in [(0, 1), (1, 0)] {
            let (host, ns, dev) = ends[me];
            let (_, peer_ns, peer_dev) = ends[peer];
            if !self
                .scenario
                .hosts
                .iter()
                .any(|h| &h.name == host && h.napi_threads)
            {
                continue;
            }
            let pids = thread(ns, dev, peer_ns, peer_dev)
                .with_context(|| format!("link[{i}]: {host}'s receive threads"))?;
            let cpus = self
                .scenario
                .hosts
                .iter()
                .find(|h| &h.name == host)
                .and_then(|h| h.napi_cpus.clone());
            if let Some(cpus) = cpus {
                for p in &pids {
                    pin(*p, &cpus)
                        .with_context(|| format!("link[{i}]: {host}'s receive thread {p}"))?;
                }
            }
            self.napi
                .extend(pids.into_iter().map(|p| (host.clone(), p)));
        }
        Ok(())
    }

    /// PIDs of the receive threads of `host` (none unless it has `napi_threads`).
    pub fn napi_pids(&self, host: &str) -> Vec<u32> {
        self.napi
            .iter()
            .filter(|(h, _)| h == host)
            .map(|(_, p)| *p)
            .collect()
    }
}

/// Runs thread `pid` on `cpus` only (`taskset`: a kernel thread of threaded NAPI may be
/// moved like any other).
fn pin(pid: u32, cpus: &str) -> anyhow::Result<()> {
    let st = std::process::Command::new("taskset")
        .args(["-p", "-c", cpus, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .context("taskset (util-linux)")?;
    anyhow::ensure!(st.success(), "taskset -p -c {cpus} {pid} failed");
    Ok(())
}

/// Kernel threads whose name starts with `napi/`.
fn napi_threads() -> BTreeSet<u32> {
    crate::measure::threads_named("napi/").into_iter().collect()
}

/// `args` run in namespace `ns`.
fn run(ns: &str, args: &[&str]) -> anyhow::Result<()> {
    super::ip(&[&["netns", "exec", ns], args].concat())
}

/// Moves the receive work of device `dev` in namespace `ns` (whose veth peer is `peer` in
/// `peer_ns`) into a thread of its own; returns that thread's PIDs.
pub fn thread(ns: &str, dev: &str, peer_ns: &str, peer: &str) -> anyhow::Result<Vec<u32>> {
    let before = napi_threads();
    run(ns, &["ethtool", "-K", dev, "gro", "on"]).context("ethtool (the ethtool package)")?;
    run(peer_ns, &["ethtool", "-K", peer, "tso", "off"])?;
    run(
        ns,
        &[
            "sh",
            "-c",
            &format!("echo 1 > /sys/class/net/{dev}/threaded"),
        ],
    )?;
    let new: Vec<u32> = napi_threads().difference(&before).copied().collect();
    anyhow::ensure!(
        !new.is_empty(),
        "{dev}: threaded NAPI started no thread (the kernel's veth needs NAPI for it)"
    );
    Ok(new)
}
