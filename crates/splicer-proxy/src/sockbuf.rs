//! `limits.receive_buffer`: a fixed receive buffer on every socket the proxy accepts or
//! connects, so that what its receive queues can hold is bounded by configuration rather
//! than by the kernel's autotuning (docs/configuration.md, docs/engines.md).

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// Fixes `stream`'s receive buffer at `bytes`; 0 leaves the kernel's autotuning on. A
/// failure costs only the bound, not the connection, so it is logged (once per process:
/// every socket would fail the same way) and the connection goes on.
pub fn apply(stream: &impl AsFd, bytes: usize) {
    if bytes == 0 {
        return;
    }
    static WARNED: AtomicBool = AtomicBool::new(false);
    let problem = match splicer_sys::sock::set_receive_buffer(stream.as_fd(), bytes) {
        // The kernel reports twice what it granted.
        Ok(got) if got / 2 >= bytes => return,
        Ok(got) => format!(
            "the kernel granted {} bytes (capped by net.core.rmem_max; going past it needs \
             CAP_NET_ADMIN)",
            got / 2
        ),
        Err(e) => format!("cannot set it: {e}"),
    };
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!("limits.receive_buffer = {bytes}: {problem}");
    }
}
