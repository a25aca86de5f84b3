//! `pathak-stress`'s table of every run: each load's slow requests beside what else the
//! run measured, so that a reader can tell a slow request of the connection from one of
//! the bed.

use super::stress::field;
use crate::experiment::run::VariantRun;
use crate::reproduce::table::{num, Table};

/// Every run's load alone, with what else the run measured: a slow request after the
/// warm-up is the path's (a retransmission, a packet the emulator dropped) or the machine's
/// (its CPU busy with more than the bed's work: a stall of the VM).
pub(super) fn per_run(parts: &[(&str, &[VariantRun])]) -> String {
    let mut t = Table::new([
        "part",
        "variant",
        "round",
        "rate /s",
        "slow",
        "slow after the first second",
        "seconds they were sent in",
        "p99 ms",
        "segments sent again",
        "packets dropped by the path",
        "receiver's ACKs per 100 data segments",
        "emulators' CPU s",
        "the rest of the machine's CPU s",
    ]);
    for (part, runs) in parts {
        for run in *runs {
            let again: u64 = run
                .tcp
                .values()
                .filter_map(|c| c.get("Tcp.RetransSegs"))
                .sum();
            let dropped: u64 = run.links.iter().map(|l| l.lost + l.overflow).sum();
            // The receiver's segments (its ACKs) per 100 the origin sent: a receiver whose
            // packets wait for a CPU takes more of them in at once and acknowledges less
            // often.
            let out = |host: &str| {
                run.tcp
                    .get(host)
                    .and_then(|c| c.get("Tcp.OutSegs"))
                    .copied()
                    .unwrap_or(0)
            };
            let origin = out("warm") + out("cold");
            let acks = if origin == 0 {
                "–".to_string()
            } else {
                num(out("edge") as f64 * 100.0 / origin as f64, 1)
            };
            for l in &run.loads {
                let warmup = field(l, "warmup_requests");
                let rate = l.params["rate"].as_f64().unwrap_or(f64::NAN);
                // The seconds after the warm-up in which slow requests were sent.
                let mut late: Vec<(u64, u64)> = l.extra["at_least_2rtt_by_second"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .filter_map(|(sec, n)| Some((sec.parse::<u64>().ok()?, n.as_u64()?)))
                            .filter(|(sec, _)| *sec as f64 * rate >= warmup as f64)
                            .collect()
                    })
                    .unwrap_or_default();
                late.sort_unstable();
                let late = match late.as_slice() {
                    [] => "–".to_string(),
                    few if few.len() <= 4 => few
                        .iter()
                        .map(|(sec, n)| format!("{sec}: {n}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    many => format!(
                        "every one of {} seconds from {} to {}",
                        many.len(),
                        many[0].0,
                        many[many.len() - 1].0
                    ),
                };
                t.row([
                    part.to_string(),
                    run.variant.clone(),
                    (run.round + 1).to_string(),
                    num(rate, 0),
                    field(l, "at_least_2rtt").to_string(),
                    field(l, "at_least_2rtt_after_warmup").to_string(),
                    late,
                    num(l.latency.p99_ms, 1),
                    again.to_string(),
                    dropped.to_string(),
                    acks.clone(),
                    num(run.emulator_cpu_s, 2),
                    num(run.machine_cpu_s, 2),
                ]);
            }
        }
    }
    format!(
        "\n## Run by run\n\n\
         Each run's load: its slow requests, those after the warm-up by the second of the run \
         they were sent in, and what else the run measured: segments any host sent again, \
         packets the path's emulators dropped (lost or over their queue), and the segments \
         the receiving host sent per 100 the origin sent (its ACKs: fewer when its received \
         packets wait for a CPU and are taken in in larger batches), and the CPU seconds of \
         the link emulators (user space: they delay every packet) and of the rest of the \
         machine during the load (from /proc/stat less the emulators'; 0 where the \
         emulators' own count is the larger). At 1000 a second the emulated path needs most \
         of one of the VM's two CPUs.\n\n{}",
        t.markdown()
    )
}
