//! The `http` front end: an HTTP/1.0 and 1.1 forward proxy.
//!
//! Heads are parsed and rewritten in user space; bodies are spliced. A body with a
//! Content-Length is spliced with `max` = its remaining length, so the front end regains
//! control when it completes and serves the next request on the kept-alive client
//! connection. Chunked bodies are relayed verbatim: the front end reads each chunk-size line
//! and splices the chunk's data with `max` = its size. Close-delimited bodies are spliced
//! to EOF. CONNECT becomes a tunnel.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;

use splicer_relay::{End, SpliceSpec};
use splicer_wire::chunked;
use splicer_wire::http::{self as wire, Authority, BodyLength, Limits, RequestHead, ResponseHead};
use tokio::net::TcpStream;

use crate::access::{Record, Side};
use crate::server::Shared;
use crate::upstream::{self, Asker, ConnectError};
use crate::wireio::{read_more, ReadError};

/// Longest chunk-size or trailer line accepted.
const MAX_CHUNK_LINE: usize = 4096;

/// A client connection and the bytes read from it but not yet used.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
    peer: SocketAddr,
}

/// Serves one client connection: requests one after the other until either side closes.
pub async fn serve(shared: &Shared, stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let mut client = Client {
        stream,
        buf: Vec::new(),
        peer,
    };
    let limits = Limits {
        max_head: shared.config.limits.max_header_size,
        max_headers: shared.config.limits.max_headers,
    };
    let mut shutdown = shared.shutdown.clone();
    let mut first = true;
    loop {
        let wait = if first {
            shared.config.limits.handshake_timeout
        } else {
            shared.config.limits.keepalive_timeout
        };
        // Between requests a stopping proxy just closes; a request being read is finished.
        let between = client.buf.is_empty();
        let read = tokio::time::timeout(wait, read_request(&mut client, &limits));
        let head = tokio::select! {
            r = read => r,
            _ = shutdown.wait_for(|stop| *stop), if between => return,
        };
        let head = match head {
            Err(_) if client.buf.is_empty() => return,
            Err(_) => {
                error(
                    &mut client,
                    Record::new("http", peer),
                    408,
                    "client:header-timeout",
                )
                .await;
                return;
            }
            Ok(Err(ReadError::Closed)) if client.buf.is_empty() => return,
            Ok(Err(ReadError::Closed)) => {
                let mut rec = Record::new("http", peer);
                rec.fail(Side::Client, "closed-in-head");
                return rec.emit();
            }
            Ok(Err(ReadError::Io(_))) => return,
            Ok(Err(ReadError::TooLarge)) => {
                error(
                    &mut client,
                    Record::new("http", peer),
                    431,
                    "client:header-too-large",
                )
                .await;
                return;
            }
            Ok(Ok(Err(e))) => {
                let status =
                    if matches!(e, wire::Error::TooLarge(_) | wire::Error::TooManyHeaders(_)) {
                        431
                    } else {
                        400
                    };
                error(
                    &mut client,
                    Record::new("http", peer),
                    status,
                    &format!("client:{e}"),
                )
                .await;
                return;
            }
            Ok(Ok(Ok(head))) => head,
        };
        first = false;
        if !handle(shared, &mut client, head).await || *shared.shutdown.borrow() {
            return;
        }
    }
}

async fn read_request(
    client: &mut Client,
    limits: &Limits,
) -> Result<Result<RequestHead, wire::Error>, ReadError> {
    loop {
        match RequestHead::parse(&client.buf, limits) {
            Ok(Some((head, n))) => {
                client.buf.drain(..n);
                if client.buf.is_empty() {
                    // Idle kept-alive connections should not hold a head-sized buffer.
                    client.buf = Vec::new();
                }
                return Ok(Ok(head));
            }
            Ok(None) => read_more(&client.stream, &mut client.buf, limits.max_head).await?,
            Err(e) => return Ok(Err(e)),
        }
    }
}

