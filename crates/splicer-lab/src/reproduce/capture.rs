//! Per-byte forwarding latency from two packet captures at a proxy (seed 003, Table 1 and
//! Fig 12): one of the packets arriving from the client, one of the packets leaving toward
//! the server. For every data byte, the time from its first arrival to its first departure.
//!
//! The two legs of a relay are different TCP connections with their own sequence numbers,
//! and the client's leg also carries the SOCKS handshake; but both end with the same data.
//! So each byte is placed by its distance from the end of its stream (the FIN's sequence
//! number), which is the same on both legs whatever came before the data.

use std::path::Path;

use anyhow::Context;
use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};
use pcap_file::pcap::PcapReader;
use pcap_file::TsResolution;

use crate::experiment::summary::nearest_rank;
use serde::{Deserialize, Serialize};

/// A TCP segment's data as a capture saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    /// Capture time, ns.
    pub t_ns: u64,
    /// Sequence number and data length.
    pub seq: u32,
    pub len: u32,
    pub fin: bool,
}

/// One IPv4 TCP packet of a capture: its time, ends, and what it carries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Packet {
    /// Capture time, ns.
    pub t_ns: u64,
    pub src: ([u8; 4], u16),
    pub dst: ([u8; 4], u16),
    pub seq: u32,
    /// Data bytes (from the headers: captures are cut short).
    pub len: u32,
    pub syn: bool,
    pub fin: bool,
}

/// Every IPv4 TCP packet of a pcap file, in capture order.
pub fn read_packets(path: &Path) -> anyhow::Result<Vec<Packet>> {
    let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let mut r = PcapReader::new(std::io::BufReader::new(file))
        .with_context(|| format!("{}: not a pcap file", path.display()))?;
    let nano = r.header().ts_resolution == TsResolution::NanoSecond;
    let mut out = Vec::new();
    // Raw records: the crate's checked packets refuse a packet longer than the snap
    // length, which is every packet of a capture cut short on purpose.
    while let Some(p) = r.next_raw_packet() {
        let p = p.with_context(|| format!("{}: a packet", path.display()))?;
        let frac_ns = if nano {
            u64::from(p.ts_frac)
        } else {
            u64::from(p.ts_frac) * 1000
        };
        let t_ns = u64::from(p.ts_sec) * 1_000_000_000 + frac_ns;
        let Ok(s) = LaxSlicedPacket::from_ethernet(&p.data) else {
            continue;
        };
        let (Some(LaxNetSlice::Ipv4(ip)), Some(TransportSlice::Tcp(tcp))) = (s.net, s.transport)
        else {
            continue;
        };
        let h = ip.header();
        // Captured with a short snap length: the lengths come from the headers.
        let data = usize::from(h.total_len())
            .saturating_sub(h.slice().len())
            .saturating_sub(tcp.slice().len() - tcp.payload().len());
        out.push(Packet {
            t_ns,
            src: (h.source(), tcp.source_port()),
            dst: (h.destination(), tcp.destination_port()),
            seq: tcp.sequence_number(),
            len: data as u32,
            syn: tcp.syn(),
            fin: tcp.fin(),
        });
    }
    Ok(out)
}

/// The data segments of the capture's busiest flow (the one with the most data bytes),
/// in capture order.
pub fn read_flow(path: &Path) -> anyhow::Result<Vec<Segment>> {
    type Key = (([u8; 4], u16), ([u8; 4], u16));
    let mut flows: std::collections::HashMap<Key, (u64, Vec<Segment>)> = Default::default();
    for p in read_packets(path)? {
        let flow = flows.entry((p.src, p.dst)).or_default();
        if p.len > 0 || p.fin {
            flow.0 += u64::from(p.len);
            flow.1.push(Segment {
                t_ns: p.t_ns,
                seq: p.seq,
                len: p.len,
                fin: p.fin,
            });
        }
    }
    Ok(flows
        .into_values()
        .max_by_key(|f| f.0)
        .map(|f| f.1)
        .unwrap_or_default())
}

/// Data that first appeared at one time: stream positions `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Piece {
    start: i64,
    end: i64,
    t_ns: u64,
}

