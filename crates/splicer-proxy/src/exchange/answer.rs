//! Relaying an upstream's answer to the client: the response head rewritten, the body
//! relayed (tapped into a fill when the cache stores it), and the upstream connection back
//! to the pool when the exchange was clean.

use std::os::fd::AsFd;

use splicer_wire::forward;
use splicer_wire::http::{BodyLength, Method};

use super::ask::Answer;
use super::body::{self, Leg, Message};
use super::client::Client;
use super::reply;
use crate::access::Record;
use crate::error::{Error, Side};
use crate::shared::Shared;

/// The request an answer is for.
pub(crate) struct Exchange<'a> {
    pub method: &'a Method,
    pub client_version: u8,
    pub request: &'a forward::Request,
    /// `host:port`, the pool's key.
    pub origin: String,
    /// The name in the response's `Via` (the front end's).
    pub via: &'a str,
}

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
    exchange: Exchange<'_>,
    mut rec: Record,
    extra: Extra,
) -> bool {
    let via = exchange.via;
    let Answer {
        upstream,
        upstream_addr,
        buf: mut up_buf,
        resp,
        reusable,
    } = answer;
    rec.status = resp.status;
    let framing = match resp.body(exchange.method) {
        Ok(f) => f,
        Err(e) => {
            return reply::error(client, rec, 502, &Error::malformed(Side::Upstream, e)).await
        }
    };
    // An HTTP/1.0 client knows no chunking: a chunked body goes to it de-chunked, ended by
    // the close (the origin should not have chunked a 1.0 request's response; some do).
    let dechunk = framing == BodyLength::Chunked && exchange.client_version == 0;
    let keep = exchange.request.client_keep
        && exchange.request.body != BodyLength::Close
        && framing != BodyLength::Close
        && !dechunk
        && !*shared.shutdown.borrow();
    let upstream_keep = resp.keep_alive();
    let mut back = match forward::response(resp, framing, keep, exchange.client_version, via) {
        Ok(b) => b,
        Err(e) => {
            return reply::error(client, rec, 502, &Error::malformed(Side::Upstream, e)).await
        }
    };
    if let Some(member) = extra.cache_status {
        back.headers.push("Cache-Status", member);
    }
    // The head goes out with the first body bytes at hand in one write: one system call and
    // one segment fewer per response.
    let mut head_bytes = Vec::with_capacity(512);
    back.encode(&mut head_bytes);
    let mut fill = extra.fill;
    let leg = Leg {
        from: &upstream,
        buf: &mut up_buf,
        to: &client.stream,
        up: false,
    };
    let msg = Message {
        lead: head_bytes,
        framing,
        dechunk,
    };
    let mut tap = fill.as_mut().map(super::fill::FillTap);
    let relayed = body::relay(
        shared,
        leg,
        msg,
        &mut rec,
        tap.as_mut().map(|t| t as &mut dyn splicer_relay::Tap),
    )
    .await;
    match relayed {
        Ok(()) => {
            if !rec.has_end() {
                rec.finish("ok");
            }
            if let Some(w) = fill {
                w.finish();
            }
            // Reusable only after a complete, exactly framed exchange with nothing extra.
            if reusable && upstream_keep && framing != BodyLength::Close && up_buf.is_empty() {
                shared
                    .upstreams
                    .pool
                    .put(exchange.origin, upstream, upstream_addr);
            }
            rec.emit();
            keep
        }
        Err(body::Stopped { error: e, rest }) => {
            // The head is already out: the only way to signal failure is a reset.
            let _ = splicer_sys::sock::set_linger_zero(client.stream.as_fd());
            rec.fail(&e);
            rec.emit();
            if let Some(w) = fill {
                if e.side == Side::Client && w.finish_without_client() {
                    super::fill::finish_alone(shared, (&upstream, up_buf), rest, w).await;
                }
            }
            false
        }
    }
}
