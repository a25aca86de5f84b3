//! Reading protocol heads from a socket into a buffer, shared by the front ends.

use std::io;

use tokio::net::TcpStream;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// The other end closed before a whole message arrived.
    Closed,
    /// The buffer reached its limit without a whole message.
    TooLarge,
    Io(io::ErrorKind),
}

/// Reads at least one more byte into `buf`, never letting it grow past `limit`.
/// Works on a shared reference so the same stream can be spliced later.
pub async fn read_more(
    stream: &TcpStream,
    buf: &mut Vec<u8>,
    limit: usize,
) -> Result<(), ReadError> {
    if buf.len() >= limit {
        return Err(ReadError::TooLarge);
    }
    // Read in steps of up to 8 KiB; most heads fit the first read.
    buf.reserve((limit - buf.len()).min(8192));
    loop {
        stream
            .readable()
            .await
            .map_err(|e| ReadError::Io(e.kind()))?;
        let room = buf.capacity().min(limit) - buf.len();
        // A short read also clears the readiness (see `read_once`): no EAGAIN round trip.
        match splicer_relay::read_once_into(stream, buf, room) {
            Ok(0) => return Err(ReadError::Closed),
            Ok(_) => return Ok(()),
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => continue,
                k => return Err(ReadError::Io(k)),
            },
        }
    }
}
