//! The arithmetic of a splice: from both legs' sequence numbers and timestamp clocks at the
//! snapshot, the deltas the TC program adds to every packet (sequence numbers, ACKs and SACK
//! edges, TSvals and TSecrs) and the window rescaling. Pure: no socket, no map, no clock.
//! All of it is modulo 2^32, as TCP's sequence space and timestamp clocks are; the tests
//! cross the wrap.

use splicer_bpf::ipsplice::{Flow, Mode, SEEN_SEQ};
use splicer_sys::sock::TcpInfo;

/// One leg's state at the snapshot.
pub(super) struct Snapshot {
    /// Next sequence number expected from the endpoint, and the next one to send to it.
    pub rcv: u32,
    pub snd: u32,
    /// The proxy socket's TSval now, and the last TSval seen from the endpoint.
    pub ts: u32,
    pub peer_ts: u32,
    pub info: TcpInfo,
}

/// The active entry for packets arriving on leg `from` and sent on leg `to` (`observed`
/// is the entry as the program left it). The sender's bytes continue the proxy's stream
/// on `to`; its ACKs and SACK edges acknowledge what `to`'s endpoint sent; its TSvals continue
/// the proxy's clock on `to`, and its echoes go back to `to`'s endpoint's clock (the inverse of
/// the other direction's TSval mapping); its windows are rescaled from its own scale to
/// the one `to`'s endpoint expects from the proxy. `now_ns` (`CLOCK_MONOTONIC`) starts the
/// entry's idleness clock.
pub(super) fn mapping(
    observed: Flow,
    from: &Snapshot,
    to: &Snapshot,
    oif: u32,
    now_ns: u64,
) -> Flow {
    let mut f = observed;
    f.oif = oif;
    f.seq_delta = to.snd.wrapping_sub(from.rcv);
    f.ack_delta = to.rcv.wrapping_sub(from.snd);
    f.tsval_delta = to.ts.wrapping_sub(from.peer_ts);
    f.tsecr_delta = to.peer_ts.wrapping_sub(from.ts);
    f.wscale_in = from.info.snd_wscale;
    f.wscale_out = to.info.rcv_wscale;
    // Bytes are counted, and idleness measured, from here on (an early take-over has seen
    // no packet yet).
    f.last_ns = now_ns;
    f.seq_max = from.rcv;
    f.seen |= SEEN_SEQ;
    f.bytes = 0;
    f.flags = 0;
    f.set_mode(Mode::Active);
    f
}

/// The clock deltas of an early take-over, before an endpoint's first packet tells its
/// clock: echoes of one proxy socket's TSvals (`off_from` is its timestamp offset) go on as
/// echoes of the other's (`off_to`).
pub(super) fn proxy_echo_delta(off_from: u32, off_to: u32) -> u32 {
    off_to.wrapping_sub(off_from)
}

/// `a` comes before `b` in sequence space.
pub(super) fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// What the TC program does with a field and its delta (ipsplice.bpf.c: `seq + seq_delta`
/// and the like, in `__u32`).
#[cfg(test)]
fn apply(delta: u32, field: u32) -> u32 {
    field.wrapping_add(delta)
}

