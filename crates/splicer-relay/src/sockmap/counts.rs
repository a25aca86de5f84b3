//! What the `sockmap` relay knows of a tunnel: the kernel's byte counters of both sockets,
//! from baselines taken at the start, and their end-of-stream and error events.

use std::io;
use std::os::fd::AsFd;

use splicer_sys::sock::{outq_bytes, readable_bytes, tcp_info, TcpInfo};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::outcome::End;
use crate::tcp::TCP_ESTABLISHED;

/// One direction of the tunnel.
pub(super) struct Dir<'a> {
    pub to: &'a TcpStream,
    /// `from`'s bytes received when the splice began, and the bytes the proxy had handed to
    /// `to` itself by then (acknowledged or not: see [`handed`]).
    pub base_received: u64,
    pub base_acked: u64,
    /// Bytes written by the proxy itself before the splice (the prefix).
    pub written: u64,
    /// The source sent FIN; waiting for the destination's acknowledgements to pass it on.
    pub fin: bool,
    /// Since when, while a FIN waits, bytes were missing from the destination's TCP: not
    /// acknowledged and not in its send queue either.
    pub missing_since: Option<Instant>,
    pub end: Option<End>,
}

impl Dir<'_> {
    /// Data bytes that arrived on `from` since the start (a received FIN counts one in
    /// the kernel's figure and is taken off).
    pub(super) fn arrived(&self, from: &TcpInfo) -> u64 {
        let fin = u64::from(self.fin && from.state != TCP_ESTABLISHED);
        from.bytes_received
            .saturating_sub(self.base_received)
            .saturating_sub(fin)
    }
    pub(super) fn bytes(&self, from: &TcpInfo) -> u64 {
        self.written + self.arrived(from)
    }
}

/// `TCP_INFO` and the bytes queued unread, taken at one moment: the pair is read again
/// while bytes keep arriving in between (nothing reads the socket meanwhile, so an
/// unchanged queue means no byte arrived). Without that, a byte arriving between the two
/// calls is counted in one and not the other, and the FIN is passed on too early or never.
pub(super) fn snapshot(s: &TcpStream) -> io::Result<(TcpInfo, u64)> {
    for _ in 0..100 {
        let before = readable_bytes(s.as_fd())?;
        let i = info(s)?;
        if readable_bytes(s.as_fd())? == before && i.bytes_received >= before as u64 {
            return Ok((i, before as u64));
        }
    }
    Err(io::Error::other(
        "TCP_INFO: bytes kept arriving while it was read",
    ))
}

/// Bytes the proxy has handed to `s` so far, acknowledged or not: `tcpi_bytes_acked` plus
/// `SIOCOUTQ`, read while no acknowledgement arrives in between (an ACK between the two
/// calls moves bytes from one figure to the other). It is the baseline of the destination's
/// acknowledgements: the SOCKS reply or the CONNECT 200, written before the splice, are
/// the proxy's own bytes, not redirected ones. A baseline taken before such a write and
/// its queue after it once counted the reply as redirected when the client acknowledged it
/// quickly, and passed the FIN on before the bytes it covered (docs/engines.md).
pub(super) fn handed(s: &TcpStream) -> io::Result<u64> {
    for _ in 0..100 {
        let acked = info(s)?.bytes_acked;
        let queued = outq_bytes(s.as_fd())? as u64;
        if info(s)?.bytes_acked == acked {
            return Ok(acked + queued);
        }
    }
    Err(io::Error::other(
        "TCP_INFO: acknowledgements kept arriving while it was read",
    ))
}

pub(super) fn info(s: &TcpStream) -> io::Result<TcpInfo> {
    tcp_info(s.as_fd())
}

/// Waits for end of stream or an error on `s`; plain readable readiness is cleared.
pub(super) async fn closed(s: &TcpStream) -> io::Result<()> {
    loop {
        let r = s.ready(Interest::READABLE).await?;
        if r.is_read_closed() || r.is_error() {
            return Ok(());
        }
        let _ = s.try_io(Interest::READABLE, || {
            Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
        });
    }
}

/// The socket's pending error, if it is one. After the relay shut a socket's sending side
/// (every redirected byte acknowledged first), the kernel's redirect path may still try to
/// pass it the partner's zero-length FIN and record `EPIPE`: no data was lost, so that is
/// not an error.
pub(super) fn real_error(s: &TcpStream, write_side_shut: bool) -> Option<io::Error> {
    let e = s.take_error().ok().flatten()?;
    (!(write_side_shut && e.kind() == io::ErrorKind::BrokenPipe)).then_some(e)
}
