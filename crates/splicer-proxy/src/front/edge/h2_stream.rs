//! The `edge` front end's requests to an `h2c` group (HTTP/2 toward origins; beyond seeds
//! 002 and 004, which multiplex over HTTP/1.1). The client's HTTP/1.x request, rewritten as
//! for any group (`splicer_wire::forward::reverse_request`), goes as a stream on the server's
//! one connection (`crate::upstream::h2c`); its body, if any, is read from the client and sent as DATA
//! frames; the answer is written back as HTTP/1.1 (1.0 to an HTTP/1.0 client) as its frames
//! arrive, never held until it ends.
//!
//! - **Framing.** HTTP/2 frames its messages itself, so the fields that frame or belong to
//!   one HTTP/1.1 connection are left out upstream (RFC 9113 §8.2.2). Back to the client a
//!   body keeps the origin's `Content-Length` (the `h2` crate resets a stream whose DATA do
//!   not add up to it); without one it is chunked, or ends with the connection for an
//!   HTTP/1.0 client. Trailers reach chunked clients (the fields that may be forwarded).
//! - **Back-pressure.** A DATA frame's bytes go back into the stream's flow-control window
//!   only once they are written to the client: a slow client holds at most
//!   `h2c::STREAM_WINDOW` of its answer in memory, and only its own stream waits (a
//!   connection carries no more streams than its window holds).
//! - **Sent again.** A request the server did not process (`REFUSED_STREAM`, or past a
//!   `GOAWAY`'s last stream: RFC 9113 §8.7) is sent once more on a new connection, as is an
//!   idempotent request without a body whose reused connection failed; never one whose body
//!   was taken from the client.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::task::Poll;

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use splicer_wire::chunked;
use splicer_wire::forward;
use splicer_wire::http::{self as wire, BodyLength, Headers, ResponseHead};

use super::pipelined::{failed, flush};
use crate::access::Record;
use crate::error::{Error, Kind, Side};
use crate::exchange::{head_limits, reply, write_all, AskError, Client};
use crate::shared::Shared;
use crate::upstream::Dial;
use crate::wireio::{read_more, ReadError};

/// Body bytes gathered into one write to the client.
const GATHER: usize = 64 * 1024;
/// Longest chunk-size line accepted in a client's chunked body.
const MAX_CHUNK_LINE: usize = 4096;
/// Bytes of a client's body read at a time.
const READ_STEP: usize = 64 * 1024;

/// Fields of one HTTP/1.1 connection, which HTTP/2 forbids (RFC 9113 §8.2.2); `host` becomes
/// the `:authority` pseudo-field.
const CONNECTION_SPECIFIC: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// An answer's head and body, and its stream's place on the connection (held until the
/// body has been relayed: `h2c::STREAMS_PER_CONNECTION`).
pub(crate) type Answer = (http::Response<RecvStream>, crate::upstream::h2c::Handle);

/// Sends the request (and its body) on a connection to the server and waits for the
/// answer's head. `server`: its address and its `host:port`, the `:authority` of a request without
/// `Host` (an HTTP/1.0 client's).
pub(crate) async fn ask(
    shared: &Shared,
    client: &mut Client,
    out: &forward::Request,
    server: (SocketAddr, &str),
    rec: &mut Record,
) -> Result<Answer, AskError> {
    let idle = shared.config.limits.idle_timeout;
    let has_body = out.body != BodyLength::None;
    let resendable = out.head.method.is_idempotent() && !has_body;
    rec.upstream_conn = None;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let request = to_h2(out, server.1)
            .map_err(|e| AskError::Reply(400, Error::unparsable(Side::Client, e)))?;
        let dial = Dial::new(&shared.config.limits, Default::default());
        let max_head = shared.config.limits.max_header_size;
        let conn = shared
            .upstreams
            .h2
            .get(server.0, dial, max_head)
            .await
            .map_err(AskError::Connect)?;
        // Past the server's concurrent-stream limit this waits for a stream to end.
        let sent = match tokio::time::timeout(idle, conn.send.clone().ready()).await {
            Err(_) => {
                return Err(AskError::Reply(
                    504,
                    Error::upstream(Kind::Timeout("stream")),
                ))
            }
            Ok(ready) => ready.and_then(|mut s| s.send_request(request, !has_body)),
        };
        let (response, body) = match sent {
            Ok(pair) => pair,
            // The connection had ended: nothing of the request went.
            Err(e) => {
                conn.forget();
                if attempt == 1 {
                    continue;
                }
                return Err(AskError::upstream(h2_error(e)));
            }
        };
        if has_body {
            if out.expects_continue && out.head.version >= 1 {
                write_all(shared, &client.stream, b"HTTP/1.1 100 Continue\r\n\r\n")
                    .await
                    .map_err(|end| {
                        AskError::Client(Error::from_end(end, Side::Client, Side::Client))
                    })?;
            }
            if let Err(e) = send_body(shared, client, out.body, body, rec).await {
                return Err(match (e.side, &e.kind) {
                    (Side::Client, Kind::Malformed(_)) => AskError::Reply(400, e),
                    (Side::Client, _) => AskError::Client(e),
                    _ => AskError::upstream(e),
                });
            }
        }
        match tokio::time::timeout(idle, response).await {
            Err(_) => {
                return Err(AskError::upstream(Error::upstream(Kind::Timeout(
                    "response",
                ))))
            }
            Ok(Ok(r)) => return Ok((r, conn)),
            Ok(Err(e)) => {
                let unprocessed = e.reason() == Some(h2::Reason::REFUSED_STREAM)
                    || (e.is_go_away() && e.is_remote());
                let failed_reused = resendable && conn.reused && e.is_io();
                if e.is_io() || e.is_go_away() {
                    conn.forget();
                }
                if attempt == 1 && !has_body && (unprocessed || failed_reused) {
                    continue;
                }
                if !conn.reused && !e.is_remote() {
                    shared.upstreams.h2.warn_first_failure(server.0, &e);
                }
                return Err(AskError::upstream(h2_error(e)));
            }
        }
    }
}

