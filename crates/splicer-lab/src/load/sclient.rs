//! Closed-loop s-clients (seed 000): each emulated client loops connect → (CONNECT and the
//! emulated SSL handshake, if asked) → HTTP/1.0 GET → read and check the body → close, with
//! no pause. The latency of one loop (SSL exchange included, as in the paper) is recorded
//! when it starts after the warm-up and ends before the cool-down.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use super::dial::{dial, Failed, Via};
use super::http::{read_response, Get};
use super::{Report, Shared, Stats, Window};
use crate::content::Pattern;
use crate::ssl;

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    /// The origin server.
    pub origin: SocketAddr,
    pub via: Via,
    pub clients: usize,
    pub size: u64,
    pub cacheable: bool,
    /// Emulate the SSL handshake before the GET (needs `direct` or `connect://`).
    pub ssl: bool,
    /// Share of abbreviated handshakes (seed 000: 60%).
    pub abbreviated: f64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub cooldown_s: f64,
    /// Longest one loop may take before it counts as a timeout.
    pub timeout_s: f64,
    pub seed: u64,
    /// HTTP/1.1 requests one after the other on one kept-alive connection per client
    /// (the benchmarks' clients) instead of a new connection per request (seed 000's).
    pub keep_alive: bool,
    /// With `keep_alive`, requests per connection (0: no bound): the last one is HTTP/1.0,
    /// so the server closes the connection after its answer (seed 002's 1 to 16).
    #[serde(default)]
    pub per_connection: u32,
    /// Think time after each request, seconds (seed 000's s-clients: none; a single client
    /// whose exchanges must not overlap, as for Table IV's captures: a little).
    pub pause_s: f64,
}

impl Params {
    pub fn check(&self) -> Result<(), super::BadParams> {
        if self.clients == 0 {
            return Err(super::BadParams("--clients: at least 1"));
        }
        if self.ssl && self.keep_alive {
            return Err(super::BadParams(
                "--ssl and --keep-alive: the handshake is per connection",
            ));
        }
        if self.ssl && matches!(self.via, Via::HttpProxy(_) | Via::Socks5(_)) {
            return Err(super::BadParams(
                "--ssl: the handshake needs --via direct or connect://PROXY",
            ));
        }
        if self.per_connection > 0 && !self.keep_alive {
            return Err(super::BadParams("--per-connection needs --keep-alive"));
        }
        if !(0.0..=1.0).contains(&self.abbreviated) {
            return Err(super::BadParams("--abbreviated: a share from 0 to 1"));
        }
        if !(0.0..=60.0).contains(&self.pause_s) {
            return Err(super::BadParams("--pause: 0 to 60 seconds"));
        }
        if self.warmup_s + self.cooldown_s >= self.duration_s {
            return Err(super::BadParams(
                "--duration must exceed --warmup plus --cooldown",
            ));
        }
        Ok(())
    }
}

/// A kept-alive connection, the bytes read past its last response, and the requests it
/// carried.
type Conn = (tokio::net::TcpStream, Vec<u8>, u32);

async fn one(
    p: &Params,
    pattern: &Pattern,
    rng: &mut rand::rngs::SmallRng,
    kept: &mut Option<Conn>,
    dials: &AtomicU64,
) -> Result<u64, Failed> {
    let (mut s, mut buf, done) = match kept.take() {
        Some(c) => c,
        None => {
            dials.fetch_add(1, Ordering::Relaxed);
            let mut s = dial(p.via, p.origin).await?;
            if p.ssl {
                let full = rng.random::<f64>() >= p.abbreviated;
                ssl::exchange(&mut s, ssl::Side::Client, full, &[])
                    .await
                    .map_err(|e| Failed::new("ssl", e))?;
            }
            (s, Vec::new(), 0)
        }
    };
    let last = p.per_connection > 0 && done + 1 >= p.per_connection;
    let get = Get {
        origin: p.origin,
        size: p.size,
        seed: p.seed,
        cacheable: p.cacheable,
        absolute: matches!(p.via, Via::HttpProxy(_)),
        keep_alive: p.keep_alive && !last,
    };
    get.send(&mut s).await?;
    let n = read_response(&mut s, &mut buf, pattern, p.size).await?;
    if get.keep_alive {
        *kept = Some((s, buf, done + 1));
    } else {
        let _ = s.shutdown().await;
    }
    Ok(n)
}

async fn client(
    i: usize,
    p: Arc<Params>,
    pattern: Arc<Pattern>,
    w: Window,
    stats: Shared,
    dials: Arc<AtomicU64>,
) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(p.seed ^ (i as u64).wrapping_mul(0x9E37));
    // Spread the first connections over the first second (or the warm-up if shorter).
    let spread = w.warmup.min(Duration::from_secs(1));
    tokio::time::sleep(spread.mul_f64(i as f64 / p.clients as f64)).await;
    let timeout = Duration::from_secs_f64(p.timeout_s);
    let mut kept = None;
    while Instant::now() < w.end() {
        let began = Instant::now();
        let left = w.end().saturating_duration_since(began);
        let exchange = one(&p, &pattern, &mut rng, &mut kept, &dials);
        match tokio::time::timeout(timeout.min(left), exchange).await {
            Ok(Ok(bytes)) => {
                let counted = w.counts(began, Instant::now());
                stats
                    .lock()
                    .expect("stats")
                    .done(w.start, began, bytes, counted);
            }
            Ok(Err(f)) => {
                stats.lock().expect("stats").failed(&f);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // A loop cut by the end of the run is not a timeout.
            Err(_) if Instant::now() >= w.end() => break,
            Err(_) => stats.lock().expect("stats").error("timeout"),
        }
        if p.pause_s > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(p.pause_s)).await;
        }
    }
}

/// Runs the s-clients for the whole duration and reports.
pub async fn run(p: Params) -> anyhow::Result<Report> {
    p.check()?;
    let w = Window::new(
        Duration::from_secs_f64(p.duration_s),
        Duration::from_secs_f64(p.warmup_s),
        Duration::from_secs_f64(p.cooldown_s),
    );
    let stats = Stats::shared();
    let pattern = Arc::new(Pattern::new(p.seed));
    let p = Arc::new(p);
    let dials = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..p.clients)
        .map(|i| {
            let (p, pattern, stats, dials) =
                (p.clone(), pattern.clone(), stats.clone(), dials.clone());
            tokio::spawn(client(i, p, pattern, w, stats, dials))
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    let stats = stats.lock().expect("stats");
    let mut r = Report::new("sclient", serde_json::to_value(&*p)?, &stats, w.measured());
    // Over the whole run, warm-up and cool-down included (as the errors).
    r.extra = serde_json::json!({ "connections": dials.load(Ordering::Relaxed) });
    Ok(r)
}
