//! A SURGE-like open-loop generator (Barford & Crovella's SURGE, the workload model behind
//! seed 002's experiments). Users start pages on their own schedule, whether or not earlier
//! pages have finished (open loop); a page is a base object and its embedded objects,
//! fetched in turn over one HTTP/1.1 connection.
//!
//! Distributions and SURGE's defaults (all seeded, so a run is repeatable):
//! - object popularity: Zipf over `files` objects, exponent 1;
//! - object size: lognormal body (μ 9.357, σ 1.318) with probability 0.93, Pareto tail
//!   (k 133,000 B, α 1.1) otherwise; each object's size is drawn once and is fixed;
//! - objects per page: ⌊Pareto(k 1, α 2.43)⌋ (so at least the base object);
//! - gap between a page's objects (active OFF): Weibull (scale 1.46 s, shape 0.382);
//! - gap between a user's pages (inactive OFF): Pareto (k 1 s, α 1.5).
//!
//! `time_scale` multiplies both OFF times, to fit a workload into a short lab run.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, RngExt, SeedableRng};
use rand_distr::{Distribution, LogNormal, Pareto, Weibull, Zipf};
use serde::Serialize;

use super::dial::{dial, Failed, Via};
use super::http::{read_response, Get};
use super::{Report, Shared, Stats, Window};
use crate::content::Pattern;
use crate::measure::hist::Latency;

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub origin: SocketAddr,
    pub via: Via,
    pub users: usize,
    pub files: u64,
    /// Objects larger than this are cut to it (a bound on one run's traffic).
    pub max_size: u64,
    pub time_scale: f64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub cooldown_s: f64,
    pub timeout_s: f64,
    pub seed: u64,
}

/// SURGE's distributions.
pub struct Model {
    body: LogNormal<f64>,
    tail: Pareto<f64>,
    tail_share: f64,
    popularity: Zipf<f64>,
    objects: Pareto<f64>,
    active_off: Weibull<f64>,
    inactive_off: Pareto<f64>,
}

impl Model {
    pub fn surge(files: u64) -> Model {
        Model {
            body: LogNormal::new(9.357, 1.318).expect("valid"),
            tail: Pareto::new(133_000.0, 1.1).expect("valid"),
            tail_share: 0.07,
            popularity: Zipf::new(files.max(1) as f64, 1.0).expect("valid"),
            objects: Pareto::new(1.0, 2.43).expect("valid"),
            active_off: Weibull::new(1.46, 0.382).expect("valid"),
            inactive_off: Pareto::new(1.0, 1.5).expect("valid"),
        }
    }
    /// An object's size in bytes (at least 1).
    pub fn size<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let x = if rng.random::<f64>() < self.tail_share {
            self.tail.sample(rng)
        } else {
            self.body.sample(rng)
        };
        (x as u64).max(1)
    }
    /// A popularity rank, 1 = most popular.
    pub fn rank<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        self.popularity.sample(rng) as u64
    }
    pub fn objects_per_page<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        self.objects.sample(rng).floor().min(1000.0) as u64
    }
    pub fn active_off<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        Duration::from_secs_f64(self.active_off.sample(rng).min(3600.0))
    }
    pub fn inactive_off<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        Duration::from_secs_f64(self.inactive_off.sample(rng).min(3600.0))
    }
}

/// The size of each of `files` objects, by popularity rank - 1, cut to `max_size`: what a
/// run with this seed asks for (and what `nginx-origin --surge` writes).
pub fn sizes(files: u64, max_size: u64, seed: u64) -> Vec<u64> {
    let model = Model::surge(files);
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..files)
        .map(|_| model.size(&mut rng).min(max_size))
        .collect()
}

struct Shared2 {
    model: Model,
    /// Size of each object, by popularity rank - 1.
    sizes: Vec<u64>,
    pattern: Pattern,
    pages: Mutex<(u64, Latency)>,
}

