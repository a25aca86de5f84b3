//! One client connection on a ring: a state machine with at most one operation in flight,
//! moved on by that operation's completion (`Conn::complete`) or by its deadline
//! (`Conn::look`). Each step says what to issue next ([`Op`]).
//!
//! The order of an exchange: the head read and decided (served here or handed off), an
//! upstream taken from the ring's pool or connected, the request sent, the response head
//! read and rewritten, then the head and the body relayed as they come, and the upstream
//! connection back to the pool when the exchange was clean. The client's head stays in
//! its buffer until the request has gone upstream: until then the connection can still be
//! handed off whole.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use splicer_sys::ring::{Completion, Ring};
use splicer_wire::chunked::Reframer;
use splicer_wire::forward;
use splicer_wire::http::{BodyLength, Limits, Method, RequestHead};

use super::Kit;
use super::{Handoff, Placed, Resume};
use crate::access::Record;
use crate::config::{Front, Protocol};
use crate::error::{Error, Kind, Side};
use crate::exchange::head_limits;
use crate::shared::Shared;

mod answer;
mod ends;

/// What a connection asks its loop for next.
pub(super) enum Op {
    /// An operation to issue.
    Ring(Start),
    /// Nothing: an operation is still in flight.
    Wait,
    /// Give the connection to the runtimes (nothing in flight).
    Handoff,
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
    server: SocketAddr,
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

    fn on_head(&mut self, res: i32, kit: &mut Kit) -> Op {
        if res <= 0 {
            if res == 0 && !self.cin.is_empty() {
                let since = self.head_since.unwrap_or_else(Instant::now);
                let mut rec = Record::starting(Front::Edge, self.addr, since);
                rec.fail(&Error::client(Kind::Closed("head")));
                rec.emit();
            }
            return Op::Free;
        }
        self.next_head(kit)
    }

    /// Parses the head in hand; serves it, reads on, or hands the connection off.
    fn next_head(&mut self, kit: &mut Kit) -> Op {
        if self.cin.is_empty() {
            if self.cin.capacity() > 4 * HEAD_STEP {
                // A large head's buffer is not held while the client is idle.
                self.cin = Vec::new();
            }
            return Op::Ring(Start::RecvClient);
        }
        let now = kit.now;
        if self.head_since.is_none() {
            self.head_since = Some(now);
            // Once a byte of a later head came, it has the handshake time to be whole (the
            // first had it from the connection's start).
            if !self.first {
                self.deadline = now + self.shared.config.limits.handshake_timeout;
            }
        }
        let parsed = RequestHead::parse_reusing(
            &self.cin,
            &self.limits,
            &mut kit.heads.target,
            &mut kit.heads.fields,
        );
        match parsed {
            Ok(Some((head, n))) => self.decide(head, n, kit),
            Ok(None) if self.cin.len() < self.limits.max_head => Op::Ring(Start::RecvClient),
            // Too large or malformed: the runtimes answer it.
            Ok(None) | Err(_) => Op::Handoff,
        }
    }

    /// Serves the request here when it is plain; otherwise hands the connection off.
    fn decide(&mut self, mut head: RequestHead, head_len: usize, kit: &mut Kit) -> Op {
        let shared = self.shared.clone();
        let (Some(config), Some(edge)) = (&shared.config.edge, &shared.upstreams.edge) else {
            return Op::Handoff;
        };
        let Ok(framing) = head.framing() else {
            return Op::Handoff;
        };
        let plain = matches!(head.method, Method::Get | Method::Head)
            && framing.body == BodyLength::None
            && head.headers.get("expect").is_none()
            && head.headers.get("upgrade").is_none();
        if !plain {
            return Op::Handoff;
        }
        // The proxy's own work on this request, for the pacer (docs/pacer.md).
        let _own_work = shared.relay.foreground();
        let since = self.head_since.take().unwrap_or_else(Instant::now);
        let mut rec = Record::starting(Front::Edge, self.addr, since);
        rec.head_read = Some(kit.now.saturating_duration_since(since));
        // The bytes are moved by the ring, in user space.
        rec.engine = Some("ring");
        if crate::access::written() {
            crate::front::http::describe(&mut rec, &head);
        }
        self.host.clear();
        let (group, path) = match crate::front::edge::aim(edge, &mut head, &mut self.host, &mut rec)
        {
            Ok(aimed) => aimed,
            Err(_) => {
                rec.forget();
                return Op::Handoff;
            }
        };
        let first = (group.protocol == Protocol::Http1 && group.pipeline <= 1)
            .then(|| group.order_named().next())
            .flatten();
        let Some((server, name)) = first else {
            rec.forget();
            return Op::Handoff;
        };
        if crate::access::written() {
            rec.destination.clone_from(&name.key);
        }
        let (method, version, keep) = (head.method.clone(), head.version, head.keep_alive());
        let forwarded_for = config.forwarded.then_some(self.addr.ip());
        let out =
            forward::reverse_request(head, &framing, &self.host, path, &config.via, forwarded_for);
        // The exchange's buffers, from the ring's shelf (given back at its end).
        if self.tx.capacity() == 0 {
            self.tx = kit.shelf.take();
        }
        if self.rx.capacity() == 0 {
            self.rx = kit.shelf.take();
        }
        self.tx.clear();
        out.head.encode(&mut self.tx);
        // Written: its target and table are the next head's.
        kit.heads.target = out.head.target;
        kit.heads.fields = out.head.headers;
        self.ride = Some(Box::new(Ride {
            rec,
            method,
            version,
            keep,
            head_len,
            server,
            name,
            attempt: 0,
            reused: false,
            framing: BodyLength::None,
            dechunk: false,
            upstream_keep: false,
            left: 0,
            reframer: None,
            done: false,
            heard: false,
        }));
        self.ask(kit)
    }

