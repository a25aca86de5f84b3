//! The report of `kong`: per size and variant the mean over rounds with seed 001's 95%
//! interval of Splicer's CPU per request (Fig 4), the spliced requests' latency (Fig 5) and
//! the hits' (Fig 6); their plots; and the paper's claims, each verdict computed from the
//! intervals of the changes against the relay, round by round.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use super::{point, Bed, Params, Variant, VARIANTS};
use crate::experiment::plot::{self, Series};
use crate::experiment::run::VariantRun;
use crate::experiment::stats::{paired_gains, Interval, Level, Verdict};
use crate::reproduce::table::Table;

/// Seed 001's confidence level.
const LEVEL: Level = Level::P95;

/// One run's figures.
#[derive(Debug, Clone, Copy)]
struct Figs {
    round: usize,
    /// Splicer's CPU with the kernel work it causes (its process, its host's receive
    /// threads, the kernel's workers: `VariantRun::proxy_kernel_ms_per_op`), ms a request.
    cpu_ms: f64,
    spliced_ms: f64,
    hit_ms: f64,
    /// Requests a second, all loads.
    rate: f64,
    /// Splicer's CPU with its kernel work, and the rest of the machine's (the emulator's
    /// included), percent of one CPU: Splicer has CPU 1 to itself, the rest CPU 0.
    proxy_pct: f64,
    rest_pct: f64,
    errors: u64,
}

/// Mean latency (ms) of a run's loads, hits or not, weighted by requests.
fn latency(run: &VariantRun, hits: bool) -> f64 {
    run.mean_latency_ms(|r| {
        (r.params.get("cacheable").and_then(|v| v.as_bool()) == Some(true)) == hits
    })
}

impl Figs {
    /// `stolen`: the share of the proxy's CPU `steal` took, which the rest of the bed's
    /// figure leaves out.
    fn of(r: &VariantRun, stolen: f64) -> Figs {
        Figs {
            round: r.round,
            cpu_ms: r.proxy_kernel_ms_per_op(),
            spliced_ms: latency(r, false),
            hit_ms: latency(r, true),
            rate: r.operations as f64 / r.wall_s.max(1e-9),
            proxy_pct: 100.0 * (r.proxy_cpu_s + r.proxy_napi_cpu_s + r.kworker_cpu_s)
                / r.wall_s.max(1e-9),
            rest_pct: 100.0
                * (r.machine_cpu_s + r.emulator_cpu_s
                    - r.proxy_cpu_s
                    - r.proxy_napi_cpu_s
                    - r.kworker_cpu_s)
                / r.wall_s.max(1e-9)
                - 100.0 * stolen,
            errors: r.loads.iter().flat_map(|l| l.errors.values()).sum(),
        }
    }
}

/// A figure of the report: its name, what it plots, and how to read it from a run.
struct Metric {
    fig: &'static str,
    what: &'static str,
    unit: &'static str,
    file: &'static str,
    of: fn(&Figs) -> f64,
}

const METRICS: [Metric; 3] = [
    Metric {
        fig: "Fig 4",
        what: "Splicer's CPU per request (process, receive threads, kernel workers)",
        unit: "ms",
        file: "fig4.svg",
        of: |f| f.cpu_ms,
    },
    Metric {
        fig: "Fig 5",
        what: "spliced requests' mean latency",
        unit: "ms",
        file: "fig5.svg",
        of: |f| f.spliced_ms,
    },
    Metric {
        fig: "Fig 6",
        what: "hits' mean latency",
        unit: "ms",
        file: "fig6.svg",
        of: |f| f.hit_ms,
    },
];

struct Runs(BTreeMap<String, Vec<Figs>>);

impl Runs {
    fn of(runs: &[VariantRun], stolen: f64) -> Runs {
        let mut by: BTreeMap<String, Vec<Figs>> = BTreeMap::new();
        for r in runs {
            by.entry(r.variant.clone())
                .or_default()
                .push(Figs::of(r, stolen));
        }
        Runs(by)
    }

    fn get(&self, size: u64, v: Variant) -> &[Figs] {
        self.0.get(&point(size, v)).map_or(&[], Vec::as_slice)
    }

    fn interval(&self, size: u64, v: Variant, f: fn(&Figs) -> f64) -> Interval {
        let x: Vec<f64> = self.get(size, v).iter().map(f).collect();
        Interval::of(&x, LEVEL)
    }

    fn by_round(&self, size: u64, v: Variant, f: fn(&Figs) -> f64) -> Vec<(usize, f64)> {
        self.get(size, v).iter().map(|x| (x.round, f(x))).collect()
    }

