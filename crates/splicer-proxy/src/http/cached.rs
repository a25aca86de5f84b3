//! The cache in the request path, seed 000's two decision points: from the request alone
//! (rules: bypass or look up), then from the response head (store it through a tap while
//! it is spliced, or only splice it). Hits are served from memory; stale objects are
//! revalidated (a `304` refreshes the stored head and the held body is served); unsafe
//! methods invalidate what they touch (RFC 9111 §4.4); `PURGE` from configured clients.

use std::time::SystemTime;

use splicer_cache::{key, Ask, Cache, CacheResult, Found, Head, Joined, Lookup, Object, Policy};
use splicer_wire::forward;
use splicer_wire::http::{self as wire, Authority, BodyLength, Headers, RequestHead};

use super::forward::{ask, relay_answer, Answer, Exchange, Extra};
use super::hit::{serve_fill, serve_object, FromFill, Send};
use super::{reply, Client};
use crate::access::{Record, Side};
use crate::error::{Error, Kind};
use crate::shared::Shared;

/// One request with the cache on. Returns whether the client connection stays open.
pub(super) async fn handle(
    shared: &Shared,
    cache: &Cache,
    client: &mut Client,
    head: RequestHead,
    authority: Authority,
    path: String,
    mut rec: Record,
) -> bool {
    let method = head.method.to_ascii_uppercase();
    let primary = key::primary(&authority, &path);
    if method == "PURGE" {
        return purge(shared, cache, client, &head, &primary, rec).await;
    }
    let target = splicer_cache::Target {
        method: &method,
        host: &authority.host,
        path: &path,
        headers: &head.headers,
    };
    if cache.decide(target) == splicer_cache::Action::Bypass {
        return through(
            shared,
            client,
            head,
            &authority,
            path,
            rec,
            CacheResult::Bypass,
        )
        .await;
    }
    // A GET or HEAD with a body is left alone: its meaning is not defined (RFC 9110 §9.3.1).
    if !(method == "GET" || method == "HEAD") || head.body() != Ok(BodyLength::None) {
        return through(
            shared,
            client,
            head,
            &authority,
            path,
            rec,
            CacheResult::Method,
        )
        .await;
    }
    let request = head.headers.clone();
    let host = authority.to_string();
    let ask_ = Ask {
        method: &method,
        headers: &request,
        host: &host,
    };
    let send = |result, origin_status| Send {
        method: &method,
        request: &request,
        client_version: head.version,
        keep: head.keep_alive() && !*shared.shutdown.borrow(),
        result,
        origin_status,
    };
    let only_if_cached = has_directive(&request, "only-if-cached");
    let now = SystemTime::now();
    let lookup = cache.lookup(&primary, ask_, now);
    let result = match lookup {
        Lookup::Fresh(found) => {
            cache
                .counters()
                .hits
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return serve_object(
                shared,
                client,
                &found.object,
                send(CacheResult::Hit, None),
                rec,
            )
            .await;
        }
        _ if only_if_cached => {
            rec.cache = Some(CacheResult::OnlyIfCached.name());
            return reply::error(
                client,
                rec,
                504,
                &Error::client(Kind::Refused("only-if-cached")),
            )
            .await;
        }
        Lookup::Stale(found) => {
            let asked_for = has_directive(&request, "no-cache")
                || has_directive(&request, "max-age")
                || request.get("pragma").is_some();
            let why = if asked_for {
                CacheResult::Request
            } else {
                CacheResult::RefreshModified
            };
            return revalidate(
                shared, cache, client, head, &authority, path, found, why, rec,
            )
            .await;
        }
        Lookup::Miss => CacheResult::Miss,
    };
    cache
        .counters()
        .misses
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let share = method == "GET"
        && [
            "range",
            "if-none-match",
            "if-modified-since",
            "if-range",
            "if-match",
            "if-unmodified-since",
        ]
        .iter()
        .all(|f| request.get(f).is_none());
    let writer = match cache.fill(&primary, &request, share) {
        Joined::Writer(w) => w,
        Joined::Reader(reader) => {
            match serve_fill(
                shared,
                client,
                reader,
                ask_,
                send(CacheResult::Collapsed, None),
                rec,
            )
            .await
            {
                FromFill::Answered(keep) => return keep,
                FromFill::Upstream(r) => {
                    rec = *r;
                    match cache.fill(&primary, &request, false) {
                        Joined::Writer(w) => w,
                        Joined::Reader(_) => unreachable!("an unshared fill is never joined"),
                    }
                }
            }
        }
    };
    let via = &shared.config.http.as_ref().expect("http front end").via;
    let client_version = head.version;
    let out = match forward::request(head, &authority, path, via) {
        Ok(out) => out,
        Err(e) => return reply::error(client, rec, 400, &Error::malformed(Side::Client, e)).await,
    };
    let answer = match ask(shared, client, &out, &authority, &mut rec).await {
        Ok(a) => a,
        Err(e) => return e.reply(client, rec).await,
    };
    let mut writer = writer;
    let fill = match storable(cache, &answer, ask_, now) {
        Some(h) => {
            writer.start(h);
            Some(writer)
        }
        None => {
            writer.abandon();
            None
        }
    };
    let exchange = Exchange {
        method: &method,
        client_version,
        request: &out,
        origin: host.clone(),
    };
    relay_as(shared, client, answer, exchange, rec, result, fill).await
}

