//! `wrk` as a generator: kept-alive clients asking for the same object as fast as they can,
//! as the s-clients do, but from a load generator in C whose own CPU per request is a
//! fraction of theirs (it checks no body), so a two-core bed leaves more of its CPU to the
//! proxy. The request is the s-clients' ([`Get`]), absolute-form through a forward proxy.
//!
//! `wrk` runs twice: once for the warm-up (its requests count in the timeline, as the
//! s-clients' do, since the experiment's CPU figures cover the whole run) and once for the
//! measured interval. Its Lua `done` hook prints the figures this module reads: requests,
//! bytes (heads included), errors by kind and latency percentiles.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;

use serde::Serialize;

use super::http::Get;
use super::{Report, Second, Via};
use crate::measure::hist::Summary;

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub origin: SocketAddr,
    #[serde(skip)]
    pub via: Via,
    pub clients: usize,
    /// wrk's threads (`-t`).
    pub threads: usize,
    pub size: u64,
    pub cacheable: bool,
    pub seed: u64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub timeout_s: f64,
    /// HTTP/1.1 kept-alive connections; without it every request says `Connection: close`.
    pub keep_alive: bool,
}

impl Params {
    pub fn check(&self) -> Result<(), super::BadParams> {
        if self.clients == 0 || self.threads == 0 || self.threads > self.clients {
            return Err(super::BadParams(
                "--clients and --threads: at least 1 thread, at most one per client",
            ));
        }
        if !matches!(self.via, Via::Direct | Via::HttpProxy(_)) {
            return Err(super::BadParams(
                "--via: wrk goes direct or through a forward proxy (http://PROXY)",
            ));
        }
        if self.duration_s < 1.0 || self.warmup_s >= self.duration_s {
            return Err(super::BadParams(
                "--duration: at least 1 s, and more than --warmup",
            ));
        }
        Ok(())
    }

    /// The address wrk connects to: the proxy, or the origin itself.
    fn target(&self) -> SocketAddr {
        match self.via {
            Via::HttpProxy(p) => p,
            _ => self.origin,
        }
    }

    /// The Lua script: the s-clients' request, built once (no `request` function, so wrk
    /// sends the same bytes without calling into Lua), and a `done` hook that prints the
    /// figures [`parse`] reads.
    pub fn script(&self) -> String {
        let get = Get {
            origin: self.origin,
            size: self.size,
            seed: self.seed,
            cacheable: self.cacheable,
            absolute: matches!(self.via, Via::HttpProxy(_)),
            keep_alive: true,
        };
        let line = get.encode();
        let target = line.split(' ').nth(1).expect("a request line has a target");
        let close = if self.keep_alive {
            ""
        } else {
            "wrk.headers[\"Connection\"] = \"close\"\n"
        };
        format!(
            "wrk.method = \"GET\"\nwrk.path = \"{target}\"\n\
             wrk.headers[\"Host\"] = \"{host}\"\nwrk.headers[\"User-Agent\"] = \"splicer-lab\"\n\
             {close}{DONE}",
            host = self.origin,
        )
    }

