//! The results of `splicer-lab run` in human form: `summary.md` (medians over rounds, with
//! min–max and ratios to the first variant), `timeline.csv`, and SVG plots of the latency
//! CDF and the throughput over time of each variant's last round.

use std::fmt::Write as _;
use std::path::Path;

use crate::bed::scenario::Scenario;
use crate::experiment::plot::{lines, Series};
use crate::experiment::run::VariantRun;

/// Median and range of a set of figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(mut v: Vec<f64>) -> Spread {
        v.retain(|x| x.is_finite());
        if v.is_empty() {
            return Spread {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Spread {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }

    /// `median` alone for one round, `median (min–max)` for more.
    pub fn show(&self, digits: usize) -> String {
        if self.min == self.max || self.min.is_nan() {
            format!("{:.*}", digits, self.median)
        } else {
            format!(
                "{:.*} ({:.*}–{:.*})",
                digits, self.median, digits, self.min, digits, self.max
            )
        }
    }
}

/// The nearest-rank quantile `q` of `sorted` (ascending); `None` when empty. For figures
/// finer than the µs histograms of [`crate::measure::hist`] (forwarding delays of 1–2 µs).
pub fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[(last as f64 * q).round() as usize])
}

fn ratio(x: f64, base: f64) -> String {
    if base > 0.0 && x.is_finite() {
        format!("{:.2}×", x / base)
    } else {
        "–".into()
    }
}

pub fn machine() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_string())
        })
        .and_then(|k| k.parse::<u64>().ok())
        .map_or(0.0, |k| k as f64 / (1u64 << 20) as f64);
    format!("Linux {}, {cpus} CPUs, {mem:.1} GiB", kernel.trim())
}

/// The runs of one variant, in round order.
pub(super) fn of<'a>(runs: &'a [VariantRun], v: &str) -> std::vec::IntoIter<&'a VariantRun> {
    runs.iter()
        .filter(|r| r.variant == v)
        .collect::<Vec<_>>()
        .into_iter()
}

/// Writes `summary.md`, `timeline.csv` and the plots of a run into `dir`.
pub fn write(s: &Scenario, runs: &[VariantRun], dir: &Path) -> anyhow::Result<()> {
    let vs = s.variants();
    let Some(first) = vs.first() else {
        anyhow::bail!("the scenario has no variant");
    };
    // Each variant with its baseline: the one it names, else the first.
    let variants: Vec<Baselined> = vs
        .iter()
        .map(|v| Baselined {
            name: v.name.clone(),
            base: v.baseline.clone().unwrap_or_else(|| first.name.clone()),
        })
        .collect();
    let names: Vec<String> = vs.iter().map(|v| v.name.clone()).collect();
    let mut md = String::new();
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    writeln!(md, "# {}\n", s.experiment.name)?;
    writeln!(
        md,
        "{date}; {}; splicer-lab built from commit {}. {} round(s), variants interleaved; \
         figures are medians over rounds (min–max when there are several); ratios are to \
         each variant's baseline (`{}` unless the scenario names another).\n",
        machine(),
        env!("SPLICER_COMMIT"),
        s.experiment.rounds,
        first.name
    )?;
    loads_table(&mut md, runs, &variants)?;
    cpu_table(&mut md, runs, &variants)?;
    kernel_table(&mut md, runs, &variants)?;
    let hosts: Vec<&String> = match &s.experiment.server {
        Some(h) => vec![h],
        None => s.hosts.iter().map(|h| &h.name).collect(),
    };
    tcp_table(&mut md, runs, &names, &hosts)?;
    if let Some(h) = &s.experiment.server {
        server_load(&mut md, runs, &names, h)?;
    }
    tcp_memory(&mut md, runs, &names, crate::measure::tcp_mem_limits())?;
    super::proxy_tables::sockets(&mut md, runs, &names)?;
    super::proxy_tables::syscalls(&mut md, runs, &names)?;
    super::proxy_tables::events(&mut md, runs, &names)?;
    if runs.iter().any(|r| !r.links.is_empty()) {
        links_table(&mut md, runs, &names)?;
    }
    writeln!(
        md,
        "\nFiles: `runs.json` (everything), `*-load*.json` (each report), `timeline.csv`, \
         `latency-cdf.svg`, `throughput.svg`, `*-process*.log`."
    )?;
    std::fs::write(dir.join("summary.md"), md)?;
    std::fs::write(dir.join("timeline.csv"), timeline_csv(runs)?)?;
    plots(runs, &names, dir)
}

