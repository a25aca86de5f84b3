//! Whether a response head starts a fill: the cache's second decision point (seed 000),
//! made from the response head alone, before its body is relayed.

use std::time::SystemTime;

use splicer_cache::policy::has_directive;
use splicer_cache::{Ask, Cache, Head, Object, Policy};
use splicer_wire::http::{self as wire, BodyLength, Method, ResponseHead};

/// The head to fill with when the response may be stored: a `GET` answered with a body of
/// known framing that fits, no `Set-Cookie` (nginx's rule: a cookie is one client's), and
/// RFC 9111's conditions; something stale at once is kept only when it can be revalidated.
pub(crate) fn storable(
    cache: &Cache,
    resp: &ResponseHead,
    ask: Ask<'_>,
    now: SystemTime,
) -> Option<Head> {
    // Methods are case-sensitive: `get` is not stored.
    if ask.method != Method::Get.as_str() || resp.headers.get("set-cookie").is_some() {
        return None;
    }
    let length = match resp.body(&Method::Get).ok()? {
        BodyLength::Length(n) => Some(n),
        // A `204` has no body: nothing to cut short (RFC 9110 §15.3.5).
        BodyLength::None if resp.status == 204 => Some(0),
        // Only the chunking is undone as the body is tapped: a body under another transfer
        // coding (`gzip, chunked`) would be stored, and served, as if it were the content.
        BodyLength::Chunked => match wire::transfer_codings(resp.version, &resp.headers) {
            Ok(Some(c)) if c.len() == 1 && c[0].eq_ignore_ascii_case("chunked") => None,
            _ => return None,
        },
        // A body that ends with the connection cannot be told from a cut one.
        BodyLength::Close | BodyLength::None => return None,
    };
    if length.is_some_and(|n| n > cache.settings().max_object) {
        return None;
    }
    // The common refusals, answered before the policy maps every field (5% of the proxy's
    // CPU on 1 KiB `no-store` exchanges); the policy would say the same of them.
    if has_directive(&resp.headers, "no-store") || has_directive(&resp.headers, "private") {
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
        reason: resp.reason.to_string(),
        headers: Object::stored_fields(resp.headers.clone()),
        policy,
        length,
    })
}
