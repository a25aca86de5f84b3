//! The report of `panteleenko`: the server part's table and claims, then the sweeps' figures
//! (packets and the edge's cost by size, requests per connection, MTU, delay and rate),
//! every figure a mean over the rounds with its 95% interval, every verdict from them.
//! Reads `runs.json` only.

use std::path::Path;

use super::{Point, SERVER_VARIANTS};
use crate::experiment::plot::{self, Series};
use crate::experiment::run::VariantRun;
use crate::experiment::stats::{paired_ratios, Interval, Level, Verdict};
use crate::reproduce::table::Table;
use crate::reproduce::Ran;

/// The paper gives no level; seed 001's and 004's.
pub(super) const LEVEL: Level = Level::P95;
/// The paper normalises its costs to this rate sent to clients, bytes a second.
pub(super) const RATE: f64 = 6e6;
/// The line from the clients into the edge, as the runs name it.
pub(super) const CLIENT_LINE: &str = "r1: client → edge";

/// A figure of one run.
pub(super) type Of<'a> = dyn Fn(&VariantRun) -> f64 + 'a;

pub(super) fn tcp(r: &VariantRun, host: &str, key: &str) -> f64 {
    r.tcp
        .get(host)
        .and_then(|c| c.get(key))
        .map_or(f64::NAN, |v| *v as f64)
}

pub(super) fn per_op(x: f64, r: &VariantRun) -> f64 {
    if r.operations == 0 {
        f64::NAN
    } else {
        x / r.operations as f64
    }
}

/// `x`, a figure of the edge host, where a process served there (NaN for `direct`, whose
/// edge host only routes and whose receive threads are not counted).
pub(super) fn on_edge(r: &VariantRun, x: f64) -> f64 {
    if r.proxy_cpu_s > 0.0 {
        x
    } else {
        f64::NAN
    }
}

/// The edge host's CPU: the process serving the clients (Splicer or nginx, with its
/// children) and the host's receive threads. NaN without a process (`direct`).
pub(super) fn host_cpu_s(r: &VariantRun) -> f64 {
    on_edge(r, r.proxy_cpu_s + r.proxy_napi_cpu_s)
}

/// The line from the edge to the clients, as the runs name it.
pub(super) const TO_CLIENTS: &str = "r1: edge → client";
/// IPv4 and TCP headers with timestamps: what a packet carries besides data.
pub(super) const HEADERS: u64 = 52;

pub(super) fn line<'a>(
    r: &'a VariantRun,
    name: &str,
) -> Option<&'a crate::experiment::run::LinkRun> {
    r.links.iter().find(|l| l.link == name)
}

/// The data the clients were sent while the loads ran, bytes: what their line carried less
/// the packets' headers. Counted in the same window as the CPU and the packets, it takes in
/// the requests still under way when a run ends, which the requests completed do not (a
/// 60 KB request takes about 9 s on a 56 kbit/s line).
pub(super) fn sent(r: &VariantRun) -> f64 {
    line(r, TO_CLIENTS).map_or(f64::NAN, |l| {
        l.bytes.saturating_sub(HEADERS * l.passed) as f64
    })
}

/// The edge host's CPU at the paper's 6 MB/s to clients: percent of one CPU.
pub(super) fn at_rate(r: &VariantRun) -> f64 {
    host_cpu_s(r) / sent(r) * RATE * 100.0
}

/// A count of the run per `size` bytes sent to the clients: per request of that size.
pub(super) fn per_sent(x: f64, r: &VariantRun, size: f64) -> f64 {
    x / sent(r) * size
}

pub(super) fn client_packets(r: &VariantRun) -> f64 {
    line(r, CLIENT_LINE).map_or(f64::NAN, |l| (l.passed + l.lost + l.overflow) as f64)
}

pub(super) fn cost_ms(r: &VariantRun) -> f64 {
    per_op(host_cpu_s(r) * 1000.0, r)
}

pub(super) fn pure_acks(r: &VariantRun) -> f64 {
    line(r, CLIENT_LINE).map_or(f64::NAN, |l| l.tcp_pure_acks as f64)
}

