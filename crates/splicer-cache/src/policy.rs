//! RFC 9111 freshness and storability, through the `http-cache-semantics` crate, plus what
//! it leaves out: `stale-while-revalidate` and `stale-if-error` (RFC 5861), which stored
//! response a `304` is about, the merge of a `304` into the stored header fields (never its
//! fields that belong to one client) (kept in Splicer's own field list, which keeps
//! repeated fields the crate's map would fold), and the validators of a revalidation.
//!
//! The crate sees requests with a fixed URI: the store has already matched the URI by its
//! key, so only method, `Host`, `Vary` and the directives remain to compare. It sees the
//! fields as RFC 9111 means them, not as they came: [`normal`] says what it is given.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use http_cache_semantics::{BeforeRequest, CacheOptions, CachePolicy, RequestLike, ResponseLike};
use splicer_wire::http::Headers;

pub mod normal;
pub use normal::pragma_no_cache;

/// A request as the policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub method: &'a str,
    /// The request's fields as the client sent them.
    pub headers: &'a Headers,
    /// The authority of the target (`host:port`): stands for `Host`.
    pub host: &'a str,
}

struct Req {
    method: Method,
    headers: HeaderMap,
}

impl Req {
    fn new(ask: Ask<'_>) -> Req {
        let mut headers = normal::request(ask.headers);
        if let Ok(v) = HeaderValue::from_str(ask.host) {
            headers.insert(http::header::HOST, v);
        }
        Req {
            method: Method::from_bytes(ask.method.as_bytes()).unwrap_or(Method::OPTIONS),
            headers,
        }
    }
}

impl RequestLike for Req {
    fn uri(&self) -> Uri {
        Uri::from_static("/")
    }
    fn is_same_uri(&self, _: &Uri) -> bool {
        // The store matched the URI already (the key).
        true
    }
    fn method(&self) -> &Method {
        &self.method
    }
    fn headers(&self) -> &HeaderMap {
        &self.headers
    }
}

struct Res {
    status: StatusCode,
    headers: HeaderMap,
}

impl ResponseLike for Res {
    fn status(&self) -> StatusCode {
        self.status
    }
    fn headers(&self) -> &HeaderMap {
        &self.headers
    }
}

fn options(heuristic: f32) -> CacheOptions {
    CacheOptions {
        shared: true,
        cache_heuristic: heuristic,
        ..CacheOptions::default()
    }
}

/// Seconds of a `name=N` directive among the `Cache-Control` fields.
fn directive_secs(headers: &Headers, name: &str) -> Option<Duration> {
    headers.token_iter("cache-control").find_map(|t| {
        let t = std::str::from_utf8(t).ok()?;
        let (k, v) = t.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().trim_matches('"').parse().ok())
            .flatten()
            .map(Duration::from_secs)
    })
}

/// Whether the `Cache-Control` fields have the directive `name` (with or without a value).
pub fn has_directive(headers: &Headers, name: &str) -> bool {
    headers.token_iter("cache-control").any(|t| {
        let k = t.split(|&b| b == b'=').next().unwrap_or(t);
        k.trim_ascii().eq_ignore_ascii_case(name.as_bytes())
    })
}

/// What a stored response may do for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    /// Serve it as it is.
    Fresh,
    /// Ask the origin first (it is stale, or the request asks for validation).
    Stale,
    /// It does not answer this request (another method, or a `Vary` field differs).
    Mismatch,
}

/// The cache policy of one stored response.
#[derive(Debug, Clone)]
pub struct Policy {
    inner: CachePolicy,
    /// The stored response's status (the crate keeps its own to itself).
    status: u16,
    heuristic: f32,
    /// When it stops being fresh (at the time it was received or refreshed).
    fresh_until: SystemTime,
    /// The `Age` it arrived with. With `fresh_until` and `basis.received` it gives what the
    /// crate's `age`, `time_to_live` and `is_stale` give, without their work per call: at
    /// every call the crate parses `Age` and, for the lifetime, looks the response's
    /// directives up in hashed maps and parses its dates (three calls per hit, about 3% of
    /// the proxy's CPU on a load of hits). A test holds the two to the same answers.
    arrived_age: Duration,
    stale_while_revalidate: Option<Duration>,
    stale_if_error: Option<Duration>,
    /// `must-revalidate`, `proxy-revalidate` or `no-cache`: never served stale.
    no_stale: bool,
    /// Stored from a `GET` and without `Vary`: a request without directives of its own
    /// needs only the freshness check ([`Policy::check`]).
    plain: bool,
    /// What it was made from beyond the response head: the request's fields, its host and
    /// when the response arrived. The disk tier stores them to make the policy again.
    basis: Arc<Basis>,
}

