//! Seed 000's mixed-load experiment (Rosu & Rosu, Figs 16–17), `splicer-lab rosu-mixed`: a
//! proxy cache serving hits itself while it splices requests it cannot serve, on the
//! corporate network (`scenarios/corporate.toml`), with the relay (`copy`) against the
//! kernel engines.
//!
//! - Fig 16: 40 spliced clients (25 plain GETs of non-cacheable objects, 15 CONNECT tunnels
//!   with the SSL-handshake emulation) while 0, 40, 80 and 120 clients fetch a cacheable
//!   object (hits): how much the spliced requests' latency rises over the run without hits.
//! - Fig 17: 40 clients fetching hits while 0, 13, 40 and 120 clients make spliced GETs
//!   (0, 25, 50 and 75% of all clients): how much the hits' latency changes over the run
//!   with hits alone. Only `copy` and `pipe` run it: `sockmap` and `ipsplice` move HTTP
//!   bodies with `pipe` (they take whole tunnels only), so they would repeat `pipe`.
//!
//! Every client is seed 000's s-client (HTTP/1.0, a new connection per request). The
//! paper's 133 MHz proxy ran at 98% CPU; `--proxy-cpu` gives Splicer a CPU budget (a cgroup
//! quota) so that it is the bottleneck here too. Splicer runs with `small_threshold = 0`, so
//! the engine named is the one that moves even 1 KiB bodies.
//!
//! After the run, [`report`] writes `figures.md`, `fig16.svg`, `fig17.svg` and `points.csv`
//! (each variant's medians) into the results directory beside the lab's usual summary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::experiment::VariantRun;
use crate::plot::{self, Series};
use crate::summary::Spread;

/// What to run.
#[derive(Debug, Clone)]
pub struct Params {
    pub rounds: u32,
    /// Seconds each variant's loads run (a sixth of it warm-up, a sixth cool-down).
    pub seconds: u32,
    /// Object sizes, KiB.
    pub sizes: Vec<u64>,
    /// Engines for the spliced requests.
    pub engines: Vec<String>,
    /// Percent of one CPU Splicer may use (0: no limit).
    pub proxy_cpu: f64,
    /// Figures to run (16, 17).
    pub figs: Vec<u32>,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            rounds: 1,
            seconds: 30,
            sizes: vec![1, 10, 45, 128],
            engines: ENGINES.map(String::from).to_vec(),
            proxy_cpu: 5.0,
            figs: vec![16, 17],
        }
    }
}

/// Fig 16's numbers of hit clients beside the 40 spliced ones.
pub const FIG16_HITS: [u32; 4] = [0, 40, 80, 120];
/// Fig 16's spliced clients: plain GETs and SSL tunnels.
pub const FIG16_GETS: u32 = 25;
pub const FIG16_SSL: u32 = 15;
/// Fig 17's hit clients, and its numbers of spliced clients (0, 25, 50, 75% of all).
pub const FIG17_HITS: u32 = 40;
pub const FIG17_SPLICED: [u32; 4] = [0, 13, 40, 120];

const ENGINES: [&str; 4] = ["copy", "pipe", "sockmap", "ipsplice"];

impl Params {
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.rounds >= 1, "--rounds: at least 1");
        anyhow::ensure!(self.seconds >= 6, "--seconds: at least 6");
        anyhow::ensure!(
            !self.sizes.is_empty() && self.sizes.iter().all(|s| (1..=1 << 20).contains(s)),
            "--sizes: KiB, 1 to 1048576 each"
        );
        for e in &self.engines {
            anyhow::ensure!(
                ENGINES.contains(&e.as_str()),
                "--engines: {e:?} is not one of {ENGINES:?}"
            );
        }
        anyhow::ensure!(!self.engines.is_empty(), "--engines: at least one");
        anyhow::ensure!(
            self.proxy_cpu == 0.0 || (1.0..=200.0).contains(&self.proxy_cpu),
            "--proxy-cpu: percent of one CPU, 1 to 200 (0: no limit)"
        );
        for f in &self.figs {
            anyhow::ensure!(*f == 16 || *f == 17, "--figs: 16, 17 or both");
        }
        anyhow::ensure!(!self.figs.is_empty(), "--figs: at least one");
        anyhow::ensure!(
            self.figs.contains(&16) || !self.fig17_engines().is_empty(),
            "--figs 17 needs copy or pipe among --engines (the others move bodies with pipe)"
        );
        Ok(())
    }

    fn fig17_engines(&self) -> Vec<&str> {
        self.engines
            .iter()
            .map(String::as_str)
            .filter(|e| matches!(*e, "copy" | "pipe"))
            .collect()
    }
}

