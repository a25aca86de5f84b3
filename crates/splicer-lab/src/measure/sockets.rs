//! What one network namespace's TCP sockets hold in the kernel, sampled with `ss -tm`
//! (iproute2) while a load runs: the proxy's share of the machine's socket memory, which
//! /proc/net/sockstat cannot give (its `mem` counts every namespace together).
//!
//! Per socket, *held* is `r + w + bl` of `skmem`: bytes (truesize) on the receive side
//! (including what a `sockmap` gate held back there), in the send queue, and in the
//! backlog. *Buffers* is `rb + tb`,
//! the socket's receive and send buffer limits: what an engine that never queues beyond
//! its sockets can hold at most. Pipes (the `pipe` engine's, up to `pipe_size` each) are
//! not sockets and are not counted.
//!
//! Not every byte the proxy's kernel holds is charged to a socket: skbs a `sockmap` verdict
//! redirected and the destination has not yet taken (the redirect queue) are charged to
//! none. With the program's gate opened wide (`sockmap_max_queue` of 1 GiB) a 256 MiB body
//! went whole into that queue within the run while `ss` saw 1.4 MB and /proc/net/sockstat
//! about 43 MB for the whole machine. So each sample also reads the machine's memory in use
//! (`MemTotal - MemAvailable` of /proc/meminfo), and a run reports how far it rose above
//! its first sample: coarse (anything else the machine does shows too) but blind to
//! nothing.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One reading of a namespace's TCP sockets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    pub held: u64,
    pub buffers: u64,
    pub sockets: u32,
    /// The machine's memory in use, bytes (0 when unread).
    pub machine_used: u64,
}

/// Sums the `skmem:(…)` fields of `ss -tmnHO` output (one socket per line).
pub fn parse(ss: &str) -> Sample {
    let mut out = Sample::default();
    for line in ss.lines() {
        let Some(rest) = line.split_once("skmem:(").map(|(_, r)| r) else {
            continue;
        };
        let fields = rest.split(')').next().unwrap_or("");
        let get = |name: &str| -> u64 {
            fields
                .split(',')
                .find_map(|f| {
                    let digits = f.strip_prefix(name)?;
                    // `r` must not match `rb`: the rest is the number alone.
                    digits.parse::<u64>().ok()
                })
                .unwrap_or(0)
        };
        out.held += get("r") + get("w") + get("bl");
        out.buffers += get("rb") + get("tb");
        out.sockets += 1;
    }
    out
}

/// `MemTotal - MemAvailable` of /proc/meminfo, in bytes.
pub fn machine_used(meminfo: &str) -> Option<u64> {
    let kib = |name: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(name))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some(kib("MemTotal:")?.saturating_sub(kib("MemAvailable:")?) * 1024)
}

/// A run's readings, summarized.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketsRun {
    pub samples: u32,
    /// Highest and median bytes held, over the samples.
    pub peak_held: u64,
    pub median_held: u64,
    /// The socket buffer limits at the reading that held the most.
    pub buffers_at_peak: u64,
    pub peak_sockets: u32,
    /// How far the machine's memory in use rose above the first sample, at most.
    #[serde(default)]
    pub machine_growth: u64,
}

impl SocketsRun {
    pub fn of(samples: &[Sample]) -> SocketsRun {
        let mut held: Vec<u64> = samples.iter().map(|s| s.held).collect();
        held.sort_unstable();
        let peak = samples.iter().max_by_key(|s| s.held).copied();
        SocketsRun {
            samples: samples.len() as u32,
            peak_held: peak.map_or(0, |s| s.held),
            median_held: held.get(held.len() / 2).copied().unwrap_or(0),
            buffers_at_peak: peak.map_or(0, |s| s.buffers),
            peak_sockets: samples.iter().map(|s| s.sockets).max().unwrap_or(0),
            machine_growth: samples.first().map_or(0, |first| {
                samples
                    .iter()
                    .map(|s| s.machine_used.saturating_sub(first.machine_used))
                    .max()
                    .unwrap_or(0)
            }),
        }
    }
}

/// Samples a namespace's sockets every `every` on a thread of its own until
/// [`SocketSampler::finish`].
pub struct SocketSampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Sample>>>,
}

impl SocketSampler {
    /// `netns` is a name under /run/netns.
    pub fn start(netns: String, every: Duration) -> SocketSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            loop {
                let out = Command::new("nsenter")
                    .arg(format!("--net=/run/netns/{netns}"))
                    .args(["--", "ss", "-tmnHO"])
                    .output();
                if let Some(o) = out.ok().filter(|o| o.status.success()) {
                    let mut s = parse(&String::from_utf8_lossy(&o.stdout));
                    s.machine_used = std::fs::read_to_string("/proc/meminfo")
                        .ok()
                        .and_then(|m| machine_used(&m))
                        .unwrap_or(0);
                    samples.push(s);
                }
                if flag.load(Ordering::Relaxed) {
                    return samples;
                }
                std::thread::sleep(every);
            }
        });
        SocketSampler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling (after one last reading) and summarizes.
    pub fn finish(mut self) -> SocketsRun {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        SocketsRun::of(&samples)
    }
}

impl Drop for SocketSampler {
    /// A run that fails before `finish` still ends the sampling thread.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_and_buffers_are_summed_over_sockets() {
        let ss = "ESTAB 0      0      127.0.0.1:55282 127.0.0.1:58547 skmem:(r0,rb131072,t0,tb4194304,f0,w0,o0,bl0,d0)\n\
                  ESTAB 100000 0      127.0.0.1:58547 127.0.0.1:55282 skmem:(r102496,rb131072,t0,tb4194304,f4000,w7,o0,bl9,d1)\n\
                  TIME-WAIT 0 0 127.0.0.1:1 127.0.0.1:2\n";
        assert_eq!(
            parse(ss),
            Sample {
                held: 102_496 + 7 + 9,
                buffers: 2 * (131_072 + 4_194_304),
                sockets: 2,
                machine_used: 0,
            }
        );
        let meminfo = "MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(machine_used(meminfo), Some(4_000_000 * 1024));
        assert_eq!(machine_used("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn a_run_keeps_the_peak_its_limits_and_the_median() {
        let s = |held, buffers, machine_used| Sample {
            held,
            buffers,
            sockets: 2,
            machine_used,
        };
        let r = SocketsRun::of(&[s(5, 10, 1000), s(90, 100, 900), s(7, 10, 1500)]);
        assert_eq!(
            (r.samples, r.peak_held, r.median_held, r.buffers_at_peak),
            (3, 90, 7, 100)
        );
        assert_eq!(r.machine_growth, 500);
        assert_eq!(SocketsRun::of(&[]).peak_held, 0);
    }
}
