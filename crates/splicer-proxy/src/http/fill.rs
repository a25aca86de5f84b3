//! The front end's side of a fill: whether a response head starts one (`storable`), the
//! tap that feeds it, and reading a body into it with no client (a fill finished after its
//! client left, as the cache's quick-abort rules say, or a background refresh).

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use splicer_cache::policy::has_directive;
use splicer_cache::{Ask, Cache, Head, Object, Policy, Writer};
use splicer_relay::Tap;
use splicer_wire::chunked::Step;
use splicer_wire::http::{self as wire, BodyLength, ResponseHead};
use tokio::net::TcpStream;

use super::body::Rest;
use crate::shared::Shared;
use crate::wireio::read_more;

/// Most bytes read from the origin in one go while no client waits.
const READ_STEP: usize = 64 * 1024;

/// The relay's tap, feeding a fill.
pub(super) struct FillTap<'a>(pub &'a mut Writer);

impl Tap for FillTap<'_> {
    fn tap(&mut self, bytes: &[u8]) -> bool {
        self.0.tap(bytes)
    }
}

/// Reads the rest of a body whose client left from `upstream` (after `buf`, what was read
/// and not yet used) into the fill and stores it, within the quick-abort bounds. The
/// connection is not reused afterwards (it is dropped): simpler than pooling it, and rare.
pub(super) async fn finish_alone(
    shared: &Shared,
    (upstream, buf): (&TcpStream, Vec<u8>),
    rest: Rest,
    fill: Writer,
) {
    let stored = read_rest(shared, (upstream, buf), rest, fill, |w, alone| {
        w.go_on_alone(alone)
    })
    .await;
    if stored {
        if let Some(cache) = &shared.cache {
            cache
                .counters()
                .finished_after_abort
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Reads the rest of a body from `upstream` (after `buf`) into the fill, with no client,
/// and stores it; `go_on(fill, n)` says whether to read on after `n` bytes read here.
/// Returns whether it was stored. Chunk framing is read as strictly as when relayed.
pub(super) async fn read_rest(
    shared: &Shared,
    (upstream, mut buf): (&TcpStream, Vec<u8>),
    rest: Rest,
    mut fill: Writer,
    go_on: impl Fn(&Writer, u64) -> bool,
) -> bool {
    // `data`: body bytes to tap before the framing (if any) is read again.
    let (mut reframer, mut data) = match rest {
        Rest::Known => match fill.length() {
            Some(length) => (None, length.saturating_sub(fill.received())),
            None => return false,
        },
        Rest::Chunked { reframer, data } => (Some(reframer), data),
    };
    let idle = shared.config.limits.idle_timeout;
    let mut read = 0u64;
    let mut framing = Vec::new();
    loop {
        let need_more = if data > 0 {
            let k = buf.len().min(data.try_into().unwrap_or(usize::MAX));
            if k > 0 && !fill.tap(&buf[..k]) {
                return false;
            }
            buf.drain(..k);
            data -= k as u64;
            data > 0
        } else {
            let Some(r) = reframer.as_mut() else {
                return fill.finish();
            };
            framing.clear();
            let Ok((used, step)) = r.advance(&buf, &mut framing) else {
                return false;
            };
            buf.drain(..used);
            match step {
                Step::More => true,
                Step::Data(n) => {
                    data = n;
                    false
                }
                Step::Done => return fill.finish(),
            }
        };
        if need_more {
            let before = buf.len();
            buf.reserve(READ_STEP);
            let limit = before + READ_STEP;
            match tokio::time::timeout(idle, read_more(upstream, &mut buf, limit)).await {
                Ok(Ok(())) => read += (buf.len() - before) as u64,
                _ => return false,
            }
            if !go_on(&fill, read) {
                return false;
            }
        }
    }
}

/// The head to fill with when the response may be stored: a `GET` answered with a body of
/// known framing that fits, no `Set-Cookie` (nginx's rule: a cookie is one client's), and
/// RFC 9111's conditions; something stale at once is kept only when it can be revalidated.
pub(super) fn storable(
    cache: &Cache,
    resp: &ResponseHead,
    ask: Ask<'_>,
    now: SystemTime,
) -> Option<Head> {
    if ask.method != "GET" || resp.headers.get("set-cookie").is_some() {
        return None;
    }
    let length = match resp.body("GET").ok()? {
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
        reason: resp.reason.clone(),
        headers: Object::stored_fields(resp.headers.clone()),
        policy,
        length,
    })
}