/// The edge's interface toward the clients: the bed's link 1 (`r1`–`edge`) is the veth
/// `v1r1` in the edge's namespace (docs/lab.md, "Test bed").
pub(super) const CLIENT_SIDE: &str = "v1r1";

/// The share of the segments the edge received from the clients' side that a socket in
/// `FIN_WAIT_1` took, percent (NaN when the run did not count them).
pub(super) fn fin_wait1_share(r: &VariantRun) -> f64 {
    let Some(c) = &r.proxy_tcp_states else {
        return f64::NAN;
    };
    let (all, fin) = (c.all(CLIENT_SIDE), c.of(CLIENT_SIDE, "FIN_WAIT1"));
    if all == 0 {
        return f64::NAN;
    }
    fin as f64 * 100.0 / all as f64
}

pub(super) fn foldable(r: &VariantRun) -> f64 {
    line(r, CLIENT_LINE).map_or(f64::NAN, |l| l.tcp_acks_after_ack as f64)
}

/// The share of the clients' packets the booster could fold into the one before, percent.
pub(super) fn foldable_share(r: &VariantRun) -> f64 {
    foldable(r) / client_packets(r) * 100.0
}

/// One variant's figure, round by round.
pub(super) fn rounds(runs: &[&VariantRun], variant: &str, f: &Of<'_>) -> Vec<(usize, f64)> {
    runs.iter()
        .filter(|r| r.variant == variant)
        .map(|r| (r.round, f(r)))
        .collect()
}

pub(super) fn interval(runs: &[&VariantRun], variant: &str, f: &Of<'_>) -> Interval {
    let v: Vec<f64> = rounds(runs, variant, f).iter().map(|x| x.1).collect();
    Interval::of(&v, LEVEL)
}

/// `a / b` round by round (the variants of a part run next to each other each round).
pub(super) fn ratios(a: &[(usize, f64)], b: &[(usize, f64)]) -> Interval {
    Interval::of(&paired_ratios(a, b), LEVEL)
}

pub fn write(points: &[Point], ran: &[Ran], out: &Path) -> anyhow::Result<String> {
    let mut s = String::new();
    let mut claims = Table::new(["claim", "paper", "ours (mean ± 95%)", "verdict"]);
    if let Some(server) = ran.iter().find(|r| r.part.name == "server") {
        s += &server_section(&server.runs, out, &mut claims)?;
    }
    let sweeps: Vec<&VariantRun> = ran
        .iter()
        .filter(|r| r.part.name != "server")
        .flat_map(|r| r.runs.iter())
        .collect();
    s += &super::sweeps::section(points, &sweeps, out, &mut claims)?;
    Ok(format!(
        "## The claims\n\n\
         Each figure is the mean over the rounds with its 95% interval (the paper gives no \
         level). A factor is taken round by round between variants run next to each other. \
         \"n× fewer\" holds when the interval's low end reaches n, is in direction when it \
         is above 1; \"a fraction\" holds when its high end is under the bound; \"about\" \
         and \"barely\" hold when the whole interval is within the range named.\n\n{}\n{s}",
        claims.markdown()
    ))
}

