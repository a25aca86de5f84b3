//! Relaying an upstream's answer to the client: the response head rewritten, the body
//! relayed (tapped into a fill when the cache stores it), and the upstream connection back
//! to the pool when the exchange was clean.

use std::os::fd::AsFd;

use splicer_wire::forward;
use splicer_wire::http::{self as wire, BodyLength, Method, ResponseHead};

use super::ask::Answer;
use super::body::{self, Leg, Message};
use super::client::Client;
use super::reply;
use super::request::Exchange;
use crate::error::{Error, Side};
use crate::shared::Shared;

/// What the cache adds to a relayed response.
#[derive(Default)]
pub(crate) struct Extra {
    /// A `Cache-Status` member to append.
    pub cache_status: Option<String>,
    /// The fill the body is tapped into.
    pub fill: Option<splicer_cache::Writer>,
}

/// Relays the answer's head and body to the client (tapping the body into a fill), and
/// gives the upstream connection back to the pool when the exchange was clean. Returns
/// whether the client connection stays open.
pub(crate) async fn relay_answer(
    shared: &Shared,
    client: &mut Client,
    answer: Answer,
    ex: &mut Exchange<'_>,
    extra: Extra,
) -> bool {
    let via = ex.via;
    let Answer {
        upstream,
        upstream_addr,
        buf: mut up_buf,
        resp,
        reusable,
    } = answer;
    ex.rec.status = resp.status;
    let stopping = *shared.shutdown.borrow();
    let Shaped {
        framing,
        dechunk,
        keep,
        upstream_keep,
        head: mut back,
    } = match shape(resp, (&ex.method, ex.version, ex.keep), via, stopping) {
        Ok(s) => s,
        Err(e) => {
            let why = Error::unparsable(Side::Upstream, e);
            return reply::error(client, &mut ex.rec, 502, &why).await;
        }
    };
    if let Some(member) = extra.cache_status {
        back.headers.push("Cache-Status", member);
    }
    ex.rec.set_content_type(back.headers.get("content-type"));
    // The head goes out with the first body bytes at hand in one write: one system call and
    // one segment fewer per response. Room for both from the start: the body's bytes are
    // appended to it (`body::relay`), and growing it was a `realloc` per response. In the
    // client connection's spare buffer, given back after (not one allocated per response).
    let mut head_bytes = client.spare.take();
    head_bytes.reserve(512 + up_buf.len());
    back.encode(&mut head_bytes);
    // Written: its table is the next answer's.
    client.spare_answer_fields.keep(back.headers);
    let mut fill = extra.fill;
    let ends_both = !keep && (framing == BodyLength::Close || !upstream_keep);
    // `reusable`: the upstream connection is this exchange's alone (not a pipelined line
    // with other clients' answers behind this one, which must never reach this client).
    if fill.is_none()
        && ends_both
        && reusable
        && !dechunk
        && framing != BodyLength::None
        && client.buf.is_empty()
        && shared.relay.kernel_forced()
    {
        head_bytes.append(&mut up_buf);
        return to_the_end(shared, client, &upstream, &head_bytes, ex).await;
    }
    // A body wholly in hand (its length known, every byte read with the head) is stored
    // before the client is written to: a request that follows this answer (on any thread)
    // then finds the object (a hit), not a fill still open (collapsed onto it). The object
    // is the origin's whole answer, whatever becomes of the client's write.
    if let (Some(w), BodyLength::Length(n)) = (fill.as_mut(), framing) {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if up_buf.len() >= n && w.tap(&up_buf[..n]) {
            if let Some(w) = fill.take() {
                w.finish();
            }
        }
    }
    let leg = Leg {
        from: &upstream,
        buf: &mut up_buf,
        to: &client.stream,
        up: false,
        nothing_follows: reusable,
    };
    let msg = Message {
        lead: &mut head_bytes,
        framing,
        dechunk,
    };
    let mut tap = fill.as_mut().map(super::fill::FillTap);
    let relayed = body::relay(
        shared,
        leg,
        msg,
        &mut ex.rec,
        tap.as_mut().map(|t| t as &mut dyn splicer_relay::Tap),
    )
    .await;
    client.spare.keep(head_bytes);
    match relayed {
        Ok(()) => {
            if !ex.rec.has_end() {
                ex.rec.finish("ok");
            }
            if let Some(w) = fill {
                w.finish();
            }
            // Reusable only after a complete, exactly framed exchange with nothing extra.
            if reusable && upstream_keep && framing != BodyLength::Close && up_buf.is_empty() {
                shared
                    .upstreams
                    .pool
                    .put(&ex.destination().key, upstream, upstream_addr);
            }
            client.spare_read.keep(up_buf);
            ex.rec.emit();
            keep
        }
        Err(body::Stopped { error: e, rest }) => {
            // The head is already out: the only way to signal failure is a reset.
            let _ = splicer_sys::sock::set_linger_zero(client.stream.as_fd());
            ex.rec.fail(&e);
            ex.rec.emit();
            if let Some(w) = fill {
                if e.side == Side::Client {
                    super::fill::after_client_left(shared, (&upstream, up_buf), rest, w).await;
                }
            }
            false
        }
    }
}