/// Handles one request; returns whether the client connection stays open.
async fn handle(shared: &Shared, client: &mut Client, head: RequestHead) -> bool {
    let mut rec = Record::new("http", client.peer);
    rec.method = head.method.clone();
    rec.destination = head.target.clone();
    let body = match head.body() {
        Ok(b) => b,
        Err(e) => return error(client, rec, 400, &format!("client:{e}")).await,
    };
    // Without a body (or with one we never read) the connection can only stay open when
    // no unread body is left behind.
    let can_keep = body == BodyLength::None && head.keep_alive();
    if shared.policy.auth_required() {
        match shared
            .policy
            .check_basic(head.headers.get("proxy-authorization"))
        {
            Some(u) => rec.user = Some(u),
            None => {
                let keep = if can_keep { Keep::Yes } else { Keep::No };
                return reply(client, rec, 407, keep, "client:auth-required").await;
            }
        }
    }
    if head.method.eq_ignore_ascii_case("CONNECT") {
        connect(shared, client, head, rec).await;
        return false;
    }
    let (authority, path) = match wire::split_absolute(&head.target) {
        Ok(t) => t,
        Err(e) => return error(client, rec, 400, &format!("client:{e}")).await,
    };
    rec.destination = authority.to_string();
    forward(shared, client, head, body, authority, path, rec).await
}

/// CONNECT host:port → `200 Connection established`, then a tunnel.
async fn connect(shared: &Shared, client: &mut Client, head: RequestHead, mut rec: Record) {
    let authority = match Authority::parse(&head.target, None) {
        Ok(a) => a,
        Err(e) => {
            error(client, rec, 400, &format!("client:{e}")).await;
            return;
        }
    };
    rec.destination = authority.to_string();
    let http = shared
        .config
        .http
        .as_ref()
        .expect("http front end configured");
    if !http.connect_ports.contains(&authority.port) {
        error(client, rec, 403, "client:connect-port-denied").await;
        return;
    }
    let user = rec.user.clone();
    let asker = Asker {
        client: client.peer.ip(),
        user: user.as_deref(),
    };
    let upstream = match upstream::connect(
        &shared.policy,
        asker,
        &authority.host,
        authority.port,
        upstream::Dial {
            timeout: shared.config.limits.connect_timeout,
            mss: shared.relay.upstream_mss(&client.stream),
            receive_buffer: shared.config.limits.receive_buffer,
        },
    )
    .await
    {
        Ok(u) => u,
        Err(e) => {
            connect_error(client, rec, e).await;
            return;
        }
    };
    rec.status = 200;
    let mut ok: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";
    // A kernel engine writes it itself, after setting the splice up.
    if !shared.relay.holds_reply() {
        if let Err(end) = write_all(shared, &client.stream, ok).await {
            rec.fail(Side::Client, &end.name());
            return rec.emit();
        }
        ok = &[];
    }
    let early = std::mem::take(&mut client.buf);
    let out = shared
        .relay
        .tunnel(
            &client.stream,
            &upstream,
            ok,
            &early,
            Some(shared.config.limits.idle_timeout),
        )
        .await;
    rec.add_splice(true, &out.up);
    rec.add_splice(false, &out.down);
    rec.end = out.end().name();
    rec.emit();
}

