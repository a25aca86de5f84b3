//! One client connection on a ring: a state machine with at most one operation in flight
//! (and a send linked ahead of it), moved on by that operation's completion
//! (`Conn::complete`) or by its deadline (`Conn::look`). Each step says what to issue next
//! ([`Op`]).
//!
//! The order of an exchange: the head read and decided (served here or handed off), an
//! upstream taken from the ring's pool or connected, the request sent, the response head
//! read and rewritten, then the head and the body relayed as they come, and the upstream
//! connection back to the pool when the exchange was clean. The client's head stays in
//! its buffer until the request has gone upstream: until then the connection can still be
//! handed off whole.
//!
//! # Layout
//! - this file: the connection, its operations and their completions, deadlines, the end.
//! - `request`: the head read and decided, the upstream taken or connected, the request
//!   sent.
//! - `answer`: the answer's head shaped, its body relayed, a long one handed over, the end
//!   of the exchange.
//! - `ends`: deadlines passed, error responses and the lingering close, failures once the
//!   answer began.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use splicer_sys::ring::{Completion, Ring};
use splicer_wire::chunked::Reframer;
use splicer_wire::http::{BodyLength, Limits, Method};

use super::Kit;
use super::{Handoff, Placed, Resume};
use crate::access::Record;
use crate::config::Front;
use crate::error::{Error, Kind, Side};
use crate::exchange::head_limits;
use crate::shared::Shared;

mod aim;
mod answer;
mod ends;
mod request;

/// What a connection asks its loop for next.
pub(super) enum Op {
    /// An operation to issue.
    Ring(Start),
    /// Nothing: an operation is still in flight.
    Wait,
    /// Give the connection to the runtimes (nothing in flight).
    Handoff,
    /// Resolve the ride's name off the ring (nothing in flight); the answer comes by the
    /// mailbox (`Conn::on_resolved`).
    Resolve,
    /// Close it (nothing in flight).
    Free,
}

/// An operation of a connection.
#[derive(Clone, Copy)]
pub(super) enum Start {
    /// Read more of a request head.
    RecvClient,
    /// Send the bytes in hand to the client.
    SendClient,
    /// Read what the client still sends after an error response, to drop it.
    Drain,
    /// Wait for a new upstream connection to be made.
    PollUp,
    /// Send the request upstream, and read the answer once it has gone (one turn).
    SendUpThenRecv,
    /// Send the bytes in hand to the client, then read more of the body.
    SendClientThenRecvUp,
    /// Send the answer's last bytes to the client, then read its next head.
    SendClientThenRecvClient,
    /// Read from upstream (the response head, then its body).
    RecvUp,
    /// Cancel the operation in flight (a deadline passed, the stop, the cut).
    Cancel(u64),
}

/// Which buffer an operation in flight holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lent {
    None,
    Cin,
    Tx,
    Rx,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    /// Waiting for the ride's name to be resolved.
    Resolve,
    Connect,
    Ask,
    Answer,
    Interim,
    Down,
    Body,
    Reply,
    Linger,
    /// Waiting for the cancelled operation's completion, then freed or handed off.
    Closing(bool),
}

/// Bytes read per receive at most.
const STEP: usize = super::shelf::STEP;
/// Bytes read at most for the start of a head (what a waiting connection holds).
const HEAD_STEP: usize = 2048;
/// How long an error response may take to go out, and how long the client's remaining
/// bytes are read and dropped after it (the runtimes' lingering close).
const REPLY_TIME: Duration = Duration::from_secs(5);
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

/// The request being served.
struct Ride {
    rec: Record,
    method: Method,
    version: u8,
    /// The client asked to keep its connection (then: the answer allows it too).
    keep: bool,
    /// The head's length at the start of the client buffer, until the request is sent.
    head_len: usize,
    /// `None` until a name is resolved or an idle connection to it taken.
    server: Option<SocketAddr>,
    /// How requests name the server (its key in the runtimes' pool).
    name: Arc<crate::upstream::Destination>,
    attempt: u8,
    reused: bool,
    framing: BodyLength,
    dechunk: bool,
    upstream_keep: bool,
    /// Body bytes still to come: of the whole body (a length), or of this chunk.
    left: u64,
    reframer: Option<Reframer>,
    /// The body has ended.
    done: bool,
    /// A byte of an answer came (an interim one too): the request is not sent again.
    heard: bool,
}

