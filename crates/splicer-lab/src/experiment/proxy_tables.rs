//! The summary's tables of what was sampled on the proxy host when a scenario asks for it:
//! what its TCP sockets held (`[experiment] proxy_sockets_ms`) and the proxy process's
//! system calls (`[experiment] proxy_syscalls`) and other events (`proxy_events`).

use std::fmt::Write as _;

use super::run::VariantRun;
use super::summary::{of, Spread};

/// What the proxy host's sockets held during the loads (`[experiment] proxy_sockets_ms`),
/// per variant: nothing when no run sampled them.
pub(super) fn sockets(
    md: &mut String,
    runs: &[VariantRun],
    variants: &[String],
) -> std::fmt::Result {
    if runs.iter().all(|r| r.proxy_sockets.is_none()) {
        return Ok(());
    }
    writeln!(
        md,
        "\n## What the proxy host's TCP sockets held (during the loads)\n"
    )?;
    writeln!(
        md,
        "Bytes (truesize) on receive sides, in send queues and backlogs of every TCP socket \
         in the proxy's namespace (`ss -tm`: r + w + bl), sampled through each run; the \
         sockets' buffer limits (rb + tb) at the peak; pipes are not counted. Not charged to \
         any socket, a `sockmap` redirect queue shows only in the machine's memory in use \
         (MemTotal − MemAvailable), given as its rise above the run's first sample.\n"
    )?;
    writeln!(
        md,
        "| variant | peak held MB | median held MB | buffer limits at the peak MB | \
         machine's memory rise MB | samples |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    let mb = |x: u64| x as f64 / 1e6;
    for v in variants {
        let s: Vec<_> = of(runs, v)
            .filter_map(|r| r.proxy_sockets.clone())
            .collect();
        if s.is_empty() {
            continue;
        }
        let spread = |f: fn(&crate::measure::sockets::SocketsRun) -> u64| {
            Spread::of(s.iter().map(|x| mb(f(x))).collect()).show(2)
        };
        writeln!(
            md,
            "| {v} | {} | {} | {} | {} | {} |",
            spread(|x| x.peak_held),
            spread(|x| x.median_held),
            spread(|x| x.buffers_at_peak),
            spread(|x| x.machine_growth),
            s.iter().map(|x| x.samples).sum::<u32>()
        )?;
    }
    Ok(())
}

/// The proxy process's system calls per operation (`[experiment] proxy_syscalls`):
/// nothing when no run counted them.
pub(super) fn syscalls(
    md: &mut String,
    runs: &[VariantRun],
    variants: &[String],
) -> std::fmt::Result {
    if runs.iter().all(|r| r.proxy_syscalls.is_none()) {
        return Ok(());
    }
    writeln!(md, "\n## System calls of the proxy (during the loads)\n")?;
    writeln!(
        md,
        "Counted with `perf stat -e raw_syscalls:sys_enter -p` on the proxy process; per \
         operation of the loads (whole run, like the CPU figures).\n"
    )?;
    writeln!(md, "| variant | system calls | per operation |")?;
    writeln!(md, "|---|---|---|")?;
    for v in variants {
        let counted: Vec<(f64, f64)> = of(runs, v)
            .filter_map(|r| {
                r.proxy_syscalls
                    .map(|n| (n as f64, r.operations.max(1) as f64))
            })
            .collect();
        if counted.is_empty() {
            continue;
        }
        writeln!(
            md,
            "| {v} | {} | {} |",
            Spread::of(counted.iter().map(|c| c.0).collect()).show(0),
            Spread::of(counted.iter().map(|c| c.0 / c.1).collect()).show(1)
        )?;
    }
    Ok(())
}

/// The `[experiment] proxy_events` per operation, and the time the proxy's threads waited
/// for a CPU per operation: nothing when no run counted them.
pub(super) fn events(
    md: &mut String,
    runs: &[VariantRun],
    variants: &[String],
) -> std::fmt::Result {
    let mut names: Vec<&String> = runs.iter().flat_map(|r| r.proxy_events.keys()).collect();
    names.sort();
    names.dedup();
    if names.is_empty() && runs.iter().all(|r| r.proxy_run_wait_s.is_none()) {
        return Ok(());
    }
    writeln!(md, "\n## Events of the proxy (during the loads)\n")?;
    writeln!(
        md,
        "Counted with `perf stat -e EVENT -p` on the proxy process, per operation of the \
         loads (whole run, like the CPU figures); the wait is the time its threads spent \
         runnable on a run queue without a CPU (`/proc/PID/task/*/schedstat`), µs per \
         operation; the machine's context switches are every process's (`ctxt` in \
         `/proc/stat`), per operation. Median (min–max) over the rounds.\n"
    )?;
    let head: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    writeln!(
        md,
        "| variant | {} | run-queue wait µs | machine's context switches |",
        head.join(" | ")
    )?;
    writeln!(md, "|---|{}---|---|", "---|".repeat(names.len()))?;
    for v in variants {
        let rs: Vec<&VariantRun> = of(runs, v).collect();
        if rs.is_empty() {
            continue;
        }
        let per_op = |f: &dyn Fn(&VariantRun) -> Option<f64>, digits: usize| {
            let xs: Vec<f64> = rs
                .iter()
                .filter_map(|r| f(r).map(|x| x / r.operations.max(1) as f64))
                .collect();
            match xs.is_empty() {
                true => "–".to_string(),
                false => Spread::of(xs).show(digits),
            }
        };
        let cells: Vec<String> = names
            .iter()
            .map(|n| per_op(&|r| r.proxy_events.get(*n).map(|c| *c as f64), 3))
            .collect();
        writeln!(
            md,
            "| {v} | {} | {} | {} |",
            cells.join(" | "),
            per_op(&|r| r.proxy_run_wait_s.map(|s| s * 1e6), 2),
            per_op(&|r| r.machine_switches.map(|n| n as f64), 3)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_given_per_operation_with_the_waits() {
        let run = |variant: &str, ops: u64, switches: u64, wait: Option<f64>| -> VariantRun {
            serde_json::from_value(serde_json::json!({
                "variant": variant, "round": 0, "wall_s": 1.0, "proxy_cpu_s": 0.0,
                "machine_cpu_s": 0.0, "emulator_cpu_s": 0.0, "operations": ops, "bytes": 1,
                "tcp": {}, "loads": [], "load_ids": [], "links": [],
                "proxy_events": { "context-switches": switches },
                "proxy_run_wait_s": wait, "machine_switches": switches * 4,
            }))
            .unwrap()
        };
        let runs = [
            run("ring", 1000, 500, Some(0.001)),
            run("ring", 1000, 700, Some(0.003)),
            run("runtime", 2000, 4000, None),
        ];
        let variants = ["ring".to_string(), "runtime".to_string()];
        let mut md = String::new();
        events(&mut md, &runs, &variants).unwrap();
        assert!(
            md.contains("| variant | `context-switches` | run-queue wait µs | machine's"),
            "{md}"
        );
        assert!(
            md.contains("| ring | 0.600 (0.500–0.700) | 2.00 (1.00–3.00) | 2.400 (2.000–2.800) |"),
            "{md}"
        );
        assert!(md.contains("| runtime | 2.000 | – | 8.000 |"), "{md}");
        // Runs that counted no events: no section.
        let mut md = String::new();
        let none: Vec<VariantRun> = runs
            .iter()
            .map(|r| VariantRun {
                proxy_events: Default::default(),
                proxy_run_wait_s: None,
                ..r.clone()
            })
            .collect();
        events(&mut md, &none, &variants).unwrap();
        assert!(md.is_empty());
    }
}
