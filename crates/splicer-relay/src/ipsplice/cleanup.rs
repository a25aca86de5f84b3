//! Taking a tunnel's entries out of the program's map: at once, when the connection's
//! task is dropped, a moment after the end, or with a reset of both sides.

use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use splicer_bpf::ipsplice::FlowKey;
use splicer_bpf::Ipsplice;
use splicer_sys::repair;
use splicer_sys::sock::set_linger_zero;
use tokio::net::TcpStream;

use super::Stop;
use crate::outcome::End;

/// How long entries stay after a FIN both ways or a reset, for the last ACKs and resent
/// FINs to pass.
const LINGER: Duration = Duration::from_secs(1);

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

/// After the end: entries of an idle tunnel go at once (like a NAT's expiry: the endpoints'
/// next packets reach the proxy, which has no socket for them any more and answers with a
/// reset); otherwise they stay [`LINGER`] for the last ACKs and resent FINs to pass.
pub(super) fn release(ip: &Arc<Ipsplice>, keys: (FlowKey, FlowKey), idle: bool) {
    if idle {
        remove(ip, keys);
    } else {
        let ip = Arc::clone(ip);
        tokio::spawn(async move {
            tokio::time::sleep(LINGER).await;
            remove(&ip, keys);
        });
    }
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
