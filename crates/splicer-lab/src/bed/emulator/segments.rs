//! What the emulator reads of a segment: its connection, and whether it carries data or is
//! a pure ACK (and a pure ACK after one, seed 002's foldable ACKs).

use std::collections::HashMap;

use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};

/// What a TCP segment carries, from its IPv4 and TCP headers (the queue copies the first
/// 80 bytes, enough for both): `Some(true)` data, `Some(false)` a pure ACK, `None` anything
/// else (not IPv4 TCP, or a SYN, FIN or RST, which count as neither).
pub(super) fn tcp_kind(p: &[u8]) -> Option<bool> {
    let s = LaxSlicedPacket::from_ip(p).ok()?;
    let (Some(LaxNetSlice::Ipv4(ip)), Some(TransportSlice::Tcp(tcp))) = (s.net, s.transport) else {
        return None;
    };
    // The packet is cut short: its data length comes from the headers.
    let headers = ip.header().slice().len() + tcp.slice().len() - tcp.payload().len();
    if usize::from(ip.header().total_len()) > headers {
        return Some(true);
    }
    (tcp.ack() && !tcp.syn() && !tcp.fin() && !tcp.rst()).then_some(false)
}

/// Whether each connection's last segment on the link was a pure ACK, to count the pure
/// ACKs that follow one ([`Stats::tcp_acks_after_ack`]).
#[derive(Default)]
pub(super) struct AckRuns {
    last_pure: HashMap<FlowKey, bool>,
}

impl AckRuns {
    /// Bounds the memory of connections long closed: clearing loses at most one count per
    /// connection open at that moment.
    const MAX: usize = 65_536;

    /// Notes a packet of `kind` ([`tcp_kind`]) on `flow`; true for a pure ACK after one.
    pub(super) fn see(&mut self, flow: Option<FlowKey>, kind: Option<bool>) -> bool {
        let Some(flow) = flow else {
            return false;
        };
        if self.last_pure.len() >= Self::MAX {
            self.last_pure.clear();
        }
        let pure = kind == Some(false);
        let before = self.last_pure.insert(flow, pure).unwrap_or(false);
        pure && before
    }
}

/// A flow: the connection's two ends, in a fixed order so both directions map to one key.
pub(super) type FlowKey = ([u8; 6], [u8; 6]);

/// The flow of an IPv4 TCP or UDP packet (needs the header and the first 4 bytes after it).
pub(super) fn flow_of(p: &[u8]) -> Option<FlowKey> {
    if p.first()? >> 4 != 4 || !matches!(p.get(9)?, 6 | 17) {
        return None;
    }
    let ihl = (p[0] & 0x0f) as usize * 4;
    let ports = p.get(ihl..ihl + 4)?;
    let mut a = [0u8; 6];
    let mut b = [0u8; 6];
    a[..4].copy_from_slice(&p[12..16]);
    a[4..].copy_from_slice(&ports[..2]);
    b[..4].copy_from_slice(&p[16..20]);
    b[4..].copy_from_slice(&ports[2..]);
    Some(if a <= b { (a, b) } else { (b, a) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_segments_are_told_apart() {
        // IPv4 header (20 bytes, total length at 2..4) and a TCP header of 32 bytes.
        let seg = |total: u16, flags: u8| {
            let mut p = vec![0u8; 52];
            p[0] = 0x45;
            p[2..4].copy_from_slice(&total.to_be_bytes());
            p[9] = 6;
            p[20 + 12] = 8 << 4;
            p[20 + 13] = flags;
            p
        };
        assert_eq!(tcp_kind(&seg(52 + 1448, 0x10)), Some(true));
        assert_eq!(tcp_kind(&seg(52 + 10, 0x19)), Some(true), "data with FIN");
        assert_eq!(tcp_kind(&seg(52, 0x10)), Some(false));
        assert_eq!(tcp_kind(&seg(52, 0x12)), None, "SYN-ACK");
        assert_eq!(tcp_kind(&seg(52, 0x11)), None, "FIN");
        assert_eq!(tcp_kind(&seg(52, 0x14)), None, "RST");
        let mut udp = seg(60, 0x10);
        udp[9] = 17;
        assert_eq!(tcp_kind(&udp), None);
        assert_eq!(tcp_kind(&seg(60, 0x10)[..30]), None, "cut short");
    }

    #[test]
    fn acks_after_acks_are_counted_per_connection() {
        let (a, b) = (([1; 6], [2; 6]), ([3; 6], [4; 6]));
        let mut r = AckRuns::default();
        let seen: Vec<bool> = [
            (a, Some(false)), // the first ACK of a run: the base
            (b, Some(false)), // another connection's, between: its own base
            (a, Some(false)), // folds into a's first
            (a, Some(false)), // and this one
            (a, Some(true)),  // data ends the run
            (a, Some(false)), // a new base
            (a, None),        // a FIN ends it too
            (a, Some(false)),
            (b, Some(false)), // b's run went on all along
        ]
        .into_iter()
        .map(|(f, k)| r.see(Some(f), k))
        .collect();
        assert_eq!(
            seen,
            [false, false, true, true, false, false, false, false, true]
        );
        assert!(!r.see(None, Some(false)), "no flow, no run");
    }

    #[test]
    fn flows_are_keyed_by_both_ends() {
        let mut p = vec![0u8; 24];
        p[0] = 0x45;
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..24].copy_from_slice(&[0x30, 0x39, 0x00, 0x50]);
        let mut back = p.clone();
        back[12..16].copy_from_slice(&[10, 0, 0, 2]);
        back[16..20].copy_from_slice(&[10, 0, 0, 1]);
        back[20..24].copy_from_slice(&[0x00, 0x50, 0x30, 0x39]);
        assert_eq!(flow_of(&p), flow_of(&back));
        assert!(flow_of(&p).is_some());
        let mut other = p.clone();
        other[21] = 0x3a;
        assert_ne!(flow_of(&p), flow_of(&other));
        p[9] = 1; // ICMP has no ports
        assert_eq!(flow_of(&p), None);
    }
}
