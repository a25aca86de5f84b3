//! `rosu-modem`: seed 000's Figs 18–20. Twenty modem clients (each held to 56 kbit/s down
//! and 28 kbit/s up on its own line) fetch non-cacheable objects from a distant server,
//! straight through the network (the proxy host only routes) or through the splicing proxy
//! (`pipe`), which splits each connection in two: the lossy 180 ms RTT leg to the server
//! then recovers its losses without the modem line in its round trips.
//!
//! Four parts, one bed each: 1% and 2% first-loss probability on the proxy–server leg,
//! with SACK off everywhere, and with SACK on between proxy and server (the client keeps
//! it off, so a connection straight from the client never has it).
//!
//! The proxy connects to the server for every request, as the paper's did (`proxy`). The
//! SACK-off parts also run Splicer as it is configured by default (`pooled`): kept-alive
//! upstream connections, so a request does not pay the 180 ms handshake to the server.

use std::path::Path;
use std::time::Duration;

mod report;

use super::{bed, header, origins, sclient, splicer_files, splicers, Kind, Leg, Timing};
use crate::experiment::run::VariantRun;
use crate::reproduce::{Experiment, Grid, Part, Ran};

pub struct Modem;

struct Params {
    sizes: &'static [u64],
    clients: u32,
    rounds: u32,
    /// Seconds counted per run at least, and in requests of the size's expected latency.
    min_measured: u32,
    requests: f64,
    edge: u32,
}

fn params(g: Grid) -> Params {
    match g {
        Grid::Full => Params {
            sizes: &[1, 16, 64, 128],
            clients: 20,
            // Seed 000's six (three before 2026-12-03): about 3h20 in all, so its parts run
            // in separate sittings (`reproduce rosu-modem --part PART`).
            rounds: 6,
            min_measured: 20,
            requests: 3.5,
            edge: 0,
        },
        Grid::Quick => Params {
            sizes: &[10, 64],
            clients: 20,
            rounds: 1,
            min_measured: 10,
            requests: 2.0,
            edge: 0,
        },
        Grid::Tiny => Params {
            sizes: &[1],
            clients: 3,
            rounds: 1,
            min_measured: 3,
            requests: 1.0,
            edge: 0,
        },
    }
}

const DOWN_BPS: u64 = 56_000;
const UP_BPS: u64 = 28_000;
const ENGINE: &str = "pipe";

/// The parts: name, first-loss probability on the proxy–server leg, SACK there.
const PARTS: [(&str, f64, bool); 4] = [
    ("loss1-sack-off", 0.01, false),
    ("loss2-sack-off", 0.02, false),
    ("loss1-sack-on", 0.01, true),
    ("loss2-sack-on", 0.02, true),
];

/// The ways a request goes: straight, the paper's proxy, Splicer with its pool.
fn ways(sack: bool) -> &'static [&'static str] {
    if sack {
        &["direct", "proxy"]
    } else {
        &["direct", "proxy", "pooled"]
    }
}

/// The paper's largest latency saved by the proxy (s): at 1% and 2% loss, SACK off.
const PAPER_GAIN_S: [f64; 2] = [0.75, 2.5];

/// A run's timing: long enough for `requests` requests of this size per client. No warm-up
/// or cool-down is cut off (`edge` 0): a request counts only if it began after the warm-up,
/// and 20 modem clients put no load to warm up on anything, while a warm-up as long as a
/// large object's fetch (128 KB took 25–29 s, not the line's 19 s) left almost nothing
/// counted. A request still running at the end is not counted.
fn timing(p: &Params, size_kib: u64) -> Timing {
    // The line's time, 40% more for headers, ACK clocking and slow start, and the round trips.
    let expected = (size_kib * 1024 * 8) as f64 / DOWN_BPS as f64 * 1.4 + 1.5;
    let measured = (expected * p.requests)
        .ceil()
        .max(f64::from(p.min_measured)) as u32;
    Timing {
        seconds: measured + 2 * p.edge,
        edge: p.edge,
        pause_s: 0.0,
    }
}

fn variant(size: u64, way: &str) -> String {
    format!("{way}.{size}k")
}

fn part(name: &'static str, g: Grid, loss_p: f64, sack: bool) -> Part {
    let p = params(g);
    let legs = [
        Leg {
            delay_ms: 50,
            loss_p: 0.001,
            loss_r: 0.40,
        },
        Leg {
            delay_ms: 90,
            loss_p,
            loss_r: 0.40,
        },
    ];
    let mut s = header("rosu-modem", p.rounds);
    s += &bed(
        Some(legs),
        Some((DOWN_BPS, UP_BPS)),
        &|h| {
            if sack && (h == "proxy" || h == "server") {
                vec![("net.ipv4.tcp_sack", "1")]
            } else {
                vec![]
            }
        },
        false,
    );
    s += &splicer_files(&[ENGINE], !sack);
    for size in p.sizes {
        for way in ways(sack) {
            s += &format!(
                "[[variant]]\nname = \"{}\"\nbaseline = \"{}\"\n",
                variant(*size, way),
                variant(*size, "direct")
            );
        }
    }
    s += &origins();
    let of = |way: &str| -> Vec<String> {
        if ways(sack).contains(&way) {
            p.sizes.iter().map(|z| variant(*z, way)).collect()
        } else {
            Vec::new()
        }
    };
    let pooled = format!("{ENGINE}-pooled");
    s += &splicers(&[(ENGINE, of("proxy")), (&pooled, of("pooled"))], None);
    for size in p.sizes {
        for way in ways(sack) {
            s += &sclient(
                &variant(*size, way),
                Kind::Get,
                *way != "direct",
                p.clients,
                *size,
                timing(&p, *size),
            );
        }
    }
    Part { name, scenario: s }
}