    /// Takes an idle upstream connection to the ride's server, or starts a new one.
    fn ask(&mut self, kit: &mut Kit) -> Op {
        let Some(ride) = self.ride.as_mut() else {
            return Op::Free;
        };
        ride.attempt += 1;
        self.sent = 0;
        // A retry goes on a new connection.
        let idle = (ride.attempt == 1)
            .then(|| kit.pool.take(ride.server))
            .flatten();
        ride.reused = idle.is_some();
        if let Some(up) = idle {
            self.up = Some(up);
            return self.send_up(kit);
        }
        match splicer_sys::ring::connect_started(ride.server) {
            Ok((up, connected)) => {
                let _ = up.set_nodelay(true);
                crate::sockbuf::apply(&up, self.shared.config.limits.receive_buffer);
                self.up = Some(up);
                if connected {
                    return self.send_up(kit);
                }
                self.state = State::Connect;
                self.dialled = Instant::now();
                self.deadline = self.dialled + self.shared.config.limits.connect_timeout;
                Op::Ring(Start::PollUp)
            }
            Err(_) => self.unreachable(),
        }
    }

    fn on_connected(&mut self, res: i32, kit: &Kit) -> Op {
        let ok = res > 0
            && self
                .up
                .as_ref()
                .is_some_and(|u| matches!(u.take_error(), Ok(None)));
        if !ok {
            return self.unreachable();
        }
        crate::metrics::events().connected(self.dialled.elapsed());
        self.send_up(kit)
    }

    /// The ride's server could not be reached and nothing was sent: the runtimes serve
    /// the request (and try the group's other servers), from its head.
    fn unreachable(&mut self) -> Op {
        self.up = None;
        match self.ride.take() {
            // A retry: the head was used when it first went, so it is answered here.
            Some(ride) if ride.head_len == 0 => {
                self.ride = Some(ride);
                let why = Error::upstream(Kind::Connect("connect-failed"));
                return self.reply(502, &why);
            }
            Some(ride) => ride.rec.forget(),
            None => {}
        }
        self.close(true)
    }

    fn send_up(&mut self, kit: &Kit) -> Op {
        self.state = State::Ask;
        self.deadline = kit.now + self.shared.config.limits.idle_timeout;
        Op::Ring(Start::SendUpThenRecv)
    }

    fn on_sent_up(&mut self, res: i32, kit: &mut Kit) -> Op {
        let Some(ride) = self.ride.as_mut() else {
            return Op::Free;
        };
        if res <= 0 {
            self.up = None;
            if ride.reused && ride.attempt == 1 && self.sent == 0 {
                return self.ask(kit);
            }
            return self.reply(502, &Error::upstream(Kind::Closed("request")));
        }
        // Linked (`SendUpThenRecv`): all of it went, or the send failed.
        self.sent += res as usize;
        ride.rec.bytes_up += self.tx.len() as u64;
        // The request went: its head is used.
        self.cin.drain(..std::mem::take(&mut ride.head_len));
        if tracing::enabled!(target: "access", tracing::Level::INFO) {
            if let Some(up) = &self.up {
                let info = splicer_sys::sock::tcp_info(up.as_fd());
                ride.rec.upstream_conn = info.ok().map(|i| (ride.reused, i.snd_cwnd));
            }
        }
        self.state = State::Answer;
        Op::Ring(Start::RecvUp)
    }
}
