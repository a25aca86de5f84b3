//! The experiment's report: each variant's medians, the figures' tables and plots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::{name, Params, FIG16_GETS, FIG16_HITS, FIG16_SSL, FIG17_HITS, FIG17_SPLICED};
use crate::experiment::plot::{self, Series};
use crate::experiment::run::VariantRun;
use crate::experiment::summary::Spread;

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
            for e in p.engines.iter().map(String::as_str) {
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
            for e in p.engines.iter().map(String::as_str) {
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
