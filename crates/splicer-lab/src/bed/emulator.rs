//! The link emulator: one direction of one link, in user space over NFQUEUE (this kernel has
//! no netem; docs/kernel-notes.md "WAN emulation without netem"). The kernel keeps and routes the
//! packets; the emulator only decides when each one may go: it asks for metadata (no payload
//! copy), computes the release time `max(arrival, link free) + serialisation + delay`, drops
//! packets lost by the two-state model or over the queue limit, and gives the ACCEPT
//! verdict when the packet is due.
//!
//! Per-client caps (each modem client held to its own rate, seed 000) are a second, per-flow
//! stage before the shared link: every TCP/UDP connection has its own serialisation clock.
//! The load generators give each emulated client one connection at a time, so a flow is a
//! client.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nfq::{Queue, Verdict};

use splicer_origin::content::Rng;

mod segments;
use segments::{flow_of, tcp_kind, AckRuns, FlowKey};

/// Bytes of framing counted per packet on top of the IP packet: Ethernet header and FCS,
/// preamble and inter-frame gap, as a real link of that rate would spend.
pub const FRAMING: u64 = 14 + 4 + 8 + 12;

/// One direction of a link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub delay: Duration,
    /// Bits per second; `None` for no cap.
    pub rate: Option<u64>,
    /// Packets waiting at most; more are dropped (tail drop).
    pub queue_limit: usize,
    pub loss: Loss,
    pub seed: u64,
    /// Bits per second each flow (connection) may use on its own; `None` for no cap.
    pub per_flow_rate: Option<u64>,
    /// How long before a release to stop sleeping and yield-wait: accuracy bought with CPU.
    pub spin: Duration,
}

/// Two-state loss (the NISTNet extension of seed 000): a packet right after a lost one is
/// lost with probability `r`, any other with probability `p`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Loss {
    pub p: f64,
    pub r: f64,
}

/// The loss model's state.
#[derive(Debug, Clone)]
pub struct LossModel {
    loss: Loss,
    last_lost: bool,
    rng: Rng,
}

impl LossModel {
    pub fn new(loss: Loss, seed: u64) -> LossModel {
        LossModel {
            loss,
            last_lost: false,
            rng: Rng::new(seed),
        }
    }
    /// Whether the next packet is lost.
    pub fn lose(&mut self) -> bool {
        let prob = if self.last_lost {
            self.loss.r
        } else {
            self.loss.p
        };
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        self.last_lost = u < prob;
        self.last_lost
    }
    /// Long-run loss rate of the model: p / (1 + p - r).
    pub fn theory(loss: Loss) -> f64 {
        loss.p / (1.0 + loss.p - loss.r)
    }
}

/// What the emulator did, written as JSON to its stats file once a second.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    pub passed: u64,
    pub lost: u64,
    pub overflow: u64,
    /// Bytes of the packets passed (IP length).
    pub bytes: u64,
    /// Largest packet seen: above the MTU means segmentation offload is on somewhere.
    pub max_packet: u64,
    /// How late verdicts were against their due time, in microseconds.
    pub late_p50_us: u64,
    pub late_p99_us: u64,
    pub late_max_us: u64,
    /// Most flows held to their own rate at once (per-client caps): each has its own
    /// serialisation clock.
    #[serde(default)]
    pub capped_flows_max: u64,
    /// TCP segments that arrived carrying data, and pure ACKs (no data, SYN, FIN or RST),
    /// counted as the sender sent them (before loss): seed 000's data packets per ACK.
    #[serde(default)]
    pub tcp_data: u64,
    #[serde(default)]
    pub tcp_pure_acks: u64,
    /// Pure ACKs whose connection's previous segment on this link was a pure ACK too: those
    /// seed 002's booster could fold into the one before ("acknowledgement aggregation").
    #[serde(default)]
    pub tcp_acks_after_ack: u64,
}

impl Stats {
    /// Reads a stats file the emulator wrote.
    pub fn read(path: &std::path::Path) -> Option<Stats> {
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
    }
}

/// Serialisation time of `bytes` at `rate` bits per second.
fn serialisation(bytes: u64, rate: Option<u64>) -> Duration {
    match rate {
        Some(r) if r > 0 => {
            Duration::from_nanos(((bytes + FRAMING) * 8).saturating_mul(1_000_000_000) / r)
        }
        _ => Duration::ZERO,
    }
}

