//! The answer: its head read and shaped, its body relayed to the client as it comes, the
//! exchange's end.

use std::net::SocketAddr;

use splicer_wire::chunked::Step;
use splicer_wire::http::{BodyLength, ResponseHead};

use super::super::Kit;
use super::super::{Asked, Resume};
use super::{Conn, Op, Ride, Start, State};

/// Bodies longer than this go by the runtimes' engines.
const LONG_BODY: u64 = 32 * 1024;
use crate::config::Front;
use crate::error::{Error, Kind, Side};
use crate::exchange::{shape, Shaped};

impl Conn {
    pub(super) fn on_answer(&mut self, res: i32, kit: &mut Kit) -> Op {
        let Some(ride) = self.ride.as_mut() else {
            return Op::Free;
        };
        if res <= 0 {
            self.up = None;
            if !self.rx.is_empty() {
                return self.reply(502, &Error::upstream(Kind::Closed("head")));
            }
            if ride.reused && ride.attempt == 1 && !ride.heard {
                // A reused connection that died before any answer byte: asked once more on
                // a new one, the request still in `tx` (as the runtimes' path does).
                return self.ask(kit);
            }
            return self.reply(502, &Error::upstream(Kind::NoResponse));
        }
        ride.heard = true;
        self.deadline = kit.now + self.shared.config.limits.idle_timeout;
        self.read_answer(kit)
    }

    /// Parses the response head in hand: an interim one goes to the client, the final one
    /// is shaped and sent with the body bytes that came with it.
    pub(super) fn read_answer(&mut self, kit: &mut Kit) -> Op {
        let Some(ride) = self.ride.as_mut() else {
            return Op::Free;
        };
        loop {
            let parsed = ResponseHead::parse_reusing(&self.rx, &self.limits, &mut kit.heads.answer);
            let (resp, n) = match parsed {
                Ok(Some(parsed)) => parsed,
                Ok(None) if self.rx.len() < self.limits.max_head => return Op::Ring(Start::RecvUp),
                Ok(None) => return self.reply(502, &Error::upstream(Kind::TooLarge("header"))),
                Err(e) => return self.reply(502, &Error::unparsable(Side::Upstream, e)),
            };
            self.rx.drain(..n);
            if resp.status == 101 {
                let why = Error::malformed(Side::Upstream, "unrequested-upgrade");
                return self.reply(502, &why);
            }
            if (100..200).contains(&resp.status) {
                // Interim answers go to HTTP/1.1 clients only, without hop-by-hop fields.
                if ride.version == 0 {
                    continue;
                }
                let mut interim = resp;
                interim.headers.remove_hop_by_hop();
                self.tx.clear();
                interim.encode(&mut self.tx);
                self.sent = 0;
                self.state = State::Interim;
                return Op::Ring(Start::SendClient);
            }
            ride.rec.first_byte = Some(kit.now.saturating_duration_since(ride.rec.start));
            // A long body goes by the runtimes' engines (a splice costs less than the
            // rings' copy past a few tens of KiB: docs/benchmarks.md), as does one the
            // close ends (which a kernel engine may take whole).
            let long = match resp.body(&ride.method) {
                Ok(BodyLength::Length(n)) => n > LONG_BODY,
                Ok(BodyLength::Close) => true,
                _ => false,
            };
            if long {
                return self.hand_over_answer(resp);
            }
            ride.rec.status = resp.status;
            let stopping = *self.shared.shutdown.borrow();
            let via = match self.front {
                Front::Http => self.shared.config.http.as_ref().map(|c| c.via.as_str()),
                _ => self.shared.config.edge.as_ref().map(|c| c.via.as_str()),
            };
            let via = via.unwrap_or_default();
            let asked = (&ride.method, ride.version, ride.keep);
            let Shaped {
                framing,
                dechunk,
                keep,
                upstream_keep,
                head,
            } = match shape(resp, asked, via, stopping) {
                Ok(s) => s,
                Err(e) => return self.reply(502, &Error::unparsable(Side::Upstream, e)),
            };
            ride.rec.set_content_type(head.headers.get("content-type"));
            ride.framing = framing;
            ride.dechunk = dechunk;
            ride.keep = keep;
            ride.upstream_keep = upstream_keep;
            if let BodyLength::Length(n) = framing {
                ride.left = n;
            }
            if framing == BodyLength::Chunked {
                let r = crate::exchange::body::reframer(&self.shared);
                ride.reframer = Some(if dechunk { r.without_trailers() } else { r });
            }
            self.tx.clear();
            head.encode(&mut self.tx);
            kit.heads.answer = head.headers;
            return self.feed_down(kit);
        }
    }

    /// Hands the connection to the runtimes with the answer's head (not yet written) and
    /// the body bytes read with it: they relay it, then serve the client's next request.
    fn hand_over_answer(&mut self, resp: ResponseHead) -> Op {
        let (Some(ride), Some(upstream)) = (self.ride.take(), self.up.take()) else {
            return Op::Free;
        };
        let Ride {
            mut rec,
            method,
            version,
            keep,
            server,
            name,
            ..
        } = *ride;
        // The runtimes' engine moves it, and says so.
        rec.engine = None;
        let unknown = || SocketAddr::from(([0, 0, 0, 0], 0));
        let server = server.unwrap_or_else(|| upstream.peer_addr().unwrap_or_else(|_| unknown()));
        self.resume = Some(Resume::Answer(Box::new(Asked {
            upstream,
            server,
            name,
            resp,
            body: std::mem::take(&mut self.rx),
            method,
            version,
            keep,
            rec,
            rest: std::mem::take(&mut self.cin),
        })));
        self.close(true)
    }

