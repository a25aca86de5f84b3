//! Answers from the cache: a stored object (one `writev` of head and body slice per
//! response) and a fill read as it arrives (collapsed requests).

use std::io::IoSlice;
use std::os::fd::AsFd;
use std::time::SystemTime;

use splicer_cache::{CacheResult, Check, Object, Reader};
use splicer_relay::End;
use splicer_wire::forward;
use splicer_wire::http::{BodyLength, Headers, ResponseHead};
use tokio::net::TcpStream;

use super::{via, Client};
use crate::access::{Record, Side};
use crate::error::{Error, Kind};
use crate::shared::Shared;

/// How a cached answer is sent.
pub(super) struct Send<'a> {
    pub method: &'a str,
    pub request: &'a Headers,
    pub client_version: u8,
    pub keep: bool,
    pub result: CacheResult,
    /// The origin's status, when it was asked (a revalidation).
    pub origin_status: Option<u16>,
}

/// Serves a stored object. Returns whether the client connection stays open.
pub(super) async fn serve_object(
    shared: &Shared,
    client: &mut Client,
    object: &Object,
    send: Send<'_>,
    mut rec: Record,
) -> bool {
    let now = SystemTime::now();
    let served = object.answer(send.method, send.request, now);
    // A 304 and a HEAD answer have no body to frame; their length fields stay as they are.
    let bodiless = served.head.status == 304 || send.method.eq_ignore_ascii_case("HEAD");
    let framing = if bodiless {
        BodyLength::None
    } else {
        BodyLength::Length(served.body.len() as u64)
    };
    let ttl = object.policy.time_to_live(now).as_secs();
    let member = send
        .result
        .member(via(shared), false, Some(ttl), send.origin_status);
    let head = match finish_head(shared, served.head, framing, &send, member) {
        Ok(h) => h,
        Err(e) => return super::reply::error(client, rec, 502, &e).await,
    };
    rec.status = head.status;
    rec.cache = Some(send.result.name());
    let mut bytes = Vec::with_capacity(512);
    head.encode(&mut bytes);
    let body = &object.body[served.body.clone()];
    match send_parts(shared, &client.stream, &bytes, body).await {
        Ok(()) => {
            rec.add_bytes(false, (bytes.len() + body.len()) as u64);
            rec.finish("ok");
            rec.emit();
            send.keep
        }
        Err(end) => {
            rec.fail(&Error::from_end(end, Side::Client, Side::Client));
            rec.emit();
            false
        }
    }
}

/// The head as the client gets it: HTTP/1.1, `Via`, `Connection`, and `Cache-Status`.
fn finish_head(
    shared: &Shared,
    mut head: ResponseHead,
    framing: BodyLength,
    send: &Send<'_>,
    member: String,
) -> Result<ResponseHead, Error> {
    head.version = 1;
    let mut head = forward::response(head, framing, send.keep, send.client_version, via(shared))
        .map_err(|e| Error::malformed(Side::Internal, e))?;
    head.headers.push("Cache-Status", member);
    Ok(head)
}

/// Writes a head and a body with as few system calls as the socket allows (one `writev`
/// when it takes everything), under the idle timeout.
async fn send_parts(shared: &Shared, to: &TcpStream, head: &[u8], body: &[u8]) -> Result<(), End> {
    let idle = shared.config.limits.idle_timeout;
    let total = head.len() + body.len();
    let mut done = 0;
    while done < total {
        let slices = if done < head.len() {
            [IoSlice::new(&head[done..]), IoSlice::new(body)]
        } else {
            [IoSlice::new(&body[done - head.len()..]), IoSlice::new(&[])]
        };
        match to.try_write_vectored(&slices) {
            Ok(0) => return Err(End::Destination(std::io::ErrorKind::WriteZero)),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                match tokio::time::timeout(idle, to.writable()).await {
                    Err(_) => return Err(End::Idle),
                    Ok(Err(e)) => return Err(End::Destination(e.kind())),
                    Ok(Ok(())) => {}
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(End::Destination(e.kind())),
        }
    }
    Ok(())
}

/// What became of a collapsed request.
pub(super) enum FromFill {
    /// Answered from the fill; whether the connection stays open.
    Answered(bool),
    /// The fill cannot answer it (given up before its head, another variant, a length not
    /// announced): the request goes upstream itself.
    Upstream(Box<Record>),
}

/// Serves a request from another client's fill, as it arrives. The response is sent as
/// the filling client got it, not revalidated (Squid PR 1927). A fill that fails after its
/// head cuts this client too (a reset, never a short body passed off as whole).
pub(super) async fn serve_fill(
    shared: &Shared,
    client: &mut Client,
    mut reader: Reader,
    ask: splicer_cache::Ask<'_>,
    send: Send<'_>,
    mut rec: Record,
) -> FromFill {
    let idle = shared.config.limits.idle_timeout;
    let head = match tokio::time::timeout(idle, reader.head()).await {
        Ok(Some(h)) => h,
        _ => return FromFill::Upstream(Box::new(rec)),
    };
    let Some(length) = head.length else {
        return FromFill::Upstream(Box::new(rec));
    };
    if head.policy.check(ask, SystemTime::now()) == Check::Mismatch {
        return FromFill::Upstream(Box::new(rec));
    }
    let mut resp = ResponseHead::new(head.status, &head.reason);
    resp.headers = head.headers.clone();
    resp.headers.push("Content-Length", length.to_string());
    let member = send.result.member(via(shared), false, None, None);
    let resp = match finish_head(shared, resp, BodyLength::Length(length), &send, member) {
        Ok(h) => h,
        Err(e) => return FromFill::Answered(super::reply::error(client, rec, 502, &e).await),
    };
    rec.status = resp.status;
    rec.cache = Some(send.result.name());
    let mut bytes = Vec::with_capacity(512);
    resp.encode(&mut bytes);
    let mut sent = 0u64;
    let mut lead = bytes;
    let failure = loop {
        let next = tokio::time::timeout(idle, reader.next()).await;
        let chunk = match next {
            Ok(Ok(Some(b))) => b,
            Ok(Ok(None)) if sent == length => break None,
            Ok(Ok(None)) => break Some(Error::upstream(Kind::Truncated)),
            Ok(Err(_)) => break Some(Error::upstream(Kind::Truncated)),
            Err(_) => break Some(Error::upstream(Kind::Idle)),
        };
        if let Err(end) = send_parts(shared, &client.stream, &lead, &chunk).await {
            break Some(Error::from_end(end, Side::Client, Side::Client));
        }
        rec.add_bytes(false, (lead.len() + chunk.len()) as u64);
        sent += chunk.len() as u64;
        lead.clear();
    };
    if !lead.is_empty() && failure.is_none() {
        // An empty body: the head alone.
        if let Err(end) = send_parts(shared, &client.stream, &lead, &[]).await {
            rec.fail(&Error::from_end(end, Side::Client, Side::Client));
            rec.emit();
            return FromFill::Answered(false);
        }
        rec.add_bytes(false, lead.len() as u64);
    }
    match failure {
        None => {
            rec.finish("ok");
            rec.emit();
            FromFill::Answered(send.keep)
        }
        Some(e) => {
            let _ = splicer_sys::sock::set_linger_zero(client.stream.as_fd());
            rec.fail(&e);
            rec.emit();
            FromFill::Answered(false)
        }
    }
}
