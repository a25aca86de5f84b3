//! The front end's side of a fill: the tap that feeds it, and finishing it alone when its
//! client has gone (the cache's quick-abort rules said so).

use std::sync::atomic::Ordering;

use splicer_cache::Writer;
use splicer_relay::Tap;
use tokio::net::TcpStream;

use crate::shared::Shared;

/// The relay's tap, feeding a fill.
pub(super) struct FillTap<'a>(pub &'a mut Writer);

impl Tap for FillTap<'_> {
    fn tap(&mut self, bytes: &[u8]) -> bool {
        self.0.tap(bytes)
    }
}

/// Reads the rest of a body with a known length from `upstream` into the fill and stores
/// it. The connection is not reused afterwards (it is dropped): simpler than pooling it,
/// and rare. A body of unknown length is never finished alone (the quick-abort rules
/// refuse it, as Squid's do).
pub(super) async fn finish_alone(shared: &Shared, upstream: &TcpStream, fill: Writer) {
    if read_rest(shared, upstream, fill).await {
        if let Some(cache) = &shared.cache {
            cache
                .counters()
                .finished_after_abort
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Reads the rest of a body of known length from `upstream` into the fill, with no client,
/// and stores it. Returns whether it was stored.
pub(super) async fn read_rest(shared: &Shared, upstream: &TcpStream, mut fill: Writer) -> bool {
    let Some(length) = fill.length() else {
        return false;
    };
    let idle = shared.config.limits.idle_timeout;
    let mut buf = vec![0u8; 64 * 1024];
    while fill.received() < length {
        if tokio::time::timeout(idle, upstream.readable())
            .await
            .is_err()
        {
            return false;
        }
        let want = buf.len().min((length - fill.received()) as usize);
        match splicer_relay::read_once(upstream, &mut buf[..want]) {
            Ok(0) => return false,
            Ok(n) => {
                if !fill.tap(&buf[..n]) {
                    return false;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    fill.finish()
}
