//! `rosu-sweep`: seed 000's Figs 4–11 (non-cacheable GETs) and Figs 12–15 (the same
//! through CONNECT with the SSL-handshake emulation), on the corporate network: object
//! size × number of s-clients, the relay (`copy`) against the kernel engines.
//!
//! Per point: Splicer's CPU per request (Fig 4, and Fig 5 as the gain over the relay) and
//! its utilisation (Fig 11), the machine's CPU per request (the emulators' excluded), the
//! server's data packets per pure ACK it received (Fig 6: counted by the emulator on the
//! proxy–server leg, as sent), the server's RTOs per 1000 data packets (Fig 7), and
//! latency: mean (Figs 8–9) and coefficient of variation (Fig 10). Figs 12–15 are the same
//! over SSL tunnels.
//!
//! One difference from the paper's proxy stays: it spliced right after connecting
//! upstream, deciding from the request alone; Splicer reads the response head before it
//! splices (its framing checks need it), so the head always passes through user space.
//!
//! The paper's 133 MHz proxy ran at up to 98% CPU; Splicer gets a CPU budget (a cgroup
//! quota) so that it is the bottleneck at the larger loads here too.
//!
//! Two parts, each on a bed of its own: sizes up to [`SMALL_KIB`] (`small`) and the larger
//! ones (`large`). At the paper's six rounds the grid takes about 2h30, more than one
//! sitting, so its parts run apart (`reproduce rosu-sweep --part PART`); the points a
//! claim compares round by round (Figs 4 and 12 at 1 KB, Fig 6 at 128 KB) are in one part.

use std::path::Path;
use std::time::Duration;

mod figs;
mod report;

use super::{bed, by_engine, header, origins, sclient, splicer_files, splicers, Kind, Timing};
use super::{CORPORATE, GET_ENGINES, TUNNEL_ENGINES};
use crate::experiment::run::VariantRun;
use crate::reproduce::grid::{expand, Axis, Point};
use crate::reproduce::{Experiment, Grid, Part, Ran};

pub struct Sweep;

struct Params {
    get_sizes: &'static [u64],
    get_clients: &'static [u32],
    ssl_sizes: &'static [u64],
    ssl_clients: &'static [u32],
    timing: Timing,
    rounds: u32,
}

/// The largest size of part `small`; larger ones run in part `large`.
const SMALL_KIB: u64 = 10;
/// Whether a size (KB) belongs to a part.
type Theirs = fn(u64) -> bool;
/// The parts: name, and which sizes are theirs.
const PARTS: [(&str, Theirs); 2] = [("small", small), ("large", large)];

fn small(kib: u64) -> bool {
    kib <= SMALL_KIB
}

fn large(kib: u64) -> bool {
    !small(kib)
}

/// Splicer's budget, percent of one CPU: the relay at 140 clients then uses all of it for
/// small objects, as the paper's proxy ran near 100%.
const CPU: f64 = 5.0;
/// Seconds a run costs beyond its load: Splicer's start, the counters, the stop.
const OVERHEAD_S: f64 = 3.5;

fn params(g: Grid) -> Params {
    match g {
        Grid::Full => Params {
            get_sizes: &[1, 10, 64, 128],
            get_clients: &[20, 140],
            ssl_sizes: &[1, 10, 128],
            ssl_clients: &[20, 140],
            timing: Timing {
                seconds: 24,
                edge: 4,
                pause_s: 0.0,
            },
            // Seed 000's six (three before 2026-12-03).
            rounds: 6,
        },
        Grid::Quick => Params {
            get_sizes: &[1, 64],
            get_clients: &[20, 140],
            ssl_sizes: &[1, 64],
            ssl_clients: &[140],
            timing: Timing {
                seconds: 15,
                edge: 3,
                pause_s: 0.0,
            },
            rounds: 3,
        },
        Grid::Tiny => Params {
            get_sizes: &[1],
            get_clients: &[4],
            ssl_sizes: &[10],
            ssl_clients: &[4],
            timing: Timing {
                seconds: 5,
                edge: 1,
                pause_s: 0.0,
            },
            rounds: 1,
        },
    }
}

/// The points of one kind, sizes outermost and engines innermost (the variants compared
/// run next to each other). Names read `pipe.c20.10k.get`.
fn points(kind: Kind, sizes: &[u64], clients: &[u32]) -> Vec<Point> {
    let engines: &[&str] = if kind == Kind::Get {
        &GET_ENGINES
    } else {
        &TUNNEL_ENGINES
    };
    expand(&[
        Axis::new("kind", [kind.name()]),
        Axis::new("size", sizes.iter().map(|s| format!("{s}k"))),
        Axis::new("clients", clients.iter().map(|c| format!("c{c}"))),
        Axis::new("engine", engines.iter().copied()),
    ])
}