async fn page(p: &Params, sh: &Shared2, rng: &mut SmallRng, w: Window, stats: &Shared) {
    let began = Instant::now();
    let n = sh.model.objects_per_page(rng);
    let mut conn: Option<tokio::net::TcpStream> = None;
    let mut buf = Vec::new();
    for k in 0..n {
        if k > 0 {
            tokio::time::sleep(sh.model.active_off(rng).mul_f64(p.time_scale)).await;
        }
        if Instant::now() >= w.end() {
            return;
        }
        let rank = sh.model.rank(rng);
        let size = sh.sizes[(rank - 1) as usize];
        let t0 = Instant::now();
        let r: Result<u64, Failed> = async {
            if conn.is_none() {
                conn = Some(dial(p.via, p.origin).await?);
                buf.clear();
            }
            let s = conn.as_mut().expect("just set");
            Get {
                origin: p.origin,
                size,
                seed: p.seed,
                cacheable: false,
                absolute: matches!(p.via, Via::HttpProxy(_)),
                keep_alive: true,
            }
            .send(s)
            .await?;
            read_response(s, &mut buf, &sh.pattern, size).await
        }
        .await;
        match r {
            Ok(bytes) => {
                let counted = w.counts(t0, Instant::now());
                stats
                    .lock()
                    .expect("stats")
                    .done(w.start, t0, bytes, counted);
            }
            Err(f) => {
                stats.lock().expect("stats").failed(&f);
                conn = None;
            }
        }
    }
    if w.counts(began, Instant::now()) {
        let mut pages = sh.pages.lock().expect("pages");
        pages.0 += 1;
        pages.1.record(began.elapsed());
    }
}

async fn user(i: usize, p: Arc<Params>, sh: Arc<Shared2>, w: Window, stats: Shared) {
    let mut rng = SmallRng::seed_from_u64(p.seed ^ (i as u64 + 1).wrapping_mul(0x2545_F491));
    // Users start at random points of their first idle time, not all at once.
    let first = sh
        .model
        .inactive_off(&mut rng)
        .mul_f64(p.time_scale * rng.random::<f64>());
    let mut next = w.start + first;
    let timeout = Duration::from_secs_f64(p.timeout_s);
    let mut pages = Vec::new();
    while next < w.end() {
        tokio::time::sleep_until(next.into()).await;
        let (p2, sh2, st2) = (p.clone(), sh.clone(), stats.clone());
        let mut prng = SmallRng::seed_from_u64(rng.random());
        pages.push(tokio::spawn(async move {
            let left = w.end().saturating_duration_since(Instant::now());
            if tokio::time::timeout(timeout.min(left), page(&p2, &sh2, &mut prng, w, &st2))
                .await
                .is_err()
                && Instant::now() < w.end()
            {
                st2.lock().expect("stats").error("timeout");
            }
        }));
        next += sh.model.inactive_off(&mut rng).mul_f64(p.time_scale);
    }
    for t in pages {
        let _ = t.await;
    }
}

