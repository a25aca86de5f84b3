//! Relaying one message body, request or response, from one socket to the other.
//!
//! A body with a Content-Length is spliced with `max` = its length, so the front end regains
//! control when it ends; a close-delimited body is spliced to EOF. A chunked body goes
//! through [`Reframer`]: its framing is read strictly and written anew, the chunk data is
//! spliced with `max` = the part not yet read. Nothing is held back: whatever has been
//! received is passed on before Splicer waits for more, so server-sent events, long polling
//! and streamed responses flow through as they arrive.

use splicer_relay::{End, Front, SpliceSpec, Tap, Trailing};
use splicer_wire::chunked::{self, Reframer, Step};
use splicer_wire::http::BodyLength;
use tokio::net::TcpStream;

use super::client::{head_limits, write_all};
use crate::access::Record;
use crate::error::{Error, Kind, Side};
use crate::shared::Shared;
use crate::wireio::{read_more, ReadError};

/// Longest chunk-size line accepted.
const MAX_CHUNK_LINE: usize = 4096;

/// Where a body stood when its relay stopped: what reading the rest alone needs (a fill
/// finished after its client left).
pub(crate) enum Rest {
    /// A body of known length: the fill counts what came.
    Known,
    /// A chunked body: `data` bytes of the current chunk still to come, then the reframer
    /// reads on (from the bytes left in the leg's buffer first).
    Chunked { reframer: Reframer, data: u64 },
}

/// A relay that stopped before its body's end.
pub(crate) struct Stopped {
    pub error: Error,
    pub rest: Rest,
}

impl Stopped {
    fn known(error: Error) -> Stopped {
        Stopped {
            error,
            rest: Rest::Known,
        }
    }
}

/// What `relay` sends: bytes to write first (a head) and how the body is framed.
pub(crate) struct Message<'a> {
    /// Lent, not given: the caller keeps the buffer for its next head (the client
    /// connection's spare), instead of one allocated per response. Body bytes at hand are
    /// appended to it.
    pub lead: &'a mut Vec<u8>,
    pub framing: BodyLength,
    /// A chunked body is passed on without its framing (to an HTTP/1.0 client, which
    /// knows no chunking; the connection's close ends the body for it).
    pub dechunk: bool,
}

/// One direction of an exchange.
pub(crate) struct Leg<'a> {
    pub from: &'a TcpStream,
    /// Bytes already read from `from` and not yet used.
    pub buf: &'a mut Vec<u8>,
    pub to: &'a TcpStream,
    /// Client → upstream (a request body), else upstream → client.
    pub up: bool,
    /// Nothing may follow the body on `from` before the proxy speaks again: an answer on
    /// an upstream connection of its own (not a pipelined line, whose next answer follows).
    /// Bytes that come anyway are surplus, and the connection is not reused; an engine
    /// that must take bytes off the source past the body (`sockmap`) may then take it.
    pub nothing_follows: bool,
}

impl Leg<'_> {
    fn sides(&self) -> (Side, Side) {
        if self.up {
            (Side::Client, Side::Upstream)
        } else {
            (Side::Upstream, Side::Client)
        }
    }
}

/// Relays `msg.lead` and then one message body; the record gets the bytes and engine.
/// `tap` (a cache fill) gets the body's bytes, without framing, as they pass.
pub(crate) async fn relay(
    shared: &Shared,
    leg: Leg<'_>,
    msg: Message<'_>,
    rec: &mut Record,
    mut tap: Option<&mut dyn Tap>,
) -> Result<(), Stopped> {
    let (src, dst) = leg.sides();
    let Message {
        lead: prefix,
        framing,
        dechunk,
    } = msg;
    let lead = prefix.len() as u64;
    let (max, want) = match framing {
        BodyLength::None => (Some(lead), End::Max),
        BodyLength::Length(n) => {
            let k = leg.buf.len().min(n.try_into().unwrap_or(usize::MAX));
            tap_some(&mut tap, &leg.buf[..k]);
            prefix.extend(leg.buf.drain(..k));
            (Some(lead + n), End::Max)
        }
        BodyLength::Close => {
            prefix.append(leg.buf);
            (None, End::Eof)
        }
        BodyLength::Chunked => {
            return relay_chunked(shared, leg, (prefix, dechunk), rec, tap).await
        }
    };
    let idle = Some(shared.config.limits.idle_timeout);
    let trailing = if leg.nothing_follows {
        Trailing::Surplus
    } else {
        Trailing::Kept
    };
    let spec = SpliceSpec {
        max,
        idle,
        trailing,
    };
    let o = splice(
        shared,
        rec.front,
        (leg.from, leg.to),
        prefix,
        spec,
        &mut tap,
    )
    .await;
    rec.add_splice(leg.up, &o);
    if framing == BodyLength::Close {
        rec.finish(o.end.name());
    }
    if o.end == want {
        Ok(())
    } else {
        Err(Stopped::known(Error::from_end(o.end, src, dst)))
    }
}

/// A splice, tapped when there is a tap that still wants bytes; paced as `front`'s.
async fn splice(
    shared: &Shared,
    front: Front,
    (from, to): (&TcpStream, &TcpStream),
    prefix: &[u8],
    spec: SpliceSpec,
    tap: &mut Option<&mut dyn Tap>,
) -> splicer_relay::Outcome {
    let relay = shared.relay.front(front);
    match tap {
        Some(t) => relay.splice_tapped(from, to, prefix, spec, &mut **t).await,
        None => relay.splice(from, to, prefix, spec).await,
    }
}

