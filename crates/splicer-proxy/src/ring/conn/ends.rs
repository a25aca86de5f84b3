//! How an exchange ends early: a deadline passed, an error response (then the lingering
//! close), or a failure once the answer began.

use std::os::fd::AsFd;
use std::time::Instant;

use super::{Conn, Op, Start, State, LINGER_TIME, REPLY_TIME};
use crate::access::Record;
use crate::error::{Error, Kind, Side};
use crate::exchange::reply;
use crate::upstream::ConnectError;

impl Conn {
    /// The deadline passed (the operation in flight, if any, is back).
    pub(super) fn on_expired(&mut self) -> Op {
        match self.state {
            // Nothing of a request came: closed quietly, as the runtimes do.
            State::Head if self.cin.is_empty() => Op::Free,
            State::Head => {
                let since = self.head_since.unwrap_or_else(Instant::now);
                let rec = Record::starting(self.front, self.addr, since);
                self.reply_with(rec, 408, &Error::client(Kind::Timeout("header")))
            }
            // Not reached in time: the next server or address, as the runtimes go on.
            State::Connect | State::Resolve => self.unreachable(ConnectError::Timeout),
            State::Ask | State::Answer => {
                self.reply(504, &Error::upstream(Kind::Timeout("response")))
            }
            State::Interim | State::Down | State::Body => {
                self.cut_short(&Error::new(Side::Upstream, Kind::Idle))
            }
            State::Reply | State::Linger | State::Closing(_) => Op::Free,
        }
    }

    /// A failure after the answer began: the client's connection is reset (the only
    /// way left to say the answer is not whole), the record written.
    pub(super) fn cut_short(&mut self, e: &Error) -> Op {
        let _ = splicer_sys::sock::set_linger_zero(self.client.as_fd());
        self.up = None;
        if let Some(mut ride) = self.ride.take() {
            ride.rec.fail(e);
            ride.rec.emit();
        }
        self.close(false)
    }

    /// An error response for the ride's request, then the lingering close.
    pub(super) fn reply(&mut self, status: u16, why: &Error) -> Op {
        self.up = None;
        let rec = match self.ride.take() {
            Some(ride) => ride.rec,
            None => Record::new(self.front, self.addr),
        };
        self.reply_with(rec, status, why)
    }

    fn reply_with(&mut self, mut rec: Record, status: u16, why: &Error) -> Op {
        let bytes = reply::generated(status, true);
        rec.status = status;
        rec.bytes_down += bytes.len() as u64;
        if !rec.has_end() {
            rec.fail(why);
        }
        rec.emit();
        self.tx = bytes;
        self.sent = 0;
        self.state = State::Reply;
        self.deadline = Instant::now() + REPLY_TIME;
        Op::Ring(Start::SendClient)
    }

    /// After an error response: the write side closed, what the client still sends read
    /// and dropped for a while, so the response is not destroyed by a reset.
    pub(super) fn linger(&mut self) -> Op {
        let _ = splicer_sys::sock::shutdown_write(self.client.as_fd());
        self.state = State::Linger;
        self.drained = 0;
        self.deadline = Instant::now() + LINGER_TIME;
        Op::Ring(Start::Drain)
    }
}
