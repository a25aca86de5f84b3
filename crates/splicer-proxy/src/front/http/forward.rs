//! A forward-proxy request (absolute form or CONNECT): the client authenticated when users
//! are configured, then a tunnel, the cache (when it is on) or the origin.

use std::sync::Arc;

use splicer_wire::http::{self as wire, Authority, BodyLength, RequestHead};

use crate::access::Record;
use crate::error::{Error, Kind, Side};
use crate::exchange::{self, reply, Client, Destination, Exchange, Extra};
use crate::shared::Shared;

/// Handles one request; returns whether the client connection stays open.
pub(super) async fn handle(
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
    if head.method == wire::Method::Connect {
        super::connect::connect(shared, client, head, rec).await;
        return false;
    }
    let (authority, path) = match wire::split_absolute(&head.target) {
        Ok(t) => t,
        Err(e) => return reply::error(client, rec, 400, &Error::malformed(Side::Client, e)).await,
    };
    rec.destination = authority.to_string();
    match &shared.cache {
        Some(cache) => {
            crate::cache::handle(shared, cache, client, head, authority, path, rec).await
        }
        None => forward(shared, client, head, authority, path, rec).await,
    }
}

/// Forwards the request and relays the response, without the cache. Returns whether the
/// client connection stays open.
async fn forward(
    shared: &Shared,
    client: &mut Client,
    head: RequestHead,
    authority: Authority,
    path: String,
    rec: Record,
) -> bool {
    let client_version = head.version;
    let method = head.method.clone();
    let key = authority.to_string();
    let dest = Destination {
        authority: &authority,
        key: &key,
    };
    let (out, answer, rec) = match exchange::send(shared, client, head, dest, path, rec).await {
        Ok(sent) => sent,
        Err(keep) => return keep,
    };
    let exchange = Exchange {
        method: &method,
        client_version,
        request: &out,
        origin: key,
        via: exchange::via(shared),
    };
    exchange::relay_answer(shared, client, answer, exchange, rec, Extra::default()).await
}