/// The points of one part, GETs then tunnels.
fn part_points(p: &Params, theirs: Theirs) -> Vec<Point> {
    let sizes = |all: &[u64]| -> Vec<u64> { all.iter().copied().filter(|s| theirs(*s)).collect() };
    let mut v = points(Kind::Get, &sizes(p.get_sizes), p.get_clients);
    v.extend(points(Kind::Ssl, &sizes(p.ssl_sizes), p.ssl_clients));
    v
}

/// How long `n` points take at `p`'s rounds, on a bed of their own.
fn duration(p: &Params, n: usize) -> Duration {
    let runs = n as f64 * f64::from(p.rounds);
    // The bed (five hosts, four emulators) takes a few seconds up and down.
    Duration::from_secs_f64(runs * (f64::from(p.timing.seconds) + OVERHEAD_S) + 15.0)
}

/// The scenario of one part: its points, each with the relay's as its baseline.
fn scenario(p: &Params, pts: &[Point]) -> String {
    let mut s = header("rosu-sweep", p.rounds);
    s += &bed(Some(CORPORATE), None, &|_| vec![], true);
    s += &splicer_files(&TUNNEL_ENGINES, false);
    for pt in pts {
        let base = pt.with("engine", "copy").name();
        s += &format!(
            "[[variant]]\nname = \"{}\"\nbaseline = \"{base}\"\n",
            pt.name()
        );
    }
    s += &origins();
    let engines: Vec<(String, &str)> = pts.iter().map(|pt| (pt.name(), pt.get("engine"))).collect();
    s += &splicers(&by_engine(&engines), Some(CPU));
    for pt in pts {
        let clients: u32 = pt.get("clients")[1..].parse().expect("c<N>");
        let size: u64 = pt.get("size").trim_end_matches('k').parse().expect("<N>k");
        s += &sclient(&pt.name(), kind_of(pt), true, clients, size, p.timing);
    }
    s
}

fn kind_of(pt: &Point) -> Kind {
    if pt.get("kind") == "ssl" {
        Kind::Ssl
    } else {
        Kind::Get
    }
}