fn latency_s(r: &VariantRun) -> f64 {
    r.loads
        .first()
        .map_or(f64::NAN, |l| l.latency.mean_ms / 1000.0)
}

impl Experiment for Modem {
    fn name(&self) -> &'static str {
        "rosu-modem"
    }
    fn title(&self) -> &'static str {
        "Seed 000 (Rosu & Rosu), Figs 18–20: modem clients, no proxy against the splicing proxy, SACK off and on"
    }
    fn estimate(&self, g: Grid) -> Duration {
        let p = params(g);
        let all: f64 = PARTS
            .iter()
            .map(|(_, _, sack)| {
                let per_way: f64 = p
                    .sizes
                    .iter()
                    .map(|z| f64::from(timing(&p, *z).seconds) + 3.0)
                    .sum();
                per_way * ways(*sack).len() as f64 * f64::from(p.rounds) + 8.0
            })
            .sum();
        Duration::from_secs_f64(all)
    }
    fn grid_note(&self, g: Grid, ran: &[Ran]) -> anyhow::Result<String> {
        let p = params(g);
        // The rounds that ran (the full grid had 3 before 2026-12-03).
        let rounds = Ran::rounds(ran, p.rounds);
        Ok(format!(
            "{} modem clients (56 kbit/s down, 28 up, each on its own line), sizes {:?} KB, \
             direct and through Splicer (`{ENGINE}`, connecting upstream per request as the \
             paper's proxy; and with its upstream pool where SACK is off), {} round(s), in \
             four parts (1% and 2% loss on the proxy–server leg; SACK off, and on between \
             proxy and server). A run \
             counts at least {} s, or {} requests' worth of the size's expected latency, \
             with {} s at each end not counted. The paper ran 13 sizes from 1 to 128 KB, 6 runs \
             of 120 s each: with two ways in four parts that is about 21 hours. This grid \
             keeps its smallest and largest sizes and two between, with {} runs per point.",
            p.clients, p.sizes, rounds, p.min_measured, p.requests, p.edge, rounds
        ))
    }
    fn parts(&self, g: Grid, _lab: &Path) -> Vec<Part> {
        PARTS
            .iter()
            .map(|(n, loss, sack)| part(n, g, *loss, *sack))
            .collect()
    }
    fn report(&self, g: Grid, ran: &[Ran], out: &Path) -> anyhow::Result<String> {
        report::write(params(g).sizes, ran, out)
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
    fn each_part_has_its_loss_sack_and_caps() {
        for g in [Grid::Tiny, Grid::Full] {
            let parts = Modem.parts(g, Path::new("/x/splicer-lab"));
            assert_eq!(parts.len(), 4);
            for (part, (_, loss, sack)) in parts.iter().zip(PARTS) {
                let text = &part.scenario;
                let s = crate::Scenario::from_toml(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
                let p = params(g);
                assert_eq!(s.variants().len(), ways(sack).len() * p.sizes.len());
                let proxies: Vec<_> = s.processes.iter().filter(|p| p.role.is_some()).collect();
                assert_eq!(proxies.len(), if sack { 1 } else { 2 });
                let to_server = s.emulations.iter().find(|e| e.to == "server").unwrap();
                assert_eq!(to_server.loss_p, loss);
                let down = s.emulations.iter().find(|e| e.to == "client").unwrap();
                assert_eq!(down.per_client_rate_bps, DOWN_BPS);
                let server = s.hosts.iter().find(|h| h.name == "server").unwrap();
                assert_eq!(
                    server.sysctl["net.ipv4.tcp_sack"],
                    if sack { "1" } else { "0" }
                );
                let direct = s
                    .loads
                    .iter()
                    .find(|l| l.variants[0].starts_with("direct"))
                    .unwrap();
                assert!(direct.command.contains(&"direct".to_string()));
            }
        }
        // 64 KB at 56 kbit/s takes about 13 s: a full run lasts three of them and more.
        let t = timing(&params(Grid::Full), 64);
        assert!(t.seconds >= 3 * 13 && t.edge == 0, "{t:?}");
        assert!(Modem.estimate(Grid::Quick) < Duration::from_secs(15 * 60));
    }
}
