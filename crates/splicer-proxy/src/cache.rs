//! The cache in the request path, seed 000's two decision points: from the request alone
//! (rules: bypass or look up), then from the response head (store it through a tap while
//! it is spliced, or only splice it). Hits are served from memory; stale objects are
//! revalidated (a `304` refreshes the stored head and the held body is served); unsafe
//! methods invalidate what they touch (RFC 9111 §4.4); `PURGE` from configured clients.
//!
//! The store itself is the `splicer-cache` crate; this module is its glue to the exchange.
//!
//! # Layout
//! - this file: a request through the cache (lookup, revalidation, fill, invalidation,
//!   PURGE).
//! - `storable`: whether a response head starts a fill.
//! - `hit`: answers from the cache (a stored object, a fill being read).
//! - `head`: the head of an answer from a stored object (a plain hit's from kept bytes).
//! - `refresh`: background revalidation (`stale-while-revalidate`).

mod head;
mod hit;
mod refresh;
mod storable;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use splicer_cache::policy::has_directive;
use splicer_cache::{key, Ask, Cache, CacheResult, Found, Joined, Lookup};
use splicer_wire::http::{self as wire, Authority, BodyLength, Headers, Method, RequestHead};

use crate::error::{Error, Kind, Side};
use crate::exchange::{
    ask, outgoing, relay_answer, release, reply, send, Answer, Client, Exchange, Extra, Rules,
};
use crate::shared::Shared;
use hit::{serve_fill, serve_found, serve_object, FromFill, Send};
use refresh::Background;
pub(crate) use storable::storable;

/// A request as the cache path sees it, taken from the exchange and its head before the
/// head is rewritten for upstream.
struct Asking<'a> {
    /// The name in `Via` and `Cache-Status`.
    via: &'a str,
    /// As the client wrote it: methods are case-sensitive (RFC 9110 §9.1), so only `GET`
    /// and `HEAD` exactly are looked up or stored; `get` is some other method.
    method: Method,
    /// The request's fields as the client sent them (borrowed: a hit copies nothing of
    /// the head; the paths that send the head upstream clone it).
    request: &'a Headers,
    /// `host:port` of the target: the pool's key and `Host` for the policy.
    host: String,
    /// The cache key of the target.
    primary: String,
    client_version: u8,
    /// The client connection may stay open after this exchange.
    keep: bool,
}

impl<'a> Asking<'a> {
    fn new(shared: &Shared, head: &'a RequestHead, ex: &Exchange<'a>, path: &str) -> Asking<'a> {
        let dest = ex.destination();
        Asking {
            via: ex.via,
            method: ex.method.clone(),
            request: &head.headers,
            host: dest.key.clone(),
            primary: key::primary(&dest.authority, path),
            client_version: ex.version,
            keep: ex.keep && !*shared.shutdown.borrow(),
        }
    }

    fn ask(&self) -> Ask<'_> {
        Ask {
            method: self.method.as_str(),
            headers: self.request,
            host: &self.host,
        }
    }

    fn send(&self, result: CacheResult, origin_status: Option<u16>) -> Send<'_> {
        Send {
            via: self.via,
            method: &self.method,
            request: self.request,
            client_version: self.client_version,
            keep: self.keep,
            result,
            origin_status,
            own: None,
            work: None,
        }
    }
}