pub(super) struct Conn {
    client: TcpStream,
    addr: SocketAddr,
    /// The front end it was accepted by: `edge` or `http` (the forward proxy).
    front: Front,
    shared: Arc<Shared>,
    handoff: Option<Handoff>,
    /// Where the runtimes take the connection up, when not at its next request.
    resume: Option<Resume>,
    limits: Limits,
    /// Bytes read from the client and not used yet.
    cin: Vec<u8>,
    /// Bytes being sent (the request upstream, or bytes to the client), and how many went.
    tx: Vec<u8>,
    sent: usize,
    /// Bytes read from upstream and not used yet.
    rx: Vec<u8>,
    /// The client's host, written per request (kept: no string per request).
    host: String,
    /// The forward proxy's last destination, for the next request that names it alike.
    named: Option<Arc<crate::upstream::Destination>>,
    /// The lookup of the ride's name in progress (its token: `super::names`).
    pub(super) resolving: Option<u64>,
    /// Where the request goes next when the ride's server cannot be reached, in turn, as
    /// the runtimes try them: the edge group's other servers in the group's order, or the
    /// name's other addresses the rules allow (kept: no list per request).
    others: Vec<(SocketAddr, Arc<crate::upstream::Destination>)>,
    lent: Lent,
    state: State,
    pending: Option<u64>,
    /// A send the pending receive is linked behind (`Ring::send_linked`), while in flight.
    sending: Option<u64>,
    deadline: Instant,
    /// The deadline passed and the operation in flight was cancelled.
    expired: bool,
    first: bool,
    head_since: Option<Instant>,
    up: Option<TcpStream>,
    ride: Option<Box<Ride>>,
    /// When the connect in progress began.
    dialled: Instant,
    drained: usize,
}

impl Conn {
    pub(super) fn new(p: Placed) -> Conn {
        let limits = head_limits(&p.shared);
        let _ = p.stream.set_nodelay(true);
        Conn {
            client: p.stream,
            addr: p.addr,
            front: p.front,
            handoff: Some(p.handoff),
            resume: None,
            deadline: Instant::now() + p.shared.config.limits.handshake_timeout,
            shared: p.shared,
            limits,
            cin: Vec::new(),
            tx: Vec::new(),
            sent: 0,
            rx: Vec::new(),
            host: String::new(),
            named: None,
            resolving: None,
            others: Vec::new(),
            lent: Lent::None,
            state: State::Head,
            pending: None,
            sending: None,
            expired: false,
            first: true,
            head_since: None,
            up: None,
            ride: None,
            dialled: Instant::now(),
            drained: 0,
        }
    }

    pub(super) fn begin(&mut self) -> Op {
        Op::Ring(Start::RecvClient)
    }

    /// Queues `start` on `ring`, lending it the buffers it needs; gives the operation's
    /// number, and a linked send's ahead of it.
    pub(super) fn submit(
        &mut self,
        ring: &mut Ring,
        start: Start,
    ) -> std::io::Result<(u64, Option<u64>)> {
        let (id, lent) = match start {
            Start::RecvClient => {
                // A kept-alive client's next head is awaited with a small buffer (most
                // heads fit it); a head that does not is read on in larger steps.
                let step = if self.cin.is_empty() { HEAD_STEP } else { STEP };
                let room = self
                    .limits
                    .max_head
                    .saturating_sub(self.cin.len())
                    .clamp(1, step);
                self.cin.reserve(room);
                (
                    ring.recv(self.client.as_fd(), std::mem::take(&mut self.cin))?,
                    Lent::Cin,
                )
            }
            Start::Drain => {
                self.rx.clear();
                self.rx.reserve(STEP);
                (
                    ring.recv(self.client.as_fd(), std::mem::take(&mut self.rx))?,
                    Lent::Rx,
                )
            }
            Start::SendClient => {
                let to = self.tx.len();
                let buf = std::mem::take(&mut self.tx);
                (
                    ring.send(self.client.as_fd(), buf, self.sent, to)?,
                    Lent::Tx,
                )
            }
            Start::SendClientThenRecvUp | Start::SendClientThenRecvClient => {
                let to = self.tx.len();
                let buf = std::mem::take(&mut self.tx);
                self.sending = Some(ring.send_linked(self.client.as_fd(), buf, self.sent, to)?);
                let follow = match start {
                    Start::SendClientThenRecvUp => Start::RecvUp,
                    _ => Start::RecvClient,
                };
                let (id, _) = self.submit(ring, follow)?;
                return Ok((id, self.sending));
            }
            Start::PollUp | Start::SendUpThenRecv | Start::RecvUp => {
                let up = self
                    .up
                    .as_ref()
                    .ok_or_else(|| std::io::Error::other("no upstream"))?;
                match start {
                    Start::PollUp => (ring.poll_writable(up.as_fd())?, Lent::None),
                    Start::SendUpThenRecv => {
                        let to = self.tx.len();
                        let buf = std::mem::take(&mut self.tx);
                        self.sending = Some(ring.send_linked(up.as_fd(), buf, self.sent, to)?);
                        self.rx.clear();
                        let (id, _) = self.submit(ring, Start::RecvUp)?;
                        return Ok((id, self.sending));
                    }
                    _ => {
                        self.rx.reserve(STEP);
                        (
                            ring.recv(up.as_fd(), std::mem::take(&mut self.rx))?,
                            Lent::Rx,
                        )
                    }
                }
            }
            // The cancellation's own completion is not this connection's operation.
            Start::Cancel(op) => return Ok((ring.cancel(op)?, None)),
        };
        self.pending = Some(id);
        self.lent = lent;
        Ok((id, None))
    }

