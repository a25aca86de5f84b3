//! The report of `panteleenko`: the server part's table and claims, then the sweeps' figures
//! (packets and the edge's cost by size, requests per connection, MTU, delay and rate),
//! every figure a mean over the rounds with its 95% interval, every verdict from them.
//! Reads `runs.json` only.

use std::fmt::Write as _;
use std::path::Path;

use super::{Point, BASE, SERVER_VARIANTS, SIZE};
use crate::experiment::plot::{self, Series};
use crate::experiment::run::VariantRun;
use crate::experiment::stats::{paired_gains, Interval, Level, Verdict};
use crate::reproduce::table::Table;
use crate::reproduce::Ran;

/// The paper gives no level; seed 001's and 004's.
const LEVEL: Level = Level::P95;
/// The paper normalises its costs to this rate sent to clients, bytes a second.
const RATE: f64 = 6e6;
/// The line from the clients into the edge, as the runs name it.
const CLIENT_LINE: &str = "r1: client → edge";

/// A figure of one run.
type Of<'a> = dyn Fn(&VariantRun) -> f64 + 'a;

fn tcp(r: &VariantRun, host: &str, key: &str) -> f64 {
    r.tcp
        .get(host)
        .and_then(|c| c.get(key))
        .map_or(f64::NAN, |v| *v as f64)
}

fn per_op(x: f64, r: &VariantRun) -> f64 {
    if r.operations == 0 {
        f64::NAN
    } else {
        x / r.operations as f64
    }
}

/// `x`, a figure of the edge host, where a process served there (NaN for `direct`, whose
/// edge host only routes and whose receive threads are not counted).
fn on_edge(r: &VariantRun, x: f64) -> f64 {
    if r.proxy_cpu_s > 0.0 {
        x
    } else {
        f64::NAN
    }
}

/// The edge host's CPU: the process serving the clients (Splicer or nginx, with its
/// children) and the host's receive threads. NaN without a process (`direct`).
fn host_cpu_s(r: &VariantRun) -> f64 {
    on_edge(r, r.proxy_cpu_s + r.proxy_napi_cpu_s)
}

/// The line from the edge to the clients, as the runs name it.
const TO_CLIENTS: &str = "r1: edge → client";
/// IPv4 and TCP headers with timestamps: what a packet carries besides data.
const HEADERS: u64 = 52;

fn line<'a>(r: &'a VariantRun, name: &str) -> Option<&'a crate::experiment::run::LinkRun> {
    r.links.iter().find(|l| l.link == name)
}

/// The data the clients were sent while the loads ran, bytes: what their line carried less
/// the packets' headers. Counted in the same window as the CPU and the packets, it takes in
/// the requests still under way when a run ends, which the requests completed do not (a
/// 60 KB request takes about 9 s on a 56 kbit/s line).
fn sent(r: &VariantRun) -> f64 {
    line(r, TO_CLIENTS).map_or(f64::NAN, |l| {
        l.bytes.saturating_sub(HEADERS * l.passed) as f64
    })
}

/// The edge host's CPU at the paper's 6 MB/s to clients: percent of one CPU.
fn at_rate(r: &VariantRun) -> f64 {
    host_cpu_s(r) / sent(r) * RATE * 100.0
}

/// A count of the run per `size` bytes sent to the clients: per request of that size.
fn per_sent(x: f64, r: &VariantRun, size: f64) -> f64 {
    x / sent(r) * size
}

fn client_packets(r: &VariantRun) -> f64 {
    line(r, CLIENT_LINE).map_or(f64::NAN, |l| (l.passed + l.lost + l.overflow) as f64)
}

fn cost_ms(r: &VariantRun) -> f64 {
    per_op(host_cpu_s(r) * 1000.0, r)
}

fn pure_acks(r: &VariantRun) -> f64 {
    line(r, CLIENT_LINE).map_or(f64::NAN, |l| l.tcp_pure_acks as f64)
}

fn foldable(r: &VariantRun) -> f64 {
    line(r, CLIENT_LINE).map_or(f64::NAN, |l| l.tcp_acks_after_ack as f64)
}