/// The request as HTTP/2: `:authority` from `Host`, the connection's fields left out.
fn to_h2(out: &forward::Request, server: &str) -> Result<http::Request<()>, http::Error> {
    let head = &out.head;
    let host = head
        .headers
        .get("host")
        .map(|h| String::from_utf8_lossy(h).trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| server.to_string());
    let uri = http::Uri::builder()
        .scheme("http")
        .authority(host.as_str())
        .path_and_query(head.target.as_str())
        .build()?;
    let method = http::Method::from_bytes(head.method.as_str().as_bytes())?;
    let mut fields = http::HeaderMap::with_capacity(head.headers.iter().count());
    for f in head.headers.iter() {
        let name = f.name.to_ascii_lowercase();
        if CONNECTION_SPECIFIC.contains(&name.as_str()) {
            continue;
        }
        let name = http::HeaderName::from_bytes(name.as_bytes())?;
        let value = http::HeaderValue::from_bytes(f.value)?;
        fields.append(name, value);
    }
    let mut request = http::Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = http::Version::HTTP_2;
    *request.headers_mut() = fields;
    Ok(request)
}

/// Reads the client's body and sends it as DATA frames (trailers of a chunked one as a
/// trailing HEADERS frame). On failure the stream is reset, so the server does not take a
/// cut body for a whole one.
async fn send_body(
    shared: &Shared,
    client: &mut Client,
    framing: BodyLength,
    mut tx: SendStream<Bytes>,
    rec: &mut Record,
) -> Result<(), Error> {
    let sent = match framing {
        BodyLength::Length(n) => send_known(shared, client, (n, true), &mut tx, rec).await,
        BodyLength::Chunked => send_chunked(shared, client, &mut tx, rec).await,
        BodyLength::None | BodyLength::Close => Ok(()),
    };
    if sent.is_err() {
        tx.send_reset(h2::Reason::CANCEL);
    }
    sent
}

/// Sends the next `n` bytes of the client's body; `last`: they end it.
async fn send_known(
    shared: &Shared,
    client: &mut Client,
    (n, last): (u64, bool),
    tx: &mut SendStream<Bytes>,
    rec: &mut Record,
) -> Result<(), Error> {
    let mut left = n;
    while left > 0 {
        if client.buf.is_empty() {
            fill(shared, client).await?;
        }
        let k = client
            .buf
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        let data = Bytes::copy_from_slice(&client.buf[..k]);
        client.buf.drain(..k);
        left -= k as u64;
        rec.add_bytes(true, k as u64);
        send_data(shared, tx, data, last && left == 0).await?;
    }
    Ok(())
}