/// Hands bytes to the tap; a tap that wants no more is let go.
fn tap_some(tap: &mut Option<&mut dyn Tap>, bytes: &[u8]) {
    if let Some(t) = tap {
        if !bytes.is_empty() && !t.tap(bytes) {
            *tap = None;
        }
    }
}

/// A chunked body: framing read and written anew by the reframer (or dropped when
/// `dechunk`), data spliced.
async fn relay_chunked(
    shared: &Shared,
    leg: Leg<'_>,
    (lead, dechunk): (&mut Vec<u8>, bool),
    rec: &mut Record,
    mut tap: Option<&mut dyn Tap>,
) -> Result<(), Stopped> {
    let (src, dst) = leg.sides();
    let limits = head_limits(shared);
    let idle = Some(shared.config.limits.idle_timeout);
    let mut reframer = reframer(shared);
    // Bytes for `to` not yet written: the head first, then framing and data at hand.
    let pending = lead;
    let mut dropped = Vec::new();
    let stop = |error, reframer, data| Stopped {
        error,
        rest: Rest::Chunked { reframer, data },
    };
    loop {
        let framing = if dechunk { &mut dropped } else { &mut *pending };
        let (used, step) = match reframer.advance(leg.buf, framing) {
            Ok(a) => a,
            Err(e) => return Err(stop(framing_error(src, e), reframer, 0)),
        };
        dropped.clear();
        leg.buf.drain(..used);
        match step {
            Step::More => {
                // Whatever is at hand goes out before waiting for the sender.
                if let Err(end) = flush(shared, leg.to, pending, rec, leg.up).await {
                    return Err(stop(Error::from_end(end, src, dst), reframer, 0));
                }
                let room = limits.max_head.max(MAX_CHUNK_LINE);
                if let Err(kind) = more(shared, leg.from, leg.buf, room).await {
                    return Err(stop(Error::new(src, kind), reframer, 0));
                }
            }
            Step::Data(size) => {
                let have = leg.buf.len().min(size.try_into().unwrap_or(usize::MAX));
                tap_some(&mut tap, &leg.buf[..have]);
                pending.extend(leg.buf.drain(..have));
                let rest = size - have as u64;
                if rest > 0 {
                    // Chunk data: the framing follows it on the source. What is pending
                    // goes first, written by the splice.
                    let spec = SpliceSpec {
                        max: Some(pending.len() as u64 + rest),
                        idle,
                        trailing: Trailing::Kept,
                    };
                    // Counted, so that a fill finished alone knows where the chunk stood.
                    let mut counted = tap.take().map(|inner| Counted { inner, n: 0 });
                    let mut t = counted.as_mut().map(|c| c as &mut dyn Tap);
                    let o =
                        splice(shared, rec.front, (leg.from, leg.to), pending, spec, &mut t).await;
                    pending.clear();
                    let still = t.is_some();
                    let read = counted.as_ref().map_or(0, |c| c.n);
                    tap = counted.filter(|_| still).map(|c| c.inner);
                    rec.add_splice(leg.up, &o);
                    if o.end != End::Max {
                        let error = Error::from_end(o.end, src, dst);
                        return Err(stop(error, reframer, rest.saturating_sub(read)));
                    }
                }
            }
            Step::Done => {
                return flush(shared, leg.to, pending, rec, leg.up)
                    .await
                    .map_err(|end| stop(Error::from_end(end, src, dst), reframer, 0));
            }
        }
    }
}

/// A reframer for a chunked body, with the front end's limits.
pub(crate) fn reframer(shared: &Shared) -> Reframer {
    Reframer::new(MAX_CHUNK_LINE, head_limits(shared))
}

/// A tap that counts what it is handed.
struct Counted<'t> {
    inner: &'t mut dyn Tap,
    n: u64,
}

impl Tap for Counted<'_> {
    fn tap(&mut self, bytes: &[u8]) -> bool {
        self.n += bytes.len() as u64;
        self.inner.tap(bytes)
    }
}

fn framing_error(src: Side, e: chunked::Error) -> Error {
    let what = match e {
        chunked::Error::BadTrailer(_) | chunked::Error::TrailerTooLarge(_) => "bad-trailer",
        _ => "bad-chunk",
    };
    Error::malformed(src, format!("{what}: {e}")).because(e)
}

/// Writes the pending bytes, if any, and counts them.
async fn flush(
    shared: &Shared,
    to: &TcpStream,
    pending: &mut Vec<u8>,
    rec: &mut Record,
    up: bool,
) -> Result<(), End> {
    if pending.is_empty() {
        return Ok(());
    }
    write_all(shared, to, pending).await?;
    rec.add_bytes(up, pending.len() as u64);
    pending.clear();
    Ok(())
}

/// Reads at least one more byte of chunk framing (up to `room` more bytes).
async fn more(
    shared: &Shared,
    from: &TcpStream,
    buf: &mut Vec<u8>,
    room: usize,
) -> Result<(), Kind> {
    let limit = buf.len() + room;
    match tokio::time::timeout(
        shared.config.limits.idle_timeout,
        read_more(from, buf, limit),
    )
    .await
    {
        Err(_) => Err(Kind::Idle),
        Ok(Ok(())) => Ok(()),
        Ok(Err(ReadError::Closed)) => Err(Kind::Truncated),
        Ok(Err(ReadError::Io(k))) => Err(Kind::Read(k)),
        // Not reached: the limit always leaves room; the reframer bounds lines itself.
        Ok(Err(ReadError::TooLarge)) => Err(Kind::Malformed("chunk-line-too-long".into())),
    }
}