/// The share of the clients' packets the booster could fold into the one before, percent.
fn foldable_share(r: &VariantRun) -> f64 {
    foldable(r) / client_packets(r) * 100.0
}

/// One variant's figure, round by round.
fn rounds(runs: &[&VariantRun], variant: &str, f: &Of<'_>) -> Vec<(usize, f64)> {
    runs.iter()
        .filter(|r| r.variant == variant)
        .map(|r| (r.round, f(r)))
        .collect()
}

fn interval(runs: &[&VariantRun], variant: &str, f: &Of<'_>) -> Interval {
    let v: Vec<f64> = rounds(runs, variant, f).iter().map(|x| x.1).collect();
    Interval::of(&v, LEVEL)
}

/// `a / b` round by round (the variants of a part run next to each other each round).
fn ratios(a: &[(usize, f64)], b: &[(usize, f64)]) -> Interval {
    let v: Vec<f64> = a
        .iter()
        .filter_map(|(round, x)| {
            let y = b.iter().find(|(r, _)| r == round)?.1;
            (y != 0.0).then(|| x / y)
        })
        .collect();
    Interval::of(&v, LEVEL)
}

/// "n times fewer", n at least `bound`: holds when the interval's low end reaches it, in
/// direction when it is above 1.
fn factor_at_least(i: Interval, bound: f64) -> Verdict {
    if !i.known() {
        Verdict::Unknown
    } else if i.lo() >= bound {
        Verdict::Holds
    } else if i.lo() > 1.0 {
        Verdict::InDirection
    } else {
        Verdict::Not
    }
}