/// The IP packet's length: from the IPv4 or IPv6 header, or what the kernel reports.
fn packet_len(msg: &nfq::Message) -> u64 {
    let p = msg.get_payload();
    let from_header = match p.first().map(|b| b >> 4) {
        Some(4) if p.len() >= 4 => u16::from_be_bytes([p[2], p[3]]) as u64,
        Some(6) if p.len() >= 6 => 40 + u16::from_be_bytes([p[4], p[5]]) as u64,
        _ => 0,
    };
    from_header.max(msg.get_original_len() as u64)
}

/// When packets leave the link's lines: each capped flow's own line (a client's modem),
/// then the shared link.
struct Lines {
    /// When each capped flow's line is free again.
    flows: HashMap<FlowKey, Instant>,
    /// When the shared link is free again (its rate's serialisation of what it carries).
    link_free: Instant,
}

impl Lines {
    fn new(now: Instant) -> Lines {
        Lines {
            flows: HashMap::new(),
            link_free: now,
        }
    }

    /// When a packet of `len` bytes arriving `now` leaves the link (its delay not counted).
    ///
    /// A flow's line holds its own packets only: a new connection's first packet is not
    /// held behind another client's backlog. (Until 2026-11-25 the shared link's clock was
    /// moved to the latest line's release time even without a shared rate, so every packet
    /// waited behind the most loaded modem line: a SYN-ACK took 3.8 s instead of 0.2 s.)
    /// The shared link's occupancy is counted from each packet's arrival, not from when it
    /// leaves its line: an approximation that only matters with both caps at once.
    fn depart(&mut self, now: Instant, len: u64, flow: Option<FlowKey>, p: &Params) -> Instant {
        self.link_free = self.link_free.max(now) + serialisation(len, p.rate);
        let ready = match (p.per_flow_rate, flow) {
            (Some(rate), Some(key)) => {
                let free = self.flows.entry(key).or_insert(now);
                *free = (*free).max(now) + serialisation(len, Some(rate));
                *free
            }
            _ => now,
        };
        ready.max(self.link_free)
    }

    /// Forgets lines idle for a second.
    fn sweep(&mut self, now: Instant) {
        self.flows
            .retain(|_, free| *free + Duration::from_secs(1) > now);
    }
}

/// A packet waiting for its release time; ordered by (due, arrival) so a flow's packets
/// keep their order.
struct Pending {
    due: Instant,
    seq: u64,
    msg: nfq::Message,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// Sockets this process has open: (descriptor number, socket inode). Listing /proc/self/fd
/// opens a descriptor of its own, which is not a socket and so not counted.
fn open_sockets() -> HashSet<(i32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return HashSet::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let target = std::fs::read_link(e.path()).ok()?;
        let target = target.to_str()?;
        target
            .starts_with("socket:")
            .then(|| Some((e.file_name().to_str()?.parse().ok()?, target.to_string())))?
    })
    .collect()
}

/// Opens the queue and finds its netlink socket's descriptor (the `nfq` crate does not lend
/// it), so the emulator can sleep until a packet arrives instead of polling: polling at
/// 200 µs added ~0.3 ms to every round trip.
fn open_queue() -> anyhow::Result<(Queue, Option<i32>)> {
    let before = open_sockets();
    let q = Queue::open()?;
    let new: Vec<i32> = open_sockets()
        .difference(&before)
        .map(|(fd, _)| *fd)
        .collect();
    Ok((q, (new.len() == 1).then(|| new[0])))
}

/// Default for [`Params::spin`]: wake this long before a release and yield-wait the rest.
/// Even with the timer slack at 1 ns, a sleeping vCPU of this VM wakes 0.2–0.4 ms late (more
/// the longer it slept: RTT errors grew from +0.36 to +0.89 ms between 10 and 200 ms with a
/// 50 µs margin). Yielding, not spinning, lets the hosts' threads run on this CPU meanwhile;
/// it still costs CPU in proportion to the packet rate (~10% of a CPU per emulator in the
/// corporate preset).
pub const SPIN: Duration = Duration::from_micros(300);

/// The NFQUEUE socket's receive buffer.
const NETLINK_BUFFER: usize = 32 << 20;

