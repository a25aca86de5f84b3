//! The figures of one `rosu-sweep` run, and of one kind's runs by point: the tables,
//! gains and plots the report is made of.

use std::path::Path;

use super::super::{Kind, GET_ENGINES, TUNNEL_ENGINES};
use crate::experiment::plot::{lines_with_errors, Series};
use crate::experiment::run::VariantRun;
use crate::experiment::stats::{paired_gains, Interval, Level};
use crate::reproduce::table::{num, Table};

/// A run's figures.
#[derive(Debug, Clone, Copy)]
pub struct Fig {
    /// Splicer's CPU, percent of one CPU.
    pub proxy_pct: f64,
    pub proxy_ms: f64,
    /// Splicer's CPU with the kernel work it causes (its host's receive threads and the
    /// kernel's workers), ms per request.
    pub kernel_ms: f64,
    /// Of which the receive threads and the workers.
    pub napi_ms: f64,
    pub kworker_ms: f64,
    pub machine_ms: f64,
    pub lat_ms: f64,
    pub cv: f64,
    pub per_s: f64,
    /// Data segments the server sent per pure ACK it was sent.
    pub data_per_ack: f64,
    /// Server RTOs per 1000 data packets it sent.
    pub rto_per_k: f64,
    pub errors: u64,
}

fn link<'a>(r: &'a VariantRun, name: &str) -> Option<&'a crate::experiment::run::LinkRun> {
    r.links.iter().find(|l| l.link == name)
}

pub fn fig(r: &VariantRun) -> Fig {
    let load = r.loads.first();
    let data = link(r, "r2: server → proxy").map_or(0, |l| l.tcp_data);
    let acks = link(r, "r2: proxy → server").map_or(0, |l| l.tcp_pure_acks);
    let rtos = r
        .tcp
        .get("server")
        .and_then(|c| c.get("TcpExt.TCPTimeouts"))
        .copied()
        .unwrap_or(0);
    Fig {
        proxy_pct: 100.0 * r.proxy_cpu_s / r.wall_s.max(1e-9),
        proxy_ms: r.proxy_ms_per_op(),
        kernel_ms: r.proxy_kernel_ms_per_op(),
        napi_ms: r.proxy_napi_cpu_s * 1000.0 / r.operations.max(1) as f64,
        kworker_ms: r.kworker_cpu_s * 1000.0 / r.operations.max(1) as f64,
        machine_ms: r.machine_ms_per_op(),
        lat_ms: load.map_or(f64::NAN, |l| l.latency.mean_ms),
        cv: load.map_or(f64::NAN, |l| l.latency.cv),
        per_s: load.map_or(f64::NAN, |l| l.per_second),
        data_per_ack: data as f64 / acks.max(1) as f64,
        rto_per_k: rtos as f64 * 1000.0 / data.max(1) as f64,
        errors: r.loads.iter().map(|l| l.error_total()).sum(),
    }
}

/// Seed 000's confidence level (its Figs: 6 runs a point, 90% intervals).
pub const LEVEL: Level = Level::P90;

/// The figures of one kind's runs, by point.
pub struct Figs<'a> {
    pub runs: &'a [VariantRun],
    pub kind: Kind,
    pub sizes: &'a [u64],
    pub clients: &'a [u32],
}

