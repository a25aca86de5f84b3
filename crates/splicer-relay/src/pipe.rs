//! The `pipe` engine: `splice(2)` from the source socket into a pooled pipe, then from the
//! pipe into the destination socket. The length given to the first `splice` is the
//! remaining bound, so a bounded splice stops at exactly `max` bytes.

use std::io;
use std::os::fd::AsFd;

use splicer_sys::pipe::splice;
use tokio::io::Interest;

use crate::io::Job;
use crate::outcome::End;
use crate::pool::PipePool;

/// Runs the splice; `Err` only when no pipe could be created (the caller falls back).
pub(crate) async fn run(pipes: &PipePool, job: &mut Job<'_>) -> io::Result<End> {
    loop {
        if job.next_len(1) == 0 {
            return Ok(End::Max);
        }
        if let Err(end) = job.readable().await {
            return Ok(end);
        }
        let mut pipe = pipes.take()?;
        loop {
            let want = job.next_len(pipe.capacity());
            if want == 0 {
                return Ok(End::Max);
            }
            // The pipe is empty here (drained below), so WouldBlock means the socket is.
            let filled = job.from.try_io(Interest::READABLE, || {
                splice(job.from.as_fd(), pipe.write_end(), want)
            });
            match filled {
                Ok(0) => return Ok(End::Eof),
                Ok(n) => {
                    pipe.set_reusable(false);
                    if let Err(end) = drain(job, &pipe, n).await {
                        return Ok(end);
                    }
                    pipe.set_reusable(true);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Ok(End::Source(e.kind())),
            }
        }
    }
}

/// Moves `pending` bytes from the pipe to the destination.
async fn drain(
    job: &mut Job<'_>,
    pipe: &splicer_sys::pipe::Pipe,
    mut pending: usize,
) -> Result<(), End> {
    while pending > 0 {
        match job.to.try_io(Interest::WRITABLE, || {
            splice(pipe.read_end(), job.to.as_fd(), pending)
        }) {
            Ok(n) => {
                pending -= n;
                job.advance(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => job.writable().await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(End::Destination(e.kind())),
        }
    }
    Ok(())
}
