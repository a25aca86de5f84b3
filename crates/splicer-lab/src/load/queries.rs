//! Seed 004's deployment workload (Fig 6): each client runs sessions of `queries`
//! back-to-back queries, each on a new connection, and the first `drop` of every session
//! are not counted (the paper drops queries 1–2). A query asks the origin for `size` bytes
//! after a think time (the search) drawn uniformly from `think`, told to the origin with
//! `X-Think-Ms` so the client knows it. Each counted query is split into: connect (the
//! client leg's handshake, about one client-side RTT), the wait for the first response byte
//! less the think time (request and first response packet across both legs: with a warm
//! upstream connection, about one client RTT plus one upstream RTT), and the transfer from
//! the first byte to the last (the slow start of whichever leg limits it).
//!
//! Seed 004's Fig 7 looks at the queries whose connection saw a retransmission. The client
//! knows of one from its socket's `TCP_INFO` when the query ends: a segment it sent again
//! (a lost SYN or request) or a response segment that arrived out of order (one lost in
//! between and sent again). A lost last segment of a response is invisible from here (it
//! arrives again in order), so the share is a lower bound.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::AsyncWriteExt;

use super::dial::Failed;
use super::http::read_response;
use super::{Report, Stats};
use crate::content::{Pattern, Rng};
use crate::measure::hist::Latency;

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    /// Where queries go: the origin itself, or an edge in front of it (origin-form
    /// requests either way).
    pub target: SocketAddr,
    pub clients: usize,
    /// Sessions per client, one after the other.
    pub sessions: usize,
    pub queries: usize,
    pub drop: usize,
    pub size: u64,
    /// Think time, uniform in this range (ms).
    pub think_ms: (u64, u64),
    /// Longest one query may take.
    pub timeout_s: f64,
    pub seed: u64,
}

impl Params {
    pub fn check(&self) -> Result<(), super::BadParams> {
        if self.clients == 0 || self.sessions == 0 {
            return Err(super::BadParams("--clients and --sessions: at least 1"));
        }
        if self.drop >= self.queries {
            return Err(super::BadParams("--drop must be below --queries"));
        }
        if self.think_ms.0 > self.think_ms.1 {
            return Err(super::BadParams("--think-ms: LOW above HIGH"));
        }
        Ok(())
    }
}

/// The parts of the counted queries.
#[derive(Default)]
struct Parts {
    connect: Latency,
    first_byte: Latency,
    transfer: Latency,
    /// The whole query less its think time.
    unthought: Latency,
    /// Whole queries (think time included, as Fig 7 plots them) whose connection the
    /// client saw lose a segment, and the others.
    lossy: Latency,
    clean: Latency,
}

pub async fn run(p: Params) -> anyhow::Result<Report> {
    p.check()?;
    let stats = Stats::shared();
    let parts = Arc::new(Mutex::new(Parts::default()));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..p.clients {
        let (p, stats, parts) = (p.clone(), stats.clone(), parts.clone());
        tasks.spawn(async move {
            let mut rng = Rng::new(p.seed.wrapping_add(c as u64 * 7919));
            let pattern = Pattern::new(p.seed);
            // Clients start spread over the first think range, not in lockstep.
            let spread = rng.between(0, p.think_ms.1.max(1));
            tokio::time::sleep(Duration::from_millis(spread)).await;
            for _ in 0..p.sessions {
                for q in 0..p.queries {
                    let think = rng.between(p.think_ms.0, p.think_ms.1);
                    let began = Instant::now();
                    let timeout = Duration::from_secs_f64(p.timeout_s);
                    let r = tokio::time::timeout(timeout, query(&p, think, &pattern)).await;
                    let counted = q >= p.drop;
                    let mut st = stats.lock().expect("stats");
                    match r {
                        Ok(Ok(t)) => {
                            st.done(start, began, p.size, counted);
                            if counted {
                                let mut parts = parts.lock().expect("parts");
                                parts.connect.record(t.connect);
                                parts.first_byte.record(
                                    t.first_byte.saturating_sub(Duration::from_millis(think)),
                                );
                                parts.transfer.record(t.transfer);
                                let whole = began.elapsed();
                                parts
                                    .unthought
                                    .record(whole.saturating_sub(Duration::from_millis(think)));
                                if t.lossy {
                                    parts.lossy.record(whole);
                                } else {
                                    parts.clean.record(whole);
                                }
                            }
                        }
                        Ok(Err(f)) => st.failed(&f),
                        Err(_) => st.error("timeout"),
                    }
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let secs = start.elapsed().as_secs_f64();
    let st = stats.lock().expect("stats");
    let mut r = Report::new("queries", serde_json::to_value(&p)?, &st, secs);
    let parts = parts.lock().expect("parts");
    r.extra = serde_json::json!({
        "connect": parts.connect.summary(),
        "first_byte_less_think": parts.first_byte.summary(),
        "transfer": parts.transfer.summary(),
        "less_think": parts.unthought.summary(),
        "lossy": parts.lossy.summary(),
        // Fig 7 is the lossy queries' distribution.
        "lossy_cdf": parts.lossy.cdf(),
        "lossless": parts.clean.summary(),
    });
    Ok(r)
}

/// One query's times.
struct Times {
    connect: Duration,
    /// From sending the request to the first response byte (think time included).
    first_byte: Duration,
    /// From the first response byte to the last.
    transfer: Duration,
    /// Whether the client saw its connection lose a segment (the module's comment).
    lossy: bool,
}

async fn query(p: &Params, think: u64, pattern: &Pattern) -> Result<Times, Failed> {
    let t0 = Instant::now();
    let mut s = tokio::net::TcpStream::connect(p.target)
        .await
        .map_err(|e| Failed::new("connect", e))?;
    let _ = s.set_nodelay(true);
    let connect = t0.elapsed();
    let req = format!(
        "GET /bytes/{}?seed={} HTTP/1.1\r\nHost: {}\r\nUser-Agent: splicer-lab\r\n\
         X-Think-Ms: {think}\r\nConnection: close\r\n\r\n",
        p.size, p.seed, p.target
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| Failed::new("send", e))?;
    let sent = Instant::now();
    s.peek(&mut [0u8; 1])
        .await
        .map_err(|e| Failed::new("receive", e))?;
    let first = Instant::now();
    read_response(&mut s, &mut Vec::new(), pattern, p.size).await?;
    let transfer = first.elapsed();
    let lossy = splicer_sys::sock::tcp_info(s.as_fd())
        .map(|i| i.total_retrans > 0 || i.rcv_ooopack > 0)
        .map_err(|e| Failed::new("receive", e))?;
    Ok(Times {
        connect,
        first_byte: first - sent,
        transfer,
        lossy,
    })
}
