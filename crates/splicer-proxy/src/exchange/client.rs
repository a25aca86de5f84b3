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
    /// the response back): one allocation fewer per head; at most [`SPARE_KEPT`] bytes.
    pub spare: Vec<u8>,
    /// As `spare`, for the upstream's answer to be read into.
    pub spare_read: Vec<u8>,
}

/// The largest [`Client::spare`] (and `spare_read`) kept while the connection waits for
/// its next request: enough for a small exchange's heads and body, so that an idle
/// kept-alive connection holds at most this twice beside its read buffer (a larger
/// answer's buffers are let go; its body costs more than their allocation).
pub(crate) const SPARE_KEPT: usize = 2048;

impl Client {
    /// A client connection, nothing read from it yet.
    pub fn new(stream: TcpStream, addr: SocketAddr) -> Client {
        Client {
            stream,
            buf: Vec::new(),
            addr,
            head_since: None,
            destination: None,
            spare: Vec::new(),
            spare_read: Vec::new(),
        }
    }

    /// The spare buffer, empty, for a request head to be written into.
    pub fn take_spare(&mut self) -> Vec<u8> {
        let mut spare = std::mem::take(&mut self.spare);
        spare.clear();
        spare
    }

    /// Gives the spare buffer back, unless it grew past what an idle connection keeps.
    pub fn keep_spare(&mut self, spare: Vec<u8>) {
        if spare.capacity() <= SPARE_KEPT {
            self.spare = spare;
        }
    }

    /// The buffer for an answer to be read into, empty.
    pub fn take_spare_read(&mut self) -> Vec<u8> {
        let mut spare = std::mem::take(&mut self.spare_read);
        spare.clear();
        spare
    }

    /// Gives the answer's buffer back once all of it was used, unless it grew past what
    /// an idle connection keeps.
    pub fn keep_spare_read(&mut self, spare: Vec<u8>) {
        if spare.is_empty() && spare.capacity() <= SPARE_KEPT {
            self.spare_read = spare;
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
