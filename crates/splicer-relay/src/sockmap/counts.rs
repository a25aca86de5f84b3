//! What the `sockmap` relay knows of a tunnel: the kernel's byte counters of both sockets,
//! from baselines taken at the start, and their end-of-stream and error events.

use std::io;
use std::os::fd::AsFd;

use splicer_sys::sock::{outq_bytes, readable_bytes, tcp_info, TcpInfo};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::outcome::End;
use crate::tcp::TCP_ESTABLISHED;

/// One direction of the tunnel.
pub(super) struct Dir<'a> {
    pub to: &'a TcpStream,
    /// `from`'s bytes received when the splice began, and the bytes the proxy had handed to
    /// `to` itself by then (acknowledged or not: see [`handed`]).
    pub base_received: u64,
    pub base_acked: u64,
    /// Bytes written by the proxy itself before the splice (the prefix).
    pub written: u64,
    /// The source sent FIN; waiting for the destination's acknowledgements to pass it on.
    pub fin: bool,
    /// What the last look at the counters saw.
    pub seen: Seen,
    pub end: Option<End>,
    /// The bytes the program's gate held for the proxy, and how many it relayed.
    pub held: super::held::Held,
}

/// One direction's counters at the last look: bytes acknowledged by the destination's
/// peer, bytes arrived on the source, and the bytes between them that were in neither the
/// destination's TCP nor its peer (the kernel's redirect queue).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Seen {
    pub acked: u64,
    pub bytes: u64,
    pub queued: u64,
    /// The most `queued` seen in the tunnel.
    pub peak: u64,
    /// Since when, while a FIN waits, bytes were missing from the destination's TCP: not
    /// acknowledged and not in its send queue either, with nothing acknowledged between
    /// looks.
    missing_since: Option<Instant>,
}

impl Dir<'_> {
    /// Data bytes that arrived on `from` since the start (a received FIN counts one in
    /// the kernel's figure and is taken off).
    pub(super) fn arrived(&self, from: &TcpInfo) -> u64 {
        let fin = u64::from(self.fin && from.state != TCP_ESTABLISHED);
        from.bytes_received
            .saturating_sub(self.base_received)
            .saturating_sub(fin)
    }
    pub(super) fn bytes(&self, from: &TcpInfo) -> u64 {
        self.written + self.arrived(from)
    }
}

impl Seen {
    /// A new look, at `now`, at a direction whose source delivered `bytes` so far, of which
    /// the destination's peer acknowledged `acked`, with `outq` in the destination's send
    /// queue (`None`: unknown). Bytes are missing when a FIN waits behind bytes that are
    /// neither acknowledged nor in the send queue, and nothing was acknowledged since the
    /// last look. Bytes taken off the source and kept by the kernel would be waited for
    /// forever; seen under loss before the program cut partly overlapping retransmissions
    /// (docs/engines.md), kept as a safety net. Only while nothing moves: a destination with
    /// a small send buffer takes the redirect queue one buffer per kernel tick with its send
    /// queue empty in between, which once reset such tunnels.
    pub(super) fn look(
        self,
        fin: bool,
        acked: u64,
        bytes: u64,
        outq: Option<usize>,
        now: Instant,
    ) -> Seen {
        let queued = bytes.saturating_sub(acked + outq.unwrap_or(0) as u64);
        let missing = fin && queued > 0 && outq == Some(0) && acked == self.acked;
        Seen {
            acked,
            bytes,
            queued,
            peak: self.peak.max(queued),
            missing_since: missing.then(|| self.missing_since.unwrap_or(now)),
        }
    }

    /// How long bytes have been missing without a break, as of `now` (zero if they are not).
    pub(super) fn missing_for(&self, now: Instant) -> std::time::Duration {
        self.missing_since.map_or(std::time::Duration::ZERO, |t| {
            now.saturating_duration_since(t)
        })
    }
}

/// `TCP_INFO` and the bytes queued unread, taken at one moment: the pair is read again
/// while bytes keep arriving in between (nothing reads the socket meanwhile, so an
/// unchanged queue means no byte arrived). Without that, a byte arriving between the two
/// calls is counted in one and not the other, and the FIN is passed on too early or never.
pub(super) async fn snapshot(s: &TcpStream) -> io::Result<(TcpInfo, u64)> {
    settled("bytes kept arriving while it was read", || {
        let before = readable_bytes(s.as_fd())?;
        let i = info(s)?;
        let after = readable_bytes(s.as_fd())?;
        let still = after == before && i.bytes_received >= before as u64;
        Ok(Try {
            seen: format!(
                "queued {before} then {after}, received {}",
                i.bytes_received
            ),
            value: still.then_some((i, before as u64)),
        })
    })
    .await
}

/// Bytes the proxy has handed to `s` so far, acknowledged or not: `tcpi_bytes_acked` plus
/// `SIOCOUTQ`, read while no acknowledgement arrives in between (an ACK between the two
/// calls moves bytes from one figure to the other). It is the baseline of the destination's
/// acknowledgements: the SOCKS reply or the CONNECT 200, written before the splice, are
/// the proxy's own bytes, not redirected ones. A baseline taken before such a write and
/// its queue after it once counted the reply as redirected when the client acknowledged it
/// quickly, and passed the FIN on before the bytes it covered (docs/engines.md).
pub(super) async fn baseline_handed(s: &TcpStream) -> io::Result<u64> {
    settled(ACKS_KEPT_ARRIVING, || handed_once(s)).await
}

/// [`baseline_handed`] during the splice's looks, which cannot wait: read in one burst
/// of tries (a look that fails is taken again at the next look).
pub(super) fn handed(s: &TcpStream) -> io::Result<u64> {
    let mut last = String::new();
    for _ in 0..BURST {
        let t = handed_once(s)?;
        if let Some(v) = t.value {
            return Ok(v);
        }
        last = t.seen;
    }
    Err(failed(ACKS_KEPT_ARRIVING, BURST, &last))
}

