//! The request: its head read and decided (served here or handed off), an upstream taken
//! from the ring's pool or connected, the request sent with the read of its answer queued
//! behind it.

use std::net::TcpStream;
use std::time::Instant;

use splicer_wire::http::{BodyLength, Method, RequestHead};

use super::super::Kit;
use super::aim::Aimed;
use super::{Conn, Op, Ride, Start, State, HEAD_STEP};
use crate::access::Record;
use crate::config::Front;
use crate::error::{Error, Kind};
use crate::upstream::ConnectError;

impl Conn {
    pub(super) fn on_head(&mut self, res: i32, kit: &mut Kit) -> Op {
        if res <= 0 {
            if res == 0 && !self.cin.is_empty() {
                let since = self.head_since.unwrap_or_else(Instant::now);
                let mut rec = Record::starting(self.front, self.addr, since);
                rec.fail(&Error::client(Kind::Closed("head")));
                rec.emit();
            }
            return Op::Free;
        }
        self.next_head(kit)
    }

    /// Parses the head in hand; serves it, reads on, or hands the connection off.
    pub(super) fn next_head(&mut self, kit: &mut Kit) -> Op {
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
    fn decide(&mut self, head: RequestHead, head_len: usize, kit: &mut Kit) -> Op {
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
        let _own_work = self.shared.relay.foreground();
        let since = self.head_since.take().unwrap_or_else(Instant::now);
        let mut rec = Record::starting(self.front, self.addr, since);
        rec.head_read = Some(kit.now.saturating_duration_since(since));
        // The bytes are moved by the ring, in user space.
        rec.engine = Some("ring");
        if crate::access::written() {
            crate::front::http::describe(&mut rec, &head);
        }
        let (method, version, keep) = (head.method.clone(), head.version, head.keep_alive());
        self.others.clear();
        let Some(Aimed { server, name, out }) = self.aim(head, &framing, &mut rec) else {
            rec.forget();
            return Op::Handoff;
        };
        if crate::access::written() {
            rec.destination.clone_from(&name.key);
        }
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

    /// Takes an idle upstream connection to the ride's server, or starts a new one (a
    /// name not resolved yet is resolved first, off the ring: `Op::Resolve`).
    pub(super) fn ask(&mut self, kit: &mut Kit) -> Op {
        let Some(ride) = self.ride.as_mut() else {
            return Op::Free;
        };
        ride.attempt += 1;
        self.sent = 0;
        // The ring's own first, then one of the runtimes' pool (a warm one, or one a
        // handed-over answer left there); a retry goes on a new connection.
        let idle = (ride.attempt == 1)
            .then(|| {
                kit.pool
                    .take(&ride.name.key)
                    .or_else(|| self.shared.upstreams.pool.take_for_ring(&ride.name.key))
            })
            .flatten();
        ride.reused = false;
        if let Some((up, addr)) = idle {
            // A name's connection is to an address the rules may since refuse this client
            // (the runtimes' pool checks it alike); refused, it is closed.
            if self.allows(addr) {
                if let Some(r) = self.ride.as_mut() {
                    r.reused = true;
                    r.server = Some(addr);
                }
                self.up = Some(up);
                return self.send_up(kit);
            }
        }
        match self.ride.as_ref().and_then(|r| r.server) {
            Some(server) => self.dial(server),
            None => {
                self.state = State::Resolve;
                self.deadline = kit.now + self.shared.config.limits.connect_timeout;
                Op::Resolve
            }
        }
    }

    /// The lookup of the ride's name, as connection `at` of the ring `reply` is the
    /// mailbox of; `token` tells its answer from earlier ones.
    pub(in crate::ring) fn lookup(
        &mut self,
        at: usize,
        token: u64,
        reply: std::sync::Arc<super::super::Mailbox>,
    ) -> Option<super::super::Job> {
        let ride = self.ride.as_ref()?;
        self.resolving = Some(token);
        Some(super::super::Job {
            host: ride.name.authority.host.clone(),
            port: ride.name.authority.port,
            at,
            token,
            reply,
        })
    }

    /// The ride's name resolved: to the addresses the rules allow this client, in turn.
    /// None found is a 502, none allowed a 403, as the runtimes answer
    /// (`crate::upstream::connect`).
    pub(in crate::ring) fn on_resolved(
        &mut self,
        addrs: std::io::Result<Vec<std::net::SocketAddr>>,
    ) -> Op {
        let Some(ride) = self.ride.as_ref() else {
            return Op::Free;
        };
        let name = ride.name.clone();
        let found = match addrs {
            Ok(found) if !found.is_empty() => found,
            _ => return self.failed(ConnectError::Resolve(name.authority.host.clone())),
        };
        self.others.clear();
        for addr in found {
            if self.allows(addr) {
                self.others.push((addr, name.clone()));
            }
        }
        self.unreachable(ConnectError::Denied)
    }

    /// Starts a connection to `server`.
    fn dial(&mut self, server: std::net::SocketAddr) -> Op {
        match splicer_sys::ring::connect_started(server) {
            Ok((up, connected)) => {
                let _ = up.set_nodelay(true);
                crate::sockbuf::apply(&up, self.shared.config.limits.receive_buffer);
                self.up = Some(up);
                self.dialled = Instant::now();
                if connected {
                    self.note_upstream();
                    self.state = State::Ask;
                    self.deadline = self.dialled + self.shared.config.limits.idle_timeout;
                    return Op::Ring(Start::SendUpThenRecv);
                }
                self.state = State::Connect;
                self.deadline = self.dialled + self.shared.config.limits.connect_timeout;
                Op::Ring(Start::PollUp)
            }
            Err(e) => self.unreachable(ConnectError::from_io(e)),
        }
    }

    pub(super) fn on_connected(&mut self, res: i32, kit: &Kit) -> Op {
        let error = match self.up.as_ref().map(TcpStream::take_error) {
            Some(Ok(None)) if res > 0 => None,
            Some(Ok(Some(e)) | Err(e)) => Some(e),
            _ => Some(std::io::Error::from_raw_os_error(-res.min(-1))),
        };
        if let Some(e) = error {
            return self.unreachable(ConnectError::from_io(e));
        }
        crate::metrics::events().connected(self.dialled.elapsed());
        self.send_up(kit)
    }

    /// The ride's server could not be reached (`why`) and nothing was sent: the next of
    /// `others` is tried (an edge group's next server, each with its own connect time;
    /// a name's next address, within the time left, as the runtimes go on), else the
    /// request is answered as the runtimes answer it.
    pub(super) fn unreachable(&mut self, why: ConnectError) -> Op {
        self.up = None;
        // A lookup that timed out may still answer: it is no longer waited for.
        self.resolving = None;
        // The forward proxy's name has one connect time for all its addresses.
        let spent = self.front == Front::Http && matches!(why, ConnectError::Timeout);
        if spent || self.others.is_empty() {
            return self.failed(why);
        }
        let (next, name) = self.others.remove(0);
        let Some(ride) = self.ride.as_mut() else {
            return Op::Free;
        };
        ride.server = Some(next);
        if crate::access::written() {
            // The line names where the request went, as the runtimes' (`Exchange::go_to`).
            ride.rec.destination.clone_from(&name.key);
        }
        ride.name = name;
        if self.front == Front::Http && matches!(self.state, State::Connect | State::Resolve) {
            // The deadline set when the name's lookup or first connect began stands, as
            // the runtimes' one (`dial` sets a new one).
            let deadline = self.deadline;
            let op = self.dial(next);
            if self.state == State::Connect {
                self.deadline = deadline;
            }
            return op;
        }
        self.dial(next)
    }

    /// No upstream could be reached for the ride: the runtimes' answer to `why` (403 for
    /// a destination the rules refuse, 504 for a timeout, else 502) and the close.
    fn failed(&mut self, why: ConnectError) -> Op {
        self.up = None;
        let status = why.http_status();
        self.reply(status, &Error::from(why))
    }

    fn send_up(&mut self, kit: &Kit) -> Op {
        self.note_upstream();
        self.state = State::Ask;
        self.deadline = kit.now + self.shared.config.limits.idle_timeout;
        Op::Ring(Start::SendUpThenRecv)
    }

    /// The access line says whether the request's upstream connection was reused, and its
    /// window before the request goes, as the edge's on the runtimes
    /// (`exchange::note_upstream`; the forward proxy's lines on the rings say it too).
    fn note_upstream(&mut self) {
        if let (Some(up), Some(ride)) = (&self.up, self.ride.as_mut()) {
            crate::exchange::note_upstream(&mut ride.rec, up, ride.reused);
        }
    }

    pub(super) fn on_sent_up(&mut self, res: i32, kit: &mut Kit) -> Op {
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
        self.state = State::Answer;
        Op::Ring(Start::RecvUp)
    }
}
