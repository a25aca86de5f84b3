//! Receive buffers that keep a `sockmap` source's window open while the kernel redirects
//! (an answer's upstream: the body's source).
//!
//! A source whose window shut, or fell under one segment, is not told when it reopens: the
//! verdict program takes its skbs in place of a read (`tcp_read_skb`, `tcp_eat_skb`), whose
//! per-skb check sends an update only when the new window is at least a segment and twice
//! the old, which on a small buffer against 64 KiB segments often fails, and nothing tries
//! again. The sender then learns it from its persist timer: 200 ms at least, doubling while
//! it finds the window still shut. It starts at the hand-off: the origin fills a fresh
//! connection's 128 KiB while the proxy parses the head. 20 clients of 1 MiB answers
//! through `sockmap` had a p95 of 218 ms and the origin sent 700 zero-window probes in
//! 10 s; with the buffer below, 37.6 ms and none (docs/engines.md, "A window no update
//! reopens").
//!
//! The gate (`held.rs`) bounds the redirect queue at its limit, so a receive buffer of four
//! times that limit (room for the queue's skbs, should they be charged there) plus headroom
//! keeps the window well above a segment until the gate closes; past the gate the source's
//! bytes are held on its receive side and the proxy reads them, and its reads send the
//! updates. When the operator fixed the receive buffers (`limits.receive_buffer`) the buffer
//! is kept and the gate lowered to fit it instead.

use std::os::fd::AsFd;

use splicer_sys::sock::{receive_buffer, set_receive_buffer};
use tokio::net::TcpStream;

/// Receive buffer (as the kernel counts it) beyond four times the gate: the window's
/// own room, so it never falls under a segment while the redirect queue is at the gate.
const HEADROOM: u64 = 512 * 1024;

/// The receive buffer a source needs for `gate`, as the kernel reports buffers.
fn needed(gate: u64) -> u64 {
    gate.saturating_mul(4).saturating_add(HEADROOM)
}

/// Makes each source's receive buffer large enough for `gate` (raised with `SO_RCVBUF`
/// when `may_raise`, which also ends its autotuning), and returns the gate the splice
/// uses: `gate`, or less where a buffer could not be raised that far.
pub(crate) fn fit(sources: &[&TcpStream], gate: u64, may_raise: bool) -> u64 {
    let want = needed(gate);
    sources.iter().fold(gate, |g, s| {
        let fd = s.as_fd();
        let mut have = receive_buffer(fd).map_or(0, |b| b as u64);
        if have < want && may_raise {
            // The kernel doubles what it is asked for; `want` is in its own units.
            let ask = usize::try_from(want.div_ceil(2)).unwrap_or(usize::MAX);
            if let Ok(b) = set_receive_buffer(fd, ask) {
                have = b as u64;
            }
        }
        if have >= want {
            g
        } else {
            g.min(have.saturating_sub(HEADROOM.min(have / 2)) / 4)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (a, _) = l.accept().await.unwrap();
        (c, a)
    }

    #[tokio::test]
    async fn raises_a_buffer_to_fit_the_gate_or_lowers_the_gate_to_fit_a_fixed_one() {
        let (a, b) = pair().await;
        let gate = 1 << 20;
        // Raised: without CAP_NET_ADMIN the kernel caps it at `net.core.rmem_max`, and
        // then the gate shrinks to what the buffer holds.
        let g = fit(&[&a], gate, true);
        let have = receive_buffer(a.as_fd()).unwrap() as u64;
        if have >= needed(gate) {
            assert_eq!(g, gate);
        } else {
            assert!(g < gate && g * 4 <= have, "gate {g} for a buffer of {have}");
        }
        // Fixed at 64 KiB (the kernel reports 128 KiB): kept, and the gate fits it.
        set_receive_buffer(b.as_fd(), 64 * 1024).unwrap();
        let g = fit(&[&b], gate, false);
        assert_eq!(receive_buffer(b.as_fd()).unwrap(), 128 * 1024);
        assert_eq!(g, (128 * 1024 - 64 * 1024) / 4);
    }
}