/// One request with the cache on. Returns whether the client connection stays open.
pub(crate) async fn handle(
    shared: &Arc<Shared>,
    cache: &Cache,
    client: &mut Client,
    head: RequestHead,
    path: String,
    ex: &mut Exchange<'_>,
) -> bool {
    let asking = Asking::new(shared, &head, ex, &path);
    let method = &asking.method;
    if *method == Method::Purge {
        return purge(shared, cache, client, ex, &asking.primary).await;
    }
    let target = splicer_cache::Target {
        method: method.as_str(),
        host: &ex.destination().authority.host,
        path: &path,
        headers: &head.headers,
    };
    let bypass = cache.decide(target) == splicer_cache::Action::Bypass;
    // A GET or HEAD with a body is left alone: its meaning is not defined (RFC 9110 §9.3.1).
    let looked_up =
        matches!(method, Method::Get | Method::Head) && ex.framing.body == BodyLength::None;
    if bypass || !looked_up {
        let result = if bypass {
            CacheResult::Bypass
        } else {
            CacheResult::Method
        };
        let head = head.clone();
        return through(shared, cache, client, (head, path), &asking, ex, result).await;
    }
    let request = asking.request;
    let now = SystemTime::now();
    let result = match cache.lookup(&asking.primary, asking.ask(), now) {
        Lookup::Fresh(found) => {
            cache.counters().hits.fetch_add(1, Ordering::Relaxed);
            let mut send = asking.send(CacheResult::Hit, None);
            send.work = ex.own_work.take();
            return serve_found(shared, client, &found, send, &mut ex.rec).await;
        }
        _ if has_directive(request, "only-if-cached") => {
            ex.rec.cache = Some(CacheResult::OnlyIfCached.name());
            let why = Error::client(Kind::Refused("only-if-cached"));
            return reply::error(client, &mut ex.rec, 504, &why).await;
        }
        Lookup::Stale(found) => {
            // Only `Pragma: no-cache`, and only without `Cache-Control`, asks for
            // validation (RFC 9111 §5.4): any other `Pragma` leaves stale-while-revalidate.
            let asked_for = has_directive(request, "no-cache")
                || has_directive(request, "max-age")
                || splicer_cache::policy::pragma_no_cache(request);
            let why = if asked_for {
                CacheResult::Request
            } else {
                CacheResult::RefreshModified
            };
            let stale = Stale { found, why };
            let head = (head.clone(), path);
            return revalidate(shared, cache, client, head, &asking, stale, ex).await;
        }
        Lookup::Miss => CacheResult::Miss,
    };
    cache.counters().misses.fetch_add(1, Ordering::Relaxed);
    // Others may read the response as it fills only when it is the whole of a plain GET.
    let share = *method == Method::Get
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
    let mut writer = match cache.fill(&asking.primary, request, share) {
        Joined::Writer(w) => w,
        Joined::Reader(reader) => {
            // The answer comes as the fill in progress gets it from upstream.
            ex.own_work = None;
            let send = asking.send(CacheResult::Collapsed, None);
            match serve_fill(shared, client, reader, asking.ask(), send, &mut ex.rec).await {
                FromFill::Answered(keep) => return keep,
                FromFill::Upstream => match cache.fill(&asking.primary, request, false) {
                    Joined::Writer(w) => w,
                    Joined::Reader(_) => unreachable!("an unshared fill is never joined"),
                },
            }
        }
    };
    let answer = match send(shared, client, head.clone(), path, ex).await {
        Ok(answer) => answer,
        Err(keep) => return keep,
    };
    let fill = match storable(cache, &answer.resp, asking.ask(), now) {
        Some(h) => {
            writer.start(h);
            Some(writer)
        }
        None => {
            writer.abandon();
            None
        }
    };
    relay_as(shared, client, answer, ex, result, fill).await
}

/// Relays an answer with the cache's result in the access line and `Cache-Status`, its
/// body tapped into `fill` when there is one.
async fn relay_as(
    shared: &Shared,
    client: &mut Client,
    answer: Answer,
    ex: &mut Exchange<'_>,
    result: CacheResult,
    fill: Option<splicer_cache::Writer>,
) -> bool {
    ex.rec.cache = Some(result.name());
    let member = result.member(ex.via, fill.is_some(), None, Some(answer.resp.status));
    let extra = Extra {
        cache_status: Some(member),
        fill,
    };
    relay_answer(shared, client, answer, ex, extra).await
}

/// A stored object that must be revalidated, and the result if the origin sends a new one.
struct Stale {
    found: Found,
    why: CacheResult,
}

