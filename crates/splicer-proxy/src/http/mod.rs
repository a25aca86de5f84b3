//! The `http` front end: an HTTP/1.0 and 1.1 forward proxy; and the requests of the `edge`
//! front end, a reverse proxy that shares all but the routing with it.
//!
//! Heads are parsed and rewritten in user space; bodies are spliced. A body with a
//! Content-Length is spliced with `max` = its remaining length, so the front end regains
//! control when it completes and serves the next request on the kept-alive client
//! connection. Chunked bodies have their framing read strictly and written anew while the
//! chunk data is spliced. Close-delimited bodies are spliced to EOF. CONNECT becomes a tunnel.
//!
//! # Layout
//! - this file: the request loop of one client connection, and dispatch.
//! - `connect`: CONNECT tunnels.
//! - `forward`: absolute-form requests: upstream (pooled or new) with one retry, the
//!   response head.
//! - `body`: relaying one message body, chunked framing written anew.
//! - `reply`: responses Splicer writes itself (errors, 407), lingering close.
//! - `cached`: the cache's decisions in the request path (lookup, revalidation, fill,
//!   invalidation, PURGE); `hit`: answers from the cache; `fill`: the tap into a fill.
//! - `edge`: an `edge` request: its route, the group's servers in turn, the reverse
//!   rewrite; `pipelined`: on a group's pipelined connections; `h2up`: to an `h2c` group,
//!   over HTTP/2.
//!
//! The head rewrite itself is pure and lives in `splicer_wire::forward`.

mod body;
mod cached;
mod connect;
mod edge;
mod fill;
mod forward;
mod h2up;
mod hit;
mod pipelined;
mod refresh;
mod reply;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use splicer_wire::http::{self as wire, BodyLength, Limits, RequestHead};
use tokio::net::TcpStream;

use crate::access::Record;
use crate::error::{Error, Kind, Side};
use crate::front::Front;
use crate::shared::Shared;
use crate::wireio::{read_more, ReadError};

pub use reply::overload_response;

/// A client connection and the bytes read from it but not yet used.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
    addr: SocketAddr,
    /// When the first byte of the request being read arrived (the start of its access
    /// line's duration).
    head_since: Option<Instant>,
}

/// The head limits of the configuration (also applied to trailer sections).
fn head_limits(shared: &Shared) -> Limits {
    Limits {
        max_head: shared.config.limits.max_header_size,
        max_headers: shared.config.limits.max_headers,
    }
}

/// Serves one client connection of the forward proxy: requests one after the other until
/// either side closes.
pub async fn serve(shared: &Arc<Shared>, stream: TcpStream, addr: SocketAddr) {
    serve_as(shared, stream, addr, Front::Http).await;
}

/// Serves one client connection of the `edge` front end.
pub async fn serve_edge(shared: &Arc<Shared>, stream: TcpStream, addr: SocketAddr) {
    serve_as(shared, stream, addr, Front::Edge).await;
}

async fn serve_as(shared: &Arc<Shared>, stream: TcpStream, addr: SocketAddr, front: Front) {
    let _ = stream.set_nodelay(true);
    let mut client = Client {
        stream,
        buf: Vec::new(),
        addr,
        head_since: None,
    };
    let limits = head_limits(shared);
    let mut shutdown = shared.shutdown.clone();
    let mut first = true;
    loop {
        let waiting_since = Instant::now();
        // Between requests a stopping proxy just closes; a request being read is finished.
        let between = client.buf.is_empty();
        let read = read_timed(&mut client, &limits, shared, first.then_some(waiting_since));
        let head = tokio::select! {
            r = read => r,
            _ = shutdown.wait_for(|stop| *stop), if between => return,
        };
        let since = client.head_since.take().unwrap_or(waiting_since);
        let new_record = || Record::starting(front.name(), addr, since);
        let head = match head {
            Ok(Ok(Ok(head))) => head,
            unread => {
                // A request that cannot be read: nothing to say between requests, an access
                // line for one cut short, an error response otherwise.
                match unreadable(unread, client.buf.is_empty()) {
                    Unread::Quiet => {}
                    Unread::Logged(e) => {
                        let mut rec = new_record();
                        rec.fail(&e);
                        rec.emit();
                    }
                    Unread::Answer(status, e) => {
                        reply::error(&mut client, new_record(), status, &e).await;
                    }
                }
                return;
            }
        };
        first = false;
        let mut rec = new_record();
        rec.method = head.method.clone();
        rec.destination = head.target.clone();
        let keep = match (front, &shared.edge) {
            (Front::Edge, Some(e)) => edge::handle(shared, e, &mut client, head, rec).await,
            _ => handle(shared, &mut client, head, rec).await,
        };
        if !keep || *shared.shutdown.borrow() {
            return;
        }
    }
}

/// What to do about a request head that could not be read.
enum Unread {
    /// The client closed or went quiet between requests, or the socket failed.
    Quiet,
    /// Cut short mid-head: an access line, no response.
    Logged(Error),
    /// A response with this status.
    Answer(u16, Error),
}