/// A policy's request side and time, as the disk tier stores them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Basis {
    pub request: Headers,
    pub host: String,
    pub received: SystemTime,
}

impl Policy {
    /// The policy of a response to `ask`, received at `now`; `heuristic` is the fraction
    /// of the time since `Last-Modified` that a response without an explicit lifetime
    /// stays fresh (RFC 9111 §4.2.2; 0.1 as in most caches).
    pub fn new(
        ask: Ask<'_>,
        status: u16,
        headers: &Headers,
        now: SystemTime,
        heuristic: f32,
    ) -> Policy {
        let stand_in = normal::stand_in(status, headers);
        let res = Res {
            status: StatusCode::from_u16(stand_in).unwrap_or(StatusCode::BAD_GATEWAY),
            headers: normal::response(status, headers),
        };
        let inner = CachePolicy::new_options(&Req::new(ask), &res, now, options(heuristic));
        let fresh_until = now + inner.time_to_live(now);
        let arrived_age = inner.age(now);
        Policy {
            inner,
            status,
            heuristic,
            fresh_until,
            arrived_age,
            stale_while_revalidate: directive_secs(headers, "stale-while-revalidate"),
            stale_if_error: directive_secs(headers, "stale-if-error"),
            no_stale: ["must-revalidate", "proxy-revalidate", "no-cache"]
                .iter()
                .any(|d| has_directive(headers, d)),
            plain: ask.method == "GET" && headers.get("vary").is_none(),
            basis: Arc::new(Basis {
                request: ask.headers.to_compact(),
                host: ask.host.to_string(),
                received: now,
            }),
        }
    }

    /// The policy of a stored `GET` response made again from what the disk tier keeps.
    pub fn again(basis: &Basis, status: u16, headers: &Headers, heuristic: f32) -> Policy {
        let ask = Ask {
            method: "GET",
            headers: &basis.request,
            host: &basis.host,
        };
        Policy::new(ask, status, headers, basis.received, heuristic)
    }

    /// The request side and time it was made from.
    pub fn basis(&self) -> &Basis {
        &self.basis
    }

    /// The bytes its copies of the request's fields take (for the memory tier's weight).
    pub fn request_bytes(&self) -> usize {
        2 * self.basis.request.wire_len() + self.basis.host.len()
    }

    /// Whether RFC 9111 §3 lets a shared cache store the response at all.
    pub fn storable(&self) -> bool {
        self.inner.is_storable()
    }

    /// Its age now (the `Age` it arrived with plus the time it has been held).
    pub fn age(&self, now: SystemTime) -> Duration {
        let held = now.duration_since(self.basis.received).unwrap_or_default();
        self.arrived_age + held
    }

    /// How long it stays fresh from `now` (a clock set back before its arrival counts
    /// from its arrival, as the crate does).
    pub fn time_to_live(&self, now: SystemTime) -> Duration {
        let from = now.max(self.basis.received);
        self.fresh_until.duration_since(from).unwrap_or_default()
    }

    /// Whether it is stale at `now` by its own lifetime (the request's directives aside).
    fn is_stale(&self, now: SystemTime) -> bool {
        self.time_to_live(now).is_zero()
    }

    /// How long past its freshness it is at `now` (zero while fresh).
    pub fn staleness(&self, now: SystemTime) -> Duration {
        now.duration_since(self.fresh_until).unwrap_or_default()
    }

    /// Whether it may serve `ask` as is, with the request's own directives (`max-age`,
    /// `min-fresh`, `max-stale`, `no-cache`, `Pragma`) and `Vary` applied.
    pub fn check(&self, ask: Ask<'_>, now: SystemTime) -> Check {
        self.quick_check(ask, now)
            .unwrap_or_else(|| self.full_check(ask, now))
    }

    /// The check of most hits, without the crate: it would copy the request's fields into
    /// a map and make (and format the `Date` of) a response head that is thrown away, on
    /// every hit. `None` when the crate must decide. What it decides is what the crate
    /// would: a `GET` or `HEAD` for the host the response was stored for, a stored `GET`
    /// response without `Vary`, and no `Cache-Control` or `Pragma` in the request leave
    /// only the crate's freshness test (a test holds the two to the same answers).
    fn quick_check(&self, ask: Ask<'_>, now: SystemTime) -> Option<Check> {
        let plain_request = matches!(ask.method, "GET" | "HEAD")
            && ask.host == self.basis.host
            && ask.headers.get("cache-control").is_none()
            && ask.headers.get("pragma").is_none();
        if !(self.plain && plain_request) {
            return None;
        }
        Some(if self.is_stale(now) {
            Check::Stale
        } else {
            Check::Fresh
        })
    }

