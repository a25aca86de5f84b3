//! How many TCP segments a host received, by interface and by the state of the socket that
//! took each one (`[experiment] proxy_tcp_states`): seed 002's booster took most of its
//! packets in `FIN_WAIT_1`, after closing a connection whose response was still draining
//! to a slow client, and the paper counts them (Figs 5–7).
//!
//! `splicer-lab tcp-states` runs in the host's network namespace: it attaches the TC
//! ingress program of `splicer_bpf::tcpstate` to every interface there but the loopback,
//! says `ready`, counts until its input ends, then prints the counts as one JSON line.
//! [`TcpStateCount`] is the experiment's side of it, started before the loads and finished
//! after them.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Stdio};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// What one host received during the loads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Segments per interface name, then per state name (`FIN_WAIT1`, `ESTABLISHED`, ...).
    pub segments: BTreeMap<String, BTreeMap<String, u64>>,
}

/// The `tcp-states` command: counts in this network namespace until standard input ends.
pub fn serve() -> anyhow::Result<()> {
    let states = splicer_bpf::TcpStates::load().context("loading the tcpstate program")?;
    let names: Vec<String> = splicer_sys::net::interfaces()
        .into_iter()
        .filter(|n| n != "lo")
        .collect();
    for name in &names {
        states
            .attach(name)
            .with_context(|| format!("attaching to {name}"))?;
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    let mut counts = Counts::default();
    for (ifindex, by_state) in states.counts()? {
        let name = splicer_sys::net::ifname(ifindex).unwrap_or_else(|_| ifindex.to_string());
        let row = counts.segments.entry(name).or_default();
        for (state, n) in by_state {
            *row.entry(state.to_string()).or_default() += n;
        }
    }
    writeln!(out, "{}", serde_json::to_string(&counts)?)?;
    Ok(())
}

/// A `tcp-states` process counting in one host until [`TcpStateCount::finish`].
pub struct TcpStateCount {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl TcpStateCount {
    /// Starts counting in `host`'s namespace (`command` runs the lab binary `lab` there);
    /// `None`, with the reason on the lab's error output, when it cannot count.
    pub fn start(
        command: impl FnOnce(&str) -> std::process::Command,
        lab: &Path,
    ) -> Option<TcpStateCount> {
        let mut child = command(&lab.display().to_string())
            .arg("tcp-states")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .ok()?;
        let mut out = BufReader::new(child.stdout.take()?);
        let mut line = String::new();
        // The first line once every interface is counted; nothing if it could not start.
        if out.read_line(&mut line).is_err() || line.trim() != "ready" {
            eprintln!("tcp-states: could not count ({})", line.trim());
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        Some(TcpStateCount { child, out })
    }

    /// Ends the count and returns it.
    pub fn finish(mut self) -> Option<Counts> {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        let read = self.out.read_to_string(&mut rest);
        let _ = self.child.wait();
        read.ok()?;
        serde_json::from_str(rest.lines().last()?).ok()
    }
}

impl Counts {
    /// The segments interface `ifname` received in `state`, 0 when none.
    pub fn of(&self, ifname: &str, state: &str) -> u64 {
        self.segments
            .get(ifname)
            .and_then(|c| c.get(state))
            .copied()
            .unwrap_or(0)
    }

    /// Every segment interface `ifname` received.
    pub fn all(&self, ifname: &str) -> u64 {
        self.segments.get(ifname).map_or(0, |c| c.values().sum())
    }
}