/// An absolute-form request: forward it, relay the response. Returns whether the client
/// connection stays open.
async fn forward(
    shared: &Shared,
    client: &mut Client,
    mut head: RequestHead,
    body: BodyLength,
    authority: Authority,
    path: String,
    mut rec: Record,
) -> bool {
    let http = shared
        .config
        .http
        .as_ref()
        .expect("http front end configured");
    let limits = Limits {
        max_head: shared.config.limits.max_header_size,
        max_headers: shared.config.limits.max_headers,
    };
    let origin = authority.to_string();
    let user = rec.user.clone();
    let asker = Asker {
        client: client.peer.ip(),
        user: user.as_deref(),
    };

    let client_keep = can_keep_after(&head, body);
    // The client's headers move into the upstream request; only what was read above is
    // needed from them later.
    let mut out = RequestHead {
        method: head.method.clone(),
        target: path,
        version: head.version,
        headers: std::mem::take(&mut head.headers),
    };
    out.headers.remove_hop_by_hop();
    out.headers.remove("host");
    if body == BodyLength::Chunked {
        // Transfer-Encoding wins over Content-Length (RFC 9112 §6.3); forwarding both would
        // let the origin frame the body differently from us: request smuggling.
        out.headers.remove("content-length");
    }
    out.headers
        .0
        .insert(0, wire::Header::new("Host", host_header(&authority)));
    let expects_continue = out.headers.has_token("expect", "100-continue");
    if expects_continue {
        // Splicer answers 100 Continue itself before relaying the body, so the origin is
        // never left waiting on an expectation the client already had answered.
        out.headers.remove("expect");
    }
    if head.version == 0 {
        // An HTTP/1.0 client gets an HTTP/1.0 exchange upstream (so no chunked response
        // it could not read), kept alive for the pool where the origin agrees.
        out.headers.push("Connection", "keep-alive");
    }
    out.headers
        .push("Via", format!("1.{} {}", head.version, http.via));
    let mut request_bytes = Vec::with_capacity(512);
    out.encode(&mut request_bytes);

    // A request on a reused connection that dies before any response byte is retried once
    // on a fresh connection, when it had no body (so nothing was consumed from the client).
    let mut attempt = 0;
    let (upstream, peer, mut up_buf, resp) = loop {
        attempt += 1;
        let (upstream, peer, reused) = match get_upstream(shared, &origin, &authority, asker).await
        {
            Ok(u) => u,
            Err(e) => {
                connect_error(client, rec, e).await;
                return false;
            }
        };
        let retry_safe = reused && body == BodyLength::None && attempt == 1;
        if let Err(end) = write_all(shared, &upstream, &request_bytes).await {
            if retry_safe {
                continue;
            }
            return error(client, rec, 502, &format!("upstream:{}", end.name())).await;
        }
        rec.bytes_up += request_bytes.len() as u64;
        if body != BodyLength::None {
            if expects_continue && head.version >= 1 {
                if let Err(end) =
                    write_all(shared, &client.stream, b"HTTP/1.1 100 Continue\r\n\r\n").await
                {
                    rec.fail(Side::Client, &end.name());
                    rec.emit();
                    return false;
                }
            }
            let request_body = Message {
                lead: Vec::new(),
                framing: body,
            };
            if let Err((side, what)) = relay_body(
                shared,
                &client.stream,
                &mut client.buf,
                &upstream,
                request_body,
                &mut rec,
                true,
            )
            .await
            {
                return match side {
                    Side::Client => {
                        rec.fail(side, &what);
                        rec.emit();
                        false
                    }
                    _ => error(client, rec, 502, &format!("{}:{what}", side.name())).await,
                };
            }
        }
        match read_response(shared, client, &upstream, &limits, head.version).await {
            Ok((resp, buf)) => break (upstream, peer, buf, resp),
            Err(ResponseError::NoResponse) if retry_safe => continue,
            Err(ResponseError::NoResponse) => {
                return error(client, rec, 502, "upstream:no-response").await
            }
            Err(ResponseError::Bad(what)) => {
                return error(client, rec, 502, &format!("upstream:{what}")).await
            }
            Err(ResponseError::Timeout) => {
                return error(client, rec, 504, "upstream:response-timeout").await
            }
            Err(ResponseError::ClientGone) => {
                rec.fail(Side::Client, "closed");
                rec.emit();
                return false;
            }
        }
    };
    rec.status = resp.status;
    let framing = match resp.body(&head.method) {
        Ok(f) => f,
        Err(e) => return error(client, rec, 502, &format!("upstream:{e}")).await,
    };
    let keep = client_keep && framing != BodyLength::Close && !*shared.shutdown.borrow();
    let upstream_keep = resp.keep_alive();
    let upstream_version = resp.version;
    let mut back = resp;
    back.version = 1;
    back.headers.remove_hop_by_hop();
    if framing == BodyLength::Chunked {
        back.headers.remove("content-length");
    }
    back.headers
        .push("Via", format!("1.{} {}", upstream_version, http.via));
    if !keep {
        back.headers.push("Connection", "close");
    } else if head.version == 0 {
        back.headers.push("Connection", "keep-alive");
    }
    // The head goes out with the first body bytes in one write: one system call and one
    // segment fewer per response.
    let mut head_bytes = Vec::with_capacity(512);
    back.encode(&mut head_bytes);
    match relay_body(
        shared,
        &upstream,
        &mut up_buf,
        &client.stream,
        Message {
            lead: head_bytes,
            framing,
        },
        &mut rec,
        false,
    )
    .await
    {
        Ok(()) => {
            rec.end = if rec.end.is_empty() {
                "ok".into()
            } else {
                rec.end
            };
            // Reusable only after a complete, exactly framed exchange with nothing extra.
            if upstream_keep && framing != BodyLength::Close && up_buf.is_empty() {
                shared.pool.put(origin, upstream, peer);
            }
            rec.emit();
            keep
        }
        Err((side, what)) => {
            // The head is already out: the only way to signal failure is a reset.
            let _ = splicer_sys::sock::set_linger_zero(client.stream.as_fd());
            rec.fail(side, &what);
            rec.emit();
            false
        }
    }
}