/// A chunked body, read as strictly as the HTTP/1.1 relay reads one
/// (`splicer_wire::chunked`): the chunk data become DATA frames, the framing goes.
async fn send_chunked(
    shared: &Shared,
    client: &mut Client,
    tx: &mut SendStream<Bytes>,
    rec: &mut Record,
) -> Result<(), Error> {
    let bad = |e: chunked::Error| Error::unparsable(Side::Client, e);
    loop {
        let size = loop {
            match chunked::parse_size_line(&client.buf, MAX_CHUNK_LINE).map_err(bad)? {
                Some((size, used)) => {
                    client.buf.drain(..used);
                    break size;
                }
                None => fill(shared, client).await?,
            }
        };
        if size == 0 {
            let limits = head_limits(shared);
            let trailers = loop {
                match chunked::parse_trailers(&client.buf, &limits).map_err(bad)? {
                    Some((t, used)) => {
                        client.buf.drain(..used);
                        break t;
                    }
                    None => fill(shared, client).await?,
                }
            };
            let trailers = trailer_map(&trailers);
            return if trailers.is_empty() {
                send_data(shared, tx, Bytes::new(), true).await
            } else {
                tx.send_trailers(trailers).map_err(h2_error)
            };
        }
        send_known(shared, client, (size, false), tx, rec).await?;
        loop {
            match chunked::parse_data_end(&client.buf).map_err(bad)? {
                Some((_, used)) => {
                    client.buf.drain(..used);
                    break;
                }
                None => fill(shared, client).await?,
            }
        }
    }
}

/// The trailer fields that may be forwarded, as HTTP/2 fields (others are dropped).
fn trailer_map(trailers: &Headers) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for f in trailers.iter() {
        let name = f.name.to_ascii_lowercase();
        if !chunked::forwardable_trailer(&name) {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            http::HeaderValue::from_bytes(f.value),
        ) {
            map.append(n, v);
        }
    }
    map
}

/// Reads more of the client's body into its buffer, under the idle timeout.
async fn fill(shared: &Shared, client: &mut Client) -> Result<(), Error> {
    let idle = shared.config.limits.idle_timeout;
    let limit = client.buf.len() + READ_STEP;
    match tokio::time::timeout(idle, read_more(&client.stream, &mut client.buf, limit)).await {
        Err(_) => Err(Error::client(Kind::Idle)),
        Ok(Ok(())) => Ok(()),
        Ok(Err(ReadError::Closed)) => Err(Error::client(Kind::Truncated)),
        Ok(Err(ReadError::Io(k))) => Err(Error::client(Kind::Read(k))),
        Ok(Err(ReadError::TooLarge)) => Err(Error::client(Kind::TooLarge("body-read"))),
    }
}

/// Sends `data` as the server's flow control allows, waiting at most the idle timeout for
/// each part of the window.
async fn send_data(
    shared: &Shared,
    tx: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), Error> {
    if data.is_empty() {
        return if end {
            tx.send_data(data, true).map_err(h2_error)
        } else {
            Ok(())
        };
    }
    let idle = shared.config.limits.idle_timeout;
    while !data.is_empty() {
        tx.reserve_capacity(data.len());
        let room = match tokio::time::timeout(idle, poll_fn(|cx| tx.poll_capacity(cx))).await {
            Err(_) => return Err(Error::upstream(Kind::Idle)),
            Ok(None) => return Err(Error::upstream(Kind::Closed("stream"))),
            Ok(Some(Err(e))) => return Err(h2_error(e)),
            Ok(Some(Ok(0))) => continue,
            Ok(Some(Ok(n))) => n,
        };
        let part = data.split_to(room.min(data.len()));
        tx.send_data(part, end && data.is_empty())
            .map_err(h2_error)?;
    }
    Ok(())
}

/// Writes the answer to the client as its frames arrive. Returns whether the client
/// connection stays open.
pub(crate) async fn relay(
    shared: &Shared,
    client: &mut Client,
    (response, _stream): Answer,
    out: &forward::Request,
    via: &str,
    rec: &mut Record,
) -> bool {
    let (parts, mut body) = response.into_parts();
    rec.status = parts.status.as_u16();
    rec.first_byte = Some(rec.start.elapsed());
    rec.engine = Some("h2");
    let (head, framing, keep) = match client_head(shared, &parts, out, via) {
        Ok(h) => h,
        Err(e) => return reply::error(client, rec, 502, &e).await,
    };
    let mut pending = Vec::with_capacity(512);
    head.encode(&mut pending);
    let idle = shared.config.limits.idle_timeout;
    let mut unreleased = 0;
    let mut ended = framing == BodyLength::None;
    loop {
        // What has arrived goes out in one write.
        while !ended && pending.len() < GATHER {
            match poll_fn(|cx| Poll::Ready(body.poll_data(cx))).await {
                Poll::Ready(Some(Ok(data))) => {
                    unreleased += data.len();
                    encode(&mut pending, &data, framing);
                }
                Poll::Ready(Some(Err(e))) => return failed(client, rec, &h2_error(e)),
                Poll::Ready(None) => ended = true,
                Poll::Pending => break,
            }
        }
        if ended && framing == BodyLength::Chunked {
            match tokio::time::timeout(idle, body.trailers()).await {
                Ok(Ok(trailers)) => end_chunks(&mut pending, trailers.as_ref()),
                Ok(Err(e)) => return failed(client, rec, &h2_error(e)),
                Err(_) => return failed(client, rec, &Error::upstream(Kind::Idle)),
            }
        }
        if let Err(e) = flush(shared, client, &mut pending, rec).await {
            return failed(client, rec, &e);
        }
        // Written: the server may send as much again.
        if unreleased > 0 {
            let _ = body.flow_control().release_capacity(unreleased);
            unreleased = 0;
        }
        if ended {
            break;
        }
        match tokio::time::timeout(idle, body.data()).await {
            Err(_) => return failed(client, rec, &Error::upstream(Kind::Idle)),
            Ok(Some(Ok(data))) => {
                unreleased += data.len();
                encode(&mut pending, &data, framing);
            }
            Ok(Some(Err(e))) => return failed(client, rec, &h2_error(e)),
            Ok(None) => ended = true,
        }
    }
    rec.finish("ok");
    rec.emit();
    keep
}

