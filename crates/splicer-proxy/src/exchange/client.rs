//! The client connection of an HTTP exchange, and what every step of one needs from the
//! configuration: the head limits, writes under the idle timeout.

use std::net::SocketAddr;
use std::time::Instant;

use splicer_wire::http::Limits;
use tokio::net::TcpStream;

use crate::shared::Shared;

/// A client connection and the bytes read from it but not yet used.
pub(crate) struct Client {
    pub stream: TcpStream,
    pub buf: Vec<u8>,
    pub addr: SocketAddr,
    /// When the first byte of the request being read arrived (the start of its access
    /// line's duration).
    pub head_since: Option<Instant>,
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
