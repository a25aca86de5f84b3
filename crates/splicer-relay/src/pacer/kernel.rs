//! Pacing a kernel engine's splice: the rate is set on the sockets its bytes leave by
//! (`SO_MAX_PACING_RATE`), and set again whenever the setting or the class's number of
//! kernel splices changes, until the splice ends. The engine's end comes when its last
//! bytes are in the sending socket's queue, which may hold megabytes not yet paced out, so
//! the cap stays until they have left (bounded by [`DRAIN_LIMIT`]) and is lifted then:
//! the sockets may go back to the proxy (a bounded body, a kept-alive connection), and
//! whatever the proxy writes next goes behind the body on the same stream anyway.

use std::future::Future;
use std::os::fd::AsFd;
use std::time::Duration;

use splicer_sys::sock::{set_max_pacing_rate, unsent_bytes};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{Class, Front, Pacer};

/// No cap, as the kernel spells it.
const UNCAPPED: u64 = u64::MAX;

/// The longest a splice's end waits for its queued bytes to be paced out before the cap is
/// lifted anyway (a reader that stopped reading would otherwise hold it forever).
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

impl Pacer {
    /// Runs `splice`, a kernel engine moving bytes out through `senders`, paced as its
    /// class of front end `front` says. `cut` resolves when every splice must end (a
    /// shutdown): the wait for queued bytes to be paced out stops then.
    pub(crate) async fn kernel<F: Future>(
        &self,
        (front, class): (Front, Class),
        senders: &[&TcpStream],
        splice: F,
        cut: impl Future<Output = ()>,
    ) -> F::Output {
        let counted = self.kernel_splice(front, class);
        let mut changes = self.changes();
        let mut applied = None;
        let apply = |applied: &mut Option<u64>| {
            let rate = counted.rate();
            if rate != *applied {
                for s in senders {
                    // Not fatal: the splice then runs at the engine's own speed, and the
                    // failure (not expected on a TCP socket) is logged.
                    if let Err(e) = set_max_pacing_rate(s.as_fd(), rate.unwrap_or(UNCAPPED)) {
                        tracing::warn!(error = %e, "pacer: cannot set SO_MAX_PACING_RATE");
                    }
                }
                *applied = rate;
            }
        };
        apply(&mut applied);
        tokio::pin!(splice);
        let out = loop {
            tokio::select! {
                out = &mut splice => break out,
                changed = changes.changed() => {
                    if changed.is_err() {
                        // The pacer lives as long as the relay: no more changes will come.
                        break splice.await;
                    }
                    apply(&mut applied);
                }
            }
        };
        if applied.is_some() {
            tokio::select! {
                () = paced_out(senders, || counted.rate()) => {}
                () = cut => {}
            }
            for s in senders {
                let _ = set_max_pacing_rate(s.as_fd(), UNCAPPED);
            }
        }
        drop(counted);
        out
    }
}

/// Waits until the sockets have sent what they hold, while a cap (`rate()`) is in force,
/// at most [`DRAIN_LIMIT`].
async fn paced_out(senders: &[&TcpStream], rate: impl Fn() -> Option<u64>) {
    let deadline = Instant::now() + DRAIN_LIMIT;
    loop {
        let unsent = senders
            .iter()
            .map(|s| unsent_bytes(s.as_fd()).unwrap_or(0))
            .max()
            .unwrap_or(0);
        let Some(rate) = rate() else { return };
        if unsent == 0 || Instant::now() >= deadline {
            return;
        }
        // Look again about when half of it should have left, between 1 and 50 ms.
        let half = Duration::from_secs_f64(unsent as f64 / rate as f64 / 2.0);
        let wait = half.clamp(Duration::from_millis(1), Duration::from_millis(50));
        tokio::time::sleep(wait).await;
    }
}
