//! `maltz-latency`: seed 003's Table 1 and Fig 12. One connection pushes bulk data through
//! the proxy; `tcpdump` records, at the proxy, the packets arriving from the client and
//! those leaving toward the server, and each data byte's forwarding latency is the time
//! from its arrival to its departure ([`crate::reproduce::capture`]).
//!
//! The client's link is the paper's 100 Mbit/s wire (`tbf`, which also cuts the veth's large
//! packets into wire-size frames); the server's link is the veth's own speed, so no queue of
//! the wire's builds inside the proxy host and what is measured is the proxy's own delay.
//! Three parts: the paper's 16 KB send and receive buffers on every host, and the kernel's
//! defaults (autotuned buffers of up to megabytes, what a proxy runs with today); then the
//! paper's buffers with Splicer held to a CPU budget that makes the relay CPU-bound below
//! the wire's rate, as the paper's relay was (33 Mbit/s on 100 Mbit/s Ethernet): whether
//! its 3.2 ms came from a full receive buffer behind a CPU-bound relay.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::{bed, load, paper_name, processes, RELAYS};
use crate::experiment::plot::{points_log_y, Series};
use crate::experiment::stats::{paired_ratios, Interval, Level, Verdict};
use crate::experiment::summary::Spread;
use crate::reproduce::capture::{latency, read_flow, Latency as Lat};
use crate::reproduce::table::{num, ratio, Table};
use crate::reproduce::{Experiment, Grid, Part, Ran};

pub struct Latency;

struct Params {
    bytes: u64,
    rounds: u32,
}

fn params(g: Grid) -> Params {
    match g {
        Grid::Full => Params {
            bytes: 64 << 20,
            rounds: 3,
        },
        Grid::Quick => Params {
            bytes: 16 << 20,
            rounds: 1,
        },
        Grid::Tiny => Params {
            bytes: 2 << 20,
            rounds: 1,
        },
    }
}

const RATE_MBIT: u32 = 100;
/// The paper gives no level; 95%, as for the seeds that give none.
const LEVEL: Level = Level::P95;
const PAPER_BUFFERS: &str = "4096 16384 16384";
/// Splicer's CPU budget in the third part, percent of one CPU: `copy` moved 127–161 Mbit/s
/// at 10% (maltz-throughput), so about 3% holds it near the paper's 33 Mbit/s.
const CPU_BOUND: f64 = 3.0;

/// The paper's Table 1: mean, variance, standard deviation (ms).
const PAPER: [(&str, f64, f64, f64); 3] = [
    ("TCP Splice", 0.1027, 0.0019, 0.0435),
    ("SOCKS", 3.2273, 0.5680, 0.7536),
    ("IP Forward", 0.0925, 0.0040, 0.0629),
];

/// The two captures at the proxy, each into a file of this run (`{run}`).
fn captures(variants: &[String]) -> String {
    let mut s = String::new();
    for (iface, dir, filter, file, settle) in [
        ("v0client", "in", "tcp and src host {client}", "in", 0),
        ("v1server", "out", "tcp and dst host {server}", "out", 700),
    ] {
        let cmd = [
            "tcpdump",
            "-i",
            iface,
            "-Q",
            dir,
            "-n",
            "-s",
            "128",
            "-B",
            "16384",
            "--time-stamp-precision=nano",
            "-w",
            &format!("{{out}}/{{run}}-{file}.pcap"),
            filter,
        ];
        writeln!(
            s,
            "[[process]]\nhost = \"proxy\"\nvariants = {variants:?}\ncommand = {cmd:?}\n\
             settle_ms = {settle}\ndrain_ms = 1000"
        )
        .unwrap();
    }
    s
}

fn part(name: &'static str, g: Grid, sysctls: &[(&str, &str)], cpu: Option<f64>) -> Part {
    let p = params(g);
    let mut s = bed("maltz-latency", p.rounds, [Some(RATE_MBIT), None], sysctls);
    for r in RELAYS {
        s += &format!("[[variant]]\nname = \"{r}\"\nbaseline = \"forward\"\n");
    }
    let variants: Vec<String> = RELAYS.iter().map(|r| r.to_string()).collect();
    s += &captures(&variants);
    s += &processes(&|e| vec![e.to_string()], cpu);
    for r in RELAYS {
        s += &load(r, r, 1, p.bytes);
    }
    Part { name, scenario: s }
}

/// One run's result: its latency, or why its transfer failed.
#[derive(serde::Serialize, serde::Deserialize)]
struct RunLatency {
    relay: String,
    round: usize,
    /// The load's first error when the transfer did not complete (its bytes cannot be
    /// matched from the end of the stream, and the run says something else than latency).
    failed: Option<String>,
    latency: Lat,
}

