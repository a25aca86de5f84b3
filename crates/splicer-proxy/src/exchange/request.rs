//! One request, from its head to the end of its answer: [`Exchange`], made once when the
//! head has been read and passed by reference through every step (the front end's checks,
//! the cache, the ask upstream, the answer), instead of each step parsing the head again
//! and handing the access record in and out.

use std::sync::Arc;

use splicer_wire::http::{Framing, Method, RequestHead};

use crate::access::Record;
use crate::upstream::Destination;

/// Every step that asks upstream comes after the front end set the destination: the
/// forward proxy from the target, the edge from the route, before the first ask.
const UNSET: &str = "an exchange is sent upstream only after go_to";

/// One request and what was decided about it. The head itself goes on by value to the
/// rewrite for upstream (`splicer_wire::forward`), which consumes it.
pub(crate) struct Exchange<'a> {
    /// As the client wrote it: methods are case-sensitive (RFC 9110 §9.1).
    pub method: Method,
    /// The client's HTTP minor version (0: HTTP/1.0).
    pub version: u8,
    /// How the request's body is framed, decided once from the head as it came: the body
    /// is read and forwarded by it, and a head it cannot frame was answered 400 before.
    pub framing: Framing,
    /// The client wants its connection kept open after this exchange (its head says so and
    /// is not ambiguously framed: `RequestHead::keep_alive`).
    pub keep: bool,
    /// Where it goes upstream, once the target or the route has said (shared: an edge
    /// group's servers are named once, at start, and not copied per request).
    pub destination: Option<Arc<Destination>>,
    /// The name in `Via` (and `Cache-Status`): the front end's.
    pub via: &'a str,
    /// The request's access line, written once when the exchange ends.
    pub rec: Record,
    /// The span of the proxy's own work this request is (its head read and decided, a hit
    /// written): open until it waits on the network ([`Exchange::waits_on_network`]), for
    /// the pacer's `conservative` and `proportional` modes (docs/pacer.md).
    pub own_work: Option<splicer_relay::Foreground>,
}

impl<'a> Exchange<'a> {
    /// The exchange of a request whose head was read and framed.
    pub fn new(head: &RequestHead, framing: Framing, via: &'a str, rec: Record) -> Exchange<'a> {
        Exchange {
            method: head.method.clone(),
            version: head.version,
            framing,
            keep: head.keep_alive(),
            destination: None,
            via,
            rec,
            own_work: None,
        }
    }

    /// The proxy's own work on this request is done for now: what follows waits on an
    /// upstream (an ask, a tunnel, a fill in progress), and splices need not wait for it.
    pub fn waits_on_network(&mut self) {
        self.own_work = None;
    }

    /// Sets where the request goes (and the access line's destination).
    pub fn go_to(&mut self, destination: Arc<Destination>) {
        if crate::access::written() {
            self.rec.destination.clone_from(&destination.key);
        }
        self.destination = Some(destination);
    }

    /// Where the request goes; set by [`Exchange::go_to`] before anything is asked upstream.
    #[allow(clippy::expect_used)] // `UNSET` says why it is set.
    pub fn destination(&self) -> &Destination {
        self.destination.as_ref().expect(UNSET)
    }

    /// The destination, and the record to fill in while asking it.
    #[allow(clippy::expect_used)] // As `destination`.
    pub fn destination_and_record(&mut self) -> (&Destination, &mut Record) {
        (self.destination.as_ref().expect(UNSET), &mut self.rec)
    }
}
