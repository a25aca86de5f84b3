//! Step 4: a spliced pair, watched through its entries until it ends.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use splicer_bpf::ipsplice::{Flow, FlowKey, FLAG_FIN, FLAG_RST, SEEN_ACK};
use splicer_bpf::Ipsplice;
use splicer_sys::process::monotonic_ns;
use splicer_sys::repair;
use tokio::net::TcpStream;

use super::mapping::before;
use crate::outcome::End;

/// How often a spliced pair's entries are looked at.
const WATCH_TICK: Duration = Duration::from_millis(100);

/// How often the entries are looked at while the client has not acknowledged the reply
/// written at an early take-over: the client socket is forgotten as soon as it has, well
/// before its retransmission timer (200 ms at least) would resend the reply.
const REPLY_TICK: Duration = Duration::from_millis(2);

/// How a spliced pair ended, and its two entries as last seen (their byte counts).
pub(super) struct Ended {
    pub up: End,
    pub down: End,
    pub client: Flow,
    pub upstream: Flow,
}

/// Watches the entries (`keys`: from the client, from the upstream) until both sides sent
/// FIN, one reset, or nothing moved for `idle`. `reply_end` is the end of the reply written
/// at an early take-over, until the client acknowledged it.
pub(super) async fn watch(
    ip: &Ipsplice,
    keys: (FlowKey, FlowKey),
    client: &TcpStream,
    mut reply_end: Option<u32>,
    idle: Option<Duration>,
    cut: impl std::future::Future<Output = ()>,
) -> Ended {
    tokio::pin!(cut);
    let idle_ns = idle.map(|d| d.as_nanos() as u64);
    let (up, down, client_flow, upstream_flow) = loop {
        let tick = if reply_end.is_some() {
            REPLY_TICK
        } else {
            WATCH_TICK
        };
        let cut_now = tokio::select! {
            () = tokio::time::sleep(tick) => false,
            () = &mut cut => true,
        };
        let (Some(fa), Some(fb)) = (ip.get(&keys.0), ip.get(&keys.1)) else {
            break (End::Aborted, End::Aborted, Flow::default(), Flow::default());
        };
        if cut_now {
            // What the flows moved so far is what the outcome reports.
            break (End::Cut, End::Cut, fa, fb);
        }
        if let Some(end) = reply_end {
            // The client's ACKs go to the server now, so the proxy's socket never learns
            // that its reply arrived: once the program saw it acknowledged, the socket is
            // forgotten, or its timer would resend the reply. Until then it resends a lost
            // reply itself.
            if fa.seen & SEEN_ACK != 0 && !before(fa.ack_max, end) {
                let _ = repair::forget(client.as_fd());
                reply_end = None;
            }
        }
        if fa.flags & FLAG_RST != 0 {
            break (
                End::Source(io::ErrorKind::ConnectionReset),
                End::Aborted,
                fa,
                fb,
            );
        }
        if fb.flags & FLAG_RST != 0 {
            break (
                End::Aborted,
                End::Source(io::ErrorKind::ConnectionReset),
                fa,
                fb,
            );
        }
        if fa.flags & fb.flags & FLAG_FIN != 0 {
            break (End::Eof, End::Eof, fa, fb);
        }
        let last = fa.last_ns.max(fb.last_ns);
        if idle_ns.is_some_and(|i| monotonic_ns().saturating_sub(last) >= i) {
            break (End::Idle, End::Idle, fa, fb);
        }
    };
    if reply_end.is_some() {
        // Never acknowledged: closing the socket later must send nothing either.
        let _ = repair::forget(client.as_fd());
    }
    Ended {
        up,
        down,
        client: client_flow,
        upstream: upstream_flow,
    }
}