/// The first appearance of every byte, positioned from the end of the stream (so the last
/// byte is at -1), in stream order. Retransmissions of bytes already seen add nothing; a
/// retransmission into a hole (its first copy was lost before the capture) is those bytes'
/// first appearance, though bytes beyond the hole were seen before it.
fn first_seen(segs: &[Segment]) -> Vec<Piece> {
    let Some(first) = segs.first() else {
        return Vec::new();
    };
    // Unwrap the 32-bit sequence numbers into one line, relative to the first segment.
    let mut last = first.seq;
    let mut rel = 0i64;
    let mut at = Vec::with_capacity(segs.len());
    for s in segs {
        rel += i64::from(s.seq.wrapping_sub(last) as i32);
        last = s.seq;
        at.push(rel);
    }
    let end = segs
        .iter()
        .zip(&at)
        .find(|(s, _)| s.fin)
        .map(|(s, r)| r + i64::from(s.len))
        .unwrap_or_else(|| {
            segs.iter()
                .zip(&at)
                .map(|(s, r)| r + i64::from(s.len))
                .max()
                .unwrap_or(0)
        });
    // The stream ranges seen so far, disjoint and merged: start -> end.
    let mut seen = std::collections::BTreeMap::<i64, i64>::new();
    let mut out = Vec::new();
    for (s, r) in segs.iter().zip(at) {
        let (a, b) = (r, r + i64::from(s.len));
        if a >= b {
            continue;
        }
        // The seen ranges that overlap or touch [a, b), from the one starting at or
        // before a.
        let from = seen.range(..=a).next_back().map_or(a, |(&start, _)| start);
        let touching: Vec<(i64, i64)> = seen
            .range(from..=b)
            .map(|(&x, &y)| (x, y))
            .filter(|&(_, y)| y >= a)
            .collect();
        let mut cur = a;
        let mut piece = |x: i64, y: i64| {
            out.push(Piece {
                start: x - end,
                end: y - end,
                t_ns: s.t_ns,
            })
        };
        for &(x, y) in &touching {
            if x > cur {
                piece(cur, x);
            }
            cur = cur.max(y);
        }
        if cur < b {
            piece(cur, b);
        }
        let (mut lo, mut hi) = (a, b);
        for (x, y) in touching {
            seen.remove(&x);
            (lo, hi) = (lo.min(x), hi.max(y));
        }
        seen.insert(lo, hi);
    }
    out.sort_by_key(|p| p.start);
    out
}

/// Per-byte forwarding latency of one run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Latency {
    /// Bytes that left with a known arrival, and those whose arrival the ingress capture
    /// did not hold (before it started).
    pub bytes: u64,
    pub unmatched_bytes: u64,
    /// Per byte, ms.
    pub mean_ms: f64,
    pub variance_ms2: f64,
    pub sd_ms: f64,
    /// Percentiles of the departing segments' first new byte, ms.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// (MB from the start of the data, ms) for the plot: at most 2,000 departing segments,
    /// evenly spread.
    pub series: Vec<(f64, f64)>,
}