/// A stale object: ask the origin with its validators. A `304` refreshes it and it is
/// served; an error lets it stand in when `stale-if-error` allows; anything else is a new
/// response, stored as a miss's would be.
async fn revalidate(
    shared: &Arc<Shared>,
    cache: &Cache,
    client: &mut Client,
    (head, path): (RequestHead, String),
    asking: &Asking<'_>,
    stale: Stale,
    ex: &mut Exchange<'_>,
) -> bool {
    let Stale { found, why } = stale;
    let mut out = outgoing(shared, head, path, ex);
    // The cache's own validators replace the client's: the 304 is then about the stored
    // response, and the client's conditions are answered from it.
    for f in ["if-none-match", "if-modified-since", "if-range"] {
        out.head.headers.remove(f);
    }
    for (name, value) in splicer_cache::policy::validators(&found.object.headers) {
        out.head.headers.push(name, value);
    }
    let now = SystemTime::now();
    if why == CacheResult::RefreshModified && found.object.policy.may_serve_while_revalidating(now)
    {
        if let Some(guard) = cache.refreshing(&asking.primary) {
            // The whole of a GET, whatever the client's method and range.
            let mut head = out.head.clone();
            head.method = Method::Get;
            head.headers.remove("range");
            let mut request = Vec::with_capacity(512);
            head.encode(&mut request);
            let job = Background {
                request,
                authority: ex.destination().authority.clone(),
                primary: asking.primary.clone(),
                fields: asking.request.clone(),
                host: asking.host.clone(),
                found: found.clone(),
                client: client.addr.ip(),
                user: ex.rec.user.clone(),
                guard,
            };
            refresh::spawn(shared.clone(), cache.clone(), job);
        }
        let send = asking.send(CacheResult::StaleWhileRevalidate, None);
        return serve_found(shared, client, &found, send, &mut ex.rec).await;
    }
    let may_stand_in = |now| found.object.policy.may_serve_on_error(asking.request, now);
    let mut answer = match ask(shared, client, &out, ex, Rules::Apply).await {
        Ok(a) => a,
        Err(e) if e.upstream_failed() && may_stand_in(now) => {
            let send = asking.send(CacheResult::StaleIfError, None);
            return serve_found(shared, client, &found, send, &mut ex.rec).await;
        }
        Err(e) => return e.reply(client, &mut ex.rec).await,
    };
    if answer.resp.status == 304 {
        let fields = &answer.resp.headers;
        if let Some((object, own)) =
            cache.refresh(&asking.primary, &found, asking.ask(), fields, now)
        {
            release(shared, &asking.host, answer);
            let mut send = asking.send(CacheResult::Refresh, Some(304));
            send.own = Some(&own);
            let file = found.file.as_deref();
            return serve_object(shared, client, &object, file, send, &mut ex.rec).await;
        }
        // A 304 about another response (it names another validator): what is stored is
        // no longer the origin's. The whole URI goes (a variant's key alone would leave its
        // file to the disk tier's next start), and the response is asked for again without
        // validators: the client did not ask for a 304 about the cache's copy.
        cache.invalidate(&asking.primary);
        release(shared, &asking.host, answer);
        for f in ["if-none-match", "if-modified-since"] {
            out.head.headers.remove(f);
        }
        answer = match ask(shared, client, &out, ex, Rules::Apply).await {
            Ok(a) => a,
            Err(e) => return e.reply(client, &mut ex.rec).await,
        };
        if answer.resp.status == 304 {
            // A 304 to a request without conditions answers nothing: never the client's.
            let e = Error::malformed(Side::Upstream, "304-to-an-unconditional-request");
            return reply::error(client, &mut ex.rec, 502, &e).await;
        }
    }
    let status = answer.resp.status;
    // A `HEAD`'s `200` about the stored `GET` response (same validator, same length)
    // freshens it as a 304 would (RFC 9111 §4.3.5); it is relayed as it came.
    if asking.method == Method::Head && status == 200 && head_is_about(&answer.resp.headers, &found)
    {
        let fields = &answer.resp.headers;
        cache.refresh(&asking.primary, &found, asking.ask(), fields, now);
    }
    if status >= 500 && may_stand_in(now) {
        let send = asking.send(CacheResult::StaleIfError, Some(status));
        return serve_found(shared, client, &found, send, &mut ex.rec).await;
    }
    // A new response is stored under the URI (a variant's key is derived from it).
    let fill = storable(cache, &answer.resp, asking.ask(), now).and_then(|h| {
        match cache.fill(&asking.primary, asking.request, false) {
            Joined::Writer(mut w) => {
                w.start(h);
                Some(w)
            }
            Joined::Reader(_) => None,
        }
    });
    relay_as(shared, client, answer, ex, why, fill).await
}

/// Whether a `HEAD` response with `fields` describes the stored response: it names the
/// stored entity tag or `Last-Modified`, and its `Content-Length`, if any, is the stored
/// body's (RFC 9111 §4.3.5).
fn head_is_about(fields: &Headers, found: &Found) -> bool {
    let same = splicer_cache::policy::same_validator(fields, &found.object.headers);
    let length = wire::content_length(fields).ok().flatten();
    same == Some(true) && length.is_none_or(|n| n == found.object.body.len())
}

/// A request the cache does not serve (a rule's bypass, a method other than GET and HEAD):
/// forwarded and spliced, with its `Cache-Status`. An unsafe method that succeeds
/// invalidates its target and the same-origin `Location` and `Content-Location`.
async fn through(
    shared: &Shared,
    cache: &Cache,
    client: &mut Client,
    (head, path): (RequestHead, String),
    asking: &Asking<'_>,
    ex: &mut Exchange<'_>,
    result: CacheResult,
) -> bool {
    let answer = match send(shared, client, head, path, ex).await {
        Ok(answer) => answer,
        Err(keep) => return keep,
    };
    let authority = &ex.destination().authority;
    if !asking.method.is_safe() && (200..400).contains(&answer.resp.status) {
        cache.invalidate(&asking.primary);
        for field in ["location", "content-location"] {
            let named = answer.resp.headers.get(field);
            if let Some(k) = named.and_then(|v| same_origin(authority, v)) {
                cache.invalidate(&k);
            }
        }
    }
    relay_as(shared, client, answer, ex, result, None).await
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
    ex: &mut Exchange<'_>,
    primary: &str,
) -> bool {
    let rec = &mut ex.rec;
    let allowed = shared
        .config
        .cache
        .purge_clients
        .iter()
        .any(|n| n.contains(&client.addr.ip()));
    let keep = if ex.keep && ex.framing.body == BodyLength::None {
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
