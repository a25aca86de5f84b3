//! Asking upstream: the rewritten head to a pooled or new upstream connection (one retry on
//! a reused connection that died), the request body, and the final response head.

use std::net::SocketAddr;
use std::os::fd::AsFd;

use splicer_wire::forward;
use splicer_wire::http::{Authority, BodyLength, Headers, Limits, RequestHead, ResponseHead};
use tokio::net::TcpStream;

use super::body::{self, Leg, Message};
use super::client::{head_limits, write_all, Client};
use super::reply;
use super::request::Exchange;
use crate::access::Record;
use crate::error::{Error, Kind, Side};
use crate::shared::Shared;
use crate::upstream::{self, Asker, Check, ConnectError, Dial};
use crate::wireio::{read_more, ReadError};

/// Builds the upstream request and asks it. `Err`: the client has had its error answer,
/// and the value says whether its connection stays open.
pub(crate) async fn send(
    shared: &Shared,
    client: &mut Client,
    head: RequestHead,
    path: String,
    ex: &mut Exchange<'_>,
) -> Result<Answer, bool> {
    let out = outgoing(shared, head, path, ex);
    let asked = ask(shared, client, &out, ex, Rules::Apply).await;
    client.keep_request(out.head);
    match asked {
        Ok(answer) => Ok(answer),
        Err(e) => Err(e.reply(client, &mut ex.rec).await),
    }
}

/// The request as it goes upstream to the exchange's destination
/// (`splicer_wire::forward::request`, framed as the exchange decided).
///
/// With `ipsplice` forced, a request whose client connection ends with this exchange asks
/// the origin to close its connection too: an answer that ends both connections is handed
/// to the kernel whole ([`super::answer`], "to the end"), one connection per request on
/// both sides as seed 000's proxy had them. `sockmap` needs no such thing: it moves a body
/// of known length bounded, and the upstream connection goes back to the pool (a connection
/// per request upstream cost it 30% of its rate at 1 MiB, docs/engines.md).
pub(crate) fn outgoing(
    shared: &Shared,
    head: RequestHead,
    path: String,
    ex: &Exchange<'_>,
) -> forward::Request {
    let authority = &ex.destination().authority;
    let asked = (&ex.framing, ex.keep);
    outgoing_to(shared, head, asked, authority, path, ex.via)
}

/// [`outgoing`], from the parts of an exchange (the rings have no [`Exchange`]): the
/// request's framing, and whether the client keeps its connection after it.
pub(crate) fn outgoing_to(
    shared: &Shared,
    head: RequestHead,
    (framing, keep): (&splicer_wire::http::Framing, bool),
    authority: &Authority,
    path: String,
    via: &str,
) -> forward::Request {
    let mut out = forward::request(head, framing, authority, path, via);
    if !keep && shared.relay.kernel_forced_to_the_end_only() {
        out.head.headers.remove("connection");
        out.head.headers.push("Connection", "close");
    }
    out
}

/// What the upstream answered: the final response head and the connection it came on.
pub(crate) struct Answer {
    pub upstream: TcpStream,
    pub upstream_addr: SocketAddr,
    /// Bytes read after the head.
    pub buf: Vec<u8>,
    pub resp: ResponseHead,
    /// Whether the connection may go back to the pool after a clean exchange (not one
    /// taken out of a pipeline, with answers to other requests behind this one).
    pub reusable: bool,
}

/// Why no answer came, before any response byte went to the client.
pub(crate) enum AskError {
    /// The client failed; recorded, nothing to send.
    Client(Error),
    /// Reaching the upstream failed (refused by the rules, DNS, connect).
    Connect(ConnectError),
    /// Send this status.
    Reply(u16, Error),
}

impl AskError {
    /// Answers the client (or only logs, when it failed itself); returns `false`.
    pub(crate) async fn reply(self, client: &mut Client, rec: &mut Record) -> bool {
        match self {
            AskError::Client(e) => {
                rec.fail(&e);
                rec.emit();
                false
            }
            AskError::Connect(e) => {
                reply::connect_error(client, rec, e).await;
                false
            }
            AskError::Reply(status, e) => reply::error(client, rec, status, &e).await,
        }
    }

    /// The upstream's answer failed before its head ended: `504` when it did not come in
    /// time, else `502`.
    pub(crate) fn upstream(e: Error) -> AskError {
        let status = if matches!(e.kind, Kind::Timeout(_)) {
            504
        } else {
            502
        };
        AskError::Reply(status, e)
    }

    /// The upstream failed (not the client): where a stale response may stand in.
    pub(crate) fn upstream_failed(&self) -> bool {
        match self {
            AskError::Client(_) => false,
            AskError::Connect(ConnectError::Denied) => false,
            AskError::Connect(_) => true,
            AskError::Reply(_, e) => e.side == Side::Upstream,
        }
    }
}