/// The corporate bed (hosts, links and emulated legs) of `scenarios/corporate.toml`.
fn corporate_bed() -> &'static str {
    let text = include_str!("../scenarios/corporate.toml");
    let start = text.find("[[host]]").expect("corporate.toml has hosts");
    let end = text.find("\n[files]").expect("corporate.toml has [files]");
    &text[start..end]
}

/// A variant's name: figure, engine (or `ref`), the level, the size.
fn name(fig: u32, engine: &str, level: &str, size: u64) -> String {
    format!("f{fig}-{engine}-{level}-{size}k")
}

struct Scen<'a> {
    s: String,
    p: &'a Params,
    /// The variants of each engine (each runs Splicer with that engine's file).
    by_engine: BTreeMap<String, Vec<String>>,
}

impl Scen<'_> {
    fn variant(&mut self, name: &str, baseline: &str, engine: &str) {
        writeln!(
            self.s,
            "[[variant]]\nname = \"{name}\"\nbaseline = \"{baseline}\""
        )
        .unwrap();
        self.by_engine
            .entry(engine.to_string())
            .or_default()
            .push(name.to_string());
    }

    fn sclient(&mut self, variant: &str, clients: u32, size: u64, kind: &str) {
        if clients == 0 {
            return;
        }
        let s = self.p.seconds;
        let (warmup, cooldown) = (s / 6, s / 6);
        let (origin, via, extra): (&str, &str, &[&str]) = match kind {
            "hit" => ("{server}:8080", "http://{proxy}:3128", &["--cacheable"]),
            "get" => ("{server}:8080", "http://{proxy}:3128", &[]),
            _ => ("{server}:443", "connect://{proxy}:3128", &["--ssl"]),
        };
        let mut cmd: Vec<String> = [
            "lab",
            "sclient",
            "--origin",
            origin,
            "--via",
            via,
            "--clients",
        ]
        .map(String::from)
        .to_vec();
        cmd.push(clients.to_string());
        cmd.extend(["--size".into(), (size * 1024).to_string()]);
        cmd.extend(["--duration".into(), s.to_string()]);
        cmd.extend(["--warmup".into(), warmup.to_string()]);
        cmd.extend(["--cooldown".into(), cooldown.to_string()]);
        cmd.extend(extra.iter().map(|e| e.to_string()));
        writeln!(
            self.s,
            "[[load]]\nhost = \"client\"\nvariants = [\"{variant}\"]\ncommand = {cmd:?}"
        )
        .unwrap();
    }
}

