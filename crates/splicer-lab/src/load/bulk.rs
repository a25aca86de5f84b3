//! Seed 003's loadclient/loadserver: `conns` connections each push `bytes` of deterministic
//! content as fast as they can (directly, through SOCKS5 or through HTTP CONNECT) into a
//! sink that counts every byte and checks it against the content of the seed.
//!
//! With `both_ways`, the sink sends as much back at the same time (content of seed + 1),
//! which the client checks the same way: full-duplex load, and a half-close in the middle
//! of a transfer (the client finishes sending while still receiving).
//!
//! Protocol: the client sends 24 bytes (seed, length, length wanted back; big-endian u64
//! each), then the content, then half-closes. The sink sends the bytes wanted back while it
//! reads, then the byte count it received (u64) and 1 if every byte was right and the count
//! is the length, else 0.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::dial::{dial, Failed, Via};
use super::http::Verifier;
use super::{Report, Stats};
use crate::content::{Pattern, Patterns, BLOCK};

/// Writes `len` bytes of `pattern`.
async fn send_content<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    pattern: &Pattern,
    mut len: u64,
    mut each: impl FnMut(u64),
) -> std::io::Result<()> {
    while len > 0 {
        let k = len.min(BLOCK as u64) as usize;
        w.write_all(pattern.block(k)).await?;
        len -= k as u64;
        each(k as u64);
    }
    Ok(())
}

/// Reads to EOF (or `limit` bytes), checking against `pattern`; returns the bytes read and
/// where the first 64 KiB piece that differed starts, if one did.
async fn check_content<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
    pattern: &Pattern,
    limit: Option<u64>,
) -> std::io::Result<(u64, Option<u64>)> {
    let mut v = Verifier::new(pattern);
    let (mut bad, mut got) = (None, 0u64);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let want = limit.map_or(buf.len(), |l| (l - got).min(buf.len() as u64) as usize);
        if want == 0 {
            break;
        }
        let n = r.read(&mut buf[..want]).await?;
        if n == 0 {
            break;
        }
        if !v.check(&buf[..n]) && bad.is_none() {
            bad = Some(got);
        }
        got += n as u64;
    }
    Ok((got, bad))
}

async fn sink(mut s: TcpStream, patterns: &Patterns) -> std::io::Result<()> {
    let seed = s.read_u64().await?;
    let len = s.read_u64().await?;
    let back = s.read_u64().await?;
    let (pattern, reply) = (patterns.get(seed), patterns.get(seed.wrapping_add(1)));
    let (mut rd, mut wr) = s.split();
    let (read, sent) = tokio::join!(
        check_content(&mut rd, &pattern, None),
        send_content(&mut wr, &reply, back, |_| {})
    );
    let (got, bad) = read?;
    sent?;
    wr.write_u64(got).await?;
    wr.write_u8((bad.is_none() && got == len) as u8).await?;
    wr.shutdown().await
}

/// The sink (loadserver): serves until the listener fails.
pub async fn serve(listener: TcpListener) {
    let patterns = Arc::new(Patterns::default());
    while let Ok((s, _)) = listener.accept().await {
        let patterns = patterns.clone();
        tokio::spawn(async move {
            let _ = sink(s, &patterns).await;
        });
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub sink: SocketAddr,
    pub via: Via,
    pub conns: usize,
    /// Bytes each connection sends.
    pub bytes: u64,
    /// Whether the sink sends as many bytes back at the same time.
    pub both_ways: bool,
    pub seed: u64,
    pub timeout_s: f64,
}

async fn push(
    p: &Params,
    pattern: &Pattern,
    moved: &Mutex<Stats>,
    start: Instant,
) -> Result<u64, Failed> {
    let mut s = dial(p.via, p.sink).await?;
    let back = if p.both_ways { p.bytes } else { 0 };
    let mut pre = [0u8; 24];
    pre[..8].copy_from_slice(&p.seed.to_be_bytes());
    pre[8..16].copy_from_slice(&p.bytes.to_be_bytes());
    pre[16..].copy_from_slice(&back.to_be_bytes());
    s.write_all(&pre)
        .await
        .map_err(|e| Failed::new("send", e))?;
    let reply = Pattern::new(p.seed.wrapping_add(1));
    let (mut rd, mut wr) = s.split();
    // Throughput over time: a timeline entry per block sent (not a completed operation, so
    // it does not touch the latency statistics).
    let count = |k: u64| {
        let mut st = moved.lock().expect("stats");
        let sec = start.elapsed().as_secs();
        while st.timeline.len() as u64 <= sec {
            let t_s = st.timeline.len() as u64;
            st.timeline.push(super::Second {
                t_s,
                ..Default::default()
            });
        }
        st.timeline[sec as usize].bytes += k;
    };
    let send = async {
        send_content(&mut wr, pattern, p.bytes, &count).await?;
        wr.shutdown().await
    };
    let (sent, received) = tokio::join!(send, check_content(&mut rd, &reply, Some(back)));
    sent.map_err(|e| Failed::new("send", e))?;
    let (got_back, bad) = received.map_err(|e| Failed::new("recv", e))?;
    // Bytes received count too (at the end: the totals, hence CPU per GiB, are what matter).
    count(got_back);
    if let Some(at) = bad {
        return Err(Failed::msg(
            "corrupt",
            format!("received {got_back} of {back} bytes back, wrong from the read at byte {at}"),
        ));
    }
    if got_back != back {
        return Err(Failed::msg(
            "short",
            format!("received {got_back} of {back} bytes back"),
        ));
    }
    let got = rd.read_u64().await.map_err(|e| Failed::new("recv", e))?;
    let ok = rd.read_u8().await.map_err(|e| Failed::new("recv", e))?;
    if ok != 1 {
        return Err(Failed::msg(
            if got == p.bytes { "corrupt" } else { "short" },
            format!("sink got {got} of {} bytes (ok={ok})", p.bytes),
        ));
    }
    Ok(got + back)
}

/// Runs the connections together; the throughput is all bytes over the time from the first
/// start to the last end.
pub async fn run(p: Params) -> anyhow::Result<Report> {
    anyhow::ensure!(p.conns > 0, "--conns: at least 1");
    anyhow::ensure!(
        !matches!(p.via, Via::HttpProxy(_)),
        "--via: bulk needs direct, connect:// or socks5://"
    );
    let stats = Stats::shared();
    let pattern = Arc::new(Pattern::new(p.seed));
    let p = Arc::new(p);
    let start = Instant::now();
    let timeout = Duration::from_secs_f64(p.timeout_s);
    let tasks: Vec<_> = (0..p.conns)
        .map(|_| {
            let (p, pattern, stats) = (p.clone(), pattern.clone(), stats.clone());
            tokio::spawn(async move {
                let began = Instant::now();
                match tokio::time::timeout(timeout, push(&p, &pattern, &stats, start)).await {
                    Ok(Ok(n)) => {
                        let mut st = stats.lock().expect("stats");
                        st.latency.record(began.elapsed());
                        st.completed += 1;
                        st.bytes += n;
                    }
                    Ok(Err(f)) => stats.lock().expect("stats").failed(&f),
                    Err(_) => stats.lock().expect("stats").error("timeout"),
                }
            })
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    let secs = start.elapsed().as_secs_f64();
    let stats = stats.lock().expect("stats");
    let mut r = Report::new("bulk", serde_json::to_value(&*p)?, &stats, secs);
    // `bytes` counts both directions when both ways.
    r.extra = serde_json::json!({ "gbit_per_second": stats.bytes as f64 * 8.0 / secs / 1e9 });
    Ok(r)
}
