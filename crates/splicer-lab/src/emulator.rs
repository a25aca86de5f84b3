//! The link emulator: one direction of one link, in user space over NFQUEUE (this kernel has
//! no netem; kernel-notes "WAN emulation without netem"). The kernel keeps and routes the
//! packets; the emulator only decides when each one may go: it asks for metadata (no payload
//! copy), computes the release time `max(arrival, link free) + serialisation + delay`, drops
//! packets lost by the two-state model or over the queue limit, and gives the ACCEPT
//! verdict when the packet is due.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nfq::{Queue, Verdict};

use crate::content::Rng;

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

/// What the emulator did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub passed: u64,
    pub lost: u64,
    pub overflow: u64,
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

/// Serves NFQUEUE `queue_num` until `stop` is set. Needs `CAP_NET_ADMIN` in the namespace
/// whose iptables rules feed the queue.
pub fn run(queue_num: u16, params: Params, stop: &AtomicBool) -> anyhow::Result<Stats> {
    let mut q = Queue::open()?;
    q.bind(queue_num)?;
    // Only the IP header: its total length is the packet's (a GRO super-packet's whole)
    // length; the payload is never needed for a verdict.
    q.set_copy_range(queue_num, 64)?;
    q.set_queue_max_len(queue_num, 65536)?;
    q.set_nonblocking(true);
    let mut loss = LossModel::new(params.loss, params.seed);
    let mut waiting: VecDeque<(Instant, nfq::Message)> = VecDeque::new();
    let mut link_free = Instant::now();
    let mut stats = Stats::default();
    while !stop.load(Ordering::Relaxed) {
        // Take every packet the kernel has queued.
        loop {
            let mut msg = match q.recv() {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            };
            let now = Instant::now();
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
            let start = link_free.max(now);
            link_free = start + serialisation(packet_len(&msg), params.rate);
            waiting.push_back((link_free + params.delay, msg));
        }
        // Release what is due; release times only grow, so the front is the earliest.
        let now = Instant::now();
        while waiting.front().is_some_and(|(due, _)| *due <= now) {
            let (_, mut msg) = waiting.pop_front().expect("checked");
            msg.set_verdict(Verdict::Accept);
            q.verdict(msg)?;
            stats.passed += 1;
        }
        // Sleep towards the next release, but busy-wait its last 300 µs (timer wake-ups on
        // this VM are late by ~0.2 ms) and look for new packets at least every 200 µs.
        let next = waiting
            .front()
            .map(|(due, _)| due.saturating_duration_since(Instant::now()));
        match next {
            Some(d) if d <= Duration::from_micros(300) => std::hint::spin_loop(),
            Some(d) => {
                std::thread::sleep((d - Duration::from_micros(300)).min(Duration::from_micros(200)))
            }
            None => std::thread::sleep(Duration::from_micros(200)),
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
    fn serialisation_counts_framing() {
        // 1500-byte packet + 38 framing at 1 Mbit/s: 12.304 ms.
        assert_eq!(
            serialisation(1500, Some(1_000_000)),
            Duration::from_micros(12_304)
        );
        assert_eq!(serialisation(1500, None), Duration::ZERO);
    }
}
