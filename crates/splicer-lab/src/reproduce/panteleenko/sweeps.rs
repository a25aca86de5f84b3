//! The sweeps of `panteleenko` (Figs 5–7 and 11–15): per point, the clients' packets and the
//! edge's cost, a table and two plots per swept quantity, and the claims they carry.

use std::fmt::Write as _;
use std::path::Path;

use super::report::{
    at_rate, client_packets, fin_wait1_share, foldable, foldable_share, host_cpu_s, interval, line,
    per_sent, pure_acks, ratios, rounds, sent, tcp, Of, LEVEL, RATE, TO_CLIENTS,
};
use super::{Point, BASE, SIZE};
use crate::experiment::plot::{self, Series};
use crate::experiment::run::VariantRun;
use crate::experiment::stats::{paired_gains, Interval, Verdict};
use crate::reproduce::table::Table;

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

pub(super) fn section(
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
         share received in FIN_WAIT_1 is of the segments arriving at the edge from the \
         clients' side, each looked up in the edge's socket tables as it arrives (an eBPF \
         program on the edge's interfaces, `[experiment] proxy_tcp_states`; a lookup per \
         segment, in the receive threads whose CPU the cost includes); `–` in runs made \
         before it was counted. The edge's cost is its process and its receive threads, at \
         the paper's 6 MB/s to clients; the paper breaks its cost down by TCP state with \
         kernel instrumentation, which this does not.\n\n",
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
    let figures: [(&str, &Of<'_>, usize); 10] = [
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
        ("received in FIN_WAIT_1 (%)", &fin_wait1_share, 1),
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
                Verdict::factor_at_least(i, 2.0).word().to_string(),
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
    // Figs 5–7: most received packets are taken in FIN_WAIT_1 (at the base point).
    let fin = interval(runs, &base, &fin_wait1_share);
    claims.row([
        "002-9 most of the packets the edge receives from the clients it takes in FIN_WAIT_1"
            .to_string(),
        "\"most\" (Figs 5–7, the text)".to_string(),
        if fin.mean.is_finite() {
            format!("{}% at {} KB", fin.show(1), SIZE as f64 / 1000.0)
        } else {
            "–".to_string()
        },
        Verdict::above(fin, 50.0).word().to_string(),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

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
