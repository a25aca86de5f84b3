//! Seed 004's Table 1: how a sender's window grows, round trip by round trip, seen from the
//! receiver. Fetches one object at a time, each on a new connection (so each starts from
//! the sender's first window), and timestamps every read: on a path whose round trip is
//! far longer than a window takes to arrive, the data comes in bursts a round trip apart,
//! and a burst's bytes are the window the sender had in that round trip.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncRead, ReadBuf};

use super::dial::{dial, Failed, Via};
use super::http::{read_response, Get};
use super::{Report, Stats};
use crate::content::Pattern;

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub origin: SocketAddr,
    /// Bytes of the object's body.
    pub size: u64,
    /// Fetches, one after the other.
    pub count: u64,
    /// The path's round trip: a gap of more than half of it between two reads starts the
    /// next burst.
    pub rtt_ms: f64,
    pub seed: u64,
}

/// A reader that notes when each read returned data, and how much.
struct Timed<R> {
    inner: R,
    reads: Vec<(Instant, usize)>,
}

impl<R: AsyncRead + Unpin> AsyncRead for Timed<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.reads.push((Instant::now(), n));
        }
        r
    }
}

/// The bytes of each burst: reads closer than `gap` to the previous one join its burst.
pub fn bursts(reads: &[(Instant, usize)], gap: Duration) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    let mut last: Option<Instant> = None;
    for (at, n) in reads {
        match (last, out.last_mut()) {
            (Some(l), Some(b)) if at.duration_since(l) <= gap => *b += *n as u64,
            _ => out.push(*n as u64),
        }
        last = Some(*at);
    }
    out
}

pub async fn run(p: Params) -> anyhow::Result<Report> {
    anyhow::ensure!(p.count > 0, "--count: at least 1");
    anyhow::ensure!(p.rtt_ms > 0.0, "--rtt-ms: more than 0");
    let gap = Duration::from_secs_f64(p.rtt_ms / 2000.0);
    let get = Get {
        origin: p.origin,
        size: p.size,
        seed: p.seed,
        cacheable: false,
        absolute: false,
        keep_alive: false,
    };
    let pattern = Pattern::new(p.seed);
    let mut stats = Stats::default();
    let mut fetches: Vec<Vec<u64>> = Vec::new();
    let mut heads: Vec<u64> = Vec::new();
    let start = Instant::now();
    for _ in 0..p.count {
        let began = Instant::now();
        let fetch = async {
            let mut s = dial(Via::Direct, p.origin).await?;
            get.send(&mut s).await?;
            let mut timed = Timed {
                inner: s,
                reads: Vec::new(),
            };
            let n = read_response(&mut timed, &mut Vec::new(), &pattern, p.size).await?;
            let read: u64 = timed.reads.iter().map(|(_, k)| *k as u64).sum();
            Ok::<_, Failed>((n, bursts(&timed.reads, gap), read - n))
        };
        match fetch.await {
            Ok((n, b, head)) => {
                stats.done(start, began, n, true);
                fetches.push(b);
                heads.push(head);
            }
            Err(f) => stats.failed(&f),
        }
        // The receiver's delayed ACK and the sender's closing leave nothing behind that
        // the next connection's slow start could see, but a moment apart keeps the bursts
        // of one fetch clear of the next's handshake in any capture.
        tokio::time::sleep(gap).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let mut r = Report::new("windows", serde_json::to_value(&p)?, &stats, secs);
    // The head's bytes are in the first burst: an origin that writes its head apart (the
    // lab's, above 16 KiB, on a TCP_NODELAY socket) sends it as a segment of its own.
    r.extra = serde_json::json!({ "bursts": fetches, "heads": heads });
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_round_trip_apart_are_bursts() {
        let t = Instant::now();
        let at = |ms: u64, n: usize| (t + Duration::from_millis(ms), n);
        let reads = [
            at(0, 1448),
            at(1, 1448),
            at(100, 2896),
            at(101, 2896),
            at(250, 10),
        ];
        assert_eq!(
            bursts(&reads, Duration::from_millis(50)),
            vec![2896, 5792, 10]
        );
        assert!(bursts(&[], Duration::from_millis(50)).is_empty());
    }
}
