//! Seed 003's loadclient/loadserver: `conns` connections each push `bytes` of deterministic
//! content as fast as they can (directly, through SOCKS5 or through HTTP CONNECT) into a
//! sink that counts every byte and checks it against the content of the seed.
//!
//! Protocol: the client sends 16 bytes (seed, length; big-endian u64 each), then the
//! content, then half-closes. The sink answers with the byte count it received (u64) and
//! 1 if every byte was right and the count is the length, else 0.

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

async fn sink(mut s: TcpStream, patterns: &Patterns) -> std::io::Result<()> {
    let seed = s.read_u64().await?;
    let len = s.read_u64().await?;
    let pattern = patterns.get(seed);
    let mut v = Verifier::new(&pattern);
    let mut ok = true;
    let mut got = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        ok &= v.check(&buf[..n]);
        got += n as u64;
    }
    s.write_u64(got).await?;
    s.write_u8((ok && got == len) as u8).await?;
    s.shutdown().await
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
    let mut pre = [0u8; 16];
    pre[..8].copy_from_slice(&p.seed.to_be_bytes());
    pre[8..].copy_from_slice(&p.bytes.to_be_bytes());
    s.write_all(&pre)
        .await
        .map_err(|e| Failed::new("send", e))?;
    let mut left = p.bytes;
    while left > 0 {
        let k = left.min(BLOCK as u64) as usize;
        s.write_all(pattern.block(k))
            .await
            .map_err(|e| Failed::new("send", e))?;
        left -= k as u64;
        // Throughput over time: a timeline entry per block sent (not a completed
        // operation, so it does not touch the latency statistics).
        let mut st = moved.lock().expect("stats");
        let sec = start.elapsed().as_secs();
        while st.timeline.len() as u64 <= sec {
            let t_s = st.timeline.len() as u64;
            st.timeline.push(super::Second {
                t_s,
                ..Default::default()
            });
        }
        st.timeline[sec as usize].bytes += k as u64;
    }
    s.shutdown().await.map_err(|e| Failed::new("send", e))?;
    let got = s.read_u64().await.map_err(|e| Failed::new("recv", e))?;
    let ok = s.read_u8().await.map_err(|e| Failed::new("recv", e))?;
    if ok != 1 {
        return Err(Failed::msg(
            if got == p.bytes { "corrupt" } else { "short" },
            format!("sink got {got} of {} bytes (ok={ok})", p.bytes),
        ));
    }
    Ok(got)
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
                    Ok(Err(f)) => stats.lock().expect("stats").error(f.kind),
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
    r.extra = serde_json::json!({ "gbit_per_second": stats.bytes as f64 * 8.0 / secs / 1e9 });
    Ok(r)
}