/// Whether the rules check the upstream's addresses.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rules {
    /// An authority a client named.
    Apply,
    /// A server the operator configured (an `edge` group's).
    Configured,
}

/// Sends the request (its body too) to a pooled or new upstream connection and reads the
/// final response head. A request on a reused connection that dies before any response
/// byte is retried once on a fresh connection, when it is idempotent and had no body (so
/// nothing was consumed from the client).
pub(crate) async fn ask(
    shared: &Shared,
    client: &mut Client,
    out: &forward::Request,
    ex: &mut Exchange<'_>,
    rules: Rules,
) -> Result<Answer, AskError> {
    ex.waits_on_network();
    // Written into the client connection's spare buffer, which it gets back after: a
    // buffer per request was an allocation per request.
    let mut request_bytes = client.spare.take();
    out.head.encode(&mut request_bytes);
    let asked = ask_with(shared, client, out, ex, rules, &request_bytes).await;
    client.spare.keep(request_bytes);
    asked
}

/// [`ask`], with the request head already written (`request_bytes`).
async fn ask_with(
    shared: &Shared,
    client: &mut Client,
    out: &forward::Request,
    ex: &mut Exchange<'_>,
    rules: Rules,
    request_bytes: &[u8],
) -> Result<Answer, AskError> {
    let (dest, rec) = ex.destination_and_record();
    let limits = head_limits(shared);
    let user = rec.user.clone();
    let asker = (rules == Rules::Apply).then_some(Asker {
        client: client.addr.ip(),
        user: user.as_deref(),
    });
    let client_version = out.head.version;
    let body = out.body;
    // RFC 9110 §9.2.2: only an idempotent request may be sent again unasked, and only one
    // without a body (none was taken from the client).
    let resendable = out.head.method.is_idempotent() && body == BodyLength::None;
    let mut attempt = 0;
    loop {
        attempt += 1;
        // A request that can be sent again may go on a connection the reactor saw quiet;
        // one that cannot is checked with the kernel (`upstream::Check`).
        let check = if resendable {
            Check::Reactor
        } else {
            Check::Kernel
        };
        let (upstream, upstream_addr, reused) =
            get_upstream(shared, &dest.key, &dest.authority, asker, check)
                .await
                .map_err(AskError::Connect)?;
        let retry_safe = resendable && reused && attempt == 1;
        if rules == Rules::Configured {
            note_upstream(rec, &upstream, reused);
        }
        if let Err(end) = write_all(shared, &upstream, request_bytes).await {
            if retry_safe {
                continue;
            }
            return Err(AskError::Reply(
                502,
                Error::from_end(end, Side::Upstream, Side::Upstream),
            ));
        }
        rec.bytes_up += request_bytes.len() as u64;
        if body != BodyLength::None {
            if out.expects_continue && client_version >= 1 {
                write_all(shared, &client.stream, b"HTTP/1.1 100 Continue\r\n\r\n")
                    .await
                    .map_err(|end| {
                        AskError::Client(Error::from_end(end, Side::Client, Side::Client))
                    })?;
            }
            let leg = Leg {
                from: &client.stream,
                buf: &mut client.buf,
                to: &upstream,
                up: true,
                // The client's next request may follow its body.
                nothing_follows: false,
            };
            let msg = Message {
                lead: &mut Vec::new(),
                framing: body,
                dechunk: false,
            };
            if let Err(body::Stopped { error: e, .. }) =
                body::relay(shared, leg, msg, rec, None).await
            {
                return Err(match (e.side, &e.kind) {
                    // A body that cannot be framed gets its 400; no response has started.
                    (Side::Client, Kind::Malformed(_)) => AskError::Reply(400, e),
                    (Side::Client, _) => AskError::Client(e),
                    _ => AskError::Reply(502, e),
                });
            }
        }
        let into = (client.spare_read.take(), client.spare_answer_fields.take());
        match read_response(
            shared,
            Some(client),
            &upstream,
            &limits,
            client_version,
            into,
        )
        .await
        {
            Ok((resp, buf)) => {
                rec.first_byte = Some(rec.start.elapsed());
                return Ok(Answer {
                    upstream,
                    upstream_addr,
                    buf,
                    resp,
                    reusable: true,
                });
            }
            Err(e) if e.retry_safe && retry_safe => continue,
            Err(e) if e.side == Side::Client => return Err(AskError::Client(e)),
            Err(e) => return Err(AskError::upstream(e)),
        }
    }
}