impl Experiment for Sweep {
    fn name(&self) -> &'static str {
        "rosu-sweep"
    }
    fn title(&self) -> &'static str {
        "Seed 000 (Rosu & Rosu), Figs 4–15: non-cacheable GETs and SSL tunnels, size × clients"
    }
    fn estimate(&self, g: Grid) -> Duration {
        let p = params(g);
        PARTS
            .iter()
            .map(|(_, theirs)| part_points(&p, *theirs).len())
            .filter(|n| *n > 0)
            .map(|n| duration(&p, n))
            .sum()
    }
    fn grid_note(&self, g: Grid, ran: &[Ran]) -> anyhow::Result<String> {
        let p = params(g);
        // The rounds that ran (the full grid had 3, in one part, before 2026-12-03).
        let rounds = Ran::rounds(ran, p.rounds);
        let runs = if rounds == 6 {
            "with 6 runs a point, the paper's count (and its 90% intervals)".to_string()
        } else {
            format!(
                "with {rounds} runs a point (the intervals are the paper's 90%, from {rounds} \
                 runs rather than 6)"
            )
        };
        let parts = if ran.len() > 1 {
            format!(
                " Sizes up to {SMALL_KIB} KB (part `small`) and the larger ones (part `large`) \
                 ran as two parts, each on a bed of its own and all its rounds in one sitting: \
                 the points a claim compares round by round are in one part; the sizes a claim \
                 compares by their gains (Fig 5's \"least at 1 KB\") are not."
            )
        } else {
            String::new()
        };
        Ok(format!(
            "GETs: sizes {:?} KB × {:?} clients × {:?}; SSL tunnels: sizes {:?} KB × {:?} \
             clients × {:?}. {} s per run ({} s at each end not counted), {rounds} round(s), \
             Splicer held to {CPU}% of one CPU, its host receiving in threads of its own \
             (GRO on its links), NewReno and SACK off on every host. The paper ran 13 \
             sizes (1–128 KB) × 7 client counts (20–140), 6 runs of 120 s per point: about \
             60 hours per engine pair, so the grid keeps the ends of the size and client \
             ranges and the sizes where the paper's curves bend, {runs}.{parts}",
            p.get_sizes,
            p.get_clients,
            GET_ENGINES,
            p.ssl_sizes,
            p.ssl_clients,
            TUNNEL_ENGINES,
            p.timing.seconds,
            p.timing.edge,
        ))
    }
    fn parts(&self, g: Grid, _lab: &Path) -> Vec<Part> {
        let p = params(g);
        PARTS
            .iter()
            .map(|(name, theirs)| (*name, part_points(&p, *theirs)))
            .filter(|(_, pts)| !pts.is_empty())
            .map(|(name, pts)| Part {
                name,
                scenario: scenario(&p, &pts),
            })
            .collect()
    }
    /// The full grid's runs of 2026-11-27 (3 rounds) ran on one bed, kept as `corporate`.
    fn former_parts(&self, g: Grid) -> &'static [&'static str] {
        if g == Grid::Full {
            &["corporate"]
        } else {
            &[]
        }
    }
    fn report(&self, g: Grid, ran: &[Ran], out: &Path) -> anyhow::Result<String> {
        let runs: Vec<VariantRun> = ran.iter().flat_map(|r| r.runs.iter().cloned()).collect();
        report::write(&params(g), &runs, out)
    }
    /// Every figure comes from the runs (`runs.json`): the TCP counters are the hosts'
    /// own, sampled into each run, no capture read.
    fn renders_from_runs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_have_every_point_its_baseline_and_the_budget() {
        for g in [Grid::Tiny, Grid::Quick, Grid::Full] {
            let parts = Sweep.parts(g, Path::new("/x/splicer-lab"));
            let p = params(g);
            let mut all = Vec::new();
            for part in &parts {
                let text = &part.scenario;
                let s = crate::Scenario::from_toml(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
                let vs = s.variants();
                let first = &vs[0].name;
                assert!(
                    first.starts_with("copy.") && first.ends_with(".get"),
                    "{first}"
                );
                assert_eq!(vs[1].name, first.replacen("copy", "pipe", 1));
                for v in &vs {
                    let base = v.baseline.as_deref().unwrap();
                    assert!(base.starts_with("copy."), "{base}");
                    assert!(vs.iter().any(|x| x.name == base));
                    // Each size in its part.
                    let size = v.name.split('.').nth(2).unwrap().trim_end_matches('k');
                    let size: u64 = size.parse().unwrap();
                    assert_eq!(size <= SMALL_KIB, part.name == "small", "{}", v.name);
                }
                assert!(s.hosts.iter().any(|h| h.name == "proxy" && h.napi_threads));
                let proxies: Vec<_> = s.processes.iter().filter(|p| p.role.is_some()).collect();
                assert_eq!(proxies.len(), 4);
                assert!(proxies.iter().all(|x| x.cpu_limit == Some(CPU)));
                assert_eq!(s.loads.len(), vs.len());
                assert_eq!(s.emulations.len(), 4);
                assert_eq!(s.experiment.rounds, p.rounds as usize);
                let ssl_load = s.loads.iter().find(|l| l.variants[0].ends_with(".ssl"));
                assert!(ssl_load.unwrap().command.contains(&"--ssl".to_string()));
                all.extend(vs.into_iter().map(|v| v.name));
            }
            assert_eq!(
                all.len(),
                p.get_sizes.len() * p.get_clients.len() * 4
                    + p.ssl_sizes.len() * p.ssl_clients.len() * 4
            );
            // The kernel engines take GETs' bodies too (seed 000's splice).
            assert!(all
                .iter()
                .any(|v| v.starts_with("sockmap") && v.ends_with("get")));
            assert!(all
                .iter()
                .any(|v| v.starts_with("ipsplice") && v.ends_with("ssl")));
        }
        let parts = Sweep.parts(Grid::Full, Path::new("/x/splicer-lab"));
        assert_eq!(
            parts.iter().map(|p| p.name).collect::<Vec<_>>(),
            ["small", "large"]
        );
        // Fig 4/12's ratio (1 KB, 20 clients, both kinds) and Fig 6's rise with load
        // (128 KB, 20 and 140 clients) compare points of one part.
        assert!(["copy.c20.1k.get", "copy.c20.1k.ssl"]
            .iter()
            .all(|v| parts[0].scenario.contains(&format!("name = \"{v}\""))));
        assert!(["copy.c20.128k.get", "copy.c140.128k.get"]
            .iter()
            .all(|v| parts[1].scenario.contains(&format!("name = \"{v}\""))));
        assert!(Sweep.estimate(Grid::Quick) < Duration::from_secs(25 * 60));
        // Each part of the paper's six rounds fits a sitting with time to spare.
        let p = params(Grid::Full);
        for (_, theirs) in PARTS {
            assert!(duration(&p, part_points(&p, theirs).len()) < Duration::from_secs(95 * 60));
        }
    }
}
