//! Taking a tunnel's entries out of the program's map: at once, when the connection's
//! task is dropped, a moment after the end, or with a reset of both sides.

use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use splicer_bpf::ipsplice::{Flow, FlowKey, SEEN_ACK};
use splicer_bpf::Ipsplice;
use splicer_sys::repair;
use splicer_sys::sock::set_linger_zero;
use tokio::net::TcpStream;

use super::pace::Slots;
use super::Stop;
use crate::outcome::End;

/// How long entries stay after a reset, or after both FINs were acknowledged, for the
/// last ACKs and resent FINs to pass (an ACK lost past the proxy has its FIN resent after
/// the sender's timer, which backs off on a lossy leg).
const LINGER: Duration = Duration::from_secs(5);

/// Most an ended tunnel's entries wait for both FINs to be acknowledged.
const FIN_WAIT_MAX: Duration = Duration::from_secs(60);

/// How often that wait looks.
const FIN_LOOK: Duration = Duration::from_millis(100);

/// Removes both entries now.
pub(super) fn remove(ip: &Ipsplice, keys: (FlowKey, FlowKey)) {
    ip.remove(&keys.0);
    ip.remove(&keys.1);
}

/// Removes a tunnel's entries when dropped while armed.
pub(super) struct Guard<'a> {
    pub ip: &'a Ipsplice,
    pub keys: (FlowKey, FlowKey),
    pub armed: bool,
}

impl Guard<'_> {
    pub(super) fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if self.armed {
            remove(self.ip, self.keys);
        }
    }
}

/// How a watched tunnel ended, as its entries' release needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// Nothing moved for the idle timeout.
    Idle,
    /// A FIN each way.
    Fins,
    /// A reset, or the proxy cut it.
    Other,
}

/// After the end: entries of an idle tunnel go at once (like a NAT's expiry: the endpoints'
/// next packets reach the proxy, which has no socket for them any more and answers with a
/// reset). After a FIN each way they stay until both FINs (so every byte before them) were
/// acknowledged, then [`LINGER`]: the last bytes or a FIN lost past the proxy are resent by
/// their sender, through these entries, after a timer that backs off on a lossy leg (with
/// a fixed second, one of four 24 MiB tunnels over 1% two-state loss lost its end that way
/// and its client waited for it until its timeout). Otherwise [`LINGER`].
/// The entries' window clamp `slots` are given back after them.
pub(super) fn release(ip: &Arc<Ipsplice>, keys: (FlowKey, FlowKey), ending: Ending, slots: Slots) {
    if ending == Ending::Idle {
        remove(ip, keys);
        drop(slots);
        return;
    }
    let ip = Arc::clone(ip);
    tokio::spawn(async move {
        if ending == Ending::Fins {
            let since = tokio::time::Instant::now();
            while !fins_acknowledged(&ip, keys) && since.elapsed() < FIN_WAIT_MAX {
                tokio::time::sleep(FIN_LOOK).await;
            }
        }
        tokio::time::sleep(LINGER).await;
        remove(&ip, keys);
        drop(slots);
    });
}

/// Whether each side acknowledged the other's FIN (true when an entry is gone).
fn fins_acknowledged(ip: &Ipsplice, keys: (FlowKey, FlowKey)) -> bool {
    match (ip.get(&keys.0), ip.get(&keys.1)) {
        (Some(a), Some(b)) => fin_acknowledged(&a, &b) && fin_acknowledged(&b, &a),
        _ => true,
    }
}

/// Whether `to`'s sender acknowledged `from`'s FIN: its highest ACK (in the sequence space of
/// the leg the FIN went out on, `from`'s own plus its delta) is past the FIN, which sits at
/// the end of `from`'s data (`seq_max`, known from the take-over on).
fn fin_acknowledged(from: &Flow, to: &Flow) -> bool {
    if to.seen & SEEN_ACK == 0 {
        return false;
    }
    let fin = from.seq_max.wrapping_add(from.seq_delta);
    super::mapping::before(fin, to.ack_max)
}

/// The mappings were installed but bytes were acknowledged outside them: reset both ends
/// Why a tunnel being taken over had to be reset on both sides.
#[derive(Debug, thiserror::Error)]
pub(super) enum Torn {
    #[error("bytes reached the proxy's socket during the snapshot")]
    SnapshotRaced,
    #[error("leaving repair mode: {0}")]
    LeavingRepair(#[source] io::Error),
    #[error("reply cut short ({written} of {len} bytes)")]
    ReplyCut { written: usize, len: usize },
    #[error("writing the reply: {0}")]
    Reply(#[source] io::Error),
}

/// (out of repair mode, so closing sends RST) rather than deliver a stream with a hole.
pub(super) fn reset_both(
    ip: &Ipsplice,
    keys: (FlowKey, FlowKey),
    client: &TcpStream,
    upstream: &TcpStream,
    why: Torn,
) -> Stop {
    remove(ip, keys);
    for s in [client, upstream] {
        let _ = repair::set_repair(s.as_fd(), false);
        let _ = set_linger_zero(s.as_fd());
    }
    tracing::warn!(reason = %why, "ipsplice: tunnel reset to keep the streams whole");
    Stop::End(true, End::Source(io::ErrorKind::InvalidData))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(seq_max: u32, seq_delta: u32, ack_max: Option<u32>) -> Flow {
        let mut f = Flow::default();
        f.seq_max = seq_max;
        f.seq_delta = seq_delta;
        if let Some(a) = ack_max {
            f.ack_max = a;
            f.seen = SEEN_ACK;
        }
        f
    }

    #[test]
    fn a_fin_counts_as_acknowledged_once_the_ack_passed_it_in_its_own_leg() {
        // The upstream's data ends at 1000 in its own space; the client's leg is 5000 ahead.
        let from = flow(1000, 5000, None);
        let ack = |a: u32| flow(0, 0, Some(a));
        assert!(!fin_acknowledged(&from, &Flow::default()), "no ACK seen");
        assert!(
            !fin_acknowledged(&from, &ack(6000)),
            "the data, not the FIN"
        );
        assert!(fin_acknowledged(&from, &ack(6001)));
        // Across the wrap of the sequence space.
        let wrapping = flow(u32::MAX - 10, 10, None);
        assert!(!fin_acknowledged(&wrapping, &ack(u32::MAX)));
        assert!(fin_acknowledged(&wrapping, &ack(0)));
    }
}