    /// The ring refused an operation: the connection cannot go on.
    pub(super) fn failed_to_submit(&mut self, e: &std::io::Error) -> Op {
        tracing::warn!("ring: cannot queue an operation: {e}");
        if let Some(mut ride) = self.ride.take() {
            ride.rec
                .fail(&Error::new(Side::Internal, Kind::Cut("ring")));
            ride.rec.emit();
        }
        self.close(false)
    }

    /// Gives the connection to the runtimes, with the bytes it has not used.
    pub(super) fn hand_off(mut self) {
        let resume = match self.resume.take() {
            Some(r) => r,
            None => Resume::Head(std::mem::take(&mut self.cin)),
        };
        if let Some(h) = self.handoff.take() {
            h(self.client, resume);
        }
    }

    /// An operation completed.
    pub(super) fn complete(&mut self, c: Completion, kit: &mut Kit) -> Op {
        if self.sending == Some(c.op) {
            return self.sent_linked(c, kit);
        }
        if self.pending != Some(c.op) {
            return Op::Wait;
        }
        self.pending = None;
        match std::mem::replace(&mut self.lent, Lent::None) {
            Lent::Cin => self.cin = c.buf,
            Lent::Tx => self.tx = c.buf,
            Lent::Rx => self.rx = c.buf,
            Lent::None => {}
        }
        if let State::Closing(handoff) = self.state {
            return self.closed(handoff);
        }
        let res = c.result;
        if self.expired && res == splicer_sys::ring::CANCELED {
            self.expired = false;
            return self.on_expired();
        }
        self.expired = false;
        self.step(res, kit)
    }

    /// A send with a receive linked behind it completed: it is handled as a send, and
    /// what comes next is that receive, already in flight. A send that failed, or sent
    /// less than all (the receive behind it is then cancelled by the kernel), is handled
    /// as a failed send.
    fn sent_linked(&mut self, c: Completion, kit: &mut Kit) -> Op {
        self.sending = None;
        self.tx = c.buf;
        if let State::Closing(handoff) = self.state {
            return self.closed(handoff);
        }
        if c.result == splicer_sys::ring::CANCELED {
            // Cancelled for a deadline: the receive behind it says so.
            return Op::Wait;
        }
        let all = self.tx.len() - self.sent;
        let res = match usize::try_from(c.result) {
            Ok(n) if n == all => c.result,
            Ok(_) => splicer_sys::ring::BROKEN_PIPE,
            Err(_) => c.result,
        };
        match self.step(res, kit) {
            Op::Ring(Start::RecvUp | Start::RecvClient) if self.pending.is_some() => Op::Wait,
            // The end (a stop between requests, say) while the receive is in flight.
            Op::Free if self.pending.is_some() => self.close(false),
            Op::Handoff if self.pending.is_some() => self.close(true),
            next => next,
        }
    }

    /// A closing connection's operations are back: freed or handed off, once all are.
    fn closed(&self, handoff: bool) -> Op {
        match (self.pending, self.sending, handoff) {
            (None, None, true) => Op::Handoff,
            (None, None, false) => Op::Free,
            _ => Op::Wait,
        }
    }

    fn step(&mut self, res: i32, kit: &mut Kit) -> Op {
        match self.state {
            State::Head => self.on_head(res, kit),
            // No operation is in flight while a name is resolved.
            State::Resolve => Op::Wait,
            State::Connect => self.on_connected(res, kit),
            State::Ask => self.on_sent_up(res, kit),
            State::Answer => self.on_answer(res, kit),
            State::Interim | State::Down => self.on_sent_down(res, kit),
            State::Body => self.on_body(res, kit),
            State::Reply => self.linger(),
            State::Linger => {
                self.drained += usize::try_from(res).unwrap_or(0);
                if res <= 0 || self.drained >= LINGER_BYTES {
                    return Op::Free;
                }
                Op::Ring(Start::Drain)
            }
            State::Closing(_) => Op::Free,
        }
    }

    /// Each tick: the cut, the stop between requests, the deadline.
    pub(super) fn look(&mut self, now: Instant) -> Option<Op> {
        if matches!(self.state, State::Closing(_)) {
            return None;
        }
        if *self.shared.cut.borrow() {
            if let Some(mut ride) = self.ride.take() {
                ride.rec
                    .fail(&Error::new(Side::Internal, Kind::Cut("shutdown-grace")));
                ride.rec.emit();
            }
            return Some(self.close(false));
        }
        let between = self.state == State::Head && self.cin.is_empty();
        if between && *self.shared.shutdown.borrow() {
            return Some(self.close(false));
        }
        if now < self.deadline || self.expired {
            return None;
        }
        self.expired = true;
        // A linked send first: cancelling it cancels the receive behind it.
        Some(match self.sending.or(self.pending) {
            Some(op) => Op::Ring(Start::Cancel(op)),
            None => {
                self.expired = false;
                self.on_expired()
            }
        })
    }

    /// Ends the connection (`handoff`: to the runtimes), once nothing is in flight.
    fn close(&mut self, handoff: bool) -> Op {
        match self.sending.or(self.pending) {
            Some(op) => {
                self.state = State::Closing(handoff);
                Op::Ring(Start::Cancel(op))
            }
            None if handoff => Op::Handoff,
            None => Op::Free,
        }
    }
}