fn good_runs(lats: &[RunLatency]) -> impl Iterator<Item = &RunLatency> {
    lats.iter().filter(|l| l.failed.is_none())
}

/// A relay's runs whose transfer completed.
fn good<'a>(lats: &'a [RunLatency], relay: &'a str) -> impl Iterator<Item = &'a RunLatency> {
    good_runs(lats).filter(move |l| l.relay == relay)
}

/// What a part's runs gave, kept beside its raw files (`PART-latency.json` in the report's
/// directory) and in its scratch directory (`latency.json`, for `--from`).
const KEPT: &str = "latency.json";

/// Each run's latency: from its two captures (removed once read: they are large, and the
/// figures are kept), or, when they are gone, from the figures kept when they were read
/// (`--render` from the committed files, `--from` a scratch directory).
fn measure(ran: &Ran) -> anyhow::Result<Vec<RunLatency>> {
    let pcap = |r: &crate::experiment::run::VariantRun, end: &str| {
        ran.dir
            .join(format!("{}-r{}-{end}.pcap", r.variant, r.round))
    };
    let captured = ran.runs.first().is_some_and(|r| pcap(r, "in").exists());
    if !captured {
        for f in [format!("{}-{KEPT}", ran.part.name), KEPT.to_string()] {
            if let Ok(text) = std::fs::read_to_string(ran.dir.join(&f)) {
                return Ok(serde_json::from_str(&text)?);
            }
        }
        anyhow::bail!(
            "{}: neither the runs' captures nor their figures ({KEPT})",
            ran.dir.display()
        );
    }
    let mut out = Vec::new();
    for r in &ran.runs {
        let failed = r
            .loads
            .iter()
            .flat_map(|l| l.first_errors.iter())
            .map(|(k, v)| format!("{k}: {v}"))
            .next();
        let (i, o) = (pcap(r, "in"), pcap(r, "out"));
        let l = latency(&read_flow(&i)?, &read_flow(&o)?);
        anyhow::ensure!(
            l.bytes > 0 || failed.is_some(),
            "{}-r{}: no forwarded byte matched its arrival (captures {} and {})",
            r.variant,
            r.round,
            i.display(),
            o.display()
        );
        let _ = std::fs::remove_file(&i);
        let _ = std::fs::remove_file(&o);
        out.push(RunLatency {
            relay: r.variant.clone(),
            round: r.round,
            failed,
            latency: l,
        });
    }
    std::fs::write(ran.dir.join(KEPT), serde_json::to_string(&out)?)?;
    Ok(out)
}

/// "≈ IP forwarding": the splice's mean within this factor of forwarding's either way.
const ABOUT_FORWARDING: f64 = 1.25;
/// "≈ 30× below the relay": the relay's mean at least this many times the splice's.
const BELOW_RELAY: f64 = 30.0;

/// A relay's mean against another's, run by run (they ran in the same round, one after the
/// other).
fn paired(lats: &[RunLatency], a: &str, b: &str) -> Interval {
    let means = |relay| -> Vec<(usize, f64)> {
        good(lats, relay)
            .map(|l| (l.round, l.latency.mean_ms))
            .collect()
    };
    Interval::of(&paired_ratios(&means(a), &means(b)), LEVEL)
}

