//! Answers from the cache: a stored object (from memory, one `writev` of head and body
//! slice per response; from disk, the head with `MSG_MORE` then `sendfile(2)` from the
//! file) and a fill read as it arrives (collapsed requests).

use std::io::IoSlice;
use std::os::fd::AsFd;
use std::time::SystemTime;

use splicer_cache::{Body, CacheResult, Check, Found, Object, Reader};
use splicer_relay::End;
use splicer_wire::http::{BodyLength, Headers, Method, ResponseHead};
use tokio::net::TcpStream;

use crate::access::Record;
use crate::error::{Error, Kind, Side};
use crate::exchange::{reply, Client};
use crate::shared::Shared;

use super::head;

/// How a cached answer is sent.
pub(crate) struct Send<'a> {
    /// The name in `Via` and `Cache-Status` (the front end's).
    pub via: &'a str,
    pub method: &'a Method,
    pub request: &'a Headers,
    pub client_version: u8,
    pub keep: bool,
    pub result: CacheResult,
    /// The origin's status, when it was asked (a revalidation).
    pub origin_status: Option<u16>,
    /// Fields for this client alone: a revalidation `304`'s `Set-Cookie`, never stored.
    pub own: Option<&'a Headers>,
    /// The request's span of the proxy's own work, when it is still open (a fresh hit):
    /// closed once a write waits for the client's window (docs/pacer.md).
    pub work: Option<splicer_relay::Foreground>,
}

/// Serves a stored object as the cache found it (a disk object comes with its file open).
pub(crate) async fn serve_found(
    shared: &Shared,
    client: &mut Client,
    found: &Found,
    send: Send<'_>,
    rec: &mut Record,
) -> bool {
    serve_object(
        shared,
        client,
        &found.object,
        found.file.as_deref(),
        send,
        rec,
    )
    .await
}

/// Serves a stored object; `file` is a disk object's file, open. Returns whether the
/// client connection stays open.
pub(crate) async fn serve_object(
    shared: &Shared,
    client: &mut Client,
    object: &Object,
    file: Option<&std::fs::File>,
    mut send: Send<'_>,
    rec: &mut Record,
) -> bool {
    let now = SystemTime::now();
    let mut work = send.work.take();
    let (bytes, range) = match head::plain_hit(object, &send, now) {
        Some(bytes) => {
            rec.status = object.status;
            rec.set_content_type(object.headers.get("content-type"));
            (bytes, 0..object.body.len() as usize)
        }
        None => match head::full(object, &send, now) {
            Ok((head, range)) => {
                rec.status = head.status;
                rec.set_content_type(head.headers.get("content-type"));
                let mut bytes = Vec::with_capacity(512);
                head.encode(&mut bytes);
                (bytes, range)
            }
            Err(e) => return reply::error(client, rec, 502, &e).await,
        },
    };
    rec.cache = Some(send.result.name());
    let sent = match (&object.body, file) {
        (Body::Memory(b), _) => {
            let to = (&client.stream, &mut work);
            send_parts(shared, to, &bytes, &b[range.clone()]).await
        }
        (_, _) if range.is_empty() => {
            send_parts(shared, (&client.stream, &mut work), &bytes, &[]).await
        }
        (Body::File(f), Some(file)) => {
            let from = f.offset + range.start as u64;
            let to = (&client.stream, &mut work);
            send_file(shared, to, &bytes, file, from, range.len()).await
        }
        (Body::File(_), None) => {
            let e = Error::new(
                Side::Internal,
                Kind::Refused("a disk object without its file"),
            );
            return reply::error(client, rec, 500, &e).await;
        }
    };
    match sent {
        Ok(()) => {
            rec.add_bytes(false, (bytes.len() + range.len()) as u64);
            rec.finish("ok");
            rec.emit();
            send.keep
        }
        Err(end) => {
            if let End::Source(_) = end {
                // The file failed after part of the body went: a reset, not a short body.
                let _ = splicer_sys::sock::set_linger_zero(client.stream.as_fd());
            }
            rec.fail(&Error::from_end(end, Side::Internal, Side::Client));
            rec.emit();
            false
        }
    }
}

/// The client's socket, and the request's span of the proxy's own work: a write that must
/// wait for the client's window closes it (a slow reader is not work the pacer's
/// `conservative` splices should wait for).
type To<'a, 'w> = (&'a TcpStream, &'w mut Option<splicer_relay::Foreground>);