    /// The gain of `v` over the relay, `(relay − v) · 100 / relay`, round by round, with
    /// its interval (positive: `v` lower).
    fn gain(&self, size: u64, v: Variant, f: fn(&Figs) -> f64) -> Interval {
        let g = paired_gains(
            &self.by_round(size, VARIANTS[0], f),
            &self.by_round(size, v, f),
        );
        Interval::of(&g, LEVEL)
    }
}

fn variant(engine: &str, mode: &str) -> Variant {
    *VARIANTS
        .iter()
        .find(|v| v.engine == engine && v.mode == mode)
        .expect("a variant of VARIANTS")
}

/// One of the paper's claims, per size: the quantity (a gain over the relay, in percent)
/// and the verdict its interval carries.
struct Claim {
    text: &'static str,
    paper: &'static str,
    /// Per size: the intervals shown and the verdict.
    verdict: fn(&Runs, u64) -> (String, Verdict),
}

fn hits_gain(r: &Runs, z: u64, v: Variant) -> Interval {
    r.gain(z, v, |f| f.hit_ms)
}

fn spliced_gain(r: &Runs, z: u64, v: Variant) -> Interval {
    r.gain(z, v, |f| f.spliced_ms)
}

const CLAIMS: [Claim; 5] = [
    Claim {
        text: "Kernel splicing cuts the proxy's CPU per request, most for large files (Fig 4): `sockmap` against the relay",
        paper: "lower, most at large sizes",
        verdict: |r, z| {
            let g = r.gain(z, variant("sockmap", "off"), |f| f.cpu_ms);
            (format!("{} %", g.show(1)), Verdict::at_least(g, 0.0))
        },
    },
    Claim {
        text: "The interrupt splice cuts the spliced requests' latency (Fig 5): `sockmap` against the relay",
        paper: "significantly lower",
        verdict: |r, z| {
            let g = spliced_gain(r, z, variant("sockmap", "off"));
            (format!("{} %", g.show(1)), Verdict::at_least(g, 0.0))
        },
    },
    Claim {
        text: "Conservative: hits' latency 50–80% below the relay's (Fig 6)",
        paper: "50–80% lower",
        verdict: |r, z| {
            let g = hits_gain(r, z, variant("sockmap", "conservative"));
            (format!("{} %", g.show(1)), Verdict::at_least(g, 50.0))
        },
    },
    Claim {
        text: "Conservative: spliced requests' latency 5–30% above the relay's (Fig 5)",
        paper: "5–30% higher",
        verdict: |r, z| {
            // A rise is a negative gain: the claim is a gain within −30..−5.
            let g = spliced_gain(r, z, variant("sockmap", "conservative"));
            (format!("{} %", g.show(1)), Verdict::within(g, -30.0, -5.0, 0.0))
        },
    },
    Claim {
        text: "Proportional: hits and spliced requests both faster than with the relay (Figs 5, 6)",
        paper: "both lower",
        verdict: |r, z| {
            let v = variant("sockmap", "proportional");
            let (h, s) = (hits_gain(r, z, v), spliced_gain(r, z, v));
            (
                format!("hits {} %, spliced {} %", h.show(1), s.show(1)),
                Verdict::all([Verdict::at_least(h, 0.0), Verdict::at_least(s, 0.0)]),
            )
        },
    },
];

