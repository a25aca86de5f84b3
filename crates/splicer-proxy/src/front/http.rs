//! The HTTP/1.0 and 1.1 request loop of a client connection, for the `http` front end (a
//! forward proxy) and the `edge` front end (a reverse proxy that shares all but the
//! routing with it): each request head is read within its time and handed to its front
//! end's handling; the loop goes on while the connection may stay open.
//!
//! Heads are parsed and rewritten in user space; bodies are spliced (`crate::exchange`).
//! A body with a Content-Length is spliced with `max` = its remaining length, so the front
//! end regains control when it completes and serves the next request on the kept-alive
//! client connection.
//!
//! # Layout
//! - this file: the request loop.
//! - `forward`: a forward-proxy request: authentication, CONNECT, then the cache or the
//!   origin.
//! - `connect`: CONNECT tunnels.
//!
//! The edge's requests are handled in `crate::front::edge`; the exchange with an origin
//! in `crate::exchange`; the cache's decisions in `crate::cache`.

mod connect;
mod forward;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use splicer_wire::http::{self as wire, Limits, RequestHead};
use tokio::net::TcpStream;

use crate::access::Record;
use crate::config::Front;
use crate::config::{EdgeConfig, HttpConfig};
use crate::error::{Error, Kind, Side};
use crate::exchange::{head_limits, reply, Client, Exchange, SPARE_KEPT};
use crate::ring::Resume;
use crate::shared::Shared;
use crate::upstream::groups::Edge;
use crate::wireio::{read_more, ReadError};

/// Serves one client connection of the forward proxy: requests one after the other until
/// either side closes, from where `resume` says (a ring hands over connections it does
/// not serve, `crate::ring`).
pub async fn serve(shared: &Arc<Shared>, stream: TcpStream, addr: SocketAddr, resume: Resume) {
    serve_as(shared, stream, addr, Front::Http, resume).await;
}

/// Serves one client connection of the `edge` front end, from where `resume` says (a
/// ring hands over connections it does not serve, `crate::ring`).
pub async fn serve_edge(shared: &Arc<Shared>, stream: TcpStream, addr: SocketAddr, resume: Resume) {
    serve_as(shared, stream, addr, Front::Edge, resume).await;
}

/// Whose requests a connection's loop serves, with that front end's configuration.
enum Role<'a> {
    /// The `http` front end: a forward proxy.
    Forward(&'a HttpConfig),
    /// The `edge` front end: its routes and groups.
    Edge(&'a EdgeConfig, &'a Edge),
}

impl<'a> Role<'a> {
    /// The role of a listener of `front`. The server opens a front end's listeners only
    /// when its section is there, so `None` is a listener without one.
    fn of(shared: &'a Shared, front: Front) -> Option<Role<'a>> {
        match front {
            Front::Http => shared.config.http.as_ref().map(Role::Forward),
            Front::Edge => match (&shared.config.edge, &shared.upstreams.edge) {
                (Some(config), Some(routes)) => Some(Role::Edge(config, routes)),
                _ => None,
            },
            Front::Socks => None,
        }
    }
}

async fn serve_as(
    shared: &Arc<Shared>,
    stream: TcpStream,
    addr: SocketAddr,
    front: Front,
    resume: Resume,
) {
    let Some(role) = Role::of(shared, front) else {
        tracing::error!(
            front = front.name(),
            "an HTTP listener without its section: closed"
        );
        return;
    };
    let _ = stream.set_nodelay(true);
    let mut client = Client::new(stream, addr);
    let mut first = true;
    match resume {
        Resume::Head(read) => client.buf = read,
        Resume::Answer(mut asked) => {
            let via = match role {
                Role::Edge(config, _) => &config.via,
                Role::Forward(http) => &http.via,
            };
            client.buf = std::mem::take(&mut asked.rest);
            if !super::edge::relay_asked(shared, via, &mut client, *asked).await {
                return;
            }
            first = false;
        }
    }
    let limits = head_limits(shared);
    let mut shutdown = shared.shutdown.clone();
    // Made once per connection: a wait made per request registered with the stop signal
    // and left it again each time, under a lock every connection shares; and looked at
    // only when the stop woke it (a pending wait polled again takes that lock too).
    let mut stopping = std::pin::pin!(crate::server::OnWake::new(shutdown.wait_for(|stop| *stop)));
    // The wait for a kept-alive client's next request, made once per connection and moved
    // later for each request: a timer made per request was put in the runtime's wheel each
    // time, and when it fell before the earliest wake the runtime had planned, the runtime
    // woke its own thread to plan again, an `eventfd` write for about one request in four
    // or five (perf, the guard's load; docs/benchmarks.md). A deadline only moved later
    // stays in the wheel untouched.
    let mut idle = std::pin::pin!(tokio::time::sleep(shared.config.limits.keepalive_timeout));
    loop {
        let waiting_since = Instant::now();
        // Between requests a stopping proxy just closes; a request being read is finished.
        let between = client.buf.is_empty();
        let read = read_timed(
            &mut client,
            &limits,
            shared,
            first.then_some(waiting_since),
            idle.as_mut(),
        );
        let head = tokio::select! {
            // The request first: the branch order is fixed, so no random number per head.
            biased;
            r = read => r,
            _ = &mut stopping, if between => return,
        };
        let since = client.head_since.take().unwrap_or(waiting_since);
        let new_record = || Record::starting(front, addr, since);
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
                        reply::error(&mut client, &mut new_record(), status, &e).await;
                    }
                }
                return;
            }
        };
        first = false;
        // The proxy's own work on this request (docs/pacer.md), from its whole head: a
        // client that sends nothing, or a head slowly, must not hold spliced traffic.
        let own_work = shared.relay.foreground();
        let mut rec = new_record();
        rec.head_read = Some(since.elapsed());
        if crate::access::written() {
            describe(&mut rec, &head);
        }
        // The body's framing is decided here, once: a request that cannot be framed cannot
        // be read past, so nothing after it can be served either.
        let framing = match head.framing() {
            Ok(f) => f,
            Err(e) => {
                reply::error(
                    &mut client,
                    &mut rec,
                    400,
                    &Error::unparsable(Side::Client, e),
                )
                .await;
                return;
            }
        };
        let keep = match role {
            Role::Edge(config, routes) => {
                let mut ex = Exchange::new(&head, framing, &config.via, rec);
                ex.own_work = Some(own_work);
                super::edge::handle(shared, routes, config, &mut client, head, &mut ex).await
            }
            Role::Forward(http) => {
                let mut ex = Exchange::new(&head, framing, &http.via, rec);
                ex.own_work = Some(own_work);
                forward::handle(shared, http, &mut client, head, &mut ex).await
            }
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

/// A head not read within its time.
struct TimedOut;

/// What reading a request head came to.
type HeadRead = Result<Result<Result<RequestHead, wire::Error>, ReadError>, TimedOut>;

/// Sorts a failed head read (`between`: no byte of a next request had arrived).
fn unreadable(r: HeadRead, between: bool) -> Unread {
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
            Unread::Answer(status, Error::unparsable(Side::Client, e))
        }
    }
}

