//! Reading protocol heads from a socket into a buffer, shared by the front ends.

use std::cell::RefCell;
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

/// How much one read asks for.
const STEP: usize = 8192;

thread_local! {
    /// Where a new head's first read lands (one per runtime thread).
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(STEP));
}

/// The first read of a head, into this thread's scratch buffer; `buf` gets only the bytes
/// that came. Reading straight into `buf` meant an 8 KiB allocation per head, freed after
/// it: with a head read on each side, 1 KiB exchanges spent about 3% of the proxy's CPU in
/// glibc's `malloc_consolidate` and `unlink_chunk` (perf, edge-bench), which a block that
/// size sets off.
fn read_fresh(stream: &TcpStream, buf: &mut Vec<u8>, step: usize) -> io::Result<usize> {
    SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        scratch.reserve(step);
        let n = splicer_relay::read_once_into(stream, scratch, step)?;
        buf.extend_from_slice(&scratch[..n]);
        Ok(n)
    })
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
    let step = (limit - buf.len()).min(STEP);
    loop {
        stream
            .readable()
            .await
            .map_err(|e| ReadError::Io(e.kind()))?;
        // A short read also clears the readiness (see `read_once`): no EAGAIN round trip.
        let read = if buf.is_empty() {
            read_fresh(stream, buf, step)
        } else {
            buf.reserve(step);
            let room = buf.capacity().min(limit) - buf.len();
            splicer_relay::read_once_into(stream, buf, room)
        };
        match read {
            Ok(0) => return Err(ReadError::Closed),
            Ok(_) => return Ok(()),
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => continue,
                k => return Err(ReadError::Io(k)),
            },
        }
    }
}
