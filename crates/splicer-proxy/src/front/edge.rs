//! The `edge` front end's requests: a reverse proxy. The route (by `Host` and path prefix)
//! names an upstream group; its servers are tried in the balance's order until one can be
//! reached; the request goes upstream in origin form with the client's `Host` and the
//! forwarding fields, and the answer is relayed as the forward proxy relays it (pooled
//! upstream connections, bounded splices, the same engines, limits and access line), or
//! over HTTP/2 to an `h2c` group.
//!
//! # Layout
//! - this file: the route, the servers in turn, the answer relayed.
//! - `pipelined`: a request on a group's pipelined lines (`crate::upstream::lines`).
//! - `h2_stream`: a request as a stream of an `h2c` server's connection
//!   (`crate::upstream::h2c`).

mod h2_stream;
mod pipelined;

use splicer_wire::forward;
use splicer_wire::http::{self as wire, Authority, Method, RequestHead};

use crate::config::{EdgeConfig, Protocol};
use crate::error::{Error, Kind, Side};
use crate::exchange::{ask, relay_answer, reply, AskError, Client, Exchange, Extra, Rules};
use crate::shared::Shared;
use crate::upstream::groups::{Edge, Group};
use crate::upstream::lines::Settings;
use pipelined::Piped;

/// What a server answered, before it is relayed.
enum Got {
    Http1(Piped),
    /// From an `h2c` group.
    H2(h2_stream::Answer),
}

/// One request to the edge. Returns whether the client connection stays open.
pub(crate) async fn handle(
    shared: &Shared,
    edge: &Edge,
    config: &EdgeConfig,
    client: &mut Client,
    mut head: RequestHead,
    ex: &mut Exchange<'_>,
) -> bool {
    // The host is written into the connection's spare string, given back after (a string
    // per request was an allocation).
    let mut host = client.spare_host.take();
    let keep = match aim(edge, &mut head, &mut host, &mut ex.rec) {
        Ok((group, path)) => to_group(shared, group, config, client, head, ex, (&host, path)).await,
        Err((status, why)) => reply::error(client, &mut ex.rec, status, &why).await,
    };
    client.spare_host.keep(host);
    keep
}

/// Relays the answer to a request a ring asked (`crate::ring`, its body left to the
/// runtimes' engines); returns whether the client connection stays open.
pub(crate) async fn relay_asked(
    shared: &Shared,
    via: &str,
    client: &mut Client,
    asked: crate::ring::Asked,
) -> bool {
    let crate::ring::Asked {
        upstream,
        server,
        name,
        resp,
        body,
        method,
        version,
        keep,
        rec,
        rest: _,
    } = asked;
    let upstream = match tokio::net::TcpStream::from_std(upstream) {
        Ok(s) => s,
        Err(e) => {
            let mut rec = rec;
            let why = Error::new(Side::Internal, Kind::Cut("handover")).because(e);
            return reply::error(client, &mut rec, 502, &why).await;
        }
    };
    let framing = wire::Framing {
        body: wire::BodyLength::None,
        codings: None,
        length: None,
    };
    let mut ex = Exchange {
        method,
        version,
        framing,
        keep,
        destination: Some(name),
        via,
        rec,
        own_work: None,
    };
    let answer = crate::exchange::Answer {
        upstream,
        upstream_addr: server,
        buf: body,
        resp,
        reusable: true,
    };
    relay_answer(shared, client, answer, &mut ex, Extra::default()).await
}

