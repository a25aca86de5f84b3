//! The `pipe` engine: `splice(2)` from the source socket into a pooled pipe, then from the
//! pipe into the destination socket. The length given to the first `splice` is the
//! remaining bound, so a bounded splice stops at exactly `max` bytes. A tapped splice
//! `tee`s each pipeful into a second pipe before the first is drained, and reads the copy
//! from there: the bytes on their way to the destination never leave the kernel.

use std::io;
use std::os::fd::AsFd;

use splicer_sys::pipe::{splice, tee, Pipe};
use tokio::io::Interest;

use crate::io::Job;
use crate::outcome::End;
use crate::pool::{BufferPool, Lease, PipePool};
use crate::tap::Tap;

/// Runs the splice; `Err` only when no pipe could be created (the caller falls back to
/// `copy`, and gets the tap back for it).
pub(crate) async fn run<'t>(
    pipes: &PipePool,
    buffers: &BufferPool,
    job: &mut Job<'_>,
    mut tap: Option<&'t mut dyn Tap>,
) -> Result<End, (io::Error, Option<&'t mut dyn Tap>)> {
    // The second pipe of a tap, taken with the first.
    let mut copy_pipe: Option<Lease<'_, Pipe>> = None;
    loop {
        if job.next_len(1) == 0 {
            return Ok(End::Max);
        }
        if let Err(end) = job.readable().await {
            return Ok(end);
        }
        let mut pipe = match pipes.take() {
            Ok(p) => p,
            Err(e) => return Err((e, tap)),
        };
        if tap.is_some() && copy_pipe.is_none() {
            match pipes.take() {
                Ok(p) => copy_pipe = Some(p),
                Err(e) => return Err((e, tap)),
            }
        }
        loop {
            let want = job.next_len(pipe.capacity());
            if want == 0 {
                return Ok(End::Max);
            }
            // A paced class reads no faster than its rate: its source's window closes.
            let want = job.paced(want).await;
            // The pipe is empty here (drained below), so WouldBlock means the socket is.
            let filled = job.from.try_io(Interest::READABLE, || {
                splice(job.from.as_fd(), pipe.write_end(), want)
            });
            match filled {
                Ok(0) => return Ok(End::Eof),
                Ok(n) => {
                    job.unread(want - n);
                    pipe.set_reusable(false);
                    if let (Some(t), Some(c)) = (tap.as_mut(), copy_pipe.as_mut()) {
                        if !copy_out(&pipe, c, buffers, n, &mut **t) {
                            tap = None;
                        }
                    }
                    if let Err(end) = drain(job, &pipe, n).await {
                        return Ok(end);
                    }
                    pipe.set_reusable(true);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    job.unread(want);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => job.unread(want),
                Err(e) => return Ok(End::Source(e.kind())),
            }
        }
    }
}

/// Hands the tap a copy of the `n` bytes in `pipe`: `tee` into `copy` (empty, as large as
/// `pipe`), then read from `copy`. Returns the tap's wish to go on; a failure of `tee`
/// (not expected: both are pipes and `copy` has room) ends the tap, not the splice.
fn copy_out(
    pipe: &Pipe,
    copy: &mut Lease<'_, Pipe>,
    buffers: &BufferPool,
    n: usize,
    tap: &mut dyn Tap,
) -> bool {
    // Left unusable (closed, not pooled) unless emptied below.
    copy.set_reusable(false);
    // One tee: `copy` is empty and as large as `pipe`, so all `n` bytes fit; a short tee
    // (never seen) ends the tap rather than risk tapping bytes twice.
    loop {
        match tee(pipe.read_end(), copy.write_end(), n) {
            Ok(k) if k == n => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            _ => return false,
        }
    }
    let mut buf = buffers.take();
    let mut left = n;
    let mut go_on = true;
    while left > 0 {
        let want = left.min(buf.len());
        match splicer_sys::pipe::read(copy.read_end(), &mut buf[..want]) {
            Ok(0) => return false,
            Ok(k) => {
                left -= k;
                if go_on {
                    go_on = tap.tap(&buf[..k]);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    copy.set_reusable(true);
    go_on
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
