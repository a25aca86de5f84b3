//! The client connection of an HTTP exchange, and what every step of one needs from the
//! configuration: the head limits, writes under the idle timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use splicer_wire::http::{Headers, Limits, RequestHead};
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
    /// The last request head's target and field table, for the next request head to be
    /// parsed into, and the last response head's table for the next answer: a head's
    /// target and table were three allocations per request, and an answer's two.
    pub spare_target: Spare<String>,
    pub spare_fields: Spare<Headers>,
    pub spare_answer_fields: Spare<Headers>,
    /// The edge's last `Host`, for the next request's.
    pub spare_host: Spare<String>,
}

/// The largest buffer a kept-alive client connection keeps while it waits for its next
/// request ([`Spare`] and the read buffer): enough for a small exchange's heads and body,
/// so that an idle connection holds a few of these at most (a larger answer's buffers are
/// let go; its body costs more than their allocation).
pub(crate) const SPARE_KEPT: usize = 2048;

/// A buffer lent out for one exchange and given back after it. It is always handed out
/// empty, so nothing written or read for one request is ever seen by the next.
#[derive(Default)]
pub(crate) struct Spare<T = Vec<u8>>(T);

/// What a [`Spare`] can hold: emptied before it is lent, and weighed before it is kept.
pub(crate) trait Lendable: Default {
    fn empty(&mut self);
    /// The bytes it has allocated.
    fn allocated(&self) -> usize;
}

impl Lendable for Vec<u8> {
    fn empty(&mut self) {
        self.clear();
    }
    fn allocated(&self) -> usize {
        self.capacity()
    }
}

impl Lendable for String {
    fn empty(&mut self) {
        self.clear();
    }
    fn allocated(&self) -> usize {
        self.capacity()
    }
}

impl Lendable for Headers {
    fn empty(&mut self) {
        self.clear();
    }
    fn allocated(&self) -> usize {
        Headers::allocated(self)
    }
}

impl<T: Lendable> Spare<T> {
    /// The buffer, empty.
    pub fn take(&mut self) -> T {
        let mut buf = std::mem::take(&mut self.0);
        buf.empty();
        buf
    }

    /// The buffer itself, for a parser that takes it only when it needs it and empties it
    /// first (`splicer_wire::http::RequestHead::parse_reusing`).
    pub fn slot(&mut self) -> &mut T {
        &mut self.0
    }

    /// Gives the buffer back, unless it grew past what an idle connection keeps.
    pub fn keep(&mut self, buf: T) {
        if buf.allocated() <= SPARE_KEPT {
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
            spare_target: Spare::default(),
            spare_fields: Spare::default(),
            spare_answer_fields: Spare::default(),
            spare_host: Spare::default(),
        }
    }

    /// Keeps a request head's target and table once it has been written upstream.
    pub fn keep_request(&mut self, head: RequestHead) {
        self.spare_target.keep(head.target);
        self.spare_fields.keep(head.headers);
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

#[cfg(test)]
mod tests {
    use super::{Spare, SPARE_KEPT};

    #[test]
    fn a_spare_is_lent_empty_and_kept_only_while_small() {
        let mut spare: Spare = Spare::default();
        let mut buf = spare.take();
        buf.extend_from_slice(b"one client's bytes");
        let kept = buf.as_ptr();
        spare.keep(buf);
        // The same allocation comes back, with nothing of the last exchange in it.
        let again = spare.take();
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), kept);
        // One grown past what an idle connection keeps is let go.
        let mut large = again;
        large.reserve(SPARE_KEPT + 1);
        spare.keep(large);
        assert_eq!(spare.take().capacity(), 0);
    }
}
