//! A forward-proxy request (absolute form or CONNECT): the client authenticated when users
//! are configured, then a tunnel, the cache (when it is on) or the origin.

use std::sync::Arc;

use splicer_wire::http::{self as wire, BodyLength, Method, RequestHead};

use crate::config::HttpConfig;
use crate::error::{Error, Kind, Side};
use crate::exchange::{self, reply, Client, Destination, Exchange, Extra};
use crate::shared::Shared;

/// Handles one request; returns whether the client connection stays open.
pub(super) async fn handle(
    shared: &Arc<Shared>,
    http: &HttpConfig,
    client: &mut Client,
    mut head: RequestHead,
    ex: &mut Exchange<'_>,
) -> bool {
    // Without a body (or with one we never read) the connection can only stay open when
    // no unread body is left behind.
    let can_keep = ex.framing.body == BodyLength::None && ex.keep;
    if shared.policy.auth_required() {
        match shared
            .policy
            .check_basic(client.addr.ip(), head.headers.get("proxy-authorization"))
            .await
        {
            crate::policy::Auth::Ok(u) => ex.rec.user = Some(u),
            crate::policy::Auth::Missing | crate::policy::Auth::Failed => {
                let keep = if can_keep {
                    reply::Keep::Yes
                } else {
                    reply::Keep::No
                };
                let why = Error::client(Kind::Refused("auth-required"));
                return reply::reply(client, &mut ex.rec, 407, keep, &why).await;
            }
            crate::policy::Auth::Throttled => {
                let why = Error::client(Kind::Refused("auth-throttled"));
                return reply::error(client, &mut ex.rec, 429, &why).await;
            }
        }
    }
    if ex.method == Method::Connect {
        ex.waits_on_network();
        super::connect::connect(shared, http, client, head, &mut ex.rec).await;
        return false;
    }
    let (destination, path) = match aimed_at(client, &mut head.target) {
        Ok(t) => t,
        Err(e) => {
            let why = Error::unparsable(Side::Client, e);
            return reply::error(client, &mut ex.rec, 400, &why).await;
        }
    };
    client.destination = Some(destination.clone());
    ex.go_to(destination);
    match &shared.cache {
        Some(cache) => crate::cache::handle(shared, cache, client, head, path, ex).await,
        None => forward(shared, client, head, path, ex).await,
    }
}

/// Where an absolute-form `target` goes, and its origin-form path: the client's last
/// destination when the target names it as it was named (`Destination::is_named_by`),
/// else the authority parsed (as `wire::split_absolute` would). The path is the target
/// itself, cut in place (taken: `target` is left empty; the rewrite writes the path as
/// the target upstream).
fn aimed_at(
    client: &Client,
    target: &mut String,
) -> Result<(Arc<Destination>, String), wire::Error> {
    let (written, rest) = wire::absolute_form(target)?;
    let destination = match &client.destination {
        Some(last) if last.is_named_by(written) => last.clone(),
        _ => Arc::new(Destination::new(wire::Authority::parse(written, Some(80))?)),
    };
    let authority_end = target.len() - rest.len();
    Ok((
        destination,
        wire::into_origin_form(std::mem::take(target), authority_end),
    ))
}

/// Forwards the request and relays the response, without the cache. Returns whether the
/// client connection stays open.
async fn forward(
    shared: &Shared,
    client: &mut Client,
    head: RequestHead,
    path: String,
    ex: &mut Exchange<'_>,
) -> bool {
    let answer = match exchange::send(shared, client, head, path, ex).await {
        Ok(answer) => answer,
        Err(keep) => return keep,
    };
    exchange::relay_answer(shared, client, answer, ex, Extra::default()).await
}