/// "a fraction of", at most `bound`: holds when the interval's high end is below it, in
/// direction when it is below 1.
fn fraction_at_most(i: Interval, bound: f64) -> Verdict {
    if !i.known() {
        Verdict::Unknown
    } else if i.hi() <= bound {
        Verdict::Holds
    } else if i.hi() < 1.0 {
        Verdict::InDirection
    } else {
        Verdict::Not
    }
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
    s += &sweeps_section(points, &sweeps, out, &mut claims)?;
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
                factor_at_least(i, 10.0).word().to_string(),
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
        fraction_at_most(full, 0.5).word().to_string(),
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

/// One sweep: a figure of the paper, the points on its axis, and the axis's value of each.
struct Sweep {
    figs: &'static str,
    axis: &'static str,
    file: &'static str,
    points: Vec<(f64, String)>,
}

fn sweeps_of(points: &[Point]) -> Vec<Sweep> {
    let on = |keep: &dyn Fn(&Point) -> Option<f64>| -> Vec<(f64, String)> {
        let mut v: Vec<(f64, String)> = points
            .iter()
            .filter_map(|p| keep(p).map(|x| (x, p.variant.clone())))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let base = |p: &Point| p.size == SIZE && p.per_connection == 1;
    vec![
        Sweep {
            figs: "Figs 5 and 11",
            axis: "object size (KB)",
            file: "size",
            points: on(&|p| {
                (p.line == BASE && p.per_connection == 1).then_some(p.size as f64 / 1000.0)
            }),
        },
        Sweep {
            figs: "Figs 7 and 13",
            axis: "requests per connection",
            file: "requests",
            points: on(&|p| {
                (p.line == BASE && p.size == SIZE).then_some(f64::from(p.per_connection))
            }),
        },
        Sweep {
            figs: "Figs 6 and 12",
            axis: "client MTU (bytes)",
            file: "mtu",
            points: on(&|p| {
                (base(p)
                    && p.line.one_way_ms == BASE.one_way_ms
                    && p.line.rate_bps == BASE.rate_bps)
                    .then_some(f64::from(p.line.mtu))
            }),
        },
        Sweep {
            figs: "Fig 14",
            axis: "round trip (ms)",
            file: "rtt",
            points: on(&|p| {
                (base(p) && p.line.mtu == BASE.mtu && p.line.rate_bps == BASE.rate_bps)
                    .then_some(2.0 * p.line.one_way_ms)
            }),
        },
        Sweep {
            figs: "Fig 15",
            axis: "line rate (kbit/s)",
            file: "rate",
            points: on(&|p| {
                (base(p) && p.line.mtu == BASE.mtu && p.line.one_way_ms == BASE.one_way_ms)
                    .then_some(p.line.rate_bps as f64 / 1000.0)
            }),
        },
    ]
}

fn sweeps_section(
    points: &[Point],
    runs: &[&VariantRun],
    out: &Path,
    claims: &mut Table,
) -> anyhow::Result<String> {
    let mut s = String::from(
        "## Packets and cost by size, requests per connection, MTU, delay and rate\n\n\
         S-clients through the edge, one thing changed from the base at a time. Packets are \
         what the clients sent into the edge's line, per request: all of them, the pure \
         ACKs, and the pure ACKs that followed a pure ACK of the same connection, which the \
         booster's acknowledgement aggregation folds into the one before (its check: no \
         data, no flags; how long it may wait is not in the text, so here no limit). The \
         paper also counts the packets received in FIN_WAIT_1; the lab's line emulator sees \
         each direction apart and does not tell them. The edge's cost is its process and \
         its receive threads, at the paper's 6 MB/s to clients; the paper breaks its cost \
         down by TCP state with kernel instrumentation, which this does not.\n\n",
    );
    // Per request: a count over the bytes sent to the clients, times the point's size.
    let size = |r: &VariantRun| {
        points
            .iter()
            .find(|p| p.variant == r.variant)
            .map_or(f64::NAN, |p| p.size as f64)
    };
    let per = |x: f64, r: &VariantRun| per_sent(x, r, size(r));
    let connections = |r: &VariantRun| -> f64 {
        r.loads
            .iter()
            .filter_map(|l| l.extra["connections"].as_f64())
            .sum()
    };
    let data_segments =
        |r: &VariantRun| line(r, TO_CLIENTS).map_or(f64::NAN, |l| l.tcp_data as f64);
    let figures: [(&str, &Of<'_>, usize); 9] = [
        ("requests completed", &|r| r.operations as f64, 0),
        ("connections per request", &|r| per(connections(r), r), 2),
        (
            "data segments to the client per request",
            &|r| per(data_segments(r), r),
            1,
        ),
        (
            "client packets per request",
            &|r| per(client_packets(r), r),
            1,
        ),
        ("pure ACKs", &|r| per(pure_acks(r), r), 1),
        ("foldable ACKs", &|r| per(foldable(r), r), 1),
        ("foldable share (%)", &foldable_share, 1),
        (
            "edge segments in per request",
            &|r| per(tcp(r, "edge", "Tcp.InSegs"), r),
            1,
        ),
        ("edge CPU at 6 MB/s (%)", &at_rate, 1),
    ];
    for sw in sweeps_of(points) {
        if sw.points.len() < 2 {
            continue;
        }
        let mut t = Table::new(
            std::iter::once(sw.axis.to_string())
                .chain(std::iter::once("variant".to_string()))
                .chain(figures.iter().map(|f| f.0.to_string())),
        );
        for (x, v) in &sw.points {
            let cells = figures
                .iter()
                .map(|(_, f, d)| interval(runs, v, *f).show(*d));
            t.row([format!("{x}"), format!("`{v}`")].into_iter().chain(cells));
        }
        // Packets by the axis, and the cost by it.
        let mut series = Vec::new();
        let mut half = Vec::new();
        for (label, f) in [
            ("client packets", figures[3].1),
            ("pure ACKs", figures[4].1),
            ("foldable ACKs", figures[5].1),
        ] {
            let is: Vec<(f64, Interval)> = sw
                .points
                .iter()
                .map(|(x, v)| (*x, interval(runs, v, f)))
                .collect();
            series.push(Series {
                label: label.into(),
                points: is.iter().map(|(x, i)| (*x, i.mean)).collect(),
            });
            half.push(is.iter().map(|(_, i)| i.half).collect());
        }
        let packets = format!("packets-by-{}.svg", sw.file);
        plot::lines_with_errors(
            &out.join(&packets),
            (
                &format!("Seed 002, {}: packets from the clients", sw.figs),
                sw.axis,
                "per request",
            ),
            &series,
            &half,
        )?;
        let is: Vec<(f64, Interval)> = sw
            .points
            .iter()
            .map(|(x, v)| (*x, interval(runs, v, &at_rate)))
            .collect();
        let cost = format!("cost-by-{}.svg", sw.file);
        plot::lines_with_errors(
            &out.join(&cost),
            (
                &format!("Seed 002, {}: the edge's CPU at 6 MB/s", sw.figs),
                sw.axis,
                "% of one CPU",
            ),
            &[Series {
                label: "edge host".into(),
                points: is.iter().map(|(x, i)| (*x, i.mean)).collect(),
            }],
            &[is.iter().map(|(_, i)| i.half).collect()],
        )?;
        write!(
            s,
            "### {}: by {}\n\n{}\n![packets](panteleenko/{packets})\n\n\
             ![cost](panteleenko/{cost})\n\n",
            sw.figs,
            sw.axis,
            t.markdown()
        )?;
        if sw.file == "rate" {
            s += &fixed_cost(runs, &sw);
        }
    }
    sweep_claims(points, runs, claims);
    Ok(s)
}

/// The edge host's CPU over a sweep of one object at several rates, fitted as a part
/// fixed per run and a part per byte (least squares over every run): what extrapolating a
/// light load to the paper's 6 MB/s carries along.
fn fixed_cost(runs: &[&VariantRun], sw: &Sweep) -> String {
    let pts: Vec<(f64, f64, f64)> = runs
        .iter()
        .filter(|r| sw.points.iter().any(|(_, v)| *v == r.variant))
        .map(|r| (sent(r) / 1e6, host_cpu_s(r), r.wall_s))
        .filter(|(x, y, _)| x.is_finite() && y.is_finite())
        .collect();
    let n = pts.len() as f64;
    if pts.len() < 3 {
        return String::new();
    }
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let per_mb = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx;
    let fixed = my - per_mb * mx;
    let wall = pts.iter().map(|p| p.2).sum::<f64>() / n;
    format!(
        "Over the {} runs of this sweep (one object, the line's rate changed), the edge \
         host's CPU per run fits {fixed:.3} s fixed ({:.1}% of a CPU over a run of \
         {wall:.0} s) plus {per_mb:.4} s per MB sent to the clients (least squares): at the \
         paper's 6 MB/s the part per byte alone is {:.1}% of a CPU. A faster line carries \
         more bytes over the same fixed part, so the cost at 6 MB/s, extrapolated from a \
         light load, falls with the rate.\n\n",
        pts.len(),
        fixed / wall * 100.0,
        per_mb * RATE / 1e6 * 100.0,
    )
}

fn sweep_claims(points: &[Point], runs: &[&VariantRun], claims: &mut Table) {
    let sweeps = sweeps_of(points);
    let base = format!("size-{SIZE}");
    // Fig 5: about half the packets foldable, from 10 KB up.
    let big: Vec<(f64, Interval)> = sweeps[0]
        .points
        .iter()
        .filter(|(x, _)| *x * 1000.0 >= SIZE as f64)
        .map(|(x, v)| (*x, interval(runs, v, &foldable_share)))
        .collect();
    if !big.is_empty() {
        claims.row([
            "002-4 about half the clients' packets can be aggregated (10 KB and above)".to_string(),
            "≈ 50% (Fig 5); pays only above 10 KB".to_string(),
            big.iter()
                .map(|(x, i)| format!("{x} KB: {}%", i.show(1)))
                .collect::<Vec<_>>()
                .join("; "),
            Verdict::all(
                big.iter()
                    .map(|(_, i)| Verdict::within(*i, 40.0, 60.0, f64::NAN)),
            )
            .word()
            .to_string(),
        ]);
    }
    // Fig 12: the MTU from 256 to 1500 cuts the cost more than twice.
    let mtu = &sweeps[2].points;
    if let (Some(lo), Some(hi)) = (mtu.first(), mtu.last()) {
        if lo.0 < hi.0 {
            let i = ratios(
                &rounds(runs, &lo.1, &at_rate),
                &rounds(runs, &hi.1, &at_rate),
            );
            claims.row([
                format!("002-5 the MTU from {} to {} cuts the cost", lo.0, hi.0),
                "more than 2× (Fig 12, 256 → 1500)".to_string(),
                format!("{}×", i.show(2)),
                factor_at_least(i, 2.0).word().to_string(),
            ]);
        }
    }
    // Fig 13: 16 requests per connection, about 20% less.
    if let Some((k, v)) = sweeps[1].points.last().filter(|(k, _)| *k > 1.0) {
        let g = Interval::of(
            &paired_gains(&rounds(runs, &base, &at_rate), &rounds(runs, v, &at_rate)),
            LEVEL,
        );
        claims.row([
            format!("002-6 {k} requests per connection cost less than 1"),
            "about 20% less (Fig 13, 16 requests)".to_string(),
            format!("{}% less", g.show(1)),
            Verdict::within(g, 10.0, 30.0, 0.0).word().to_string(),
        ]);
    }
    // Figs 14–15: delay and rate barely matter: every point within 10% of the base.
    for (sw, id, what) in [
        (&sweeps[3], "002-7", "delay"),
        (&sweeps[4], "002-8", "rate"),
    ] {
        let others: Vec<&(f64, String)> = sw.points.iter().filter(|(_, v)| *v != base).collect();
        if others.is_empty() {
            continue;
        }
        let changes: Vec<(f64, Interval)> = others
            .iter()
            .map(|(x, v)| {
                let g = paired_gains(&rounds(runs, &base, &at_rate), &rounds(runs, v, &at_rate));
                // A change, positive when the cost grew.
                let up: Vec<f64> = g.iter().map(|x| -x).collect();
                (*x, Interval::of(&up, LEVEL))
            })
            .collect();
        claims.row([
            format!("{id} the line's {what} barely changes the cost (within ±10% of the base)"),
            format!("\"minimal\" ({})", sw.figs),
            changes
                .iter()
                .map(|(x, i)| format!("{x}: {}%", i.show(1)))
                .collect::<Vec<_>>()
                .join("; "),
            Verdict::all(
                changes
                    .iter()
                    .map(|(_, i)| Verdict::within(*i, -10.0, 10.0, f64::NAN)),
            )
            .word()
            .to_string(),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(mean: f64, half: f64) -> Interval {
        Interval { mean, half, n: 3 }
    }

    #[test]
    fn factors_and_fractions_get_their_verdicts() {
        assert_eq!(factor_at_least(i(12.0, 1.0), 10.0), Verdict::Holds);
        assert_eq!(factor_at_least(i(10.5, 1.0), 10.0), Verdict::InDirection);
        assert_eq!(factor_at_least(i(1.2, 0.5), 10.0), Verdict::Not);
        assert_eq!(fraction_at_most(i(0.3, 0.1), 0.5), Verdict::Holds);
        assert_eq!(fraction_at_most(i(0.6, 0.1), 0.5), Verdict::InDirection);
        assert_eq!(fraction_at_most(i(0.95, 0.1), 0.5), Verdict::Not);
        assert_eq!(
            factor_at_least(Interval::of(&[3.0], LEVEL), 2.0),
            Verdict::Unknown
        );
    }

    #[test]
    fn ratios_pair_rounds() {
        let a = [(0, 10.0), (1, 20.0), (2, 30.0)];
        let b = [(0, 1.0), (2, 3.0)];
        let r = ratios(&a, &b);
        assert_eq!((r.mean, r.n), (10.0, 2));
    }

    #[test]
    fn the_sweeps_meet_at_the_base() {
        let pts = super::super::points(&super::super::params(crate::reproduce::Grid::Full));
        let sw = sweeps_of(&pts);
        let base = format!("size-{SIZE}");
        for s in &sw {
            assert!(
                s.points.iter().any(|(_, v)| *v == base),
                "{}: {:?}",
                s.figs,
                s.points
            );
            assert!(s.points.len() >= 3, "{}", s.figs);
        }
        let mtu: Vec<f64> = sw[2].points.iter().map(|p| p.0).collect();
        assert_eq!(mtu, [256.0, 536.0, 1500.0]);
    }
}