    fn run_wrk(&self, script: &std::path::Path, seconds: f64) -> anyhow::Result<Run> {
        let out = Command::new("wrk")
            .arg(format!("-t{}", self.threads))
            .arg(format!("-c{}", self.clients))
            .arg(format!("-d{}s", seconds.round().max(1.0) as u64))
            .arg(format!(
                "--timeout={}s",
                self.timeout_s.round().max(1.0) as u64
            ))
            .arg("-s")
            .arg(script)
            .arg(format!("http://{}/", self.target()))
            .output()
            .map_err(|e| anyhow::anyhow!("wrk: {e} (BENCH=1 scripts/setup.sh installs it)"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        parse(&text).ok_or_else(|| {
            anyhow::anyhow!(
                "wrk gave no figures (exit {}):\n{text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }
}

/// Printed by the script when wrk ends: summary, latency (µs), percentiles (µs).
const DONE: &str = r#"done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("splicer-wrk summary %d %d %d %d %d %d %d %d\n",
    summary.duration, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout))
  io.write(string.format("splicer-wrk latency %.1f %.1f %d\n",
    latency.mean, latency.stdev, latency.max))
  for _, p in ipairs({1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, 99.9, 99.99}) do
    io.write(string.format("splicer-wrk p %g %d\n", p, latency:percentile(p)))
  end
end
"#;

/// What one wrk run printed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    pub duration_us: u64,
    pub requests: u64,
    pub bytes: u64,
    pub errors: BTreeMap<String, u64>,
    pub mean_us: f64,
    pub stdev_us: f64,
    pub max_us: u64,
    /// (percentile, µs), ascending.
    pub percentiles: Vec<(f64, u64)>,
}

impl Run {
    fn at(&self, p: f64) -> f64 {
        self.percentiles
            .iter()
            .find(|(q, _)| *q >= p)
            .map_or(self.max_us as f64, |(_, v)| *v as f64)
    }
}

/// Reads the `splicer-wrk` lines of wrk's output; `None` if the summary is missing.
pub fn parse(text: &str) -> Option<Run> {
    let mut run = Run::default();
    let mut summary = false;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["splicer-wrk", "summary", rest @ ..] if rest.len() == 8 => {
                let n: Vec<u64> = rest.iter().map(|x| x.parse().ok()).collect::<Option<_>>()?;
                (run.duration_us, run.requests, run.bytes) = (n[0], n[1], n[2]);
                for (kind, v) in ["connect", "read", "write", "status", "timeout"]
                    .iter()
                    .zip(&n[3..])
                {
                    if *v > 0 {
                        run.errors.insert(kind.to_string(), *v);
                    }
                }
                summary = true;
            }
            ["splicer-wrk", "latency", mean, stdev, max] => {
                run.mean_us = mean.parse().ok()?;
                run.stdev_us = stdev.parse().ok()?;
                run.max_us = max.parse().ok()?;
            }
            ["splicer-wrk", "p", p, v] => run.percentiles.push((p.parse().ok()?, v.parse().ok()?)),
            _ => {}
        }
    }
    summary.then_some(run)
}

/// The report of a warm-up run and a measured run.
pub fn report(p: &Params, warm: Option<&Run>, run: &Run) -> anyhow::Result<Report> {
    let measured_s = run.duration_us as f64 / 1e6;
    let mut errors = run.errors.clone();
    let mut timeline = vec![];
    if let Some(w) = warm {
        for (k, v) in &w.errors {
            *errors.entry(k.clone()).or_default() += v;
        }
        timeline.push(Second {
            t_s: 0,
            completed: w.requests,
            bytes: w.bytes,
        });
    }
    timeline.push(Second {
        t_s: p.warmup_s as u64,
        completed: run.requests,
        bytes: run.bytes,
    });
    let ms = |us: f64| us / 1000.0;
    let secs = measured_s.max(1e-9);
    Ok(Report {
        generator: "wrk".into(),
        params: serde_json::to_value(p)?,
        measured_s,
        completed: run.requests,
        bytes: run.bytes,
        per_second: run.requests as f64 / secs,
        mbit_per_second: run.bytes as f64 * 8.0 / secs / 1e6,
        first_errors: errors
            .keys()
            .map(|k| (k.clone(), format!("wrk counted {k} errors")))
            .collect(),
        errors,
        latency: Summary {
            n: run.requests,
            mean_ms: ms(run.mean_us),
            p50_ms: ms(run.at(50.0)),
            p95_ms: ms(run.at(95.0)),
            p99_ms: ms(run.at(99.0)),
            max_ms: ms(run.max_us as f64),
            cv: if run.mean_us > 0.0 {
                run.stdev_us / run.mean_us
            } else {
                0.0
            },
        },
        extra: serde_json::json!({ "threads": p.threads }),
        timeline,
        cdf: run
            .percentiles
            .iter()
            .map(|(q, v)| (ms(*v as f64), q / 100.0))
            .collect(),
    })
}

/// Runs wrk (warm-up, then the measured interval) and reports.
pub fn run(p: Params) -> anyhow::Result<Report> {
    p.check()?;
    let dir = std::env::temp_dir().join(format!("splicer-lab-wrk-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let script = dir.join("load.lua");
    std::fs::write(&script, p.script())?;
    let warm = if p.warmup_s >= 1.0 {
        Some(p.run_wrk(&script, p.warmup_s)?)
    } else {
        None
    };
    let measured = p.run_wrk(&script, p.duration_s - p.warmup_s);
    let _ = std::fs::remove_dir_all(&dir);
    report(&p, warm.as_ref(), &measured?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(via: Via) -> Params {
        Params {
            origin: "10.231.2.2:8080".parse().unwrap(),
            via,
            clients: 50,
            threads: 1,
            size: 1024,
            cacheable: false,
            seed: 7,
            duration_s: 12.0,
            warmup_s: 2.0,
            timeout_s: 10.0,
            keep_alive: true,
        }
    }

    #[test]
    fn the_script_asks_for_the_s_clients_object_absolute_through_a_proxy() {
        let p = params(Via::HttpProxy("10.231.1.2:3128".parse().unwrap()));
        let s = p.script();
        assert!(
            s.contains("wrk.path = \"http://10.231.2.2:8080/bytes/1024?seed=7\""),
            "{s}"
        );
        assert!(s.contains("wrk.headers[\"Host\"] = \"10.231.2.2:8080\""));
        assert!(!s.contains("Connection") && !s.contains("request ="));
        assert_eq!(p.target().to_string(), "10.231.1.2:3128");
        let direct = Params {
            keep_alive: false,
            cacheable: true,
            ..params(Via::Direct)
        };
        let s = direct.script();
        assert!(
            s.contains("wrk.path = \"/bytes/1024?seed=7&cache=1\""),
            "{s}"
        );
        assert!(s.contains("\"Connection\"] = \"close\""));
        assert_eq!(direct.target().to_string(), "10.231.2.2:8080");
    }

    #[test]
    fn bad_parameters_are_refused() {
        for bad in [
            Params {
                threads: 51,
                ..params(Via::Direct)
            },
            Params {
                warmup_s: 12.0,
                ..params(Via::Direct)
            },
            params(Via::Connect("10.231.1.2:3128".parse().unwrap())),
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
        assert!(params(Via::Direct).check().is_ok());
    }

    #[test]
    fn wrk_s_output_becomes_a_report() {
        let text = "Running 10s test @ http://x/\n  1 threads and 50 connections\n\
            splicer-wrk summary 10000000 400000 500000000 0 2 0 3 0\n\
            splicer-wrk latency 1200.5 300.0 9000\n\
            splicer-wrk p 50 1100\nsplicer-wrk p 95 1900\nsplicer-wrk p 99 2500\n\
            splicer-wrk p 99.9 4000\n";
        let run = parse(text).unwrap();
        assert_eq!(run.requests, 400_000);
        assert_eq!(run.errors.get("read"), Some(&2));
        assert_eq!(run.errors.get("status"), Some(&3));
        assert!(!run.errors.contains_key("connect"));
        let warm = Run {
            requests: 70_000,
            bytes: 1,
            errors: [("read".to_string(), 1)].into(),
            ..Run::default()
        };
        let r = report(&params(Via::Direct), Some(&warm), &run).unwrap();
        assert_eq!(r.completed, 400_000);
        assert!((r.per_second - 40_000.0).abs() < 1e-6);
        assert_eq!(r.errors.get("read"), Some(&3));
        assert_eq!(r.latency.p50_ms, 1.1);
        assert_eq!(r.latency.p99_ms, 2.5);
        assert_eq!(r.latency.max_ms, 9.0);
        let ops: u64 = r.timeline.iter().map(|s| s.completed).sum();
        assert_eq!(ops, 470_000, "the warm-up counts in the timeline");
        let (ms, at) = *r.cdf.last().unwrap();
        assert!(ms == 4.0 && (at - 0.999).abs() < 1e-9, "{:?}", r.cdf);
        assert!(parse("Running 10s test\n").is_none());
    }
}