    /// The check by the crate, for any request.
    fn full_check(&self, ask: Ask<'_>, now: SystemTime) -> Check {
        let req = Req::new(ask);
        // A stored GET answers a HEAD: compare as a GET.
        let as_get = Req {
            method: if req.method == Method::HEAD {
                Method::GET
            } else {
                req.method.clone()
            },
            headers: req.headers,
        };
        match self.inner.before_request(&as_get, now) {
            BeforeRequest::Fresh(_) => Check::Fresh,
            BeforeRequest::Stale { matches: true, .. } => Check::Stale,
            BeforeRequest::Stale { matches: false, .. } => Check::Mismatch,
        }
    }

    /// Whether a stale response may be served while it is refreshed in the background
    /// (RFC 5861 §3).
    pub fn may_serve_while_revalidating(&self, now: SystemTime) -> bool {
        !self.no_stale
            && self
                .stale_while_revalidate
                .is_some_and(|w| self.staleness(now) <= w)
    }

    /// Whether a stale response may stand in for an error from the origin (RFC 5861 §4),
    /// the request's own `stale-if-error` taken into account.
    pub fn may_serve_on_error(&self, request: &Headers, now: SystemTime) -> bool {
        let window = directive_secs(request, "stale-if-error").or(self.stale_if_error);
        !self.no_stale && window.is_some_and(|w| self.staleness(now) <= w)
    }

    /// The policy after a `304` (headers `fields`) to the cache's own revalidation of the
    /// stored response (fields `stored`) for `ask`, or `None` when the 304 is about another
    /// response (RFC 9111 §4.3.4: it names a validator the stored response does not have).
    /// A 304 without validators answers the request the cache made with the stored
    /// response's validators, so it is about that response (as Squid, ATS and httpd take it).
    pub fn refreshed(
        &self,
        ask: Ask<'_>,
        fields: &Headers,
        stored: &Headers,
        now: SystemTime,
    ) -> Option<Refreshed> {
        if !selects(fields, stored) {
            return None;
        }
        let (merged, own) = merge_304(stored, fields);
        // What is stored is a `GET`'s response, whichever request revalidated it (a `HEAD`
        // made it a `HEAD`'s, which no later `GET` matched).
        let ask = Ask {
            method: "GET",
            ..ask
        };
        let policy = Policy::new(ask, self.status, &merged, now, self.heuristic);
        Some(Refreshed {
            storable: policy.storable() && !shared_refusal(&merged),
            policy,
            merged,
            own,
        })
    }
}

/// A stored response freshened by a `304`.
#[derive(Debug)]
pub struct Refreshed {
    pub policy: Policy,
    /// The stored fields updated by the 304, without the fields that belong to one client.
    pub merged: Headers,
    /// The 304's fields that belong to the client whose request caused the revalidation
    /// only (`Set-Cookie`, fields a qualified `private` names): sent to it, never stored.
    pub own: Headers,
    /// Whether the freshened response may still be stored (the 304 may say `no-store` or
    /// `private`): when not, it answers this request and leaves the cache.
    pub storable: bool,
}

/// Whether a 304 with `fields` is about the stored response with `stored` (RFC 9111
/// §4.3.4): the validator it names is the stored one, and one that names none answers the
/// conditional request the cache made for that response.
fn selects(fields: &Headers, stored: &Headers) -> bool {
    same_validator(fields, stored).unwrap_or(true)
}

/// Whether a response with `fields` names the validator of the stored response with
/// `stored`: its entity tag, when it has one, is the stored one (weak comparison: a 304 may
/// carry a weak tag only); else its `Last-Modified`, when it has one. `None` when it names
/// no validator.
pub fn same_validator(fields: &Headers, stored: &Headers) -> Option<bool> {
    fn opaque(tag: &[u8]) -> &[u8] {
        let tag = tag.trim_ascii();
        tag.strip_prefix(b"W/").unwrap_or(tag)
    }
    if let Some(tag) = fields.get("etag") {
        return Some(stored.get("etag").is_some_and(|s| opaque(s) == opaque(tag)));
    }
    let lm = fields.get("last-modified")?;
    Some(
        stored
            .get("last-modified")
            .is_some_and(|s| s.trim_ascii() == lm.trim_ascii()),
    )
}