/// The edge's warm-pool check in the access line: whether the connection a request goes on
/// was reused, and its window, where one whose window collapsed while idle shows
/// (docs/edge.md, "Warm upstream connections").
pub(crate) fn note_upstream(rec: &mut Record, upstream: &impl AsFd, reused: bool) {
    // A system call per request, for the access line only: not made when it is not written.
    if !tracing::enabled!(target: "access", tracing::Level::INFO) {
        return;
    }
    let info = splicer_sys::sock::tcp_info(upstream.as_fd());
    rec.upstream_conn = info.ok().map(|i| (reused, i.snd_cwnd));
}

/// A pooled connection the rules still allow (looked at as `check` says), or a new one; with
/// its address and whether it was reused. Without `asker` no rule applies: the authority is
/// a server the operator configured (an `edge` group's), not one a client named.
pub(crate) async fn get_upstream(
    shared: &Shared,
    origin: &str,
    authority: &Authority,
    asker: Option<Asker<'_>>,
    check: Check,
) -> Result<(TcpStream, SocketAddr, bool), ConnectError> {
    if let Some(idle) = shared.upstreams.pool.take(origin, check) {
        let allowed = asker.is_none_or(|asker| {
            let domain = authority
                .host
                .parse::<std::net::IpAddr>()
                .is_err()
                .then_some(authority.host.as_str());
            shared.policy.allows(&crate::policy::Request {
                client: asker.client,
                user: asker.user,
                domain,
                destination: idle.addr.ip(),
                port: authority.port,
            })
        });
        if allowed {
            return Ok((idle.stream, idle.addr, true));
        }
        shared.upstreams.pool.put(origin, idle.stream, idle.addr);
    }
    let dial = Dial::new(&shared.config.limits, Default::default());
    let s = match asker {
        Some(asker) => {
            upstream::connect(&shared.policy, asker, &authority.host, authority.port, dial).await?
        }
        None => {
            let ip = authority
                .host
                .parse()
                .map_err(|_| ConnectError::Resolve(authority.host.clone()))?;
            upstream::connect_addr(SocketAddr::new(ip, authority.port), dial).await?
        }
    };
    let upstream_addr = s.peer_addr().map_err(ConnectError::Other)?;
    Ok((s, upstream_addr, false))
}

/// Reads the final response head, passing interim (1xx) responses on to HTTP/1.1 clients.
/// Reads a response head; interim (1xx) responses go to `client` when there is one (a
/// background revalidation has none: they are dropped). Read into `buf` (empty: a
/// client connection's spare, or a new one), which comes back with the bytes after the
/// head; its fields into `table` (a spare, or a new one).
pub(crate) async fn read_response(
    shared: &Shared,
    client: Option<&Client>,
    upstream: &TcpStream,
    limits: &Limits,
    client_version: u8,
    (mut buf, mut table): (Vec<u8>, Headers),
) -> Result<(ResponseHead, Vec<u8>), Error> {
    let idle = shared.config.limits.idle_timeout;
    loop {
        match ResponseHead::parse_reusing(&buf, limits, &mut table) {
            Ok(Some((head, n))) => {
                buf.drain(..n);
                if head.status == 101 {
                    return Err(Error::malformed(Side::Upstream, "unrequested-upgrade"));
                }
                if (100..200).contains(&head.status) {
                    if let (Some(client), 1..) = (client, client_version) {
                        let mut interim = head.clone();
                        interim.headers.remove_hop_by_hop();
                        let mut bytes = Vec::new();
                        interim.encode(&mut bytes);
                        write_all(shared, &client.stream, &bytes)
                            .await
                            .map_err(|_| Error::client(Kind::Closed("")))?;
                    }
                    table = head.headers;
                    continue;
                }
                return Ok((head, buf));
            }
            Ok(None) => {}
            Err(e) => return Err(Error::unparsable(Side::Upstream, e)),
        }
        let had = buf.len();
        match tokio::time::timeout(idle, read_more(upstream, &mut buf, limits.max_head)).await {
            Err(_) => return Err(Error::upstream(Kind::Timeout("response"))),
            Ok(Ok(())) => {}
            Ok(Err(ReadError::TooLarge)) => return Err(Error::upstream(Kind::TooLarge("header"))),
            Ok(Err(ReadError::Closed | ReadError::Io(_))) if had == 0 => {
                // Nothing of the request was acted upon that the client could see.
                return Err(Error::upstream(Kind::NoResponse).retry_safe());
            }
            Ok(Err(_)) => return Err(Error::upstream(Kind::Closed("head"))),
        }
    }
}

/// Gives a bodiless answer's connection back to the pool when it may be reused.
pub(crate) fn release(shared: &Shared, origin: &str, answer: Answer) {
    if answer.resp.keep_alive() && answer.buf.is_empty() {
        shared
            .upstreams
            .pool
            .put(origin, answer.upstream, answer.upstream_addr);
    }
}