fn can_keep_after(head: &RequestHead, body: BodyLength) -> bool {
    head.keep_alive()
        && matches!(
            body,
            BodyLength::None | BodyLength::Length(_) | BodyLength::Chunked
        )
}

fn host_header(a: &Authority) -> String {
    let host = if a.host.contains(':') {
        format!("[{}]", a.host)
    } else {
        a.host.clone()
    };
    if a.port == 80 {
        host
    } else {
        format!("{host}:{}", a.port)
    }
}

/// A pooled connection the rules still allow, or a new one; with its peer address and
/// whether it was reused.
async fn get_upstream(
    shared: &Shared,
    origin: &str,
    authority: &Authority,
    asker: Asker<'_>,
) -> Result<(TcpStream, SocketAddr, bool), ConnectError> {
    if let Some(idle) = shared.pool.take(origin) {
        let domain = authority
            .host
            .parse::<std::net::IpAddr>()
            .is_err()
            .then_some(authority.host.as_str());
        let allowed = shared.policy.allows(&crate::policy::Request {
            client: asker.client,
            user: asker.user,
            domain,
            destination: idle.peer.ip(),
            port: authority.port,
        });
        if allowed {
            return Ok((idle.stream, idle.peer, true));
        }
        shared.pool.put(origin.to_string(), idle.stream, idle.peer);
    }
    let s = upstream::connect(
        &shared.policy,
        asker,
        &authority.host,
        authority.port,
        upstream::Dial {
            timeout: shared.config.limits.connect_timeout,
            mss: None,
            receive_buffer: shared.config.limits.receive_buffer,
        },
    )
    .await?;
    let peer = s.peer_addr().map_err(ConnectError::Other)?;
    Ok((s, peer, false))
}

enum ResponseError {
    /// The upstream closed or reset before sending any byte.
    NoResponse,
    Bad(String),
    Timeout,
    ClientGone,
}

/// Reads the final response head, passing interim (1xx) responses on to HTTP/1.1 clients.
async fn read_response(
    shared: &Shared,
    client: &Client,
    upstream: &TcpStream,
    limits: &Limits,
    client_version: u8,
) -> Result<(ResponseHead, Vec<u8>), ResponseError> {
    let mut buf = Vec::new();
    let idle = shared.config.limits.idle_timeout;
    loop {
        match ResponseHead::parse(&buf, limits) {
            Ok(Some((head, n))) => {
                buf.drain(..n);
                if head.status == 101 {
                    return Err(ResponseError::Bad("unrequested-upgrade".into()));
                }
                if (100..200).contains(&head.status) {
                    if client_version >= 1 {
                        let mut interim = head.clone();
                        interim.headers.remove_hop_by_hop();
                        let mut bytes = Vec::new();
                        interim.encode(&mut bytes);
                        write_all(shared, &client.stream, &bytes)
                            .await
                            .map_err(|_| ResponseError::ClientGone)?;
                    }
                    continue;
                }
                return Ok((head, buf));
            }
            Ok(None) => {}
            Err(e) => return Err(ResponseError::Bad(e.to_string())),
        }
        let had = buf.len();
        match tokio::time::timeout(idle, read_more(upstream, &mut buf, limits.max_head)).await {
            Err(_) => return Err(ResponseError::Timeout),
            Ok(Ok(())) => {}
            Ok(Err(ReadError::TooLarge)) => {
                return Err(ResponseError::Bad("header-too-large".into()))
            }
            Ok(Err(ReadError::Closed | ReadError::Io(_))) if had == 0 => {
                return Err(ResponseError::NoResponse)
            }
            Ok(Err(_)) => return Err(ResponseError::Bad("closed-in-head".into())),
        }
    }
}

/// What `relay_body` sends: bytes to write first (a head) and how the body is framed.
struct Message {
    lead: Vec<u8>,
    framing: BodyLength,
}