/// Writes a head and a body with as few system calls as the socket allows (one `writev`
/// when it takes everything), under the idle timeout.
async fn send_parts(
    shared: &Shared,
    (to, work): To<'_, '_>,
    head: &[u8],
    body: &[u8],
) -> Result<(), End> {
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
                *work = None;
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

/// Writes a head, then `len` bytes of `file` from `offset` with `sendfile(2)`: the body goes
/// from the page cache to the socket without a copy through user space. The head is sent
/// with `MSG_MORE` so that it leaves in one segment with the start of the body.
async fn send_file(
    shared: &Shared,
    (to, work): To<'_, '_>,
    head: &[u8],
    file: &std::fs::File,
    offset: u64,
    len: usize,
) -> Result<(), End> {
    let idle = shared.config.limits.idle_timeout;
    let mut done = 0;
    while done < head.len() {
        let more = || splicer_sys::sock::send_more(to.as_fd(), &head[done..]);
        match to.try_io(tokio::io::Interest::WRITABLE, more) {
            Ok(n) => done += n,
            Err(e) => wait((to, &mut *work), idle, e).await?,
        }
    }
    let (mut at, end) = (offset, offset + len as u64);
    while at < end {
        let left = (end - at).min(1 << 30) as usize;
        let send = || splicer_sys::file::sendfile(to.as_fd(), file.as_fd(), &mut at, left);
        match to.try_io(tokio::io::Interest::WRITABLE, send) {
            // The file is shorter than its entry says: never pass a short body off as whole.
            Ok(0) => return Err(End::Source(std::io::ErrorKind::UnexpectedEof)),
            Ok(_) => {}
            Err(e) => wait((to, &mut *work), idle, e).await?,
        }
    }
    Ok(())
}

/// After a failed non-blocking write: waits for room when the socket was full, or ends.
async fn wait(
    (to, work): To<'_, '_>,
    idle: std::time::Duration,
    e: std::io::Error,
) -> Result<(), End> {
    match e.kind() {
        std::io::ErrorKind::WouldBlock => {
            // Waiting on the client is not the proxy's work.
            *work = None;
            match tokio::time::timeout(idle, to.writable()).await {
                Err(_) => Err(End::Idle),
                Ok(Err(e)) => Err(End::Destination(e.kind())),
                Ok(Ok(())) => Ok(()),
            }
        }
        std::io::ErrorKind::Interrupted => Ok(()),
        k => Err(End::Destination(k)),
    }
}

/// What became of a collapsed request.
pub(crate) enum FromFill {
    /// Answered from the fill; whether the connection stays open.
    Answered(bool),
    /// The fill cannot answer it (given up before its head, another variant, a length not
    /// announced): the request goes upstream itself.
    Upstream,
}

/// Serves a request from another client's fill, as it arrives. The response is sent as
/// the filling client got it, not revalidated (Squid PR 1927). A fill that fails after its
/// head cuts this client too (a reset, never a short body passed off as whole).
pub(crate) async fn serve_fill(
    shared: &Shared,
    client: &mut Client,
    mut reader: Reader,
    ask: splicer_cache::Ask<'_>,
    mut send: Send<'_>,
    rec: &mut Record,
) -> FromFill {
    let idle = shared.config.limits.idle_timeout;
    let head = match tokio::time::timeout(idle, reader.head()).await {
        Ok(Some(h)) => h,
        _ => return FromFill::Upstream,
    };
    if head.policy.check(ask, SystemTime::now()) == Check::Mismatch {
        return FromFill::Upstream;
    }
    let mut resp = ResponseHead::new(head.status, &head.reason);
    resp.headers = head.headers.clone();
    // A body of unknown length (it came chunked) goes on chunked to an HTTP/1.1 client,
    // and to the connection's end to an HTTP/1.0 one, which knows no chunking.
    let chunked = head.length.is_none() && send.client_version >= 1;
    let framing = match head.length {
        Some(length) => {
            resp.headers.push("Content-Length", length.to_string());
            BodyLength::Length(length)
        }
        None if chunked => {
            resp.headers.push("Transfer-Encoding", "chunked");
            BodyLength::Chunked
        }
        None => {
            send.keep = false;
            BodyLength::Close
        }
    };
    let member = send.result.member(send.via, false, None, None);
    let resp = match head::finish(resp, framing, &send, member) {
        Ok(h) => h,
        Err(e) => return FromFill::Answered(reply::error(client, rec, 502, &e).await),
    };
    rec.status = resp.status;
    rec.cache = Some(send.result.name());
    rec.set_content_type(resp.headers.get("content-type"));
    let mut bytes = Vec::with_capacity(512);
    resp.encode(&mut bytes);
    let mut sent = 0u64;
    let mut lead = bytes;
    let failure = loop {
        let next = tokio::time::timeout(idle, reader.next()).await;
        let chunk = match next {
            Ok(Ok(Some(b))) => b,
            Ok(Ok(None)) if head.length.is_none_or(|l| sent == l) => {
                if chunked {
                    lead.extend_from_slice(b"0\r\n\r\n");
                }
                break None;
            }
            Ok(Ok(None)) => break Some(Error::upstream(Kind::Truncated)),
            Ok(Err(_)) => break Some(Error::upstream(Kind::Truncated)),
            Err(_) => break Some(Error::upstream(Kind::Idle)),
        };
        if chunk.is_empty() {
            continue;
        }
        if chunked {
            lead.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        }
        if let Err(end) = send_parts(shared, (&client.stream, &mut None), &lead, &chunk).await {
            break Some(Error::from_end(end, Side::Client, Side::Client));
        }
        rec.add_bytes(false, (lead.len() + chunk.len()) as u64);
        sent += chunk.len() as u64;
        lead.clear();
        if chunked {
            lead.extend_from_slice(b"\r\n");
        }
    };
    if !lead.is_empty() && failure.is_none() {
        // What is left: the head of an empty body, or the end of a chunked one.
        if let Err(end) = send_parts(shared, (&client.stream, &mut None), &lead, &[]).await {
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