/// What a shared cache refuses to store whatever the policy says (the proxy's rule for a
/// `200` too): `no-store` and `private`.
fn shared_refusal(fields: &Headers) -> bool {
    has_directive(fields, "no-store") || has_directive(fields, "private")
}

/// Fields of a 304 that never replace stored ones: they describe the stored body, or the
/// connection.
const KEEP_STORED: &[&str] = &[
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "content-range",
    "connection",
    "keep-alive",
    "trailer",
    "te",
    "upgrade",
];

/// Fields that belong to the one client a response was sent to: a cache stores no response
/// that carries them, and takes none of them from a 304.
const PERSONAL: &[&str] = &["set-cookie", "set-cookie2"];

/// Whether `name` belongs to one client in a response with `fields`: a cookie, or a field
/// that a qualified `private="…"` names (RFC 9111 §5.2.2.7).
fn personal(fields: &Headers, name: &str) -> bool {
    PERSONAL.iter().any(|p| p.eq_ignore_ascii_case(name))
        || qualified(fields, "private").any(|n| n.eq_ignore_ascii_case(name.as_bytes()))
}

/// The field names a qualified directive (`private="a, b"`) lists.
fn qualified<'a>(fields: &'a Headers, directive: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    fields
        .get_all("cache-control")
        .flat_map(directives)
        .filter(move |(name, _)| name.eq_ignore_ascii_case(directive.as_bytes()))
        .flat_map(|(_, value)| value.unwrap_or_default().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|n| !n.is_empty())
}

/// The directives of one `Cache-Control` value (RFC 9111 §5.2: `name[=token|quoted-string]`,
/// comma-separated), each with its value unquoted (escapes left in: field names have none).
/// A quoted value may hold commas, so the value is not split on them first.
pub(crate) fn directives(value: &[u8]) -> Vec<(&[u8], Option<&[u8]>)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < value.len() {
        while i < value.len() && matches!(value[i], b',' | b' ' | b'\t') {
            i += 1;
        }
        let start = i;
        while i < value.len() && !matches!(value[i], b',' | b'=') {
            i += 1;
        }
        let name = value[start..i].trim_ascii();
        let mut arg = None;
        if i < value.len() && value[i] == b'=' {
            i += 1;
            while i < value.len() && matches!(value[i], b' ' | b'\t') {
                i += 1;
            }
            if i < value.len() && value[i] == b'"' {
                let from = i + 1;
                i = from;
                while i < value.len() && value[i] != b'"' {
                    i += if value[i] == b'\\' { 2 } else { 1 };
                }
                arg = Some(&value[from..i.min(value.len())]);
                while i < value.len() && value[i] != b',' {
                    i += 1;
                }
            } else {
                let from = i;
                while i < value.len() && value[i] != b',' {
                    i += 1;
                }
                arg = Some(value[from..i].trim_ascii());
            }
        }
        if !name.is_empty() {
            out.push((name, arg));
        }
    }
    out
}

/// The stored fields updated by a 304 (RFC 9111 §3.2): each field the 304 carries replaces
/// all stored fields of that name; the others stay. The 304's fields that belong to one
/// client are not merged: they come back apart (the second list), for that client alone.
pub fn merge_304(stored: &Headers, fields: &Headers) -> (Headers, Headers) {
    let kept = |name: &str| KEEP_STORED.iter().any(|k| k.eq_ignore_ascii_case(name));
    let own: Headers = fields.iter().filter(|f| personal(fields, f.name)).collect();
    let replaced =
        |name: &str| !kept(name) && fields.get(name).is_some() && !personal(fields, name);
    let mut out: Headers = stored.iter().filter(|f| !replaced(f.name)).collect();
    out.extend(
        fields
            .iter()
            .filter(|f| !kept(f.name) && !personal(fields, f.name)),
    );
    (out, own)
}

/// The validators to send when revalidating a stored response with `fields`: its `ETag`
/// as `If-None-Match`, its `Last-Modified` as `If-Modified-Since`.
pub fn validators(fields: &Headers) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    if let Some(etag) = fields.get("etag") {
        out.push(("If-None-Match", etag.to_vec()));
    }
    if let Some(lm) = fields.get("last-modified") {
        out.push(("If-Modified-Since", lm.to_vec()));
    }
    out
}

#[cfg(test)]
mod tests;