/// Sorts a failed head read (`between`: no byte of a next request had arrived).
fn unreadable(
    r: Result<Result<Result<RequestHead, wire::Error>, ReadError>, tokio::time::error::Elapsed>,
    between: bool,
) -> Unread {
    match r {
        // A head that was read is not a failure (the caller never passes one).
        Ok(Ok(Ok(_))) => Unread::Quiet,
        Err(_) | Ok(Err(ReadError::Closed)) if between => Unread::Quiet,
        Err(_) => Unread::Answer(408, Error::client(Kind::Timeout("header"))),
        Ok(Err(ReadError::Closed)) => Unread::Logged(Error::client(Kind::Closed("head"))),
        Ok(Err(ReadError::Io(_))) => Unread::Quiet,
        Ok(Err(ReadError::TooLarge)) => {
            Unread::Answer(431, Error::client(Kind::TooLarge("header")))
        }
        Ok(Ok(Err(e))) => {
            let too_large = matches!(e, wire::Error::TooLarge(_) | wire::Error::TooManyHeaders(_));
            let status = if too_large { 431 } else { 400 };
            Unread::Answer(status, Error::malformed(Side::Client, e))
        }
    }
}

/// Reads a request head within its time: the first one within `handshake_timeout` of the
/// connection (`first`: since when); a later one may be awaited for `keepalive_timeout`, but
/// once its first byte has come its head must be whole within `handshake_timeout` of it
/// (HAProxy's `timeout http-request`): a head that trickles is not given the idle time of a
/// kept-alive connection.
async fn read_timed(
    client: &mut Client,
    limits: &Limits,
    shared: &Shared,
    first: Option<Instant>,
) -> Result<Result<Result<RequestHead, wire::Error>, ReadError>, tokio::time::error::Elapsed> {
    let head_time = shared.config.limits.handshake_timeout;
    if first.is_none() && client.buf.is_empty() {
        let idle = shared.config.limits.keepalive_timeout;
        let came = tokio::time::timeout(
            idle,
            read_more(&client.stream, &mut client.buf, limits.max_head),
        );
        if let Err(e) = came.await? {
            return Ok(Err(e));
        }
        client.head_since = Some(Instant::now());
    }
    let since = first.or(client.head_since).unwrap_or_else(Instant::now);
    let deadline = tokio::time::Instant::from_std(since + head_time);
    tokio::time::timeout_at(deadline, read_request(client, limits)).await
}

async fn read_request(
    client: &mut Client,
    limits: &Limits,
) -> Result<Result<RequestHead, wire::Error>, ReadError> {
    loop {
        if !client.buf.is_empty() && client.head_since.is_none() {
            client.head_since = Some(Instant::now());
        }
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
async fn handle(
    shared: &Arc<Shared>,
    client: &mut Client,
    head: RequestHead,
    mut rec: Record,
) -> bool {
    let body = match head.body() {
        Ok(b) => b,
        Err(e) => return reply::error(client, rec, 400, &Error::malformed(Side::Client, e)).await,
    };
    // Without a body (or with one we never read) the connection can only stay open when
    // no unread body is left behind.
    let can_keep = body == BodyLength::None && head.keep_alive();
    if shared.policy.auth_required() {
        match shared
            .policy
            .check_basic(client.addr.ip(), head.headers.get("proxy-authorization"))
        {
            crate::policy::Auth::Ok(u) => rec.user = Some(u),
            crate::policy::Auth::Missing | crate::policy::Auth::Failed => {
                let keep = if can_keep {
                    reply::Keep::Yes
                } else {
                    reply::Keep::No
                };
                return reply::reply(
                    client,
                    rec,
                    407,
                    keep,
                    &Error::client(Kind::Refused("auth-required")),
                )
                .await;
            }
            crate::policy::Auth::Throttled => {
                return reply::error(
                    client,
                    rec,
                    429,
                    &Error::client(Kind::Refused("auth-throttled")),
                )
                .await;
            }
        }
    }
    if head.method == "CONNECT" {
        connect::connect(shared, client, head, rec).await;
        return false;
    }
    let (authority, path) = match wire::split_absolute(&head.target) {
        Ok(t) => t,
        Err(e) => return reply::error(client, rec, 400, &Error::malformed(Side::Client, e)).await,
    };
    rec.destination = authority.to_string();
    match &shared.cache {
        Some(cache) => cached::handle(shared, cache, client, head, authority, path, rec).await,
        None => forward::forward(shared, client, head, authority, path, rec).await,
    }
}

/// The name this proxy gives itself in `Via` (and `Cache-Status`).
fn via(shared: &Shared) -> &str {
    &shared.config.http.as_ref().expect("http front end").via
}

/// Writes bytes under the idle timeout.
async fn write_all(
    shared: &Shared,
    to: &TcpStream,
    bytes: &[u8],
) -> Result<(), splicer_relay::End> {
    shared
        .relay
        .send(to, bytes, Some(shared.config.limits.idle_timeout))
        .await
}