/// Reads a request head within its time: the first one within `handshake_timeout` of the
/// connection (`first`: since when); a later one may be awaited for `keepalive_timeout`, but
/// once its first byte has come its head must be whole within `handshake_timeout` of it
/// (HAProxy's `timeout http-request`): a head that trickles is not given the idle time of a
/// kept-alive connection. `idle` is the connection's wait for a next request, moved here.
async fn read_timed(
    client: &mut Client,
    limits: &Limits,
    shared: &Shared,
    first: Option<Instant>,
    mut idle: std::pin::Pin<&mut tokio::time::Sleep>,
) -> HeadRead {
    let head_time = shared.config.limits.handshake_timeout;
    if first.is_none() && client.buf.is_empty() {
        idle.as_mut()
            .reset(tokio::time::Instant::now() + shared.config.limits.keepalive_timeout);
        let came = tokio::select! {
            // The read first, as `tokio::time::timeout` polls it: a request that is there
            // is taken even when the wait has just run out.
            biased;
            came = read_more(&client.stream, &mut client.buf, limits.max_head) => came,
            () = idle => return Err(TimedOut),
        };
        if let Err(e) = came {
            return Ok(Err(e));
        }
        client.head_since = Some(Instant::now());
    }
    let since = first.or(client.head_since).unwrap_or_else(Instant::now);
    let deadline = tokio::time::Instant::from_std(since + head_time);
    tokio::time::timeout_at(deadline, read_request(client, limits))
        .await
        .map_err(|_| TimedOut)
}

async fn read_request(
    client: &mut Client,
    limits: &Limits,
) -> Result<Result<RequestHead, wire::Error>, ReadError> {
    loop {
        if !client.buf.is_empty() && client.head_since.is_none() {
            client.head_since = Some(Instant::now());
        }
        // Into the last request's target and table (the connection's spares): taken only
        // when the head is whole, and cleared by the parser first.
        let parsed = RequestHead::parse_reusing(
            &client.buf,
            limits,
            client.spare_target.slot(),
            client.spare_fields.slot(),
        );
        match parsed {
            Ok(Some((head, n))) => {
                client.buf.drain(..n);
                if client.buf.is_empty() && client.buf.capacity() > SPARE_KEPT {
                    // Idle kept-alive connections should not hold a large buffer; a small
                    // one is kept, so the next head is read without an allocation.
                    client.buf = Vec::new();
                }
                return Ok(Ok(head));
            }
            Ok(None) => read_more(&client.stream, &mut client.buf, limits.max_head).await?,
            Err(e) => return Ok(Err(e)),
        }
    }
}

/// The access line's fields from the request's head.
pub(crate) fn describe(rec: &mut Record, head: &RequestHead) {
    use crate::access::{field_value, USER_AGENT_MAX};
    rec.method = head.method.to_string();
    rec.destination = head.target.clone();
    rec.url = Some(head.target.clone());
    let field = |name| {
        head.headers
            .get(name)
            .map(|v| field_value(v, USER_AGENT_MAX))
    };
    rec.user_agent = field("user-agent");
    rec.version = Some(if head.version == 0 {
        "HTTP/1.0"
    } else {
        "HTTP/1.1"
    });
    rec.referer = field("referer");
}