/// Seed 000's splice to the end of the connection: an answer not stored, on an upstream
/// connection of its own, after which neither connection carries anything (the client's
/// ends with it, and the origin closes its own: it said so, or the body is
/// close-delimited), goes to the forced kernel engine as a tunnel. `lead` (the rewritten
/// head and the body bytes already read) goes first, written by the engine before its
/// set-up (the client waits for it); the engine's sequence mapping absorbs the difference
/// between the head the origin sent and the one the client gets. Whatever
/// the client sends after its request goes to an origin that is closing and, by
/// RFC 9112 §9.6, processes nothing more. An engine that declines leaves the tunnel to
/// `pipe`, its reason in the access line. The client connection ends.
async fn to_the_end(
    shared: &Shared,
    client: &Client,
    upstream: &tokio::net::TcpStream,
    lead: &[u8],
    ex: &mut Exchange<'_>,
) -> bool {
    let idle = Some(shared.config.limits.idle_timeout);
    let out = shared
        .relay
        .front(ex.rec.front)
        .answer_to_the_end(&client.stream, upstream, lead, idle)
        .await;
    ex.rec.add_tunnel(&out);
    // The head and the bytes read with it, as a relayed body counts them.
    ex.rec.add_bytes(false, lead.len() as u64);
    ex.rec.emit();
    false
}

/// A response head as the client gets it, and what was decided with it.
pub(crate) struct Shaped {
    /// How the upstream frames the body.
    pub framing: BodyLength,
    /// The body goes de-chunked to an HTTP/1.0 client.
    pub dechunk: bool,
    /// The client connection stays open after it.
    pub keep: bool,
    /// The upstream said it keeps its connection open.
    pub upstream_keep: bool,
    pub head: ResponseHead,
}

/// Frames the upstream's response to a request of `method` from an HTTP/1.`version`
/// client that asked to `keep` its connection, and rewrites its head for the client
/// (`splicer_wire::forward::response`). Shared by the runtimes' path and the rings'.
pub(crate) fn shape(
    resp: ResponseHead,
    (method, version, keep): (&Method, u8, bool),
    via: &str,
    stopping: bool,
) -> Result<Shaped, wire::Error> {
    let framing = resp.body(method)?;
    // An HTTP/1.0 client knows no chunking: a chunked body goes to it de-chunked, ended by
    // the close (the origin should not have chunked a 1.0 request's response; some do).
    let dechunk = framing == BodyLength::Chunked && version == 0;
    let keep = keep && framing != BodyLength::Close && !dechunk && !stopping;
    let upstream_keep = resp.keep_alive();
    let head = forward::response(resp, framing, keep, version, via)?;
    Ok(Shaped {
        framing,
        dechunk,
        keep,
        upstream_keep,
        head,
    })
}