/// Relays `msg.lead` and then one message body from `from` to `to`; `buf` holds bytes already
/// read from `from`. `up` says the direction (client → upstream) for the record and sides.
async fn relay_body(
    shared: &Shared,
    from: &TcpStream,
    buf: &mut Vec<u8>,
    to: &TcpStream,
    msg: Message,
    rec: &mut Record,
    up: bool,
) -> Result<(), (Side, String)> {
    let (src, dst) = if up {
        (Side::Client, Side::Upstream)
    } else {
        (Side::Upstream, Side::Client)
    };
    let idle = Some(shared.config.limits.idle_timeout);
    let fail = |end: End| -> (Side, String) {
        match end {
            End::Destination(_) => (dst, end.name()),
            End::Eof => (src, "truncated-body".into()),
            _ => (src, end.name()),
        }
    };
    let Message {
        lead: mut prefix,
        framing,
    } = msg;
    let lead = prefix.len() as u64;
    let (max, want) = match framing {
        BodyLength::None => (Some(lead), End::Max),
        BodyLength::Length(n) => {
            let k = buf.len().min(n.try_into().unwrap_or(usize::MAX));
            prefix.extend(buf.drain(..k));
            (Some(lead + n), End::Max)
        }
        BodyLength::Close => {
            prefix.append(buf);
            (None, End::Eof)
        }
        BodyLength::Chunked => {
            return relay_chunked(shared, from, buf, to, prefix, rec, up)
                .await
                .map_err(|e| match e {
                    ChunkError::Framing(what) => (src, what),
                    ChunkError::End(end) => fail(end),
                })
        }
    };
    let o = shared
        .relay
        .splice(from, to, &prefix, SpliceSpec { max, idle })
        .await;
    rec.add_splice(up, &o);
    if framing == BodyLength::Close {
        rec.end = o.end.name();
    }
    if o.end == want {
        Ok(())
    } else {
        Err(fail(o.end))
    }
}

enum ChunkError {
    Framing(String),
    End(End),
}

/// Chunked bodies go through verbatim: size lines, extensions and trailers are copied,
/// chunk data is spliced with `max` = the part of the chunk not yet read.
async fn relay_chunked(
    shared: &Shared,
    from: &TcpStream,
    buf: &mut Vec<u8>,
    to: &TcpStream,
    lead: Vec<u8>,
    rec: &mut Record,
    up: bool,
) -> Result<(), ChunkError> {
    // Verbatim bytes not yet written (the head first); sent as the prefix of the next splice.
    let mut pending: Vec<u8> = lead;
    loop {
        let size = loop {
            match chunked::parse_size_line(buf, MAX_CHUNK_LINE) {
                Ok(Some((size, n))) => {
                    pending.extend(buf.drain(..n));
                    break size;
                }
                Ok(None) => more(shared, from, buf).await?,
                Err(e) => return Err(ChunkError::Framing(format!("bad-chunk: {e}"))),
            }
        };
        if size == 0 {
            loop {
                match chunked::parse_trailer_line(buf, MAX_CHUNK_LINE) {
                    Ok(Some((last, n))) => {
                        pending.extend(buf.drain(..n));
                        if last {
                            let o = flush(shared, from, to, &mut pending, 0).await?;
                            rec.add_splice(up, &o);
                            return Ok(());
                        }
                    }
                    Ok(None) => more(shared, from, buf).await?,
                    Err(e) => return Err(ChunkError::Framing(format!("bad-trailer: {e}"))),
                }
            }
        }
        let have = buf.len().min(size.try_into().unwrap_or(usize::MAX));
        pending.extend(buf.drain(..have));
        let rest = size - have as u64;
        if rest > 0 || pending.len() >= 64 * 1024 {
            let o = flush(shared, from, to, &mut pending, rest).await?;
            rec.add_splice(up, &o);
        }
        loop {
            match chunked::parse_data_end(buf) {
                Ok(Some(((), n))) => {
                    pending.extend(buf.drain(..n));
                    break;
                }
                Ok(None) => more(shared, from, buf).await?,
                Err(e) => return Err(ChunkError::Framing(format!("bad-chunk: {e}"))),
            }
        }
    }
}