/// A variant and the variant its ratios are to.
struct Baselined {
    name: String,
    base: String,
}

/// Each load's throughput and latency per variant, with ratios to the baseline.
fn loads_table(md: &mut String, runs: &[VariantRun], variants: &[Baselined]) -> std::fmt::Result {
    writeln!(
        md,
        "## Loads (measured interval: warm-up and cool-down excluded)\n"
    )?;
    writeln!(
        md,
        "| variant | load | done/s | Mbit/s | mean ms | p50 ms | p95 ms | p99 ms | cv | errors | done/s ratio | p50 ratio |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    let loads = runs.first().map_or(0, |r| r.loads.len());
    for li in 0..loads {
        let stat = |v: &str, f: &dyn Fn(&crate::load::Report) -> f64| {
            Spread::of(of(runs, v).filter_map(|r| r.loads.get(li)).map(f).collect())
        };
        for Baselined { name: v, base } in variants {
            let base_rate = stat(base, &|r| r.per_second).median;
            let base_p50 = stat(base, &|r| r.latency.p50_ms).median;
            let Some((first, id)) =
                of(runs, v).find_map(|r| r.loads.get(li).zip(r.load_ids.get(li)))
            else {
                continue;
            };
            let rate = stat(v, &|r| r.per_second);
            let p50 = stat(v, &|r| r.latency.p50_ms);
            writeln!(
                md,
                "| {v} | load[{id}] {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                first.generator,
                rate.show(1),
                stat(v, &|r| r.mbit_per_second).show(2),
                stat(v, &|r| r.latency.mean_ms).show(2),
                p50.show(2),
                stat(v, &|r| r.latency.p95_ms).show(2),
                stat(v, &|r| r.latency.p99_ms).show(2),
                stat(v, &|r| r.latency.cv).show(3),
                stat(v, &|r| r.error_total() as f64).show(0),
                ratio(rate.median, base_rate),
                ratio(p50.median, base_p50),
            )?;
        }
    }
    Ok(())
}

/// CPU of the proxy and of the machine per operation and per GiB, per variant.
fn cpu_table(md: &mut String, runs: &[VariantRun], variants: &[Baselined]) -> std::fmt::Result {
    writeln!(md, "\n## CPU during the loads (whole run of the loads)\n")?;
    writeln!(
        md,
        "Machine CPU is busy time from /proc/stat minus the link emulators' own CPU (they stand \
         for the network, not for any host).\n"
    )?;
    writeln!(
        md,
        "| variant | operations | GiB | proxy CPU s | machine CPU s | emulators CPU s | proxy ms/op | machine ms/op | proxy s/GiB | machine s/GiB | machine ms/op ratio |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    for Baselined { name: v, base } in variants {
        let base = Spread::of(of(runs, base).map(|r| r.machine_ms_per_op()).collect()).median;
        let st = |f: &dyn Fn(&VariantRun) -> f64| Spread::of(of(runs, v).map(f).collect());
        let m = st(&|r| r.machine_ms_per_op());
        writeln!(
            md,
            "| {v} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            st(&|r| r.operations as f64).show(0),
            st(&|r| r.gib()).show(3),
            st(&|r| r.proxy_cpu_s).show(2),
            st(&|r| r.machine_cpu_s).show(2),
            st(&|r| r.emulator_cpu_s).show(2),
            st(&|r| r.proxy_ms_per_op()).show(3),
            m.show(3),
            st(&|r| r.proxy_cpu_s / r.gib()).show(2),
            st(&|r| r.machine_cpu_s / r.gib()).show(2),
            ratio(m.median, base),
        )?;
    }
    Ok(())
}

/// The proxy's CPU with the kernel work it causes (docs/lab.md, "The proxy's kernel
/// work"), when the proxy host has receive threads: nothing otherwise.
fn kernel_table(md: &mut String, runs: &[VariantRun], variants: &[Baselined]) -> std::fmt::Result {
    if !runs.iter().any(|r| r.proxy_napi_cpu_s > 0.0) {
        return Ok(());
    }
    writeln!(md, "\n## The proxy's CPU with its kernel work\n")?;
    writeln!(
        md,
        "The proxy process, its host's receive threads (threaded NAPI: the kernel's work for \
         the packets it receives) and the kernel's workers (`kworker`, machine-wide).\n"
    )?;
    writeln!(
        md,
        "| variant | proxy CPU s | receive threads CPU s | kworkers CPU s | proxy with kernel ms/op | ratio |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for Baselined { name: v, base } in variants {
        let base = Spread::of(of(runs, base).map(|r| r.proxy_kernel_ms_per_op()).collect()).median;
        let st = |f: &dyn Fn(&VariantRun) -> f64| Spread::of(of(runs, v).map(f).collect());
        let k = st(&|r| r.proxy_kernel_ms_per_op());
        writeln!(
            md,
            "| {v} | {} | {} | {} | {} | {} |",
            st(&|r| r.proxy_cpu_s).show(2),
            st(&|r| r.proxy_napi_cpu_s).show(2),
            st(&|r| r.kworker_cpu_s).show(2),
            k.show(3),
            ratio(k.median, base),
        )?;
    }
    Ok(())
}

/// The TCP counters of each host (or of the server alone, when the scenario names one).
fn tcp_table(
    md: &mut String,
    runs: &[VariantRun],
    variants: &[String],
    hosts: &[&String],
) -> std::fmt::Result {
    writeln!(
        md,
        "\n## TCP counters per host (increase during the loads)\n"
    )?;
    writeln!(
        md,
        "`in/out` at a server that sends the data is about the number of ACKs it gets per \
         data segment it sends (seed 000, Fig. 6).\n"
    )?;
    writeln!(
        md,
        "| variant | host | InSegs | OutSegs | RetransSegs | TCPTimeouts | in/out |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|")?;
    for v in variants {
        for h in hosts {
            let st = |k: &str| {
                Spread::of(
                    of(runs, v)
                        .map(|r| r.tcp.get(*h).and_then(|c| c.get(k)).copied().unwrap_or(0) as f64)
                        .collect(),
                )
            };
            let (i, o) = (st("Tcp.InSegs"), st("Tcp.OutSegs"));
            if i.median == 0.0 && o.median == 0.0 {
                continue;
            }
            writeln!(
                md,
                "| {v} | {h} | {} | {} | {} | {} | {:.3} |",
                i.show(0),
                o.show(0),
                st("Tcp.RetransSegs").show(0),
                st("TcpExt.TCPTimeouts").show(0),
                i.median / o.median.max(1.0),
            )?;
        }
    }
    Ok(())
}

/// What each emulated link passed, lost and dropped, against its loss model.
fn links_table(md: &mut String, runs: &[VariantRun], variants: &[String]) -> std::fmt::Result {
    writeln!(md, "\n## Emulated links (during the loads)\n")?;
    writeln!(
        md,
        "| variant | link | packets | lost | loss % | model % | queue drops | verdict lateness p99 µs |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|---|---|")?;
    for v in variants {
        let rs: Vec<&VariantRun> = of(runs, v).collect();
        for (i, l) in rs[0].links.iter().enumerate() {
            let st = |f: &dyn Fn(&crate::experiment::run::LinkRun) -> f64| {
                Spread::of(rs.iter().filter_map(|r| r.links.get(i)).map(f).collect())
            };
            writeln!(
                md,
                "| {v} | {} | {} | {} | {} | {:.3} | {} | {} |",
                l.link,
                st(&|l| l.passed as f64 + l.lost as f64).show(0),
                st(&|l| l.lost as f64).show(0),
                st(&|l| 100.0 * l.lost as f64 / (l.passed + l.lost).max(1) as f64).show(3),
                100.0 * l.theory_loss,
                st(&|l| l.overflow as f64).show(0),
                st(&|l| l.late_p99_us as f64).show(0),
            )?;
        }
    }
    Ok(())
}

/// Every load's timeline, one line per second of each run.
fn timeline_csv(runs: &[VariantRun]) -> Result<String, std::fmt::Error> {
    // Timeline and plots.
    let mut csv = String::from("variant,round,load,t_s,completed,bytes\n");
    for r in runs {
        for (li, l) in r.loads.iter().enumerate() {
            for t in &l.timeline {
                writeln!(
                    csv,
                    "{},{},{li},{},{},{}",
                    r.variant, r.round, t.t_s, t.completed, t.bytes
                )?;
            }
        }
    }
    Ok(csv)
}

/// The latency CDF and the throughput over time of each variant's last round.
fn plots(runs: &[VariantRun], variants: &[String], dir: &Path) -> anyhow::Result<()> {
    let mut cdf = Vec::new();
    let mut thr = Vec::new();
    for v in variants {
        let Some(last) = of(runs, v).last() else {
            continue;
        };
        for (li, l) in last.loads.iter().enumerate() {
            let id = last.load_ids.get(li).copied().unwrap_or(li);
            let label = format!("{v} / load[{id}] {}", l.generator);
            cdf.push(Series {
                label: label.clone(),
                points: l.cdf.clone(),
            });
            thr.push(Series {
                label,
                points: l
                    .timeline
                    .iter()
                    .map(|t| (t.t_s as f64, t.bytes as f64 * 8.0 / 1e6))
                    .collect(),
            });
        }
    }
    lines(
        &dir.join("latency-cdf.svg"),
        "latency CDF (measured interval)",
        "latency (ms)",
        "fraction of operations",
        &cdf,
        true,
    )?;
    lines(
        &dir.join("throughput.svg"),
        "throughput over time",
        "time (s)",
        "Mbit/s",
        &thr,
        true,
    )?;
    Ok(())
}

/// The machine's peak TCP memory per variant against `net.ipv4.tcp_mem` (`limits`): above
/// its pressure mark the kernel drops segments and connections back off, which explains
/// stalls that no relay causes on its own (docs/engines.md, "Socket memory under load").
fn tcp_memory(
    md: &mut String,
    runs: &[VariantRun],
    variants: &[String],
    limits: Option<[u64; 3]>,
) -> std::fmt::Result {
    if runs.iter().all(|r| r.tcp_mem_peak_pages == 0) {
        return Ok(());
    }
    writeln!(
        md,
        "\n## TCP memory of the whole machine (peak during the loads)\n"
    )?;
    let pressure = limits.map(|l| l[1]);
    if let Some([low, pressure, high]) = limits {
        writeln!(
            md,
            "Pages, sampled every 100 ms from /proc/net/sockstat, which lags the truth by up \
             to {slack} pages (the kernel batches each CPU's share). `net.ipv4.tcp_mem`: {low} \
             {pressure} {high}; above the second (pressure) the kernel drops arriving segments \
             of the sockets that hold the most.\n",
            slack = crate::measure::tcp_memory_slack_pages()
        )?;
    }
    writeln!(md, "| variant | peak pages | of the pressure mark |")?;
    writeln!(md, "|---|---|---|")?;
    for v in variants {
        let peak = Spread::of(of(runs, v).map(|r| r.tcp_mem_peak_pages as f64).collect());
        let share = match pressure {
            Some(p) if p > 0 => {
                let s = Spread::of(
                    of(runs, v)
                        .map(|r| 100.0 * r.tcp_mem_peak_pages as f64 / p as f64)
                        .collect(),
                );
                format!("{} %", s.show(0))
            }
            _ => "-".into(),
        };
        writeln!(md, "| {v} | {} | {share} |", peak.show(0))?;
    }
    Ok(())
}

/// What the server host handled per operation (seed 002's measure of a proxy that spares
/// the origin): connections it accepted, TCP segments in and out, and the CPU of the
/// `role = "server"` processes. Nothing when no run counted any.
fn server_load(
    md: &mut String,
    runs: &[VariantRun],
    variants: &[String],
    host: &str,
) -> std::fmt::Result {
    let counter = |r: &VariantRun, k: &str| -> f64 {
        r.tcp.get(host).and_then(|c| c.get(k)).copied().unwrap_or(0) as f64
    };
    let per_op = |x: f64, r: &VariantRun| x / r.operations.max(1) as f64;
    if !runs
        .iter()
        .any(|r| r.server_cpu_s > 0.0 || counter(r, "Tcp.PassiveOpens") > 0.0)
    {
        return Ok(());
    }
    writeln!(
        md,
        "\n## The server `{host}`, per operation (whole run of the loads)\n"
    )?;
    writeln!(
        md,
        "| variant | operations | connections accepted | connections / op | segments in+out / op | server CPU ms / op |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for v in variants {
        let st = |f: &dyn Fn(&VariantRun) -> f64| {
            Spread::of(runs.iter().filter(|r| &r.variant == v).map(f).collect())
        };
        writeln!(
            md,
            "| {v} | {} | {} | {} | {} | {} |",
            st(&|r| r.operations as f64).show(0),
            st(&|r| counter(r, "Tcp.PassiveOpens")).show(0),
            st(&|r| per_op(counter(r, "Tcp.PassiveOpens"), r)).show(3),
            st(&|r| per_op(counter(r, "Tcp.InSegs") + counter(r, "Tcp.OutSegs"), r)).show(1),
            st(&|r| per_op(r.server_cpu_s * 1000.0, r)).show(3),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_median_and_range() {
        let s = Spread::of(vec![3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(s.show(1), "2.0 (1.0–3.0)");
        assert_eq!(Spread::of(vec![4.0, 2.0]).median, 3.0);
        assert_eq!(Spread::of(vec![5.0]).show(0), "5");
        assert!(Spread::of(vec![]).median.is_nan());
    }

    #[test]
    fn tcp_memory_peaks_are_shown_against_the_pressure_mark() {
        let run = |variant: &str, round: usize, peak: u64| -> VariantRun {
            serde_json::from_value(serde_json::json!({
                "variant": variant, "round": round, "wall_s": 1.0, "proxy_cpu_s": 0.0,
                "machine_cpu_s": 0.0, "emulator_cpu_s": 0.0, "operations": 1, "bytes": 1,
                "tcp": {}, "loads": [], "load_ids": [], "links": [],
                "tcp_mem_peak_pages": peak,
            }))
            .unwrap()
        };
        let runs = [run("a", 0, 100), run("a", 1, 300), run("b", 0, 50)];
        let variants = ["a".to_string(), "b".to_string()];
        let mut md = String::new();
        tcp_memory(&mut md, &runs, &variants, Some([10, 200, 400])).unwrap();
        assert!(md.contains("`net.ipv4.tcp_mem`: 10 200 400"), "{md}");
        assert!(
            md.contains("| a | 200 (100–300) | 100 (50–150) % |"),
            "{md}"
        );
        assert!(md.contains("| b | 50 | 25 % |"), "{md}");
        // Results from before the peak was kept have none: no section.
        let old: Vec<VariantRun> = runs
            .iter()
            .map(|r| VariantRun {
                tcp_mem_peak_pages: 0,
                ..r.clone()
            })
            .collect();
        let mut md = String::new();
        tcp_memory(&mut md, &old, &variants, Some([10, 200, 400])).unwrap();
        assert!(md.is_empty());
    }

    #[test]
    fn the_server_table_gives_connections_segments_and_cpu_per_operation() {
        let run = |variant: &str, opens: u64, cpu: f64| -> VariantRun {
            serde_json::from_value(serde_json::json!({
                "variant": variant, "round": 0, "wall_s": 1.0, "proxy_cpu_s": 0.0,
                "server_cpu_s": cpu, "machine_cpu_s": 0.0, "emulator_cpu_s": 0.0,
                "operations": 200, "bytes": 1, "loads": [], "load_ids": [], "links": [],
                "tcp": { "origin": { "Tcp.PassiveOpens": opens, "Tcp.InSegs": 1000,
                                     "Tcp.OutSegs": 1000 } },
            }))
            .unwrap()
        };
        let runs = [run("direct", 100, 0.5), run("edge", 4, 0.1)];
        let variants = ["direct".to_string(), "edge".to_string()];
        let mut md = String::new();
        server_load(&mut md, &runs, &variants, "origin").unwrap();
        assert!(
            md.contains("| direct | 200 | 100 | 0.500 | 10.0 | 2.500 |"),
            "{md}"
        );
        assert!(
            md.contains("| edge | 200 | 4 | 0.020 | 10.0 | 0.500 |"),
            "{md}"
        );
        // Runs that counted nothing of the server: no section.
        let mut md = String::new();
        server_load(&mut md, &[run("direct", 0, 0.0)], &variants, "origin").unwrap();
        assert!(md.is_empty());
    }
}