/// The experiment's scenario text.
pub fn scenario(p: &Params) -> String {
    let mut sc = Scen {
        s: String::new(),
        p,
        by_engine: BTreeMap::new(),
    };
    writeln!(
        sc.s,
        "# Generated by `splicer-lab rosu-mixed`.\n[experiment]\nname = \"rosu-mixed\"\n\
         rounds = {}\nserver = \"server\"\n",
        p.rounds
    )
    .unwrap();
    sc.s += corporate_bed();
    sc.s += "\n[files]\n";
    for e in &p.engines {
        writeln!(
            sc.s,
            "\"splicer-{e}.toml\" = \"\"\"\n[log]\nlevel = \"warn\"\n[relay]\nengine = \"{e}\"\n\
             small_threshold = 0\n[http]\nlisten = [\"{{proxy}}:3128\"]\n[acl]\ndefault = \"deny\"\n\
             [[acl.rule]]\naction = \"allow\"\nclients = [\"10.231.0.0/16\"]\n\"\"\""
        )
        .unwrap();
    }
    // Sizes outermost, engines innermost: the variants compared with each other run
    // close together in time.
    for &size in &p.sizes {
        if p.figs.contains(&16) {
            let base = |e: &str| name(16, e, "h0", size);
            for h in FIG16_HITS {
                for e in &p.engines {
                    let v = name(16, e, &format!("h{h}"), size);
                    sc.variant(&v, &base(e), e);
                    sc.sclient(&v, FIG16_GETS, size, "get");
                    sc.sclient(&v, FIG16_SSL, size, "ssl");
                    sc.sclient(&v, h, size, "hit");
                }
            }
        }
        if p.figs.contains(&17) {
            let engines = p.fig17_engines();
            if engines.is_empty() {
                continue;
            }
            // Hits alone do not depend on the splice engine: one reference run.
            let base = name(17, "ref", "s0", size);
            sc.variant(&base, &base, engines[0]);
            sc.sclient(&base, FIG17_HITS, size, "hit");
            for k in FIG17_SPLICED.iter().filter(|k| **k > 0) {
                for e in &engines {
                    let v = name(17, e, &format!("s{k}"), size);
                    sc.variant(&v, &base, e);
                    sc.sclient(&v, FIG17_HITS, size, "hit");
                    sc.sclient(&v, *k, size, "get");
                }
            }
        }
    }
    let limit = if p.proxy_cpu > 0.0 {
        format!("cpu_limit = {}\n", p.proxy_cpu)
    } else {
        String::new()
    };
    writeln!(
        sc.s,
        "[[process]]\nhost = \"server\"\ncommand = [\"lab\", \"origin\", \"--listen\", \"{{server}}:8080\"]\n\
         wait_for = \"{{server}}:8080\"\n\
         [[process]]\nhost = \"server\"\ncommand = [\"lab\", \"origin\", \"--listen\", \"{{server}}:443\"]\n\
         wait_for = \"{{server}}:443\""
    )
    .unwrap();
    for (e, variants) in &sc.by_engine {
        writeln!(
            sc.s,
            "[[process]]\nhost = \"proxy\"\nrole = \"proxy\"\n{limit}variants = {variants:?}\n\
             command = [\"splicer\", \"run\", \"--config\", \"{{file:splicer-{e}.toml}}\"]\n\
             wait_for = \"{{proxy}}:3128\""
        )
        .unwrap();
    }
    sc.s
}

/// The kind of clients a load report belongs to, from its parameters.
fn kind(r: &crate::load::Report) -> &'static str {
    let flag = |k: &str| r.params.get(k).and_then(|v| v.as_bool()).unwrap_or(false);
    if flag("cacheable") {
        "hit"
    } else if flag("ssl") {
        "ssl"
    } else {
        "get"
    }
}

/// Mean latency (ms) of a run's loads of the given kinds, weighted by requests.
fn mean_of(run: &VariantRun, kinds: &[&str]) -> f64 {
    let (mut sum, mut n) = (0.0, 0u64);
    for r in run.loads.iter().filter(|r| kinds.contains(&kind(r))) {
        sum += r.latency.mean_ms * r.latency.n as f64;
        n += r.latency.n;
    }
    if n == 0 {
        f64::NAN
    } else {
        sum / n as f64
    }
}

fn errors(run: &VariantRun) -> u64 {
    run.loads.iter().flat_map(|r| r.errors.values()).sum()
}

/// One variant's figures, medians over rounds.
struct Point {
    hit_ms: Spread,
    get_ms: Spread,
    ssl_ms: Spread,
    spliced_ms: Spread,
    proxy_cpu: Spread,
    throttled: Spread,
    errors: u64,
}

fn points(runs: &[VariantRun]) -> BTreeMap<String, Point> {
    let mut by: BTreeMap<&str, Vec<&VariantRun>> = BTreeMap::new();
    for r in runs {
        by.entry(&r.variant).or_default().push(r);
    }
    by.into_iter()
        .map(|(v, rs)| {
            let of = |f: &dyn Fn(&VariantRun) -> f64| Spread::of(rs.iter().map(|r| f(r)).collect());
            let p = Point {
                hit_ms: of(&|r| mean_of(r, &["hit"])),
                get_ms: of(&|r| mean_of(r, &["get"])),
                ssl_ms: of(&|r| mean_of(r, &["ssl"])),
                spliced_ms: of(&|r| mean_of(r, &["get", "ssl"])),
                proxy_cpu: of(&|r| 100.0 * r.proxy_cpu_s / r.wall_s.max(1e-9)),
                throttled: of(&|r| r.proxy_throttled_s / r.wall_s.max(1e-9)),
                errors: rs.iter().map(|r| errors(r)).sum(),
            };
            (v.to_string(), p)
        })
        .collect()
}

/// A spread as `Spread::show` gives it, or `–` when there is none (no such load).
fn spread(s: &Spread, digits: usize) -> String {
    if s.median.is_finite() {
        s.show(digits)
    } else {
        "–".into()
    }
}

fn pct(new: f64, base: f64) -> f64 {
    (new - base) * 100.0 / base
}