/// Matches every departing byte with its arrival.
pub fn latency(ingress: &[Segment], egress: &[Segment]) -> Latency {
    let inp = first_seen(ingress);
    let outp = first_seen(egress);
    let data_start = outp.first().map_or(0, |p| p.start);
    let (mut n, mut sum, mut sumsq, mut unmatched) = (0f64, 0f64, 0f64, 0u64);
    let mut firsts = Vec::with_capacity(outp.len());
    for o in &outp {
        let mut i = inp.partition_point(|p| p.end <= o.start);
        let mut covered = 0i64;
        let mut first = None;
        while i < inp.len() && inp[i].start < o.end {
            let p = inp[i];
            let len = (p.end.min(o.end) - p.start.max(o.start)) as f64;
            let ms = (o.t_ns as f64 - p.t_ns as f64) / 1e6;
            if ms >= 0.0 {
                n += len;
                sum += len * ms;
                sumsq += len * ms * ms;
                covered += len as i64;
                first.get_or_insert(ms);
            }
            i += 1;
        }
        unmatched += (o.end - o.start - covered) as u64;
        if let Some(ms) = first {
            firsts.push(((o.start - data_start) as f64 / 1e6, ms));
        }
    }
    let mean = if n > 0.0 { sum / n } else { 0.0 };
    let variance = if n > 0.0 {
        (sumsq / n - mean * mean).max(0.0)
    } else {
        0.0
    };
    let mut sorted: Vec<f64> = firsts.iter().map(|f| f.1).collect();
    sorted.sort_by(f64::total_cmp);
    let pct = |q: f64| nearest_rank(&sorted, q).unwrap_or(0.0);
    let step = firsts.len().div_ceil(2000).max(1);
    Latency {
        bytes: n as u64,
        unmatched_bytes: unmatched,
        mean_ms: mean,
        variance_ms2: variance,
        sd_ms: variance.sqrt(),
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        max_ms: sorted.last().copied().unwrap_or(0.0),
        series: firsts.into_iter().step_by(step).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(t_us: u64, seq: u32, len: u32, fin: bool) -> Segment {
        Segment {
            t_ns: t_us * 1000,
            seq,
            len,
            fin,
        }
    }

    #[test]
    fn bytes_are_matched_from_the_end_of_each_stream() {
        // Client leg: 13 bytes of handshake, then 3000 bytes of data in two segments, FIN.
        let seq0 = u32::MAX - 1000; // the numbers wrap inside the data
        let ingress = [
            seg(0, seq0, 13, false),
            seg(1000, seq0 + 13, 1500, false),
            seg(2000, seq0.wrapping_add(1513), 1500, false),
            seg(2000, seq0.wrapping_add(3013), 0, true),
        ];
        // Server leg: other numbers, other cuts; a retransmission that adds nothing.
        let egress = [
            seg(1100, 7, 1000, false),
            seg(1300, 1007, 500, false),
            seg(1400, 7, 1000, false),
            seg(2500, 1507, 1500, true),
        ];
        let l = latency(&ingress, &egress);
        assert_eq!(l.bytes, 3000);
        assert_eq!(l.unmatched_bytes, 0);
        // 1000 bytes at 0.1 ms, 500 at 0.3 ms, 1500 at 0.5 ms.
        let mean = (1000.0 * 0.1 + 500.0 * 0.3 + 1500.0 * 0.5) / 3000.0;
        assert!((l.mean_ms - mean).abs() < 1e-9, "{l:?}");
        let var = (1000.0 * 0.01 + 500.0 * 0.09 + 1500.0 * 0.25) / 3000.0 - mean * mean;
        assert!((l.variance_ms2 - var).abs() < 1e-9, "{l:?}");
        assert_eq!(l.series.len(), 3);
        assert_eq!(l.series[0], (0.0, 0.1));
        assert!((l.p99_ms - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_retransmission_into_a_hole_is_those_bytes_first_arrival() {
        // Ingress: 1000..2000 is lost before the capture and comes back last; 0..1000
        // is also sent twice. Egress forwards each range once, in stream order.
        let ingress = [
            seg(0, 0, 1000, false),
            seg(10, 2000, 1000, false),
            seg(20, 0, 1000, false),
            seg(500, 1000, 1000, false),
            seg(510, 3000, 0, true),
        ];
        let egress = [
            seg(100, 50, 1000, false),
            seg(600, 1050, 2000, false),
            seg(610, 3050, 0, true),
        ];
        let l = latency(&ingress, &egress);
        assert_eq!((l.bytes, l.unmatched_bytes), (3000, 0), "{l:?}");
        // 1000 bytes at 0.1 ms, the hole's 1000 at 0.1 ms, the rest at 0.59 ms.
        let mean = (1000.0 * 0.1 + 1000.0 * 0.1 + 1000.0 * 0.59) / 3000.0;
        assert!((l.mean_ms - mean).abs() < 1e-9, "{l:?}");
        // Egress holes filled the same way count their bytes once each.
        let egress = [
            seg(100, 50, 1000, false),
            seg(600, 2050, 1000, false),
            seg(700, 1050, 1000, false),
            seg(710, 3050, 0, true),
        ];
        let l = latency(&ingress, &egress);
        assert_eq!((l.bytes, l.unmatched_bytes), (3000, 0), "{l:?}");
        assert_eq!(l.series.len(), 3);
        assert_eq!(l.series[1].0, 1000.0 / 1e6, "stream order: {l:?}");
    }

    #[test]
    fn bytes_the_ingress_capture_missed_are_counted_apart() {
        let ingress = [seg(10, 500, 500, true)];
        let egress = [seg(0, 0, 500, false), seg(20, 500, 500, true)];
        let l = latency(&ingress, &egress);
        assert_eq!((l.bytes, l.unmatched_bytes), (500, 500));
        assert!((l.mean_ms - 0.01).abs() < 1e-9);
        assert_eq!(latency(&[], &[]).bytes, 0);
    }

    #[test]
    fn reads_the_busiest_flow_of_a_pcap() {
        use etherparse::PacketBuilder;
        use pcap_file::pcap::{PcapPacket, PcapWriter};
        let path = std::env::temp_dir().join(format!("splab-cap-{}.pcap", std::process::id()));
        // A short snap length, as the experiment captures, and nanosecond times.
        let header = pcap_file::pcap::PcapHeader {
            snaplen: 80,
            ts_resolution: TsResolution::NanoSecond,
            ..Default::default()
        };
        let mut w = PcapWriter::with_header(std::fs::File::create(&path).unwrap(), header).unwrap();
        let mut put = |t_us: u64, port: u16, seq: u32, len: usize, fin: bool| {
            let b = PacketBuilder::ethernet2([1; 6], [2; 6])
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .tcp(port, 80, seq, 1000);
            let b = if fin { b.fin() } else { b };
            let mut pkt = Vec::new();
            b.write(&mut pkt, &vec![7u8; len]).unwrap();
            let orig = pkt.len() as u32;
            pkt.truncate(80);
            w.write_packet(&PcapPacket::new(
                std::time::Duration::from_micros(t_us),
                orig,
                &pkt,
            ))
            .unwrap();
        };
        put(1, 1111, 100, 10, false);
        put(2, 2222, 5000, 1400, false);
        put(3, 2222, 6400, 600, false);
        put(4, 2222, 7000, 0, true);
        put(5, 2222, 7001, 0, false); // a bare ACK: not data
        drop(w);
        let segs = read_flow(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            segs,
            [
                seg(2, 5000, 1400, false),
                seg(3, 6400, 600, false),
                seg(4, 7000, 0, true)
            ]
        );
    }
}