pub async fn run(p: Params) -> anyhow::Result<Report> {
    anyhow::ensure!(p.users > 0, "--users: at least 1");
    anyhow::ensure!(p.files > 0, "--files: at least 1");
    anyhow::ensure!(p.time_scale > 0.0, "--time-scale: above 0");
    anyhow::ensure!(
        p.warmup_s + p.cooldown_s < p.duration_s,
        "--duration must exceed --warmup plus --cooldown"
    );
    let sh = Arc::new(Shared2 {
        model: Model::surge(p.files),
        sizes: sizes(p.files, p.max_size, p.seed),
        pattern: Pattern::new(p.seed),
        pages: Mutex::new((0, Latency::new())),
    });
    let w = Window::new(
        Duration::from_secs_f64(p.duration_s),
        Duration::from_secs_f64(p.warmup_s),
        Duration::from_secs_f64(p.cooldown_s),
    );
    let stats = Stats::shared();
    let p = Arc::new(p);
    let tasks: Vec<_> = (0..p.users)
        .map(|i| tokio::spawn(user(i, p.clone(), sh.clone(), w, stats.clone())))
        .collect();
    for t in tasks {
        t.await?;
    }
    let stats = stats.lock().expect("stats");
    let mut r = Report::new("surge", serde_json::to_value(&*p)?, &stats, w.measured());
    let pages = sh.pages.lock().expect("pages");
    r.extra = serde_json::json!({
        "pages": pages.0,
        "pages_per_second": pages.0 as f64 / w.measured().max(1e-9),
        "page_latency": pages.1.summary(),
    });
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: usize = 200_000;

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    #[test]
    fn sizes_have_the_lognormal_body_and_pareto_tail() {
        let m = Model::surge(2000);
        let mut rng = SmallRng::seed_from_u64(7);
        let body: Vec<f64> = (0..N).map(|_| m.body.sample(&mut rng)).collect();
        let want = 9.357f64.exp();
        let got = median(body);
        assert!(
            (got - want).abs() / want < 0.03,
            "body median {got} vs {want}"
        );
        let sizes: Vec<u64> = (0..N).map(|_| m.size(&mut rng)).collect();
        // Tail objects are ≥ 133,000 B; about 7% come from the tail, plus the body's own
        // share above 133,000 (P(lognormal > 133000) ≈ 0.032).
        let above = sizes.iter().filter(|&&s| s >= 133_000).count() as f64 / N as f64;
        let want = 0.07 + 0.93 * 0.0317;
        assert!(
            (above - want).abs() < 0.01,
            "share ≥133 kB {above} vs {want}"
        );
    }

    #[test]
    fn popularity_is_zipf() {
        let files = 2000u64;
        let m = Model::surge(files);
        let mut rng = SmallRng::seed_from_u64(8);
        let mut counts = vec![0u64; files as usize + 1];
        for _ in 0..N {
            let r = m.rank(&mut rng);
            assert!((1..=files).contains(&r));
            counts[r as usize] += 1;
        }
        let h: f64 = (1..=files).map(|k| 1.0 / k as f64).sum();
        for rank in [1usize, 2, 10] {
            let want = 1.0 / (rank as f64 * h);
            let got = counts[rank] as f64 / N as f64;
            assert!(
                (got - want).abs() / want < 0.06,
                "rank {rank}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn pages_and_idle_times() {
        let m = Model::surge(10);
        let mut rng = SmallRng::seed_from_u64(9);
        let objs: Vec<u64> = (0..N).map(|_| m.objects_per_page(&mut rng)).collect();
        assert!(objs.iter().all(|&o| o >= 1));
        // P(⌊X⌋ = 1) = 1 - 2^-2.43.
        let one = objs.iter().filter(|&&o| o == 1).count() as f64 / N as f64;
        let want = 1.0 - 2f64.powf(-2.43);
        assert!(
            (one - want).abs() < 0.01,
            "single-object pages {one} vs {want}"
        );
        // Pareto(1, 1.5) median: 2^(1/1.5).
        let off = median(
            (0..N)
                .map(|_| m.inactive_off(&mut rng).as_secs_f64())
                .collect(),
        );
        let want = 2f64.powf(1.0 / 1.5);
        assert!(
            (off - want).abs() / want < 0.03,
            "idle median {off} vs {want}"
        );
        // Weibull(1.46, 0.382) median: 1.46 · ln2^(1/0.382).
        let act = median(
            (0..N)
                .map(|_| m.active_off(&mut rng).as_secs_f64())
                .collect(),
        );
        let want = 1.46 * 2f64.ln().powf(1.0 / 0.382);
        assert!(
            (act - want).abs() / want < 0.05,
            "active median {act} vs {want}"
        );
    }

    #[test]
    fn same_seed_same_workload() {
        let m = Model::surge(100);
        let draw = |seed| {
            let mut rng = SmallRng::seed_from_u64(seed);
            (0..50)
                .map(|_| (m.size(&mut rng), m.rank(&mut rng)))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
    }
}