/// Writes the pending verbatim bytes, then splices `extra` more bytes of chunk data.
async fn flush(
    shared: &Shared,
    from: &TcpStream,
    to: &TcpStream,
    pending: &mut Vec<u8>,
    extra: u64,
) -> Result<splicer_relay::Outcome, ChunkError> {
    let prefix = std::mem::take(pending);
    let spec = SpliceSpec {
        max: Some(prefix.len() as u64 + extra),
        idle: Some(shared.config.limits.idle_timeout),
    };
    let o = shared.relay.splice(from, to, &prefix, spec).await;
    if o.end == End::Max {
        Ok(o)
    } else {
        Err(ChunkError::End(o.end))
    }
}

/// Reads at least one more byte of chunk framing.
async fn more(shared: &Shared, from: &TcpStream, buf: &mut Vec<u8>) -> Result<(), ChunkError> {
    let limit = buf.len() + MAX_CHUNK_LINE;
    match tokio::time::timeout(
        shared.config.limits.idle_timeout,
        read_more(from, buf, limit),
    )
    .await
    {
        Err(_) => Err(ChunkError::End(End::Idle)),
        Ok(Ok(())) => Ok(()),
        Ok(Err(ReadError::Closed)) => Err(ChunkError::End(End::Eof)),
        Ok(Err(ReadError::Io(k))) => Err(ChunkError::End(End::Source(k))),
        Ok(Err(ReadError::TooLarge)) => Err(ChunkError::Framing("chunk-line-too-long".into())),
    }
}

/// Writes bytes under the idle timeout.
async fn write_all(shared: &Shared, to: &TcpStream, bytes: &[u8]) -> Result<(), End> {
    shared
        .relay
        .send(to, bytes, Some(shared.config.limits.idle_timeout))
        .await
}

async fn connect_error(client: &mut Client, mut rec: Record, e: ConnectError) {
    let side = if matches!(e, ConnectError::Denied) {
        Side::Client
    } else {
        Side::Upstream
    };
    rec.fail(side, e.name());
    let end = rec.end.clone();
    error(client, rec, e.http_status(), &end).await;
}

#[derive(PartialEq)]
enum Keep {
    Yes,
    No,
}

/// Sends an error response and closes the connection. Returns `false` (not kept).
async fn error(client: &mut Client, rec: Record, status: u16, end: &str) -> bool {
    reply(client, rec, status, Keep::No, end).await
}

/// Sends a short generated response; returns whether the connection stays open.
async fn reply(client: &mut Client, mut rec: Record, status: u16, keep: Keep, end: &str) -> bool {
    let reason = reason(status);
    let body = format!("{status} {reason}\n");
    let mut head = ResponseHead::new(status, reason);
    head.headers.push("Content-Type", "text/plain");
    head.headers.push("Content-Length", body.len().to_string());
    if status == 407 {
        head.headers
            .push("Proxy-Authenticate", "Basic realm=\"splicer\"");
    }
    if keep == Keep::No {
        head.headers.push("Connection", "close");
    }
    let mut bytes = Vec::with_capacity(256);
    head.encode(&mut bytes);
    bytes.extend_from_slice(body.as_bytes());
    rec.status = status;
    rec.bytes_down += bytes.len() as u64;
    if rec.end.is_empty() {
        rec.end = end.to_string();
    }
    rec.emit();
    use tokio::io::AsyncWriteExt;
    let sent = tokio::time::timeout(Duration::from_secs(5), client.stream.write_all(&bytes)).await;
    if keep == Keep::Yes && matches!(sent, Ok(Ok(()))) {
        return true;
    }
    lingering_close(client).await;
    false
}

/// Half-closes, then reads and drops what the client still sends for a short while, so
/// that unread request bytes do not turn our close into a reset that destroys the response
/// before the client has read it (what Apache and nginx call lingering close).
async fn lingering_close(client: &mut Client) {
    let _ = splicer_sys::sock::shutdown_write(client.stream.as_fd());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut drained = 0usize;
    let mut scratch = vec![0u8; 16 * 1024];
    while drained < 1 << 20 {
        match tokio::time::timeout_at(deadline, client.stream.readable()).await {
            Ok(Ok(())) => match client.stream.try_read(&mut scratch) {
                Ok(0) => break,
                Ok(n) => drained += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            },
            _ => break,
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// The response sent when the connection limit is reached.
pub fn overload_response() -> &'static [u8] {
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 24\r\nConnection: close\r\n\r\n503 Service Unavailable\n"
}