impl Figs<'_> {
    pub fn engines(&self) -> &'static [&'static str] {
        if self.kind == Kind::Get {
            &GET_ENGINES
        } else {
            &TUNNEL_ENGINES
        }
    }
    /// The splice engines: every engine but the relay.
    pub fn splices(&self) -> &'static [&'static str] {
        &self.engines()[1..]
    }
    /// One point's figure, round by round.
    pub fn rounds(&self, e: &str, c: u32, s: u64, f: &dyn Fn(&Fig) -> f64) -> Vec<(usize, f64)> {
        let v = format!("{e}.c{c}.{s}k.{}", self.kind.name());
        self.runs
            .iter()
            .filter(|r| r.variant == v)
            .map(|r| (r.round, f(&fig(r))))
            .collect()
    }
    /// One point's mean over its rounds, with its interval.
    pub fn at(&self, e: &str, c: u32, s: u64, f: &dyn Fn(&Fig) -> f64) -> Interval {
        let v: Vec<f64> = self.rounds(e, c, s, f).into_iter().map(|x| x.1).collect();
        Interval::of(&v, LEVEL)
    }
    /// The gains of `e` over the relay at one point, round by round (paired).
    fn gains_at(&self, e: &str, c: u32, s: u64, f: &dyn Fn(&Fig) -> f64) -> Vec<f64> {
        paired_gains(&self.rounds("copy", c, s, f), &self.rounds(e, c, s, f))
    }
    /// The gain of `e` over the relay at one point: the mean of its rounds' gains.
    pub fn gain_at(&self, e: &str, c: u32, s: u64, f: &dyn Fn(&Fig) -> f64) -> Interval {
        Interval::of(&self.gains_at(e, c, s, f), LEVEL)
    }
    /// The gain of `e` at one size, every client count's rounds together.
    pub fn size_gain(&self, e: &str, s: u64, f: &dyn Fn(&Fig) -> f64) -> Interval {
        let v: Vec<f64> = self
            .clients
            .iter()
            .flat_map(|c| self.gains_at(e, *c, s, f))
            .collect();
        Interval::of(&v, LEVEL)
    }
    /// The points (clients, size) of the sizes `sizes` accepts.
    pub fn points(&self, sizes: impl Fn(u64) -> bool) -> Vec<(u32, u64)> {
        let mut v = Vec::new();
        for s in self.sizes.iter().filter(|s| sizes(**s)) {
            for c in self.clients {
                v.push((*c, *s));
            }
        }
        v
    }
    /// Rows size × engine, columns clients: mean ± half the interval.
    pub fn table(&self, f: &dyn Fn(&Fig) -> f64, digits: usize) -> String {
        let mut t = Table::new(
            ["KB", "engine"]
                .map(String::from)
                .into_iter()
                .chain(self.clients.iter().map(|c| format!("{c} clients"))),
        );
        for s in self.sizes {
            for e in self.engines() {
                t.row(
                    [s.to_string(), e.to_string()].into_iter().chain(
                        self.clients
                            .iter()
                            .map(|c| self.at(e, *c, *s, f).show(digits)),
                    ),
                );
            }
        }
        t.markdown()
    }
    /// The gain of each splice engine over the relay, %: rows size, columns engine ×
    /// clients, mean ± half the interval.
    pub fn gains(&self, f: &dyn Fn(&Fig) -> f64) -> String {
        let mut head = vec!["KB".to_string()];
        for e in self.splices() {
            for c in self.clients {
                head.push(format!("{e} {c}"));
            }
        }
        let mut t = Table::new(head);
        for s in self.sizes {
            let mut row = vec![s.to_string()];
            for e in self.splices() {
                for c in self.clients {
                    row.push(self.gain_at(e, *c, *s, f).show(0));
                }
            }
            t.row(row);
        }
        t.markdown()
    }
    /// Gain against size, one line per engine and client count, with the intervals.
    pub fn plot(&self, path: &Path, title: &str, f: &dyn Fn(&Fig) -> f64) -> anyhow::Result<()> {
        let mut series = Vec::new();
        let mut half = Vec::new();
        for e in self.splices() {
            for c in self.clients {
                let g: Vec<(f64, Interval)> = self
                    .sizes
                    .iter()
                    .map(|s| (*s as f64, self.gain_at(e, *c, *s, f)))
                    .collect();
                series.push(Series {
                    label: format!("{e}, {c} clients"),
                    points: g.iter().map(|(s, i)| (*s, i.mean)).collect(),
                });
                half.push(g.iter().map(|(_, i)| i.half).collect());
            }
        }
        let y = format!("gain over the relay, % ({}% intervals)", LEVEL.percent());
        lines_with_errors(path, (title, "object size, KB", &y), &series, &half)
    }
    /// The gains of `e` at the points of the sizes `sizes` accepts.
    pub fn gains_over(
        &self,
        e: &str,
        f: &dyn Fn(&Fig) -> f64,
        sizes: impl Fn(u64) -> bool,
    ) -> Vec<Interval> {
        self.points(sizes)
            .into_iter()
            .map(|(c, s)| self.gain_at(e, c, s, f))
            .collect()
    }
    /// The differences relay − `e` of a figure, paired by point and round, over every
    /// point: "fewer with splice" when the interval is above zero.
    pub fn pooled_difference(&self, e: &str, f: &dyn Fn(&Fig) -> f64) -> Interval {
        let mut v = Vec::new();
        for (c, s) in self.points(|_| true) {
            let relay = self.rounds("copy", c, s, f);
            for (round, x) in self.rounds(e, c, s, f) {
                if let Some((_, r)) = relay.iter().find(|(k, _)| *k == round) {
                    v.push(r - x);
                }
            }
        }
        Interval::of(&v, LEVEL)
    }
    /// Mean over every run of an engine.
    pub fn overall(&self, e: &str, f: &dyn Fn(&Fig) -> f64) -> Interval {
        let v: Vec<f64> = self
            .points(|_| true)
            .into_iter()
            .flat_map(|(c, s)| self.rounds(e, c, s, f))
            .map(|x| x.1)
            .collect();
        Interval::of(&v, LEVEL)
    }
}

/// The range of the means of some intervals: `-9 to 12%`.
pub fn mean_range(v: &[Interval]) -> String {
    let m: Vec<f64> = v.iter().map(|i| i.mean).filter(|x| x.is_finite()).collect();
    if m.is_empty() {
        return "– (no such point in the grid)".into();
    }
    let lo = m.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = m.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{} to {}%", num(lo, 0), num(hi, 0))
}

/// The interval whose mean is the largest.
pub fn best(v: &[Interval]) -> Option<Interval> {
    v.iter()
        .filter(|i| i.mean.is_finite())
        .copied()
        .max_by(|a, b| a.mean.total_cmp(&b.mean))
}
