//! An absolute-form request: the rewritten head to a pooled or new upstream connection (one
//! retry on a reused connection that died), the request body, the response head, the
//! response body, and the connection back to the pool when the exchange was clean.

use std::net::SocketAddr;
use std::os::fd::AsFd;

use splicer_wire::forward;
use splicer_wire::http::{Authority, BodyLength, Limits, RequestHead, ResponseHead};
use tokio::net::TcpStream;

use super::body::{self, Leg, Message};
use super::{head_limits, reply, write_all, Client};
use crate::access::{Record, Side};
use crate::error::{Error, Kind};
use crate::shared::Shared;
use crate::upstream::{self, Asker, ConnectError};
use crate::wireio::{read_more, ReadError};

/// Forwards the request and relays the response. Returns whether the client connection
/// stays open.
pub(super) async fn forward(
    shared: &Shared,
    client: &mut Client,
    head: RequestHead,
    authority: Authority,
    path: String,
    mut rec: Record,
) -> bool {
    let http = shared
        .config
        .http
        .as_ref()
        .expect("http front end configured");
    let limits = head_limits(shared);
    let origin = authority.to_string();
    let user = rec.user.clone();
    let asker = Asker {
        client: client.addr.ip(),
        user: user.as_deref(),
    };
    let method = head.method.clone();
    let client_version = head.version;
    let out = match forward::request(head, &authority, path, &http.via) {
        Ok(out) => out,
        Err(e) => return reply::error(client, rec, 400, &Error::malformed(Side::Client, e)).await,
    };
    let body = out.body;
    let mut request_bytes = Vec::with_capacity(512);
    out.head.encode(&mut request_bytes);

    // A request on a reused connection that dies before any response byte is retried once
    // on a fresh connection, when it had no body (so nothing was consumed from the client).
    let mut attempt = 0;
    let (upstream, upstream_addr, mut up_buf, resp) = loop {
        attempt += 1;
        let (upstream, upstream_addr, reused) =
            match get_upstream(shared, &origin, &authority, asker).await {
                Ok(u) => u,
                Err(e) => {
                    reply::connect_error(client, rec, e).await;
                    return false;
                }
            };
        let retry_safe = reused && body == BodyLength::None && attempt == 1;
        if let Err(end) = write_all(shared, &upstream, &request_bytes).await {
            if retry_safe {
                continue;
            }
            return reply::error(
                client,
                rec,
                502,
                &Error::from_end(end, Side::Upstream, Side::Upstream),
            )
            .await;
        }
        rec.bytes_up += request_bytes.len() as u64;
        if body != BodyLength::None {
            if out.expects_continue && client_version >= 1 {
                if let Err(end) =
                    write_all(shared, &client.stream, b"HTTP/1.1 100 Continue\r\n\r\n").await
                {
                    rec.fail(&Error::from_end(end, Side::Client, Side::Client));
                    rec.emit();
                    return false;
                }
            }
            let leg = Leg {
                from: &client.stream,
                buf: &mut client.buf,
                to: &upstream,
                up: true,
            };
            let msg = Message {
                lead: Vec::new(),
                framing: body,
            };
            if let Err(e) = body::relay(shared, leg, msg, &mut rec).await {
                return match (e.side, &e.kind) {
                    // A body that cannot be framed gets its 400; no response has started.
                    (Side::Client, Kind::Malformed(_)) => reply::error(client, rec, 400, &e).await,
                    (Side::Client, _) => {
                        rec.fail(&e);
                        rec.emit();
                        false
                    }
                    _ => reply::error(client, rec, 502, &e).await,
                };
            }
        }
        match read_response(shared, client, &upstream, &limits, client_version).await {
            Ok((resp, buf)) => break (upstream, upstream_addr, buf, resp),
            Err(e) if e.retry_safe && retry_safe => continue,
            Err(e) if e.side == Side::Client => {
                rec.fail(&e);
                rec.emit();
                return false;
            }
            Err(e) => {
                let status = if e.kind == Kind::Timeout("response") {
                    504
                } else {
                    502
                };
                return reply::error(client, rec, status, &e).await;
            }
        }
    };
    rec.status = resp.status;
    let framing = match resp.body(&method) {
        Ok(f) => f,
        Err(e) => {
            return reply::error(client, rec, 502, &Error::malformed(Side::Upstream, e)).await
        }
    };
    let keep = out.client_keep
        && body != BodyLength::Close
        && framing != BodyLength::Close
        && !*shared.shutdown.borrow();
    let upstream_keep = resp.keep_alive();
    let back = match forward::response(resp, framing, keep, client_version, &http.via) {
        Ok(b) => b,
        Err(e) => {
            return reply::error(client, rec, 502, &Error::malformed(Side::Upstream, e)).await
        }
    };
    // The head goes out with the first body bytes at hand in one write: one system call and
    // one segment fewer per response.
    let mut head_bytes = Vec::with_capacity(512);
    back.encode(&mut head_bytes);
    let leg = Leg {
        from: &upstream,
        buf: &mut up_buf,
        to: &client.stream,
        up: false,
    };
    let msg = Message {
        lead: head_bytes,
        framing,
    };
    match body::relay(shared, leg, msg, &mut rec).await {
        Ok(()) => {
            if !rec.has_end() {
                rec.finish("ok");
            }
            // Reusable only after a complete, exactly framed exchange with nothing extra.
            if upstream_keep && framing != BodyLength::Close && up_buf.is_empty() {
                shared.pool.put(origin, upstream, upstream_addr);
            }
            rec.emit();
            keep
        }
        Err(e) => {
            // The head is already out: the only way to signal failure is a reset.
            let _ = splicer_sys::sock::set_linger_zero(client.stream.as_fd());
            rec.fail(&e);
            rec.emit();
            false
        }
    }
}

/// A pooled connection the rules still allow, or a new one; with its address and
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
            destination: idle.addr.ip(),
            port: authority.port,
        });
        if allowed {
            return Ok((idle.stream, idle.addr, true));
        }
        shared.pool.put(origin.to_string(), idle.stream, idle.addr);
    }
    let s = upstream::connect(
        &shared.policy,
        asker,
        &authority.host,
        authority.port,
        super::dial(shared, splicer_relay::UpstreamSocket::default()),
    )
    .await?;
    let upstream_addr = s.peer_addr().map_err(ConnectError::Other)?;
    Ok((s, upstream_addr, false))
}

/// Reads the final response head, passing interim (1xx) responses on to HTTP/1.1 clients.
async fn read_response(
    shared: &Shared,
    client: &Client,
    upstream: &TcpStream,
    limits: &Limits,
    client_version: u8,
) -> Result<(ResponseHead, Vec<u8>), Error> {
    let mut buf = Vec::new();
    let idle = shared.config.limits.idle_timeout;
    loop {
        match ResponseHead::parse(&buf, limits) {
            Ok(Some((head, n))) => {
                buf.drain(..n);
                if head.status == 101 {
                    return Err(Error::malformed(Side::Upstream, "unrequested-upgrade"));
                }
                if (100..200).contains(&head.status) {
                    if client_version >= 1 {
                        let mut interim = head.clone();
                        interim.headers.remove_hop_by_hop();
                        let mut bytes = Vec::new();
                        interim.encode(&mut bytes);
                        write_all(shared, &client.stream, &bytes)
                            .await
                            .map_err(|_| Error::client(Kind::Closed("")))?;
                    }
                    continue;
                }
                return Ok((head, buf));
            }
            Ok(None) => {}
            Err(e) => return Err(Error::malformed(Side::Upstream, e)),
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