/// Relays an answer with the cache's result in the access line and `Cache-Status`, its
/// body tapped into `fill` when there is one.
async fn relay_as(
    shared: &Shared,
    client: &mut Client,
    answer: Answer,
    exchange: Exchange<'_>,
    mut rec: Record,
    result: CacheResult,
    fill: Option<splicer_cache::Writer>,
) -> bool {
    let via = &shared.config.http.as_ref().expect("http front end").via;
    rec.cache = Some(result.name());
    let member = result.member(via, fill.is_some(), None, Some(answer.resp.status));
    let extra = Extra {
        cache_status: Some(member),
        fill,
    };
    relay_answer(shared, client, answer, exchange, rec, extra).await
}

/// The head to fill with when the response may be stored: a `GET` answered with a body of
/// known framing that fits, no `Set-Cookie` (nginx's rule: a cookie is one client's), and
/// RFC 9111's conditions; something stale at once is kept only when it can be revalidated.
fn storable(cache: &Cache, answer: &Answer, ask: Ask<'_>, now: SystemTime) -> Option<Head> {
    let resp = &answer.resp;
    if ask.method != "GET" || resp.headers.get("set-cookie").is_some() {
        return None;
    }
    let length = match resp.body("GET").ok()? {
        BodyLength::Length(n) => Some(n),
        BodyLength::Chunked => None,
        // A body that ends with the connection cannot be told from a cut one.
        BodyLength::Close | BodyLength::None => return None,
    };
    if length.is_some_and(|n| n > cache.settings().max_object) {
        return None;
    }
    let policy = Policy::new(
        ask,
        resp.status,
        &resp.headers,
        now,
        cache.settings().heuristic,
    );
    let validator =
        resp.headers.get("etag").is_some() || resp.headers.get("last-modified").is_some();
    if !policy.storable() || (policy.time_to_live(now).is_zero() && !validator) {
        return None;
    }
    Some(Head {
        status: resp.status,
        reason: resp.reason.clone(),
        headers: Object::stored_fields(resp.headers.clone()),
        policy,
        length,
    })
}

/// A stale object: ask the origin with its validators. A `304` refreshes it and it is
/// served; an error lets it stand in when `stale-if-error` allows; anything else is a new
/// response, stored as a miss's would be.
#[allow(clippy::too_many_arguments)]
async fn revalidate(
    shared: &Shared,
    cache: &Cache,
    client: &mut Client,
    head: RequestHead,
    authority: &Authority,
    path: String,
    found: Found,
    why: CacheResult,
    mut rec: Record,
) -> bool {
    let via = &shared.config.http.as_ref().expect("http front end").via;
    let method = head.method.to_ascii_uppercase();
    let request = head.headers.clone();
    let host = authority.to_string();
    let ask_ = Ask {
        method: &method,
        headers: &request,
        host: &host,
    };
    let client_version = head.version;
    let keep = head.keep_alive() && !*shared.shutdown.borrow();
    let send = |result, origin_status| Send {
        method: &method,
        request: &request,
        client_version,
        keep,
        result,
        origin_status,
    };
    let mut out = match forward::request(head, authority, path, via) {
        Ok(out) => out,
        Err(e) => return reply::error(client, rec, 400, &Error::malformed(Side::Client, e)).await,
    };
    // The cache's own validators replace the client's: the 304 is then about the stored
    // response, and the client's conditions are answered from it.
    for f in ["if-none-match", "if-modified-since", "if-range"] {
        out.head.headers.remove(f);
    }
    for (name, value) in splicer_cache::policy::validators(&found.object.headers) {
        out.head.headers.push(name, value);
    }
    let now = SystemTime::now();
    let answer = match ask(shared, client, &out, authority, &mut rec).await {
        Ok(a) => a,
        Err(e) if e.upstream_failed() && found.object.policy.may_serve_on_error(&request, now) => {
            return serve_object(
                shared,
                client,
                &found.object,
                send(CacheResult::StaleIfError, None),
                rec,
            )
            .await;
        }
        Err(e) => return e.reply(client, rec).await,
    };
    let status = answer.resp.status;
    if status == 304 {
        if let Some(object) = cache.refresh(&found, ask_, &answer.resp.headers, now) {
            release(shared, &host, answer);
            return serve_object(
                shared,
                client,
                &object,
                send(CacheResult::Refresh, Some(304)),
                rec,
            )
            .await;
        }
        // A 304 about something else: what is stored is no longer the origin's.
        cache.invalidate(&found.key);
    }
    if status >= 500 && found.object.policy.may_serve_on_error(&request, now) {
        return serve_object(
            shared,
            client,
            &found.object,
            send(CacheResult::StaleIfError, Some(status)),
            rec,
        )
        .await;
    }
    let fill = match storable(cache, &answer, ask_, now) {
        Some(h) => match cache.fill(&found.key, &request, false) {
            Joined::Writer(mut w) => {
                w.start(h);
                Some(w)
            }
            Joined::Reader(_) => None,
        },
        None => None,
    };
    let exchange = Exchange {
        method: &method,
        client_version,
        request: &out,
        origin: host.clone(),
    };
    relay_as(shared, client, answer, exchange, rec, why, fill).await
}