/// Where a request to the edge goes: its group, and the path as it goes upstream (taken
/// from `head`), its host written into `host` (its `Host`, or its absolute-form target's
/// authority); or the status and reason of its refusal (a no-route's host in `rec`).
/// Shared by the runtimes' path and the rings' (`crate::ring`).
pub(crate) fn aim<'e>(
    edge: &'e Edge,
    head: &mut RequestHead,
    host: &mut String,
    rec: &mut crate::access::Record,
) -> Result<(&'e Group, String), (u16, Error)> {
    if head.method == Method::Connect {
        return Err((405, Error::client(Kind::Refused("connect-on-edge"))));
    }
    // RFC 9112 §3.2: an HTTP/1.1 request with no Host, or with more than one, is refused.
    let host_fields = head.headers.get_all("host").count();
    if head.version >= 1 && host_fields != 1 {
        return Err((
            400,
            Error::malformed(Side::Client, "missing-or-repeated-host"),
        ));
    }
    // Origin form; or absolute form, which a server must accept too (RFC 9112 §3.2.2), its
    // authority standing for the Host field.
    let path = if head.target.starts_with('/') {
        let value = head.headers.get("host").unwrap_or_default();
        host.push_str(String::from_utf8_lossy(value).trim());
        // The target is the path as it goes upstream: taken, not copied (the rewrite
        // writes the path it is given as the target).
        std::mem::take(&mut head.target)
    } else {
        match wire::split_absolute(&head.target) {
            Ok((authority, path)) => {
                host.push_str(&forward::host_header(&authority));
                path
            }
            Err(e) => return Err((400, Error::unparsable(Side::Client, e))),
        }
    };
    // RFC 9112 §3.2: a Host that is not an authority is refused too.
    if !host.is_empty() && Authority::check(host, Some(80)).is_err() {
        return Err((400, Error::malformed(Side::Client, "bad-host")));
    }
    match edge.route(host, &path) {
        Some(group) => Ok((group, path)),
        None => {
            rec.destination = host.to_string();
            Err((404, Error::client(Kind::Refused("no-route"))))
        }
    }
}

/// The request to `host` at `path`, asked of `group`'s servers in turn.
async fn to_group(
    shared: &Shared,
    group: &Group,
    config: &EdgeConfig,
    client: &mut Client,
    head: RequestHead,
    ex: &mut Exchange<'_>,
    (host, path): (&str, String),
) -> bool {
    let forwarded_for = config.forwarded.then_some(client.addr.ip());
    let out = forward::reverse_request(head, &ex.framing, host, path, ex.via, forwarded_for);
    // Pipelined when the group allows it and the request may share a connection.
    let lines = (group.pipeline > 1 && pipelined::pipelinable(&out)).then(|| Settings {
        depth: group.pipeline,
        cutoff: group.cutoff,
        timeout: shared.config.limits.idle_timeout,
        limits: crate::exchange::head_limits(shared),
    });
    let mut unreachable = None;
    ex.waits_on_network();
    for (server, name) in group.order_named() {
        ex.go_to(name.clone());
        let asked = match (group.protocol, lines) {
            (Protocol::H2c, _) => {
                h2_stream::ask(shared, client, &out, (server, &name.key), &mut ex.rec)
                    .await
                    .map(Got::H2)
            }
            (Protocol::Http1, Some(settings)) => pipelined::ask(shared, &out, ex, settings)
                .await
                .map(Got::Http1),
            (Protocol::Http1, None) => ask(shared, client, &out, ex, Rules::Configured)
                .await
                .map(|a| Got::Http1(Piped::Whole(a))),
        };
        match asked {
            Ok(Got::H2(response)) => {
                return h2_stream::relay(shared, client, response, &out, ex.via, &mut ex.rec).await;
            }
            Ok(Got::Http1(Piped::Whole(answer))) => {
                client.keep_request(out.head);
                return relay_answer(shared, client, answer, ex, Extra::default()).await;
            }
            Ok(Got::Http1(Piped::Buffered {
                resp,
                framing,
                body,
            })) => {
                let answer = (resp, framing, body);
                return pipelined::relay_buffered(shared, client, answer, ex).await;
            }
            // Not reached (nothing was sent): the next server of the group.
            Err(AskError::Connect(e)) => {
                tracing::debug!(group = %group.name, %server, "edge server unreachable: {e}");
                unreachable = Some(e);
            }
            Err(e) => return e.reply(client, &mut ex.rec).await,
        }
    }
    // No server was tried when the group's only names have never resolved.
    let e = unreachable.unwrap_or_else(|| {
        let names: Vec<String> = group.configured.iter().map(ToString::to_string).collect();
        crate::upstream::ConnectError::Resolve(names.join(" "))
    });
    AskError::Connect(e).reply(client, &mut ex.rec).await
}