/// Writes the plots and `points.csv` into `out`; returns the report's body. The copy of the
/// runs kept beside the report (`kong-runs.json`) leaves out the loads' latency
/// distributions, which no figure here uses: with them it was 14 MB a quick grid. The full
/// runs stay in the run's results directory.
pub fn write(p: &Params, bed: &Bed, runs: &[VariantRun], out: &Path) -> anyhow::Result<String> {
    let mut kept = runs.to_vec();
    for l in kept.iter_mut().flat_map(|r| r.loads.iter_mut()) {
        l.cdf.clear();
    }
    std::fs::write(out.join("kong-runs.json"), serde_json::to_string(&kept)?)?;
    let r = Runs::of(runs, bed.stolen);
    let mut body = String::new();
    writeln!(
        body,
        "`kong/kong-runs.json` is the runs without the loads' latency distributions (`cdf`), \
         which no figure here uses.\n"
    )?;
    let errors: u64 = r.0.values().flatten().map(|f| f.errors).sum();
    writeln!(
        body,
        "Every figure is the mean over the rounds with its 95% interval (Student's t, seed \
         001's level); requests that failed: {errors} in all.\n"
    )?;
    let mut csv = String::from(
        "size_kib,variant,round,cpu_ms_per_request,spliced_ms,hit_ms,requests_per_s,errors\n",
    );
    for (name, figs) in &r.0 {
        let (size, v) = name.split_once("k.").unwrap_or((name, ""));
        for f in figs {
            writeln!(
                csv,
                "{size},{v},{},{:.5},{:.3},{:.3},{:.1},{}",
                f.round, f.cpu_ms, f.spliced_ms, f.hit_ms, f.rate, f.errors
            )?;
        }
    }
    std::fs::write(out.join("points.csv"), csv)?;
    for m in &METRICS {
        writeln!(body, "## {}: {} ({})\n", m.fig, m.what, m.unit)?;
        let mut head = vec!["variant".to_string()];
        head.extend(p.sizes.iter().map(|z| format!("{z} KiB")));
        let mut t = Table::new(head);
        let mut series = Vec::new();
        let mut halves = Vec::new();
        for v in VARIANTS {
            let mut row = vec![v.label()];
            let mut pts = Vec::new();
            let mut half = Vec::new();
            for &z in p.sizes {
                let i = r.interval(z, v, m.of);
                row.push(i.show(if m.unit == "ms" && i.mean < 1.0 { 3 } else { 1 }));
                pts.push((z as f64, i.mean));
                half.push(i.half);
            }
            t.row(row);
            series.push(Series {
                label: v.label(),
                points: pts,
            });
            halves.push(half);
        }
        body += &t.markdown();
        plot::lines_with_errors(
            &out.join(m.file),
            (
                &format!("{}: {}", m.fig, m.what),
                "object size (KiB)",
                m.unit,
            ),
            &series,
            &halves,
        )?;
        writeln!(body, "\n![{}](kong/{})\n", m.fig, m.file)?;
    }
    body += &cpu_section(p, bed, &r)?;
    writeln!(body, "## The paper's claims\n")?;
    writeln!(
        body,
        "Each change is against the relay (`copy`, the paper's \"App.\"), computed round by \
         round (the variants of a round ran next to each other) as `(relay − variant) · 100 / \
         relay`: positive is lower than the relay. A claim holds where the whole interval is \
         where the paper puts it, is in direction where it is on the paper's side of zero \
         only, and does not hold otherwise. The paper's kThread splice is `sockmap` with the \
         pacer here.\n"
    )?;
    let mut head = vec!["claim".to_string(), "paper".to_string()];
    head.extend(p.sizes.iter().map(|z| format!("{z} KiB")));
    let mut t = Table::new(head);
    for c in &CLAIMS {
        let mut row = vec![c.text.to_string(), c.paper.to_string()];
        for &z in p.sizes {
            let (shown, v) = (c.verdict)(&r, z);
            row.push(format!("{shown}: **{}**", v.word()));
        }
        t.row(row);
    }
    body += &t.markdown();
    Ok(body)
}

/// Below this share of what `steal` leaves of its CPU, Splicer was not the bottleneck.
const SATURATED_PCT: f64 = 95.0;

