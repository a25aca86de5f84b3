//! The exchange's side of a fill: the tap that feeds it as a body is relayed, and reading a
//! body into it with no client (a fill finished after its client left, as the cache's
//! quick-abort rules say, or a background refresh).

use std::sync::atomic::Ordering;

use splicer_cache::Writer;
use splicer_relay::Tap;
use splicer_wire::chunked::Step;
use tokio::net::TcpStream;

use super::body::Rest;
use crate::shared::Shared;
use crate::wireio::read_more;

/// Most bytes read from the origin in one go while no client waits.
const READ_STEP: usize = 64 * 1024;

/// The relay's tap, feeding a fill.
pub(crate) struct FillTap<'a>(pub &'a mut Writer);

impl Tap for FillTap<'_> {
    fn tap(&mut self, bytes: &[u8]) -> bool {
        self.0.tap(bytes)
    }
}

/// A fill whose client left: finished alone when the quick-abort bounds allow it
/// ([`finish_alone`]), else given up (the writer dropped: nothing is stored). A debug line
/// says which, with the bytes the fill had when its client left.
pub(crate) async fn after_client_left(
    shared: &Shared,
    upstream: (&TcpStream, Vec<u8>),
    rest: Rest,
    fill: Writer,
) {
    let received = fill.received();
    if !fill.finish_without_client() {
        tracing::debug!(
            received,
            "cache fill given up: its client left (quick_abort)"
        );
        return;
    }
    if finish_alone(shared, upstream, rest, fill).await {
        tracing::debug!(received, "cache fill finished without its client");
    } else {
        // Past the bounds while alone, or the upstream failed.
        tracing::debug!(
            received,
            "cache fill given up after reading on without its client"
        );
    }
}

/// Reads the rest of a body whose client left from `upstream` (after `buf`, what was read
/// and not yet used) into the fill and stores it, within the quick-abort bounds; returns
/// whether it was stored. The connection is not reused afterwards (it is dropped): simpler
/// than pooling it, and rare.
async fn finish_alone(
    shared: &Shared,
    (upstream, buf): (&TcpStream, Vec<u8>),
    rest: Rest,
    fill: Writer,
) -> bool {
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
    stored
}

/// Reads the rest of a body from `upstream` (after `buf`) into the fill, with no client,
/// and stores it; `go_on(fill, n)` says whether to read on after `n` bytes read here.
/// Returns whether it was stored. Chunk framing is read as strictly as when relayed.
pub(crate) async fn read_rest(
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