fn server_section(runs: &[VariantRun], out: &Path, claims: &mut Table) -> anyhow::Result<String> {
    let runs: Vec<&VariantRun> = runs.iter().collect();
    let figures: [(&str, &Of<'_>, usize); 9] = [
        ("objects", &|r| r.operations as f64, 0),
        (
            "origin connections per object",
            &|r| per_op(tcp(r, "origin", "Tcp.PassiveOpens"), r),
            3,
        ),
        (
            "origin segments in+out per object",
            &|r| {
                per_op(
                    tcp(r, "origin", "Tcp.InSegs") + tcp(r, "origin", "Tcp.OutSegs"),
                    r,
                )
            },
            1,
        ),
        (
            "origin CPU ms per object",
            &|r| per_op(r.server_cpu_s * 1000.0, r),
            3,
        ),
        ("edge host CPU ms per object", &cost_ms, 3),
        (
            "of it, the serving process",
            &|r| per_op(on_edge(r, r.proxy_cpu_s) * 1000.0, r),
            3,
        ),
        (
            "of it, the receive threads",
            &|r| per_op(on_edge(r, r.proxy_napi_cpu_s) * 1000.0, r),
            3,
        ),
        ("edge host CPU at 6 MB/s (% of a CPU)", &at_rate, 1),
        (
            "errors",
            &|r| {
                r.loads
                    .iter()
                    .map(|l| l.errors.values().sum::<u64>() as f64)
                    .sum()
            },
            1,
        ),
    ];
    let mut t = Table::new(std::iter::once("variant").chain(figures.iter().map(|f| f.0)));
    for v in SERVER_VARIANTS {
        let cells = figures
            .iter()
            .map(|(_, f, d)| interval(&runs, v, *f).show(*d));
        t.row(std::iter::once(format!("`{v}`")).chain(cells));
    }
    let conns: &Of<'_> = figures[1].1;
    let segs: &Of<'_> = figures[2].1;
    for v in ["edge", "edge-pipelined"] {
        for (what, f, id) in [("connections", conns, "002-1"), ("segments", segs, "002-2")] {
            let i = ratios(&rounds(&runs, "direct", f), &rounds(&runs, v, f));
            claims.row([
                format!("{id} the origin handles far fewer {what} per object (`{v}`)"),
                "about 10× fewer (companion report)".to_string(),
                format!("{}× fewer", i.show(1)),
                Verdict::factor_at_least(i, 10.0).word().to_string(),
            ]);
        }
    }
    let full = ratios(
        &rounds(&runs, "edge", &at_rate),
        &rounds(&runs, "nginx", &at_rate),
    );
    claims.row([
        "002-3 the booster costs a fraction of a full web server (edge against nginx, the \
         edge host's CPU per byte)"
            .to_string(),
        "½ (polling only) to ¼ (all optimisations) of TUX".to_string(),
        format!("{} of nginx", full.show(2)),
        Verdict::fraction_at_most(full, 0.5).word().to_string(),
    ]);
    // Item: the per-object figures as plots, each variant a point with its interval.
    for (file, what, f) in [
        (
            "server-connections.svg",
            "origin connections per object",
            conns,
        ),
        (
            "server-segments.svg",
            "origin segments in+out per object",
            segs,
        ),
    ] {
        let mut series = Vec::new();
        let mut half = Vec::new();
        for (k, v) in SERVER_VARIANTS.iter().enumerate() {
            let i = interval(&runs, v, f);
            series.push(Series {
                label: format!("{} {v}", k + 1),
                points: vec![((k + 1) as f64, i.mean)],
            });
            half.push(vec![i.half]);
        }
        plot::lines_with_errors(
            &out.join(file),
            (
                &format!("Seed 002: {what}"),
                "variant (1 direct, 2 edge, 3 edge-pipelined, 4 nginx)",
                what,
            ),
            &series,
            &half,
        )?;
    }
    Ok(format!(
        "## The server's load, and the booster against a full web server\n\n\
         SURGE users on the base lines. `direct`: the lab's origin serves them itself; \
         `edge` and `edge-pipelined`: through Splicer's edge; `nginx`: nginx on the edge's \
         host serves the same objects itself (sendfile), the full web server in the \
         booster's place. The edge host's CPU is its serving process (with its children) \
         and its receive threads (threaded NAPI: the kernel's receive work for its links); \
         at 6 MB/s it is that CPU per byte sent to the clients times the paper's rate, in \
         percent of one CPU. For `direct` the edge host only routes.\n\n{}\n\
         ![origin connections per object](panteleenko/server-connections.svg)\n\n\
         ![origin segments per object](panteleenko/server-segments.svg)\n\n\
         The paper's figure for its booster with every optimisation is about 12% of its CPU \
         at 6 MB/s (Fig 8), a quarter of TUX's; its CPU was of 2002.\n\n",
        t.markdown()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_pair_rounds() {
        let a = [(0, 10.0), (1, 20.0), (2, 30.0)];
        let b = [(0, 1.0), (2, 3.0)];
        let r = ratios(&a, &b);
        assert_eq!((r.mean, r.n), (10.0, 2));
    }
}
