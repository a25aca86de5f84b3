//! Readiness waits under the idle timeout, and writing a buffer fully.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::outcome::End;

/// When bytes last moved. A tunnel's two splices share one, so a tunnel is idle only when
/// both directions are.
#[derive(Debug)]
pub(crate) struct Activity {
    base: Instant,
    last_nanos: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Activity {
        Activity {
            base: Instant::now(),
            last_nanos: AtomicU64::new(0),
        }
    }
    pub(crate) fn touch(&self) {
        let n = self.base.elapsed().as_nanos() as u64;
        self.last_nanos.store(n, Ordering::Relaxed);
    }
    fn last(&self) -> Instant {
        self.base + Duration::from_nanos(self.last_nanos.load(Ordering::Relaxed))
    }
}

/// What every engine needs to run one splice.
pub(crate) struct Job<'a> {
    pub from: &'a TcpStream,
    pub to: &'a TcpStream,
    /// Bytes still allowed when bounded.
    pub remaining: Option<u64>,
    pub idle: Option<Duration>,
    pub activity: &'a Activity,
    /// Bytes moved so far; read by the tunnel when it aborts a direction.
    pub moved: &'a AtomicU64,
    /// How fast the user-space engines may read (the pacer's `rate` mode).
    pub pace: crate::pacer::Paced<'a>,
}

impl Job<'_> {
    /// Largest next transfer: `cap`, or less when the bound is near. 0 means the bound is met.
    pub(crate) fn next_len(&self, cap: usize) -> usize {
        match self.remaining {
            Some(r) => r.min(cap as u64) as usize,
            None => cap,
        }
    }
    /// Waits until the pacer lets some of `want` bytes be read, and returns how many (all
    /// of them at once when the splice's class is not paced).
    pub(crate) async fn paced(&mut self, want: usize) -> usize {
        self.pace.take(want).await
    }

    /// Gives the pacer back what a read took leave for and did not read.
    pub(crate) fn unread(&mut self, n: usize) {
        self.pace.unused(n);
    }

    pub(crate) fn advance(&mut self, n: usize) {
        if let Some(r) = self.remaining.as_mut() {
            *r -= n as u64;
        }
        self.moved.fetch_add(n as u64, Ordering::Relaxed);
        self.activity.touch();
    }

    /// Waits until the source is readable; `Err(End::Idle)` when nothing moved for `idle`.
    pub(crate) async fn readable(&self) -> Result<(), End> {
        wait(|| self.from.readable(), self.idle, self.activity)
            .await
            .map_err(|e| e.unwrap_or_else(End::Source))
    }

    pub(crate) async fn writable(&self) -> Result<(), End> {
        wait(|| self.to.writable(), self.idle, self.activity)
            .await
            .map_err(|e| e.unwrap_or_else(End::Destination))
    }

    /// Writes all of `data` to the destination.
    pub(crate) async fn write_all(&mut self, mut data: &[u8]) -> Result<(), End> {
        while !data.is_empty() {
            match self.to.try_write(data) {
                Ok(n) => {
                    data = &data[n..];
                    self.advance(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable().await?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(End::Destination(e.kind())),
            }
        }
        Ok(())
    }
}

/// Reads once from a non-blocking socket. A short read (fewer bytes than `buf` holds) means
/// the socket is drained, so its readiness is cleared right away instead of being learnt from
/// an `EAGAIN` on the next read. The readiness is the one observed *before* the read, as in
/// tokio's own `poll_read`: an arrival seen by the reactor after it keeps the socket ready,
/// so no wake-up is lost.
pub fn read_once(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let room = buf.len();
    read_short(stream, room, || stream.try_read(buf))
}

/// [`read_once`] into the spare capacity of `buf`, at most `max` bytes, appended: the room
/// is not zeroed first (a head read costs a `memset` of its 8 KiB room otherwise, 3% of the
/// proxy's CPU on 1 KiB exchanges). `buf` must have spare capacity; returns the bytes read.
pub fn read_once_into(stream: &TcpStream, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    use bytes::BufMut;
    let room = (buf.capacity() - buf.len()).min(max);
    read_short(stream, room, || {
        stream.try_read_buf(&mut (&mut *buf).limit(room))
    })
}

/// One `read` of up to `room` bytes under the readiness observed before it; a short read
/// clears that readiness (see [`read_once`]).
fn read_short(
    stream: &TcpStream,
    room: usize,
    mut read: impl FnMut() -> io::Result<usize>,
) -> io::Result<usize> {
    let mut got = 0;
    let r = stream.try_io(tokio::io::Interest::READABLE, || {
        let n = read()?;
        got = n;
        if n > 0 && n < room {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(n)
        }
    });
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
        r => r,
    }
}

/// Awaits a readiness future, re-armed until the shared activity has been still for `idle`.
/// Errors: `Ok(End::Idle)` on timeout, `Err(kind)` for a readiness error.
async fn wait<F, Fut>(
    mut make: F,
    idle: Option<Duration>,
    activity: &Activity,
) -> Result<(), Result<End, io::ErrorKind>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = io::Result<()>>,
{
    let Some(idle) = idle else {
        return make().await.map_err(|e| Err(e.kind()));
    };
    loop {
        match tokio::time::timeout_at(activity.last() + idle, make()).await {
            Ok(r) => return r.map_err(|e| Err(e.kind())),
            Err(_) if activity.last() + idle <= Instant::now() => return Err(Ok(End::Idle)),
            Err(_) => {} // the other direction moved bytes meanwhile: keep waiting
        }
    }
}

/// Writes all of `data` to a non-blocking socket, waiting for room only when it is full (a
/// prefix, a reply owed to the client before a tunnel).
pub(crate) async fn write_all(s: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match s.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => s.writable().await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
