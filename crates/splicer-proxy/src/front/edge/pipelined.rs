//! The `edge` front end's pipelined requests (`pipeline` above 1 in a group): a `GET` or
//! `HEAD` without a body goes on one of the server's lines (`crate::upstream::lines`) with room
//! for it, or on a new line; a request the line could not answer is asked again first on a
//! new line of its own (within [`TRIES`] and [`OFFERS`]): behind others again, it could be
//! handed back each time (an origin that closes after one answer did that 16 times in a
//! row to one request of 24). A buffered answer is relayed to the client as its bytes
//! arrive; a body above the cut-off comes with the connection itself and is relayed as the
//! forward proxy relays one, with the chosen engine.

use splicer_wire::forward;
use splicer_wire::http::{BodyLength, Method, ResponseHead};
use tokio::sync::{mpsc, oneshot};

use crate::access::Record;
use crate::error::{Error, Kind, Side};
use crate::exchange::{
    get_upstream, note_upstream, reply, write_all, Answer, AskError, Client, Exchange,
};
use crate::shared::Shared;
use crate::upstream::lines::{Body, Chunk, Job, Reply, Settings};
use crate::upstream::Check;

/// Connections that closed without answering anything with a request first in line,
/// before it fails with `502` (as an unpipelined request is sent once more at most).
const TRIES: usize = 2;
/// Lines a request is offered to at most: a line that ends (the origin closed it, or a body
/// before it was spliced) hands the requests behind back, to be asked again.
const OFFERS: usize = 16;

/// Body bytes gathered into one write to the client.
const GATHER: usize = 64 * 1024;

/// What a pipelined request got.
pub(crate) enum Piped {
    /// A body that is not buffered: the connection itself (not reusable).
    Whole(Answer),
    /// The head, and the body as the line reads it.
    Buffered {
        resp: ResponseHead,
        framing: BodyLength,
        body: Body,
    },
}

/// Whether a request may share a connection with others: safe to send again, and nothing
/// taken from the client to send (RFC 9112 §9.3.2 lets a client pipeline only such).
pub(crate) fn pipelinable(out: &forward::Request) -> bool {
    matches!(out.head.method, Method::Get | Method::Head)
        && out.body == BodyLength::None
        && !out.expects_continue
}

/// Sends the request on a line to `dest` and waits for its answer's head.
pub(crate) async fn ask(
    shared: &Shared,
    out: &forward::Request,
    ex: &mut Exchange<'_>,
    settings: Settings,
) -> Result<Piped, AskError> {
    let (dest, rec) = ex.destination_and_record();
    let mut request = Vec::with_capacity(512);
    out.head.encode(&mut request);
    let mut tries = 0;
    for offer in 0..OFFERS {
        let busy = match offer {
            0 => shared.upstreams.lines.choose(&dest.key, settings.depth),
            _ => None,
        };
        let chosen = match busy {
            // On a busy line: no window of its own to report.
            Some(line) => {
                rec.upstream_conn = None;
                line
            }
            None => {
                // Registered first, so that requests coming while it connects queue on it.
                let opening = shared.upstreams.lines.open(dest.key.clone(), settings);
                let (upstream, addr, reused) =
                    get_upstream(shared, &dest.key, &dest.authority, None, Check::Kernel)
                        .await
                        .map_err(AskError::Connect)?;
                note_upstream(rec, &upstream, reused);
                let pool = shared.upstreams.pool.clone();
                opening.run((upstream, addr, reused), pool)
            }
        };
        let (tx, rx) = oneshot::channel();
        chosen.send(Job {
            request: request.clone(),
            method: out.head.method.clone(),
            reply: tx,
        });
        let piped = match rx.await {
            Ok(Reply::Buffered {
                resp,
                framing,
                body,
            }) => Piped::Buffered {
                resp,
                framing,
                body,
            },
            Ok(Reply::Handoff {
                upstream,
                addr,
                buf,
                resp,
            }) => Piped::Whole(Answer {
                upstream,
                upstream_addr: addr,
                buf,
                resp,
                reusable: false,
            }),
            Ok(Reply::Failed(e)) => return Err(AskError::upstream(e)),
            Ok(Reply::Reissue { tried }) => {
                tries += usize::from(tried);
                if tries >= TRIES {
                    break;
                }
                continue;
            }
            // The line ended before taking it.
            Err(_) => continue,
        };
        rec.bytes_up += request.len() as u64;
        return Ok(piped);
    }
    Err(AskError::Reply(502, Error::upstream(Kind::NoResponse)))
}

/// Relays a buffered answer: the head with the first bytes at hand in one write, then the
/// body as the line reads it. Returns whether the client connection stays open.
pub(crate) async fn relay_buffered(
    shared: &Shared,
    client: &mut Client,
    (resp, framing, mut body): (ResponseHead, BodyLength, Body),
    ex: &mut Exchange<'_>,
) -> bool {
    let (version, via) = (ex.version, ex.via);
    let keep = ex.keep && !*shared.shutdown.borrow();
    let rec = &mut ex.rec;
    rec.status = resp.status;
    rec.first_byte = Some(rec.start.elapsed());
    rec.engine = Some("buffer");
    // Room for the head and the body's first write, so that gathering them does not
    // reallocate (glibc consolidates its free lists on an allocation of 1 KiB and more).
    let first = match framing {
        BodyLength::Length(n) => n.min(GATHER as u64) as usize,
        _ => 0,
    };
    let back = match forward::response(resp, framing, keep, version, via) {
        Ok(b) => b,
        Err(e) => {
            return reply::error(client, rec, 502, &Error::unparsable(Side::Upstream, e)).await
        }
    };
    let mut pending = Vec::with_capacity(512 + first);
    back.encode(&mut pending);
    let mut ended = false;
    // The chunks written next hold their share of the budget until they are written.
    let mut held: Vec<Chunk> = Vec::new();
    loop {
        // What is at hand goes in one write.
        while pending.len() < GATHER {
            match body.try_recv() {
                Ok(Ok(c)) => {
                    pending.extend_from_slice(&c.bytes);
                    held.push(c);
                }
                Ok(Err(e)) => return failed(client, rec, &e),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    ended = true;
                    break;
                }
            }
        }
        if let Err(e) = flush(shared, client, &mut pending, rec).await {
            return failed(client, rec, &e);
        }
        held.clear();
        if ended {
            break;
        }
        match body.recv().await {
            Some(Ok(c)) => {
                pending.extend_from_slice(&c.bytes);
                held.push(c);
            }
            Some(Err(e)) => return failed(client, rec, &e),
            None => break,
        }
    }
    rec.finish("ok");
    rec.emit();
    keep
}

/// Writes what was gathered for the client, and counts it.
pub(crate) async fn flush(
    shared: &Shared,
    client: &Client,
    pending: &mut Vec<u8>,
    rec: &mut Record,
) -> Result<(), Error> {
    if pending.is_empty() {
        return Ok(());
    }
    write_all(shared, &client.stream, pending)
        .await
        .map_err(|end| Error::from_end(end, Side::Client, Side::Client))?;
    rec.add_bytes(false, pending.len() as u64);
    pending.clear();
    Ok(())
}

/// The head is already out (or the client failed): a reset is the only signal left.
pub(crate) fn failed(client: &mut Client, rec: &mut Record, e: &Error) -> bool {
    let _ = splicer_sys::sock::set_linger_zero(std::os::fd::AsFd::as_fd(&client.stream));
    rec.fail(e);
    rec.emit();
    false
}
