//! The summary's tables of what was sampled on the proxy host when a scenario asks for it:
//! what its TCP sockets held (`[experiment] proxy_sockets_ms`) and the proxy process's
//! system calls (`[experiment] proxy_syscalls`).

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