/// Serves NFQUEUE `queue_num` until `stop` is set. Needs `CAP_NET_ADMIN` in the namespace
/// whose iptables rules feed the queue.
pub fn run(
    queue_num: u16,
    params: Params,
    stop: &AtomicBool,
    stats_file: Option<&std::path::Path>,
) -> anyhow::Result<Stats> {
    // Precise wake-ups: the kernel would otherwise fire our timers up to 50 µs late.
    splicer_sys::process::set_timer_slack(1)?;
    let (mut q, fd) = open_queue()?;
    q.bind(queue_num)?;
    // Only the headers: the IP total length is the packet's (a GRO super-packet's whole)
    // length and the ports name its flow; the payload is never needed for a verdict.
    q.set_copy_range(queue_num, 80)?;
    // Not asking for GSO packets (NFQA_CFG_F_GSO off, the default) makes the kernel cut
    // offload super-packets into MTU-size packets before queueing them, so loss, rate and
    // queue limits apply per packet as on a real WAN, while senders keep their offloads
    // (forcing gso_max_segs 1 on the links instead cut a bulk transfer from 1.4 to 0.55
    // Gbit/s here).
    q.set_recv_gso(queue_num, false)?;
    q.set_queue_max_len(queue_num, 65536)?;
    if let Some(fd) = fd {
        // Room for tens of thousands of queued packets: a default-sized buffer overflowed
        // at 400 Mbit/s and lost packets the emulator never saw (seed 004's stress test).
        splicer_sys::nfqueue::set_receive_buffer(fd, NETLINK_BUFFER)?;
    }
    q.set_nonblocking(true);
    let mut loss = LossModel::new(params.loss, params.seed);
    let mut waiting: BinaryHeap<Reverse<Pending>> = BinaryHeap::new();
    let mut lines = Lines::new(Instant::now());
    let mut last_sweep = Instant::now();
    let mut seq = 0u64;
    let mut stats = Stats::default();
    let mut ack_runs = AckRuns::default();
    let mut late = crate::measure::hist::Latency::new();
    let mut last_write = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // Take every packet the kernel has queued.
        loop {
            let mut msg = match q.recv() {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            };
            let now = Instant::now();
            let kind = tcp_kind(msg.get_payload());
            match kind {
                Some(true) => stats.tcp_data += 1,
                Some(false) => stats.tcp_pure_acks += 1,
                None => {}
            }
            if ack_runs.see(flow_of(msg.get_payload()), kind) {
                stats.tcp_acks_after_ack += 1;
            }
            if loss.lose() {
                stats.lost += 1;
                msg.set_verdict(Verdict::Drop);
                q.verdict(msg)?;
                continue;
            }
            if waiting.len() >= params.queue_limit {
                stats.overflow += 1;
                msg.set_verdict(Verdict::Drop);
                q.verdict(msg)?;
                continue;
            }
            let len = packet_len(&msg);
            stats.max_packet = stats.max_packet.max(len);
            stats.bytes += len;
            let depart = lines.depart(now, len, flow_of(msg.get_payload()), &params);
            stats.capped_flows_max = stats.capped_flows_max.max(lines.flows.len() as u64);
            seq += 1;
            waiting.push(Reverse(Pending {
                due: depart + params.delay,
                seq,
                msg,
            }));
        }
        // Release what is due, earliest first. Without per-client caps release times grow
        // with arrival, so what is due is every waiting packet up to some id: one batch
        // verdict accepts them all (the kernel's ids grow with arrival too).
        let now = Instant::now();
        let mut batch: Option<u32> = None;
        while waiting.peek().is_some_and(|p| p.0.due <= now) {
            let Reverse(mut p) = waiting.pop().expect("checked");
            late.record_us(now.duration_since(p.due));
            stats.passed += 1;
            match fd.filter(|_| params.per_flow_rate.is_none()) {
                Some(_) => batch = Some(p.msg.get_packet_id()),
                None => {
                    p.msg.set_verdict(Verdict::Accept);
                    q.verdict(p.msg)?;
                }
            }
        }
        if let (Some(fd), Some(id)) = (fd, batch) {
            splicer_sys::nfqueue::batch_accept(fd, queue_num, id)?;
        }
        if let Some(f) =
            stats_file.filter(|_| now.duration_since(last_write) >= Duration::from_secs(1))
        {
            let l = late.summary();
            stats.late_p50_us = (l.p50_ms * 1000.0) as u64;
            stats.late_p99_us = (l.p99_ms * 1000.0) as u64;
            stats.late_max_us = (l.max_ms * 1000.0) as u64;
            // Write then rename, so a reader never sees half a file.
            let tmp = f.with_extension("tmp");
            std::fs::write(&tmp, serde_json::to_string(&stats)?)?;
            std::fs::rename(&tmp, f)?;
            last_write = now;
        }
        if now.duration_since(last_sweep) > Duration::from_secs(1) {
            lines.sweep(now);
            last_sweep = now;
        }
        // Wait for the next packet or towards the next release; spin its last moments.
        let next = waiting
            .peek()
            .map(|p| p.0.due.saturating_duration_since(Instant::now()));
        let wait = match next {
            Some(d) if d <= params.spin => {
                std::thread::yield_now();
                continue;
            }
            Some(d) => d - params.spin,
            None => Duration::from_millis(100),
        };
        match fd {
            Some(fd) => {
                splicer_sys::sock::poll_readable(fd, wait)?;
            }
            None => std::thread::sleep(wait.min(Duration::from_micros(200))),
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_state_loss_matches_theory() {
        let loss = Loss { p: 0.01, r: 0.4 };
        let mut m = LossModel::new(loss, 42);
        let n = 200_000;
        let (mut lost, mut after_loss, mut lost_after_loss, mut prev) = (0u64, 0u64, 0u64, false);
        for _ in 0..n {
            let l = m.lose();
            if prev {
                after_loss += 1;
                lost_after_loss += l as u64;
            }
            lost += l as u64;
            prev = l;
        }
        let overall = lost as f64 / n as f64;
        let theory = LossModel::theory(loss);
        assert!(
            (overall - theory).abs() / theory < 0.15,
            "overall {overall} vs theory {theory}"
        );
        let cond = lost_after_loss as f64 / after_loss as f64;
        assert!((cond - 0.4).abs() < 0.05, "P(loss|loss) {cond}");
    }

    #[test]
    fn a_capped_line_holds_only_its_own_flow() {
        let t0 = Instant::now();
        let p = Params {
            delay: Duration::from_millis(100),
            rate: None,
            queue_limit: 1000,
            loss: Loss::default(),
            seed: 1,
            per_flow_rate: Some(56_000),
            spin: SPIN,
        };
        let a = ([10, 0, 0, 1, 0, 1], [10, 0, 0, 2, 0, 80]);
        let b = ([10, 0, 0, 1, 0, 2], [10, 0, 0, 2, 0, 80]);
        let mut lines = Lines::new(t0);
        // Flow a queues 50 full packets: about 11 s of its 56 kbit/s line.
        let mut last = t0;
        for _ in 0..50 {
            let d = lines.depart(t0, 1500, Some(a), &p);
            assert!(d > last, "a flow's packets leave in order");
            last = d;
        }
        assert!(last - t0 > Duration::from_secs(10), "{:?}", last - t0);
        // A SYN-ACK of flow b leaves after its own 60 bytes, not after a's backlog.
        let d = lines.depart(t0, 60, Some(b), &p);
        assert_eq!(d - t0, serialisation(60, Some(56_000)));
        // With a shared rate too, b waits for the shared link's occupancy only.
        let shared = Params {
            rate: Some(10_000_000),
            ..p
        };
        let mut lines = Lines::new(t0);
        for _ in 0..50 {
            lines.depart(t0, 1500, Some(a), &shared);
        }
        let d = lines.depart(t0, 60, Some(b), &shared);
        let occupancy =
            serialisation(1500, Some(10_000_000)) * 50 + serialisation(60, Some(10_000_000));
        assert_eq!(d - t0, occupancy.max(serialisation(60, Some(56_000))));
        // Without per-flow caps, the shared link serialises in arrival order, as before.
        let plain = Params {
            per_flow_rate: None,
            ..shared
        };
        let mut lines = Lines::new(t0);
        let first = lines.depart(t0, 1500, Some(a), &plain);
        let second = lines.depart(t0, 1500, Some(b), &plain);
        assert_eq!(second - first, serialisation(1500, Some(10_000_000)));
    }

    #[test]
    fn serialisation_counts_framing() {
        // 1500-byte packet + 38 framing at 1 Mbit/s: 12.304 ms.
        assert_eq!(
            serialisation(1500, Some(1_000_000)),
            Duration::from_micros(12_304)
        );
        assert_eq!(serialisation(1500, None), Duration::ZERO);
    }
}
