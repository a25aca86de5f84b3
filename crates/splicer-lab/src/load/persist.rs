//! Seed 004's stress test of a persistent connection: one HTTP/1.1 keep-alive connection,
//! requests sent at a fixed rate whether or not earlier responses have arrived (so they
//! pipeline when the connection falls behind), ~50 KB responses. Each request's time runs
//! from when it was sent to the end of its response; the report gives the share
//! that took 2 round trips or more (a connection with a warm, large window needs one).
//!
//! The paper counts every request from the connection's first. A new connection opens its
//! window in its first round trips, so `--warmup-secs` names, before the run, the requests
//! due in its first seconds: the report counts the slow ones of all requests and, apart,
//! of the requests due after (what an edge's long-kept upstream connection sees).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::AsyncWriteExt;

use super::dial::{dial, Via};
use super::http::{read_response, Get};
use super::{Report, Stats};
use crate::content::Pattern;

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub origin: SocketAddr,
    pub via: Via,
    /// Requests per second (1 to 1000 in the paper).
    pub rate: f64,
    pub count: u64,
    pub size: u64,
    /// The round trip the latencies are compared with; `None`: the TCP connect time.
    pub rtt_ms: Option<f64>,
    /// Requests due before this second of the run are the warm-up (0: none).
    pub warmup_secs: f64,
    pub seed: u64,
}

impl Params {
    /// Requests due before `warmup_secs`: request `i` is due at `i / rate`.
    pub fn warmup_requests(&self) -> u64 {
        ((self.warmup_secs * self.rate).ceil().max(0.0) as u64).min(self.count)
    }
}

pub async fn run(p: Params) -> anyhow::Result<Report> {
    anyhow::ensure!(
        p.rate > 0.0 && p.rate <= 100_000.0,
        "--rate: 0 to 100000 per second"
    );
    anyhow::ensure!(p.count > 0, "--count: at least 1");
    anyhow::ensure!(
        p.warmup_secs >= 0.0 && p.warmup_secs.is_finite(),
        "--warmup-secs: 0 or more"
    );
    anyhow::ensure!(
        matches!(p.via, Via::Direct | Via::HttpProxy(_)),
        "--via: direct or http://PROXY"
    );
    let t = Instant::now();
    let s = dial(p.via, p.origin).await.map_err(|f| f.error)?;
    let connect = t.elapsed();
    let rtt = p
        .rtt_ms
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .unwrap_or(connect);
    let (mut rd, mut wr) = s.into_split();
    let get = Get {
        origin: p.origin,
        size: p.size,
        seed: p.seed,
        cacheable: false,
        absolute: matches!(p.via, Via::HttpProxy(_)),
        keep_alive: true,
    }
    .encode();
    let due: Arc<Mutex<VecDeque<Instant>>> = Arc::default();
    let notify = Arc::new(tokio::sync::Notify::new());
    let start = Instant::now();
    let writer = {
        let (due, notify, count, rate) = (due.clone(), notify.clone(), p.count, p.rate);
        tokio::spawn(async move {
            for i in 0..count {
                let at = start + Duration::from_secs_f64(i as f64 / rate);
                tokio::time::sleep_until(at.into()).await;
                // Timed from the actual send: tokio's timer wakes up to 1 ms late.
                due.lock().expect("due").push_back(Instant::now());
                notify.notify_one();
                wr.write_all(get.as_bytes()).await?;
            }
            std::io::Result::Ok(wr)
        })
    };
    let pattern = Pattern::new(p.seed);
    let mut stats = Stats::default();
    let mut slow = 0u64;
    let warmup = p.warmup_requests();
    let mut slow_after_warmup = 0u64;
    let mut done_after_warmup = 0u64;
    // Second of the run each slow request was sent in: a window still opening shows as slow
    // requests in the first seconds only, a fault of the path as slow requests throughout.
    let mut slow_by_second: BTreeMap<u64, u64> = BTreeMap::new();
    let mut buf = Vec::new();
    for i in 0..p.count {
        let at = loop {
            if let Some(at) = due.lock().expect("due").pop_front() {
                break at;
            }
            notify.notified().await;
        };
        match read_response(&mut rd, &mut buf, &pattern, p.size).await {
            Ok(n) => {
                let took = at.elapsed();
                let counted = i >= warmup;
                done_after_warmup += u64::from(counted);
                if took >= rtt * 2 {
                    slow += 1;
                    slow_after_warmup += u64::from(counted);
                    let second = at.duration_since(start).as_secs();
                    *slow_by_second.entry(second).or_default() += 1;
                }
                stats.done(start, at, n, true);
            }
            Err(f) => {
                stats.failed(&f);
                break;
            }
        }
    }
    writer.abort();
    let secs = start.elapsed().as_secs_f64();
    let mut r = Report::new("persist", serde_json::to_value(&p)?, &stats, secs);
    r.extra = serde_json::json!({
        "rtt_ms": rtt.as_secs_f64() * 1000.0,
        "rtt_from": if p.rtt_ms.is_some() { "given" } else { "tcp connect" },
        "at_least_2rtt": slow,
        "share_at_least_2rtt": slow as f64 / stats.completed.max(1) as f64,
        "at_least_2rtt_by_second": slow_by_second,
        "warmup_requests": warmup,
        "completed_after_warmup": done_after_warmup,
        "at_least_2rtt_after_warmup": slow_after_warmup,
    });
    Ok(r)
}