fn show(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "–".into()
    }
}

/// Every variant's medians, one line each (`points.csv`).
fn csv(pts: &BTreeMap<String, Point>) -> String {
    let mut out = String::from(
        "variant,spliced_ms,get_ms,ssl_ms,hit_ms,proxy_cpu_pct,throttled_s_per_s,errors\n",
    );
    for (v, p) in pts {
        let f = |s: &Spread| {
            if s.median.is_finite() {
                format!("{:.3}", s.median)
            } else {
                String::new()
            }
        };
        writeln!(
            out,
            "{v},{},{},{},{},{},{},{}",
            f(&p.spliced_ms),
            f(&p.get_ms),
            f(&p.ssl_ms),
            f(&p.hit_ms),
            f(&p.proxy_cpu),
            f(&p.throttled),
            p.errors
        )
        .unwrap();
    }
    out
}

/// Draws one figure: a line per series, object size on the x axis.
fn draw(
    dir: &Path,
    file: &str,
    title: &str,
    y_desc: &str,
    series: BTreeMap<String, Vec<(f64, f64)>>,
) -> anyhow::Result<()> {
    let series: Vec<Series> = series
        .into_iter()
        .map(|(label, points)| Series { label, points })
        .collect();
    plot::lines(
        &dir.join(file),
        title,
        "object size (KiB)",
        y_desc,
        &series,
        false,
    )
}