/// Gives a bodiless answer's connection back to the pool when it may be reused.
fn release(shared: &Shared, origin: &str, answer: Answer) {
    if answer.resp.keep_alive() && answer.buf.is_empty() {
        shared
            .pool
            .put(origin.to_string(), answer.upstream, answer.upstream_addr);
    }
}

/// A request the cache does not serve (a rule's bypass, a method other than GET and HEAD):
/// forwarded and spliced, with its `Cache-Status`. An unsafe method that succeeds
/// invalidates its target and the same-origin `Location` and `Content-Location`.
async fn through(
    shared: &Shared,
    client: &mut Client,
    head: RequestHead,
    authority: &Authority,
    path: String,
    mut rec: Record,
    result: CacheResult,
) -> bool {
    let via = &shared.config.http.as_ref().expect("http front end").via;
    let method = head.method.to_ascii_uppercase();
    let client_version = head.version;
    let primary = key::primary(authority, &path);
    let out = match forward::request(head, authority, path, via) {
        Ok(out) => out,
        Err(e) => return reply::error(client, rec, 400, &Error::malformed(Side::Client, e)).await,
    };
    let answer = match ask(shared, client, &out, authority, &mut rec).await {
        Ok(a) => a,
        Err(e) => return e.reply(client, rec).await,
    };
    let safe = matches!(method.as_str(), "GET" | "HEAD" | "OPTIONS" | "TRACE");
    if let (false, Some(cache)) = (safe, &shared.cache) {
        if (200..400).contains(&answer.resp.status) {
            cache.invalidate(&primary);
            for field in ["location", "content-location"] {
                if let Some(k) = answer
                    .resp
                    .headers
                    .get(field)
                    .and_then(|v| same_origin(authority, v))
                {
                    cache.invalidate(&k);
                }
            }
        }
    }
    let exchange = Exchange {
        method: &method,
        client_version,
        request: &out,
        origin: authority.to_string(),
    };
    relay_as(shared, client, answer, exchange, rec, result, None).await
}

/// The key of a `Location`-like value when it names the same origin (RFC 9111 §4.4).
fn same_origin(authority: &Authority, value: &[u8]) -> Option<String> {
    let v = std::str::from_utf8(value).ok()?.trim();
    if v.starts_with('/') && !v.starts_with("//") {
        return Some(key::primary(authority, v));
    }
    let (a, path) = wire::split_absolute(v).ok()?;
    (a.host == authority.host && a.port == authority.port).then(|| key::primary(&a, &path))
}

/// `PURGE`: forgets the URI, for the clients `cache.purge_clients` names (403 otherwise);
/// 200 when something was stored, 404 when not.
async fn purge(
    shared: &Shared,
    cache: &Cache,
    client: &mut Client,
    head: &RequestHead,
    primary: &str,
    mut rec: Record,
) -> bool {
    let allowed = shared
        .config
        .cache
        .purge_clients
        .iter()
        .any(|n| n.contains(&client.addr.ip()));
    let keep = if head.keep_alive() && head.body() == Ok(BodyLength::None) {
        reply::Keep::Yes
    } else {
        reply::Keep::No
    };
    if !allowed {
        return reply::reply(
            client,
            rec,
            403,
            keep,
            &Error::client(Kind::Refused("purge-not-allowed")),
        )
        .await;
    }
    let status = if cache.invalidate(primary) { 200 } else { 404 };
    rec.finish(if status == 200 { "ok" } else { "not-stored" });
    rec.cache = Some("purge");
    reply::reply(
        client,
        rec,
        status,
        keep,
        &Error::client(Kind::Refused("purge")),
    )
    .await
}

/// Whether a request's `Cache-Control` has the directive `name` (with or without a value).
fn has_directive(headers: &Headers, name: &str) -> bool {
    headers.token_iter("cache-control").any(|t| {
        let k = t.split(|&b| b == b'=').next().unwrap_or(t);
        k.trim_ascii().eq_ignore_ascii_case(name.as_bytes())
    })
}