impl Experiment for Latency {
    fn name(&self) -> &'static str {
        "maltz-latency"
    }
    fn title(&self) -> &'static str {
        "Seed 003 (Maltz & Bhagwat), Table 1 and Fig 12: per-byte forwarding latency under bulk load"
    }
    fn estimate(&self, g: Grid) -> Duration {
        let p = params(g);
        let run = p.bytes as f64 * 8.0 / (f64::from(RATE_MBIT) * 0.95e6) + 4.0;
        // The budget's part runs the relays at about a third of the wire's rate.
        Duration::from_secs_f64(4.0 * RELAYS.len() as f64 * run * f64::from(p.rounds) + 15.0)
    }
    fn grid_note(&self, g: Grid, _ran: &[Ran]) -> anyhow::Result<String> {
        let p = params(g);
        Ok(format!(
            "one connection moving {} MiB per run, {} relays, {} round(s), in three parts \
             (the paper's 16 KB buffers; the kernel's defaults; the paper's buffers with \
             Splicer held to {}% of one CPU, so that the relay is CPU-bound below the wire's \
             rate as the paper's was). Client link {RATE_MBIT} Mbit/s as the paper's \
             Ethernet. The paper plots one transfer of unstated length.",
            p.bytes >> 20,
            RELAYS.len(),
            p.rounds,
            CPU_BOUND
        ))
    }
    fn parts(&self, g: Grid, _lab: &Path) -> Vec<Part> {
        let paper = [
            ("net.ipv4.tcp_rmem", PAPER_BUFFERS),
            ("net.ipv4.tcp_wmem", PAPER_BUFFERS),
        ];
        vec![
            part("paper-buffers", g, &paper, None),
            part("default-buffers", g, &[], None),
            part("paper-buffers-cpu-bound", g, &paper, Some(CPU_BOUND)),
        ]
    }
    fn report(&self, _g: Grid, ran: &[Ran], out: &Path) -> anyhow::Result<String> {
        let mut body = String::new();
        let mut claims = Table::new([
            "part",
            "what",
            "paper",
            "ours (mean ± 95%)",
            "ours / paper",
            "verdict",
        ]);
        let mut sections = String::new();
        for r in ran {
            let lats = measure(r)?;
            std::fs::write(
                out.join(format!("{}-latency.json", r.part.name)),
                serde_json::to_string(&lats)?,
            )?;
            let mean = |relay: &str, f: &dyn Fn(&Lat) -> f64| {
                Spread::of(good(&lats, relay).map(|l| f(&l.latency)).collect())
            };
            let interval = |relay: &str| {
                let v: Vec<f64> = good(&lats, relay).map(|l| l.latency.mean_ms).collect();
                Interval::of(&v, LEVEL)
            };
            let fwd = mean("forward", &|l| l.mean_ms).median;
            let mut t = Table::new([
                "relay",
                "paper's name",
                "mean ms (± 95%)",
                "variance ms²",
                "std. dev. ms",
                "p50 ms",
                "p99 ms",
                "max ms",
                "mean / forwarding",
            ]);
            let mut failures = String::new();
            for relay in RELAYS {
                let failed: Vec<&RunLatency> = lats
                    .iter()
                    .filter(|l| l.relay == relay && l.failed.is_some())
                    .collect();
                if let Some(f) = failed.first() {
                    let runs = lats.iter().filter(|l| l.relay == relay).count();
                    writeln!(
                        failures,
                        "- **`{relay}`: the transfer failed in {} of {runs} runs** ({}); \
                         its row counts only the others (`–`: none).",
                        failed.len(),
                        f.failed.as_deref().unwrap_or_default()
                    )
                    .unwrap();
                }
                t.row([
                    relay.to_string(),
                    paper_name(relay).into(),
                    interval(relay).show(4),
                    num(mean(relay, &|l| l.variance_ms2).median, 4),
                    num(mean(relay, &|l| l.sd_ms).median, 4),
                    num(mean(relay, &|l| l.p50_ms).median, 4),
                    num(mean(relay, &|l| l.p99_ms).median, 3),
                    num(mean(relay, &|l| l.max_ms).median, 3),
                    ratio(mean(relay, &|l| l.mean_ms).median, fwd),
                ]);
            }
            let series: Vec<Series> = RELAYS
                .iter()
                .filter_map(|relay| {
                    good(&lats, relay).next().map(|l| Series {
                        label: relay.to_string(),
                        points: l.latency.series.clone(),
                    })
                })
                .collect();
            let plot = format!("fig12-{}.svg", r.part.name);
            points_log_y(
                &out.join(&plot),
                &format!(
                    "Forwarding latency per byte, {} (seed 003, Fig 12)",
                    r.part.name
                ),
                "MB into the transfer",
                "ms (log scale)",
                &series,
            )?;
            let unmatched: u64 = good_runs(&lats).map(|l| l.latency.unmatched_bytes).sum();
            let matched: u64 = good_runs(&lats).map(|l| l.latency.bytes).sum();
            writeln!(
                sections,
                "## Table 1, {name}\n\nThe mean over rounds with its 95% interval; the other \
                 columns are medians over rounds. Per byte: \
                 every forwarded byte counts once, at its first departure. Over the completed \
                 runs, {matched} bytes matched their arrival and {unmatched} did not.\n\n\
                 {failures}\n{t}\n![Fig 12, {name}](maltz-latency/{plot})\n\n\
                 Fig 12 shows each relay's first completed run, at most 2,000 departing \
                 segments spread evenly over the transfer (the latency of each one's first \
                 new byte).\n",
                name = r.part.name,
                t = t.markdown(),
            )
            .unwrap();
            for (relay, (pname, pm, _, _)) in [
                ("ipsplice", PAPER[0]),
                ("copy", PAPER[1]),
                ("forward", PAPER[2]),
            ] {
                let i = interval(relay);
                claims.row([
                    r.part.name.to_string(),
                    format!("mean, {relay} ({pname}), ms"),
                    num(pm, 4),
                    i.show(4),
                    ratio(i.mean, pm),
                    String::new(),
                ]);
            }
            let near = paired(&lats, "ipsplice", "forward");
            let about = Verdict::within(near, 1.0 / ABOUT_FORWARDING, ABOUT_FORWARDING, f64::NAN);
            claims.row([
                r.part.name.to_string(),
                format!("003-5 ipsplice's mean / forwarding's (≈ within ×{ABOUT_FORWARDING})"),
                num(PAPER[0].1 / PAPER[2].1, 2),
                near.show(2),
                ratio(near.mean, PAPER[0].1 / PAPER[2].1),
                about.word().to_string(),
            ]);
            for relay in ["ipsplice", "pipe", "sockmap"] {
                let i = paired(&lats, "copy", relay);
                claims.row([
                    r.part.name.to_string(),
                    format!("003-6 relay's mean / {relay}'s (at least {BELOW_RELAY}×)"),
                    num(PAPER[1].1 / PAPER[0].1, 1),
                    i.show(1),
                    ratio(i.mean, PAPER[1].1 / PAPER[0].1),
                    Verdict::factor_at_least(i, BELOW_RELAY).word().to_string(),
                ]);
            }
        }
        body += &format!(
            "## The paper's figures beside ours\n\n\
             Paper: Table 1 (ms): TCP Splice {:.4}, SOCKS {:.4}, IP Forward {:.4} — the relay \
             {:.0}× the splice. The paper's splice is at the IP level, which is `ipsplice`; \
             `pipe` and `sockmap` are socket splices (both connections end at the proxy). \
             Ours: the mean over rounds with its 95% interval; a ratio is taken round by \
             round between relays that ran in the same round. \"≈ forwarding\" holds when the \
             whole interval is within ×{ABOUT_FORWARDING} of 1 either way; \"at least \
             {BELOW_RELAY}×\" when its low end reaches it (in direction when above 1).\n\n{}\n",
            PAPER[0].1,
            PAPER[1].1,
            PAPER[2].1,
            PAPER[1].1 / PAPER[0].1,
            claims.markdown()
        );
        body += &sections;
        Ok(body)
    }
    /// The captures are gone once read, but the figures read from them are kept beside the
    /// raw files, and the report is written from those.
    fn renders_from_runs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_part_captures_both_interfaces_of_every_run() {
        let parts = Latency.parts(Grid::Full, Path::new("/x/splicer-lab"));
        assert_eq!(parts.len(), 3);
        for part in &parts {
            let s = crate::Scenario::from_toml(&part.scenario)
                .unwrap_or_else(|e| panic!("{e}\n{}", part.scenario));
            assert_eq!(s.variants().len(), RELAYS.len());
            let caps: Vec<_> = s
                .processes
                .iter()
                .filter(|p| p.command[0] == "tcpdump")
                .collect();
            assert_eq!(caps.len(), 2);
            assert!(caps.iter().all(|c| c.variants.len() == RELAYS.len()));
            assert!(caps[0].command.contains(&"{out}/{run}-in.pcap".to_string()));
            assert!(caps[1].settle_ms > 0);
            assert!(caps.iter().all(|c| c.drain_ms > 0));
            assert_eq!(s.links[0].rate_mbit, Some(RATE_MBIT));
            assert_eq!(s.links[1].rate_mbit, None);
            // One connection per run.
            assert!(s
                .loads
                .iter()
                .all(|l| l.command.windows(2).any(|w| w == ["--conns", "1"])));
        }
        assert!(parts[0].scenario.contains("tcp_wmem"));
        assert!(!parts[1].scenario.contains("tcp_wmem"));
        assert!(parts[2].scenario.contains("tcp_wmem"));
        // Only the third holds Splicer to a budget.
        let limited = |p: &Part| {
            crate::Scenario::from_toml(&p.scenario)
                .unwrap()
                .processes
                .iter()
                .filter(|x| x.cpu_limit == Some(CPU_BOUND))
                .count()
        };
        assert_eq!(
            parts.iter().map(limited).collect::<Vec<_>>(),
            [0, 0, RELAYS.len() - 1]
        );
        assert!(Latency.estimate(Grid::Quick) < Duration::from_secs(15 * 60));
    }
}