/// What the TC program does with a window: from the sender's scale to the receiver's,
/// capped at what the 16-bit field holds.
#[cfg(test)]
fn rescale(window: u16, f: &Flow) -> u16 {
    let w = (u32::from(window) << (f.wscale_in & 15)) >> (f.wscale_out & 15);
    w.min(65535) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leg(rcv: u32, snd: u32, ts: u32, peer_ts: u32, snd_wscale: u8, rcv_wscale: u8) -> Snapshot {
        Snapshot {
            rcv,
            snd,
            ts,
            peer_ts,
            info: TcpInfo {
                snd_wscale,
                rcv_wscale,
                ..TcpInfo::default()
            },
        }
    }

    /// The client leg (a) and the upstream leg (b) of one tunnel, and both entries.
    fn pair(a: &Snapshot, b: &Snapshot) -> (Flow, Flow) {
        (
            mapping(Flow::observing(), a, b, 7, 1),
            mapping(Flow::observing(), b, a, 3, 1),
        )
    }

    /// Every boundary of the 32-bit space the four numbers can sit across.
    const EDGES: [u32; 6] = [0, 1, 0x7fff_ffff, 0x8000_0000, u32::MAX - 1, u32::MAX];

    #[test]
    fn the_next_byte_continues_the_proxys_stream_on_the_other_leg() {
        for &ra in &EDGES {
            for &sb in &EDGES {
                let a = leg(ra, 10, 0, 0, 7, 7);
                let b = leg(20, sb, 0, 0, 7, 7);
                let (up, _) = pair(&a, &b);
                // The client's next byte is the proxy's next byte toward the server...
                assert_eq!(apply(up.seq_delta, ra), sb, "rcv_a {ra:#x} snd_b {sb:#x}");
                // ...and 100 bytes on, across the wrap if it is near.
                assert_eq!(
                    apply(up.seq_delta, ra.wrapping_add(100)),
                    sb.wrapping_add(100)
                );
            }
        }
    }

    #[test]
    fn acks_and_sack_edges_acknowledge_what_the_other_side_sent() {
        for &sa in &EDGES {
            for &rb in &EDGES {
                let a = leg(5, sa, 0, 0, 0, 0);
                let b = leg(rb, 9, 0, 0, 0, 0);
                let (up, down) = pair(&a, &b);
                // The client acknowledging the proxy's next byte on its leg acknowledges the
                // server's next byte; a SACK block 1,000 bytes further maps alike.
                assert_eq!(apply(up.ack_delta, sa), rb);
                assert_eq!(
                    apply(up.ack_delta, sa.wrapping_add(1000)),
                    rb.wrapping_add(1000)
                );
                // And the other way round: the server's bytes continue the proxy's stream
                // toward the client, its ACKs acknowledge the client's bytes.
                assert_eq!(apply(down.seq_delta, rb), sa);
                assert_eq!(apply(down.ack_delta, 9), 5);
            }
        }
    }

    #[test]
    fn sequence_order_survives_the_wrap() {
        assert!(before(u32::MAX, 0));
        assert!(before(u32::MAX - 10, 5));
        assert!(!before(5, u32::MAX - 10));
        assert!(!before(7, 7));
        assert!(before(0x7fff_fff0, 0x8000_0010));
        let (up, _) = pair(&leg(u32::MAX - 2, 0, 0, 0, 0, 0), &leg(0, 100, 0, 0, 0, 0));
        // Two bytes of the client on either side of its wrap stay in order after mapping.
        let (x, y) = (u32::MAX - 1, 1u32);
        assert!(before(x, y));
        assert!(before(apply(up.seq_delta, x), apply(up.seq_delta, y)));
    }

    #[test]
    fn tsvals_continue_the_proxys_clock_and_echoes_go_back_to_the_peers() {
        for &ts_b in &EDGES {
            for &peer_a in &EDGES {
                // The client's clock reads peer_a, the proxy's socket toward the server ts_b.
                let a = leg(0, 0, 1_000, peer_a, 0, 0);
                let b = leg(0, 0, ts_b, 77, 0, 0);
                let (up, down) = pair(&a, &b);
                // The client's TSval, 30 ticks later, reaches the server as the proxy's
                // clock 30 ticks later: never older than what that socket sent (PAWS).
                assert_eq!(
                    apply(up.tsval_delta, peer_a.wrapping_add(30)),
                    ts_b.wrapping_add(30)
                );
                // The server echoing that TSval: the client gets its own clock back.
                let echo = ts_b.wrapping_add(30);
                assert_eq!(apply(down.tsecr_delta, echo), peer_a.wrapping_add(30));
                // The client echoing the proxy's last TSval on its leg (1,000) gives the
                // server its own last TSval (77) back.
                assert_eq!(apply(up.tsecr_delta, 1_000), 77);
            }
        }
    }

    #[test]
    fn an_early_take_over_passes_echoes_between_the_proxys_clocks() {
        for &off_a in &EDGES {
            for &off_b in &EDGES {
                let d = proxy_echo_delta(off_a, off_b);
                let now = 123_456u32;
                // An echo of the client-leg socket's TSval (now + off_a) becomes an echo of
                // the upstream-leg socket's (now + off_b).
                assert_eq!(apply(d, now.wrapping_add(off_a)), now.wrapping_add(off_b));
            }
        }
    }

    #[test]
    fn windows_are_rescaled_to_what_the_receiver_expects_and_capped() {
        // The client's leg: the client scales by 2^7; the server expects the proxy's
        // windows at 2^9 on its leg.
        let a = leg(0, 0, 0, 0, 7, 2);
        let b = leg(0, 0, 0, 0, 3, 9);
        let (up, down) = pair(&a, &b);
        assert_eq!((up.wscale_in, up.wscale_out), (7, 9));
        assert_eq!(rescale(1024, &up), 256);
        assert_eq!((down.wscale_in, down.wscale_out), (3, 2));
        assert_eq!(rescale(1024, &down), 2048);
        // A window the 16-bit field cannot hold at the receiver's scale is capped.
        assert_eq!(rescale(65535, &down), 65535);
    }

    #[test]
    fn an_entry_starts_active_counting_from_the_snapshot() {
        let mut observed = Flow::observing();
        observed.bytes = 99;
        observed.flags = 1;
        let f = mapping(
            observed,
            &leg(500, 0, 0, 0, 0, 0),
            &leg(0, 0, 0, 0, 0, 0),
            4,
            42,
        );
        assert_eq!(f.mode(), Mode::Active);
        assert_eq!((f.bytes, f.flags, f.oif, f.last_ns), (0, 0, 4, 42));
        assert_eq!(f.seq_max, 500);
        assert_ne!(f.seen & SEEN_SEQ, 0);
    }
}
