//! Background revalidation (RFC 5861 `stale-while-revalidate`): a stale object inside its
//! window is served at once while one task per URI asks the origin with its validators. A
//! `304` refreshes it, a new storable response of known length replaces it, another new
//! response removes it; an error leaves it to go stale past its window.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use splicer_cache::{Ask, Cache, Found, Joined, Refreshing};
use splicer_wire::http::Authority;

use super::storable::storable;
use crate::error::{Error, Kind, Side};
use crate::exchange::body::{self, Rest};
use crate::exchange::{
    get_upstream, head_limits, read_response, read_rest, release, write_all, Answer,
};
use crate::shared::Shared;
use crate::upstream::{Asker, Check};

/// A revalidation to run without a client.
pub(crate) struct Background {
    /// The upstream request, encoded (the client's `GET` with the stored validators).
    pub request: Vec<u8>,
    pub authority: Authority,
    pub primary: String,
    /// The client's fields and `host:port`, for the policy.
    pub fields: splicer_wire::http::Headers,
    pub host: String,
    pub found: Found,
    /// Who asked: the rules that let the client reach the origin apply to the revalidation.
    pub client: IpAddr,
    pub user: Option<String>,
    pub guard: Refreshing,
}

/// Runs `job` in its own task.
pub(crate) fn spawn(shared: Arc<Shared>, cache: Cache, job: Background) {
    tokio::spawn(async move {
        let outcome = run(&shared, &cache, &job).await;
        match outcome {
            Ok(what) => {
                tracing::debug!(uri = %job.primary, what, "cache: revalidated in the background")
            }
            Err(e) => {
                tracing::info!(uri = %job.primary, error = %e.end(), "cache: background revalidation failed; the stale object stays")
            }
        }
        drop(job.guard);
    });
}

async fn run(shared: &Shared, cache: &Cache, job: &Background) -> Result<&'static str, Error> {
    let asker = Asker {
        client: job.client,
        user: job.user.as_deref(),
    };
    let (upstream, upstream_addr, _) = get_upstream(
        shared,
        &job.host,
        &job.authority,
        Some(asker),
        Check::Kernel,
    )
    .await
    .map_err(Error::from)?;
    write_all(shared, &upstream, &job.request)
        .await
        .map_err(|end| Error::from_end(end, Side::Upstream, Side::Upstream))?;
    let limits = head_limits(shared);
    let (resp, buf) =
        read_response(shared, None, &upstream, &limits, 1, Default::default()).await?;
    let ask = Ask {
        method: "GET",
        headers: &job.fields,
        host: &job.host,
    };
    let now = SystemTime::now();
    let answer = Answer {
        upstream,
        upstream_addr,
        buf,
        resp,
        reusable: true,
    };
    if answer.resp.status == 304 {
        let fields = &answer.resp.headers;
        // The 304's fields for one client (a `Set-Cookie`) have no client here: dropped.
        if cache
            .refresh(&job.primary, &job.found, ask, fields, now)
            .is_some()
        {
            release(shared, &job.host, answer);
            return Ok("refreshed");
        }
        cache.invalidate(&job.primary);
        return Ok("a 304 about another response: removed");
    }
    if answer.resp.status >= 500 {
        // An error is no reason to drop what is stored: it stays until its window ends.
        return Ok("the origin answered 5xx: the stale object stays");
    }
    let Some(head) = storable(cache, &answer.resp, ask, now) else {
        // What is stored is no longer what the origin sends.
        cache.invalidate(&job.primary);
        return Ok("a new response that is not stored: removed");
    };
    let Joined::Writer(mut fill) = cache.fill(&job.primary, &job.fields, false) else {
        return Ok("already being filled");
    };
    let rest = match head.length {
        Some(_) => Rest::Known,
        None => Rest::Chunked {
            reframer: body::reframer(shared),
            data: 0,
        },
    };
    fill.start(head);
    let Answer { upstream, buf, .. } = answer;
    if read_rest(shared, (&upstream, buf), rest, fill, |_, _| true).await {
        Ok("replaced by a new response")
    } else {
        Err(Error::upstream(Kind::Truncated))
    }
}
