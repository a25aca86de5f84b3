//! The client connection of an HTTP exchange, and what every step of one needs from the
//! configuration: the head limits, writes under the idle timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use splicer_wire::http::Limits;
use tokio::net::TcpStream;

use crate::shared::Shared;
use crate::upstream::Destination;

/// A client connection and the bytes read from it but not yet used.
pub(crate) struct Client {
    pub stream: TcpStream,
    pub buf: Vec<u8>,
    pub addr: SocketAddr,
    /// When the first byte of the request being read arrived (the start of its access
    /// line's duration).
    pub head_since: Option<Instant>,
    /// Where the client's last forward-proxy request went: the next one to the same
    /// authority goes there without parsing it and naming it again (a parsed authority,
    /// its pool key and their `Arc` were four allocations per request).
    pub destination: Option<Arc<Destination>>,
    /// A buffer kept between requests for the heads written (the request upstream, then
    /// the response back): one allocation fewer per head.
    pub spare: Spare,
    /// As `spare`, for the upstream's answer to be read into.
    pub spare_read: Spare,
}

/// The largest buffer a kept-alive client connection keeps while it waits for its next
/// request ([`Spare`] and the read buffer): enough for a small exchange's heads and body,
/// so that an idle connection holds a few of these at most (a larger answer's buffers are
/// let go; its body costs more than their allocation).
pub(crate) const SPARE_KEPT: usize = 2048;

/// A buffer lent out for one exchange and given back after it. It is always handed out
/// empty, so nothing written or read for one request is ever seen by the next.
#[derive(Default)]
pub(crate) struct Spare(Vec<u8>);

impl Spare {
    /// The buffer, empty.
    pub fn take(&mut self) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.0);
        buf.clear();
        buf
    }

    /// Gives the buffer back, unless it grew past what an idle connection keeps.
    pub fn keep(&mut self, buf: Vec<u8>) {
        if buf.capacity() <= SPARE_KEPT {
            self.0 = buf;
        }
    }
}

impl Client {
    /// A client connection, nothing read from it yet.
    pub fn new(stream: TcpStream, addr: SocketAddr) -> Client {
        Client {
            stream,
            buf: Vec::new(),
            addr,
            head_since: None,
            destination: None,
            spare: Spare::default(),
            spare_read: Spare::default(),
        }
    }
}

/// The head limits of the configuration (also applied to trailer sections).
pub(crate) fn head_limits(shared: &Shared) -> Limits {
    Limits {
        max_head: shared.config.limits.max_header_size,
        max_headers: shared.config.limits.max_headers,
    }
}

/// Writes bytes under the idle timeout.
pub(crate) async fn write_all(
    shared: &Shared,
    to: &TcpStream,
    bytes: &[u8],
) -> Result<(), splicer_relay::End> {
    shared
        .relay
        .send(to, bytes, Some(shared.config.limits.idle_timeout))
        .await
}
