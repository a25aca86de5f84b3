//! The user-space relay that runs while a tunnel is being taken over (steps 2 and 3), and
//! the test of a socket that can be snapshotted.

use std::io;
use std::os::fd::AsFd;

use splicer_sys::repair;
use splicer_sys::sock::{outq_bytes, readable_bytes, set_linger_zero, tcp_info};
use tokio::net::TcpStream;

use super::Stop;
use crate::outcome::End;
use crate::tcp::TCP_ESTABLISHED;

/// Buffers (64 KiB) moved per direction between two looks at the take-over's conditions.
const PUMP_READS: usize = 4;

/// Nothing unread, unacknowledged or out of order on the socket, and still established.
pub(super) fn quiet(s: &TcpStream) -> bool {
    let fd = s.as_fd();
    readable_bytes(fd).is_ok_and(|n| n == 0)
        && outq_bytes(fd).is_ok_and(|n| n == 0)
        && repair::rmem_alloc(fd).is_ok_and(|n| n == 0)
        && tcp_info(fd).is_ok_and(|i| i.state == TCP_ESTABLISHED)
}

/// What the user-space part of the take-over ran into.
enum Pumped {
    Moved(u64),
    /// The source sent FIN (after this many bytes): the tunnel can no longer be spliced.
    Eof(u64),
    /// Reading the source failed.
    Source(io::Error),
    /// Writing the destination failed.
    Destination(io::Error),
}

/// Moves what is readable now from `from` to `to` (the take-over's user-space relay), at
/// most [`PUMP_READS`] buffers, so that a stream that never pauses still lets the take-over
/// look at its conditions.
async fn pump(from: &TcpStream, to: &TcpStream, buf: &mut [u8]) -> Pumped {
    let mut moved = 0u64;
    for _ in 0..PUMP_READS {
        match from.try_read(buf) {
            Ok(0) => return Pumped::Eof(moved),
            Ok(n) => {
                let mut data = &buf[..n];
                while !data.is_empty() {
                    if let Err(e) = to.writable().await {
                        return Pumped::Destination(e);
                    }
                    match to.try_write(data) {
                        Ok(w) => data = &data[w..],
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Pumped::Destination(e),
                    }
                }
                moved += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Pumped::Moved(moved),
            Err(e) => return Pumped::Source(e),
        }
    }
    Pumped::Moved(moved)
}

/// The user-space relay of the take-over, both ways, once; `Err` is how the tunnel ends
/// or why it must be left to another engine.
pub(super) async fn pump_both(
    client: &TcpStream,
    upstream: &TcpStream,
    buf: &mut [u8],
    moved: &mut (u64, u64),
) -> Result<(), Stop> {
    for (from, to, up) in [(client, upstream, true), (upstream, client, false)] {
        match pump(from, to, buf).await {
            Pumped::Moved(n) => {
                if up {
                    moved.0 += n
                } else {
                    moved.1 += n
                }
            }
            Pumped::Eof(n) => {
                if up {
                    moved.0 += n
                } else {
                    moved.1 += n
                }
                return Err(Stop::Decline(
                    "a side half-closed during the take-over".into(),
                ));
            }
            Pumped::Source(e) => {
                let _ = set_linger_zero(to.as_fd());
                return Err(Stop::End(up, End::Source(e.kind())));
            }
            Pumped::Destination(e) => {
                let _ = set_linger_zero(from.as_fd());
                return Err(Stop::End(up, End::Destination(e.kind())));
            }
        }
    }
    Ok(())
}