const ACKS_KEPT_ARRIVING: &str = "acknowledgements kept arriving while it was read";

fn handed_once(s: &TcpStream) -> io::Result<Try<u64>> {
    let acked = info(s)?.bytes_acked;
    let queued = outq_bytes(s.as_fd())? as u64;
    let again = info(s)?.bytes_acked;
    Ok(Try {
        seen: format!("acked {acked} then {again}, unacknowledged {queued}"),
        value: (again == acked).then_some(acked + queued),
    })
}

/// One reading of a pair of counters: the value if nothing moved in between, and what was
/// seen (for the error when nothing ever settles).
struct Try<T> {
    seen: String,
    value: Option<T>,
}

/// Readings taken back to back, and bursts of them at most, with a pause of
/// [`PAUSE`] after each burst. Unlocking the socket at the end of each call runs the CPU's
/// pending network softirq in the caller's own thread, so while a stream flows toward
/// this CPU, back-to-back readings can each see a packet land (a fresh-clone CI run
/// declined a body after 100 readings without a pause, 2026-11-27). The pause lets the
/// softirq run elsewhere and the sender's window fill; it is the runtime's timer, so the
/// proxy's thread serves other connections meanwhile. At most 10 bursts: about 10 ms.
const BURST: u32 = 20;
const BURSTS: u32 = 10;
const PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

/// Takes readings until one is consistent; an error names `what` and the last reading.
async fn settled<T>(what: &str, mut read: impl FnMut() -> io::Result<Try<T>>) -> io::Result<T> {
    let mut last = String::new();
    for burst in 0..BURSTS {
        if burst > 0 {
            tokio::time::sleep(PAUSE).await;
        }
        for _ in 0..BURST {
            let t = read()?;
            if let Some(v) = t.value {
                return Ok(v);
            }
            last = t.seen;
        }
    }
    Err(failed(what, BURST * BURSTS, &last))
}

fn failed(what: &str, tries: u32, last: &str) -> io::Error {
    io::Error::other(format!(
        "TCP_INFO: {what} ({tries} readings; the last: {last})"
    ))
}

pub(super) fn info(s: &TcpStream) -> io::Result<TcpInfo> {
    tcp_info(s.as_fd())
}

/// What woke a watch waiting on a spliced source.
pub(super) enum Woke {
    /// End of stream or an error.
    Closed,
    /// Bytes on the source's own receive side: redirected ones raise nothing, so these
    /// were passed to the proxy (the gate holding them, or the program keeping them).
    Readable,
}

/// Waits for end of stream, an error, or bytes passed to `s`'s own receive side. The
/// readable readiness it returns on is cleared first, so a stale edge costs one look at
/// the counters, not a loop.
pub(super) async fn woken(s: &TcpStream) -> io::Result<Woke> {
    let r = s.ready(Interest::READABLE).await?;
    if r.is_read_closed() || r.is_error() {
        return Ok(Woke::Closed);
    }
    let _ = s.try_io(Interest::READABLE, || {
        Err::<(), _>(io::Error::from(io::ErrorKind::WouldBlock))
    });
    Ok(Woke::Readable)
}

/// The socket's pending error, if it is one. After the relay shut a socket's sending side
/// (every redirected byte acknowledged first), the kernel's redirect path may still try to
/// pass it the partner's zero-length FIN and record `EPIPE`: no data was lost, so that is
/// not an error.
pub(super) fn real_error(s: &TcpStream, write_side_shut: bool) -> Option<io::Error> {
    let e = s.take_error().ok().flatten()?;
    (!(write_side_shut && e.kind() == io::ErrorKind::BrokenPipe)).then_some(e)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::Seen;

    #[test]
    fn bytes_are_missing_only_while_nothing_moves() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let start = Seen::default();
        // 100 arrived, 40 acknowledged, the send queue empty: 60 in the redirect queue.
        let s = start.look(true, 40, 100, Some(0), at(0));
        assert_eq!((s.queued, s.peak), (60, 60));
        assert_eq!(
            s.missing_for(at(0)),
            Duration::ZERO,
            "acknowledgements moved"
        );
        let s = s.look(true, 40, 100, Some(0), at(20));
        let s = s.look(true, 40, 100, Some(0), at(40));
        assert_eq!(
            s.missing_for(at(50)),
            Duration::from_millis(30),
            "nothing moved since the look at 20 ms, and the bytes are in no queue of TCP's"
        );
        let s = s.look(true, 50, 100, Some(0), at(60));
        assert_eq!(
            s.missing_for(at(60)),
            Duration::ZERO,
            "the queue drains a buffer at a time"
        );
        assert_eq!((s.queued, s.peak), (50, 60));
        // Not without a FIN waiting, nor with bytes in the send queue or an unknown one.
        let fresh = s.look(true, 50, 100, Some(0), at(80));
        assert!(fresh.missing_for(at(80)) == Duration::ZERO && fresh.missing_since.is_some());
        for (fin, outq) in [(false, Some(0)), (true, Some(50)), (true, None)] {
            assert_eq!(
                fresh.look(fin, 50, 100, outq, at(90)).missing_for(at(2000)),
                Duration::ZERO
            );
        }
        // Everything acknowledged: nothing queued, and the wait is over (a wait left
        // standing once reset the tunnel a second after this direction ended).
        let s = fresh.look(true, 100, 100, Some(0), at(100));
        assert_eq!((s.queued, s.missing_for(at(2000))), (0, Duration::ZERO));
    }
}
