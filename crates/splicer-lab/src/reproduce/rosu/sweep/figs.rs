//! The figures of one `rosu-sweep` run, and of one kind's runs by point: the tables,
//! gains and plots the report is made of.

use std::path::Path;

use super::super::{gain, Kind, GET_ENGINES, TUNNEL_ENGINES};
use crate::experiment::plot::{lines, Series};
use crate::experiment::run::VariantRun;
use crate::experiment::summary::Spread;
use crate::reproduce::table::{num, Table};

/// A run's figures.
#[derive(Debug, Clone, Copy)]
pub struct Fig {
    /// Splicer's CPU, percent of one CPU.
    pub proxy_pct: f64,
    pub proxy_ms: f64,
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
        machine_ms: r.machine_ms_per_op(),
        lat_ms: load.map_or(f64::NAN, |l| l.latency.mean_ms),
        cv: load.map_or(f64::NAN, |l| l.latency.cv),
        per_s: load.map_or(f64::NAN, |l| l.per_second),
        data_per_ack: data as f64 / acks.max(1) as f64,
        rto_per_k: rtos as f64 * 1000.0 / data.max(1) as f64,
        errors: r.loads.iter().map(|l| l.error_total()).sum(),
    }
}

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
    pub fn at(&self, e: &str, c: u32, s: u64, f: &dyn Fn(&Fig) -> f64) -> Spread {
        let v = format!("{e}.c{c}.{s}k.{}", self.kind.name());
        Spread::of(
            self.runs
                .iter()
                .filter(|r| r.variant == v)
                .map(|r| f(&fig(r)))
                .collect(),
        )
    }
    pub fn gain_at(&self, e: &str, c: u32, s: u64, f: &dyn Fn(&Fig) -> f64) -> f64 {
        gain(self.at("copy", c, s, f).median, self.at(e, c, s, f).median)
    }
    /// Rows size × engine, columns clients.
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
    /// The gain of each splice engine over the relay, %: rows size, columns engine × clients.
    pub fn gains(&self, f: &dyn Fn(&Fig) -> f64) -> String {
        let splices = &self.engines()[1..];
        let mut head = vec!["KB".to_string()];
        for e in splices {
            for c in self.clients {
                head.push(format!("{e} {c}"));
            }
        }
        let mut t = Table::new(head);
        for s in self.sizes {
            let mut row = vec![s.to_string()];
            for e in splices {
                for c in self.clients {
                    row.push(num(self.gain_at(e, *c, *s, f), 0));
                }
            }
            t.row(row);
        }
        t.markdown()
    }
    /// Gain against size, one line per engine and client count.
    pub fn plot(&self, path: &Path, title: &str, f: &dyn Fn(&Fig) -> f64) -> anyhow::Result<()> {
        let mut series = Vec::new();
        for e in &self.engines()[1..] {
            for c in self.clients {
                series.push(Series {
                    label: format!("{e}, {c} clients"),
                    points: self
                        .sizes
                        .iter()
                        .map(|s| (*s as f64, self.gain_at(e, *c, *s, f)))
                        .collect(),
                });
            }
        }
        lines(
            path,
            title,
            "object size, KB",
            "gain over the relay, %",
            &series,
            false,
        )
    }
    /// Extremes of a gain over the sizes `sizes` accepts and every client count and splice
    /// engine.
    pub fn gain_range(&self, f: &dyn Fn(&Fig) -> f64, sizes: impl Fn(u64) -> bool) -> (f64, f64) {
        let mut v = Vec::new();
        for e in &self.engines()[1..] {
            for c in self.clients {
                for s in self.sizes.iter().filter(|s| sizes(**s)) {
                    v.push(self.gain_at(e, *c, *s, f));
                }
            }
        }
        v.retain(|x| x.is_finite());
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    }
    /// The median gain at one size, over client counts and splice engines.
    pub fn size_gain(&self, s: u64, f: &dyn Fn(&Fig) -> f64) -> f64 {
        let mut v = Vec::new();
        for e in &self.engines()[1..] {
            for c in self.clients {
                v.push(self.gain_at(e, *c, s, f));
            }
        }
        Spread::of(v).median
    }
    /// Median over every point of an engine.
    pub fn overall(&self, e: &str, f: &dyn Fn(&Fig) -> f64) -> f64 {
        let mut v = Vec::new();
        for c in self.clients {
            for s in self.sizes {
                v.push(self.at(e, *c, *s, f).median);
            }
        }
        Spread::of(v).median
    }
}

pub fn range(r: (f64, f64)) -> String {
    if r.0.is_finite() {
        format!("{} to {}%", num(r.0, 0), num(r.1, 0))
    } else {
        "– (no such point in the grid)".into()
    }
}

/// A claim's verdict: `–` where the grid cannot tell.
pub fn verdict(v: Option<bool>) -> String {
    match v {
        Some(true) => "yes".into(),
        Some(false) => "no".into(),
        None => "–".into(),
    }
}