/// Writes `figures.md`, `fig16.svg` and `fig17.svg` into `dir` from its `runs.json`;
/// returns the markdown.
pub fn report(dir: &Path, p: &Params) -> anyhow::Result<String> {
    let runs: Vec<VariantRun> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("runs.json"))?)?;
    let pts = points(&runs);
    std::fs::write(dir.join("points.csv"), csv(&pts))?;
    let mut md = String::new();
    let limit = if p.proxy_cpu > 0.0 {
        format!("{}% of one CPU (cgroup quota)", p.proxy_cpu)
    } else {
        "none".to_string()
    };
    writeln!(
        md,
        "# Seed 000's mixed load (Figs 16–17), as measured\n\n\
         Corporate setting; {} s per variant ({} s warm-up and cool-down excluded); {} round(s); \
         Splicer's CPU budget: {limit}. Latencies are means over requests (the paper's \
         \"average latency\"), medians over rounds. \"proxy CPU\" is percent of one CPU over \
         the run; \"throttled\" is how long the budget held Splicer's threads back per second \
         of the run (summed over CPUs, so up to the number of CPUs).\n",
        p.seconds,
        p.seconds / 6,
        p.rounds
    )?;
    if p.figs.contains(&16) {
        writeln!(
            md,
            "## Fig 16: spliced requests' latency as hits are added\n\n\
             {FIG16_GETS} plain GETs + {FIG16_SSL} SSL tunnels, plus N hit clients. Increase: \
             the spliced requests' mean latency against the same engine's run with N = 0.\n\n\
             | size KiB | engine | N hits | spliced ms | increase % | GET ms | SSL ms | hit ms | proxy CPU % | throttled s/s | errors |\n\
             |---|---|---|---|---|---|---|---|---|---|---|"
        )?;
        let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for &size in &p.sizes {
            for e in &p.engines {
                let base = pts
                    .get(&name(16, e, "h0", size))
                    .map(|b| b.spliced_ms.median);
                for h in FIG16_HITS {
                    let Some(pt) = pts.get(&name(16, e, &format!("h{h}"), size)) else {
                        continue;
                    };
                    let inc = base.map_or(f64::NAN, |b| pct(pt.spliced_ms.median, b));
                    if h > 0 && inc.is_finite() {
                        series
                            .entry(format!("{e}, {h} hit clients"))
                            .or_default()
                            .push((size as f64, inc));
                    }
                    writeln!(
                        md,
                        "| {size} | {e} | {h} | {} | {} | {} | {} | {} | {} | {} | {} |",
                        spread(&pt.spliced_ms, 1),
                        if h == 0 { "–".into() } else { show(inc, 1) },
                        spread(&pt.get_ms, 1),
                        spread(&pt.ssl_ms, 1),
                        spread(&pt.hit_ms, 1),
                        spread(&pt.proxy_cpu, 1),
                        spread(&pt.throttled, 2),
                        pt.errors
                    )?;
                }
            }
        }
        draw(
            dir,
            "fig16.svg",
            "Fig 16: spliced latency increase with hits added",
            "increase over no hits (%)",
            series,
        )?;
        md += "\n![Fig 16](fig16.svg)\n\n";
    }
    if p.figs.contains(&17) {
        writeln!(
            md,
            "## Fig 17: hits' latency as spliced requests are added\n\n\
             {FIG17_HITS} hit clients, plus K clients making spliced GETs (K = 13, 40, 120: 25, \
             50, 75% of all clients). Change: the hits' mean latency against the run with hits \
             alone (`ref`); positive is slower (the paper plots the improvement, the negative \
             of this).\n\n\
             | size KiB | engine | K spliced | hit ms | change % | GET ms | proxy CPU % | throttled s/s | errors |\n\
             |---|---|---|---|---|---|---|---|---|"
        )?;
        let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for &size in &p.sizes {
            let base = pts.get(&name(17, "ref", "s0", size));
            if let Some(b) = base {
                writeln!(
                    md,
                    "| {size} | ref | 0 | {} | – | – | {} | {} | {} |",
                    spread(&b.hit_ms, 1),
                    spread(&b.proxy_cpu, 1),
                    spread(&b.throttled, 2),
                    b.errors
                )?;
            }
            for e in p.fig17_engines() {
                for k in FIG17_SPLICED.iter().filter(|k| **k > 0) {
                    let Some(pt) = pts.get(&name(17, e, &format!("s{k}"), size)) else {
                        continue;
                    };
                    let ch = base.map_or(f64::NAN, |b| pct(pt.hit_ms.median, b.hit_ms.median));
                    if ch.is_finite() {
                        series
                            .entry(format!("{e}, {} % spliced", k * 100 / (k + FIG17_HITS)))
                            .or_default()
                            .push((size as f64, ch));
                    }
                    writeln!(
                        md,
                        "| {size} | {e} | {k} | {} | {} | {} | {} | {} | {} |",
                        spread(&pt.hit_ms, 1),
                        show(ch, 1),
                        spread(&pt.get_ms, 1),
                        spread(&pt.proxy_cpu, 1),
                        spread(&pt.throttled, 2),
                        pt.errors
                    )?;
                }
            }
        }
        draw(
            dir,
            "fig17.svg",
            "Fig 17: hit latency change with spliced load added",
            "change over hits alone (%)",
            series,
        )?;
        md += "\n![Fig 17](fig17.svg)\n";
    }
    std::fs::write(dir.join("figures.md"), &md)?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_has_every_point_and_its_baseline() {
        let p = Params::default();
        let text = scenario(&p);
        let s = crate::Scenario::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let names: Vec<String> = s.variants().iter().map(|v| v.name.clone()).collect();
        // Per size: Fig 16 4 levels × 4 engines, Fig 17 the reference + 3 levels × 2 engines.
        assert_eq!(names.len(), 4 * (4 * 4 + 1 + 3 * 2), "{names:?}");
        for v in s.variants() {
            let base = v.baseline.as_deref().unwrap();
            assert!(names.iter().any(|x| x == base), "{base}");
        }
        assert!(names.contains(&"f16-sockmap-h120-128k".to_string()));
        assert!(!names.iter().any(|n| n.starts_with("f17-sockmap")));
        // The corporate legs are there, and Splicer runs under its budget.
        assert_eq!(s.emulations.len(), 4);
        assert!(text.contains("cpu_limit = 5"));
        assert!(text.contains("small_threshold = 0"));
        // Fig 16 at 120 hit clients: 25 GETs, 15 SSL and 120 hit clients.
        let loads: Vec<&crate::scenario::Load> = s
            .loads
            .iter()
            .filter(|l| l.variants == ["f16-copy-h120-1k"])
            .collect();
        assert_eq!(loads.len(), 3);
        let clients = |l: &crate::scenario::Load| {
            let i = l.command.iter().position(|a| a == "--clients").unwrap();
            (
                l.command[i + 1].clone(),
                l.command.contains(&"--ssl".to_string()),
            )
        };
        let mut got: Vec<(String, bool)> = loads.iter().map(|l| clients(l)).collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("120".into(), false),
                ("15".into(), true),
                ("25".into(), false)
            ]
        );
        let narrow = Params {
            sizes: vec![1],
            engines: vec!["sockmap".into()],
            figs: vec![17],
            proxy_cpu: 0.0,
            ..Params::default()
        };
        // Fig 17 has no sockmap points: nothing to run.
        assert!(narrow.check().is_err());
        let unlimited = Params {
            engines: vec!["pipe".into()],
            ..narrow
        };
        assert!(unlimited.check().is_ok());
        let text = scenario(&unlimited);
        assert!(!text.contains("cpu_limit"));
        let s = crate::Scenario::from_toml(&text).unwrap();
        let names: Vec<String> = s.variants().iter().map(|v| v.name.clone()).collect();
        assert_eq!(
            names,
            [
                "f17-ref-s0-1k",
                "f17-pipe-s13-1k",
                "f17-pipe-s40-1k",
                "f17-pipe-s120-1k"
            ]
        );
    }

    #[test]
    fn params_are_checked() {
        assert!(Params::default().check().is_ok());
        let bad = |f: fn(&mut Params)| {
            let mut p = Params::default();
            f(&mut p);
            p.check().is_err()
        };
        assert!(bad(|p| p.engines = vec!["splice".into()]));
        assert!(bad(|p| p.sizes = vec![0]));
        assert!(bad(|p| p.proxy_cpu = 0.5));
        assert!(bad(|p| p.figs = vec![18]));
        assert!(bad(|p| p.seconds = 3));
    }

    /// The report reads the lab's results and computes increases against each baseline.
    #[test]
    fn the_report_computes_increases_against_the_baselines() {
        let dir = std::env::temp_dir().join(format!("splab-rosu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let load = |cacheable: bool, ssl: bool, mean: f64, n: u64| {
            serde_json::json!({
                "generator": "sclient",
                "params": {"cacheable": cacheable, "ssl": ssl},
                "measured_s": 10.0, "completed": n, "bytes": 0, "per_second": 0.0,
                "mbit_per_second": 0.0, "errors": {},
                "latency": {"n": n, "mean_ms": mean, "p50_ms": mean, "p95_ms": mean,
                            "p99_ms": mean, "max_ms": mean, "cv": 0.0},
                "extra": {}, "timeline": [], "cdf": [],
            })
        };
        let run = |v: &str, loads: Vec<serde_json::Value>| {
            serde_json::json!({
                "variant": v, "round": 0, "wall_s": 10.0, "proxy_cpu_s": 1.0,
                "proxy_throttled_s": 2.0, "machine_cpu_s": 0.0, "emulator_cpu_s": 0.0,
                "operations": 1, "bytes": 1, "tcp": {}, "loads": loads, "load_ids": [],
                "links": [],
            })
        };
        let runs = serde_json::json!([
            run(
                "f16-copy-h0-1k",
                vec![load(false, false, 100.0, 30), load(false, true, 200.0, 10)]
            ),
            run(
                "f16-copy-h40-1k",
                vec![
                    load(false, false, 150.0, 30),
                    load(false, true, 300.0, 10),
                    load(true, false, 50.0, 100),
                ]
            ),
            run("f17-ref-s0-1k", vec![load(true, false, 80.0, 100)]),
            run(
                "f17-copy-s40-1k",
                vec![load(true, false, 100.0, 100), load(false, false, 1.0, 5)]
            ),
        ]);
        std::fs::write(dir.join("runs.json"), runs.to_string()).unwrap();
        let p = Params {
            sizes: vec![1],
            engines: vec!["copy".into()],
            ..Params::default()
        };
        let md = report(&dir, &p).unwrap();
        // Spliced means 125 ms (30 × 100 + 10 × 200) and 187.5 ms: +50%.
        assert!(
            md.contains(
                "| 1 | copy | 40 | 187.5 | 50.0 | 150.0 | 300.0 | 50.0 | 10.0 | 0.20 | 0 |"
            ),
            "{md}"
        );
        assert!(md.contains("| 1 | copy | 0 | 125.0 | – |"), "{md}");
        // Hits 80 → 100 ms: +25%.
        assert!(
            md.contains("| 1 | copy | 40 | 100.0 | 25.0 | 1.0 |"),
            "{md}"
        );
        assert!(dir.join("fig16.svg").exists() && dir.join("fig17.svg").exists());
        let csv = std::fs::read_to_string(dir.join("points.csv")).unwrap();
        assert!(
            csv.contains("f16-copy-h40-1k,187.500,150.000,300.000,50.000,10.000,0.200,0"),
            "{csv}"
        );
        assert!(csv.contains("f17-ref-s0-1k,,,,80.000,"), "{csv}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