/// Where the CPU went: whether Splicer's CPU was saturated, as the paper's was, and what
/// the rest of the bed used. Every sentence is computed from the runs.
fn cpu_section(p: &Params, bed: &Bed, r: &Runs) -> anyhow::Result<String> {
    let mut body = String::from("## Where the CPU went\n\n");
    let mut head = vec!["variant".to_string()];
    for z in p.sizes {
        head.push(format!("{z} KiB: Splicer (CPU 1)"));
        head.push(format!("{z} KiB: the rest (CPU 0)"));
    }
    let mut t = Table::new(head);
    let (mut saturated, mut points, mut rest_full) = (0, 0, 0);
    let proxy_full = SATURATED_PCT * (1.0 - bed.stolen);
    for v in VARIANTS {
        let mut row = vec![v.label()];
        for &z in p.sizes {
            let proxy = r.interval(z, v, |f| f.proxy_pct);
            let rest = r.interval(z, v, |f| f.rest_pct);
            points += 1;
            saturated += usize::from(proxy.mean >= proxy_full);
            rest_full += usize::from(rest.mean >= SATURATED_PCT);
            row.push(format!("{} %", proxy.show(0)));
            row.push(format!("{} %", rest.show(0)));
        }
        t.row(row);
    }
    writeln!(
        body,
        "Percent of one CPU, the mean over the rounds with its 95% interval. Splicer's is its \
         process, its host's receive threads and the kernel's workers, on the {left}% of CPU 1 \
         that `steal` leaves; the rest is the machine's other busy time with the link \
         emulator's, less `steal`'s share (the clients, the origin, the emulator).\n",
        left = 100.0 * (1.0 - bed.stolen),
    )?;
    body += &t.markdown();
    writeln!(
        body,
        "\nSplicer's CPU was saturated (a mean of {proxy_full}% of one CPU or more, \
         {SATURATED_PCT}% of what `steal` leaves) in {saturated} of {points} points; the rest of the bed used {SATURATED_PCT}% or more of CPU 0 in \
         {rest_full} of them.{}\n",
        if saturated < points {
            " Where Splicer's CPU was not saturated, its splices did not compete with its \
             hits for CPU, which is what the paper's pacing is about: those points cannot \
             show its effect."
        } else {
            ""
        }
    )?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(variant: &str, round: usize, cpu: f64, spliced: f64, hit: f64) -> VariantRun {
        let load = |cacheable: bool, ms: f64| {
            serde_json::json!({
                "generator": "sclient",
                "params": {"cacheable": cacheable},
                "measured_s": 10.0, "completed": 100, "bytes": 0, "per_second": 10.0,
                "mbit_per_second": 0.0, "errors": {}, "extra": null, "timeline": [], "cdf": [],
                "latency": {"n": 100, "mean_ms": ms, "p50_ms": ms, "p95_ms": ms, "p99_ms": ms,
                            "max_ms": ms, "cv": 0.0}
            })
        };
        serde_json::from_value(serde_json::json!({
            "variant": variant, "round": round, "wall_s": 10.0, "proxy_cpu_s": cpu,
            "machine_cpu_s": 12.0, "emulator_cpu_s": 3.0, "operations": 1000, "bytes": 0,
            "tcp": {}, "loads": [load(true, hit), load(false, spliced)], "load_ids": [0, 1],
            "links": []
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn claims_are_read_from_the_runs_round_by_round() {
        let mut runs = Vec::new();
        for round in 0..3 {
            let wobble = round as f64 * 0.01;
            runs.push(run("10k.copy", round, 1.0, 100.0 + wobble, 10.0 + wobble));
            // Conservative: hits 70% lower, spliced 20% higher.
            runs.push(run(
                "10k.sockmap-conservative",
                round,
                0.5,
                120.0,
                3.0 + wobble,
            ));
            // Proportional: both lower.
            runs.push(run("10k.sockmap-proportional", round, 0.5, 90.0, 8.0));
            runs.push(run("10k.sockmap", round, 0.5, 50.0 + wobble, 30.0));
        }
        let r = Runs::of(&runs, 0.5);
        let verdicts: Vec<Verdict> = CLAIMS.iter().map(|c| (c.verdict)(&r, 10).1).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Holds,
                Verdict::Holds,
                Verdict::Holds,
                Verdict::Holds,
                Verdict::Holds
            ]
        );
        // CPU per request: the process's seconds over all requests (1 s / 1000).
        assert!((r.interval(10, VARIANTS[0], |f| f.cpu_ms).mean - 1.0).abs() < 1e-9);
        // Hits that got slower: the conservative claim does not hold.
        let slow: Vec<VariantRun> = runs
            .iter()
            .map(|x| {
                if x.variant == "10k.sockmap-conservative" {
                    run(
                        &x.variant,
                        x.round,
                        0.5,
                        120.0,
                        12.0 + x.round as f64 * 0.01,
                    )
                } else {
                    x.clone()
                }
            })
            .collect();
        let r = Runs::of(&slow, 0.5);
        assert_eq!((CLAIMS[2].verdict)(&r, 10).1, Verdict::Not);
        // Splicer at 10% (1 s of 10) and 5% of a CPU: not saturated, which the report says;
        // the rest is the machine's 12 s and the emulator's 3 s less Splicer's and `steal`'s
        // half of CPU 1.
        let p = Params {
            sizes: &[10],
            seconds: 10,
            edge: 1,
            rounds: 3,
        };
        let bed = Bed {
            stolen: 0.5,
            ..super::super::BED
        };
        let text = cpu_section(&p, &bed, &r).unwrap();
        assert!(
            text.contains("saturated (a mean of 47.5% of one CPU or more, 95% of what `steal` leaves) in 0 of 10 points"),
            "{text}"
        );
        assert!(
            text.contains("| copy (App.) | 10 ± 0 % | 90 ± 0 % |"),
            "{text}"
        );
    }
}