/// The HTTP/1.1 head for the client, how its body is framed, and whether the client
/// connection stays open after it.
fn client_head(
    shared: &Shared,
    parts: &http::response::Parts,
    out: &forward::Request,
    via: &str,
) -> Result<(ResponseHead, BodyLength, bool), Error> {
    let status = parts.status.as_u16();
    let mut head = ResponseHead::new(status, parts.status.canonical_reason().unwrap_or(""));
    for (name, value) in &parts.headers {
        // The `http` crate admits no CR, LF or NUL in a value; checked again where it
        // would turn into a field of its own.
        if value
            .as_bytes()
            .iter()
            .any(|&b| matches!(b, b'\r' | b'\n' | 0))
        {
            return Err(Error::malformed(Side::Upstream, "h2-field-value"));
        }
        head.headers.push(name.as_str(), value.as_bytes());
    }
    let length =
        wire::content_length(&head.headers).map_err(|e| Error::unparsable(Side::Upstream, e))?;
    let no_body = out.head.method == wire::Method::Head || status == 204 || status == 304;
    let framing = match length {
        _ if no_body => BodyLength::None,
        Some(n) => BodyLength::Length(n),
        None if out.head.version >= 1 => BodyLength::Chunked,
        None => BodyLength::Close,
    };
    let keep = out.client_keep && framing != BodyLength::Close && !*shared.shutdown.borrow();
    head.headers.remove_hop_by_hop();
    head.headers.remove("transfer-encoding");
    if framing == BodyLength::Chunked {
        head.headers.push("Transfer-Encoding", "chunked");
    }
    head.headers.push_parts("Via", &[b"2 ", via.as_bytes()]);
    if !keep {
        head.headers.push("Connection", "close");
    } else if out.head.version == 0 {
        head.headers.push("Connection", "keep-alive");
    }
    Ok((head, framing, keep))
}

/// Appends a DATA frame's bytes as the client's framing wants them.
fn encode(pending: &mut Vec<u8>, data: &[u8], framing: BodyLength) {
    if data.is_empty() {
        // An empty chunk would end a chunked body.
        return;
    }
    if framing == BodyLength::Chunked {
        pending.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        pending.extend_from_slice(data);
        pending.extend_from_slice(b"\r\n");
    } else {
        pending.extend_from_slice(data);
    }
}

/// The last chunk and the trailer section.
fn end_chunks(pending: &mut Vec<u8>, trailers: Option<&http::HeaderMap>) {
    pending.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        let clean = !value
            .as_bytes()
            .iter()
            .any(|&b| matches!(b, b'\r' | b'\n' | 0));
        if clean && chunked::forwardable_trailer(name.as_str()) {
            pending.extend_from_slice(name.as_str().as_bytes());
            pending.extend_from_slice(b": ");
            pending.extend_from_slice(value.as_bytes());
            pending.extend_from_slice(b"\r\n");
        }
    }
    pending.extend_from_slice(b"\r\n");
}

/// An HTTP/2 failure as the access line names it.
fn h2_error(e: h2::Error) -> Error {
    if let Some(io) = e.get_io() {
        return Error::upstream(Kind::Read(io.kind()));
    }
    if e.is_go_away() && e.is_remote() {
        return Error::upstream(Kind::Closed("goaway"));
    }
    if e.is_reset() && e.is_remote() {
        return Error::upstream(Kind::Closed("stream"));
    }
    let reason = e.reason().map_or(0, u32::from);
    Error::malformed(Side::Upstream, format!("h2-error-{reason}")).because(e)
}