    /// Moves the body bytes in hand to what goes to the client, and sends it.
    fn feed_down(&mut self, kit: &mut Kit) -> Op {
        let Some(ride) = self.ride.as_mut() else {
            return Op::Free;
        };
        if let Err(e) = feed(ride, &mut self.rx, &mut self.tx) {
            return self.cut_short(&e);
        }
        if self.tx.is_empty() {
            if ride.done {
                return self.finish(kit);
            }
            self.state = State::Body;
            return Op::Ring(Start::RecvUp);
        }
        self.sent = 0;
        self.state = State::Down;
        // What follows is read in the same turn as the send: more of the body, or the
        // client's next head (when none is in hand already).
        let waits = ride.keep && self.cin.is_empty() && !*self.shared.shutdown.borrow();
        Op::Ring(match (ride.done, waits) {
            (false, _) => Start::SendClientThenRecvUp,
            (true, true) => Start::SendClientThenRecvClient,
            (true, false) => Start::SendClient,
        })
    }

    pub(super) fn on_sent_down(&mut self, res: i32, kit: &mut Kit) -> Op {
        if res <= 0 {
            let kind = std::io::Error::from_raw_os_error(-res).kind();
            return self.cut_short(&Error::client(Kind::Write(kind)));
        }
        self.sent += res as usize;
        if self.sent < self.tx.len() {
            return Op::Ring(Start::SendClient);
        }
        let Some(ride) = self.ride.as_mut() else {
            return Op::Free;
        };
        ride.rec.bytes_down += self.tx.len() as u64;
        self.tx.clear();
        if self.state == State::Interim {
            self.state = State::Answer;
            return self.read_answer(kit);
        }
        if ride.done {
            return self.finish(kit);
        }
        self.deadline = kit.now + self.shared.config.limits.idle_timeout;
        self.state = State::Body;
        Op::Ring(Start::RecvUp)
    }

    pub(super) fn on_body(&mut self, res: i32, kit: &mut Kit) -> Op {
        let Some(ride) = self.ride.as_mut() else {
            return Op::Free;
        };
        if res == 0 && ride.framing == BodyLength::Close {
            ride.done = true;
            return self.finish(kit);
        }
        if res <= 0 {
            return self.cut_short(&Error::upstream(Kind::Truncated));
        }
        self.deadline = kit.now + self.shared.config.limits.idle_timeout;
        self.feed_down(kit)
    }

    /// The answer went whole: the record, the upstream back to the pool when clean, and
    /// the next request (or the end).
    fn finish(&mut self, kit: &mut Kit) -> Op {
        let Some(ride) = self.ride.take() else {
            return Op::Free;
        };
        let mut rec = ride.rec;
        if !rec.has_end() {
            rec.finish("ok");
        }
        rec.emit();
        // Reusable only after a complete, exactly framed exchange with nothing extra.
        let up = self.up.take();
        let clean = ride.upstream_keep && ride.framing != BodyLength::Close && self.rx.is_empty();
        if let (true, Some(up), Some(server)) = (clean, up, ride.server) {
            kit.pool.put(&ride.name, server, up);
        }
        kit.shelf.give(std::mem::take(&mut self.tx));
        kit.shelf.give(std::mem::take(&mut self.rx));
        if !ride.keep || *self.shared.shutdown.borrow() {
            return Op::Free;
        }
        self.first = false;
        self.state = State::Head;
        self.deadline = kit.now + self.shared.config.limits.keepalive_timeout;
        // A next request already read (the client sent it before this answer) is served
        // now, from the buffer.
        self.next_head(kit)
    }
}

/// Moves what of `rx` belongs to the ride's body into `tx`, its chunked framing written
/// anew (or dropped, de-chunked for an HTTP/1.0 client); marks the body done at its end.
fn feed(ride: &mut Ride, rx: &mut Vec<u8>, tx: &mut Vec<u8>) -> Result<(), Error> {
    match ride.framing {
        BodyLength::None => ride.done = true,
        BodyLength::Close => {
            tx.extend_from_slice(rx);
            rx.clear();
        }
        BodyLength::Length(_) => {
            let take = rx
                .len()
                .min(usize::try_from(ride.left).unwrap_or(usize::MAX));
            tx.extend_from_slice(&rx[..take]);
            rx.drain(..take);
            ride.left -= take as u64;
            ride.done = ride.left == 0;
        }
        BodyLength::Chunked => {
            let Some(reframer) = ride.reframer.as_mut() else {
                ride.done = true;
                return Ok(());
            };
            let mut used = 0;
            let mut dropped = Vec::new();
            loop {
                if ride.left > 0 {
                    let room = usize::try_from(ride.left).unwrap_or(usize::MAX);
                    let take = (rx.len() - used).min(room);
                    tx.extend_from_slice(&rx[used..used + take]);
                    used += take;
                    ride.left -= take as u64;
                    if ride.left > 0 {
                        break;
                    }
                }
                let framing = if ride.dechunk { &mut dropped } else { &mut *tx };
                let (n, step) = reframer
                    .advance(&rx[used..], framing)
                    .map_err(|e| Error::unparsable(Side::Upstream, e))?;
                dropped.clear();
                used += n;
                match step {
                    Step::More => break,
                    Step::Data(size) => ride.left = size,
                    Step::Done => {
                        ride.done = true;
                        break;
                    }
                }
            }
            rx.drain(..used);
        }
    }
    Ok(())
}
