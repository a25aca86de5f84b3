//! systemd's readiness protocol (`sd_notify`): with `Type=notify`, systemd counts the
//! service started when it says `READY=1`, here once every listener is bound, and shows
//! `STATUS=` in `systemctl status`. Without `NOTIFY_SOCKET` (not under systemd) nothing is
//! sent. The protocol is one datagram to a Unix socket, so no library is needed for it.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (newline-separated `KEY=value` lines) to the service manager, if any; a
/// failure is logged, and the proxy runs on.
pub fn send(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let bytes = path.as_bytes();
    // `@name`: a socket in the abstract namespace.
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(&path),
    };
    let sent = addr.and_then(|a| UnixDatagram::unbound()?.send_to_addr(state.as_bytes(), &a));
    if let Err(e) = sent {
        tracing::warn!(socket = ?path, "cannot notify the service manager: {e}");
    }
}
