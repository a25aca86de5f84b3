//! `splicer-lab run SCENARIO.toml`: builds the bed, then for each round runs every variant in
//! turn (interleaved, so slow drifts of the machine hit all variants alike): starts the
//! variant's processes, runs its loads together, measures CPU and TCP counters around the
//! loads, stops the processes. Writes a results directory: the scenario, each load's JSON
//! report, `runs.json` with the measurements, `timeline.csv`, SVG plots and `summary.md`.
//!
//! # Layout
//! - this file: the variants and rounds, measurements around the loads.
//! - [`run`](mod@run): what one variant's run measured (`runs.json`).
//! - [`summary`]: `summary.md`, `timeline.csv` and the plots of a run; [`plot`] draws SVGs;
//!   `proxy_tables`: its tables of what was sampled on the proxy host.

pub mod plot;
mod proxy_tables;
pub mod run;
pub mod share;
pub mod stats;
pub mod summary;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::bed::cpulimit::CpuLimit;
use crate::bed::scenario::{expand, Scenario, Variant};
use crate::experiment::run::{LinkRun, VariantRun};
use crate::load::Report;
use crate::measure::events::{self, PerfCount};
use crate::measure::sockets::SocketSampler;
use crate::measure::tcpstates::TcpStateCount;
use crate::measure::{machine_cpu, own_cpu, process_cpu, TcpCounters, TcpMemoryPeak, ThreadsCpu};
use crate::Bed;

/// The TCP counters a run keeps per host.
pub const COUNTERS: [&str; 8] = [
    "Tcp.InSegs",
    "Tcp.OutSegs",
    "Tcp.RetransSegs",
    "TcpExt.TCPTimeouts",
    "Tcp.ActiveOpens",
    "Tcp.PassiveOpens",
    // A sender's zero-window probes, and a receiver's windows advertised shut: a window
    // that reopened with no update shows as probes on the other side.
    "TcpExt.TCPWinProbe",
    "TcpExt.TCPToZeroWindowAdv",
];

/// Resolves a command's program: `lab` is this binary, `splicer` the Splicer binary beside
/// it when there is one.
fn program(name: &str, lab: &Path) -> String {
    match name {
        "lab" => lab.display().to_string(),
        "splicer" => {
            let beside = lab.with_file_name("splicer");
            if beside.exists() {
                beside.display().to_string()
            } else {
                "splicer".into()
            }
        }
        other => other.to_string(),
    }
}

/// Whether a program given by name (no `/`) is on `PATH`, or one given by path exists.
fn installed(program: &str) -> bool {
    if program.contains('/') {
        return Path::new(program).exists();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

/// Every program the scenario's processes and loads run is there, checked before a bed is
/// built: a benchmark peer missing from this machine is named, with where it comes from,
/// rather than found by a failed start in the middle of a run.
fn check_programs(s: &Scenario, lab: &Path) -> anyhow::Result<()> {
    let commands = s
        .processes
        .iter()
        .map(|p| &p.command)
        .chain(s.loads.iter().map(|l| &l.command));
    let mut missing: Vec<String> = commands
        .filter_map(|c| c.first())
        .map(|name| program(name, lab))
        .filter(|p| !installed(p))
        .collect();
    missing.sort();
    missing.dedup();
    anyhow::ensure!(
        missing.is_empty(),
        "not installed: {} (the benchmark peers come with `BENCH=1 scripts/setup.sh`; \
         `splicer` with `cargo build --release -p splicer`)",
        missing.join(", ")
    );
    Ok(())
}

/// Waits until `addr` accepts a TCP connection from inside `host` (bash's /dev/tcp).
fn wait_tcp(bed: &Bed, host: &str, addr: &str, within: Duration) -> anyhow::Result<()> {
    let (ip, port) = addr
        .rsplit_once(':')
        .with_context(|| format!("wait_for {addr:?}: not IP:PORT"))?;
    let deadline = Instant::now() + within;
    loop {
        let ok = bed
            .command(host, "bash")
            .args(["-c", &format!("exec 3<>/dev/tcp/{ip}/{port}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "nothing accepted connections on {addr} in {host} within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn counters(bed: &Bed, s: &Scenario) -> anyhow::Result<BTreeMap<String, TcpCounters>> {
    s.hosts
        .iter()
        .map(|h| {
            Ok((
                h.name.clone(),
                TcpCounters::read(Some(&bed.netns(&h.name)))?,
            ))
        })
        .collect()
}

struct Ctx<'a> {
    s: &'a Scenario,
    lab: &'a Path,
    dir: &'a Path,
}

impl Ctx<'_> {
    /// A command with its placeholders replaced: hosts' addresses, `{file:NAME}`, the
    /// variant's vars, `{out}` (the results directory) and `{run}` (this variant and round,
    /// to name a file of this run alone).
    fn args(
        &self,
        bed: &Bed,
        v: &Variant,
        round: usize,
        cmd: &[String],
    ) -> anyhow::Result<Vec<String>> {
        let addr = |n: &str| match n {
            "out" => Some(self.dir.display().to_string()),
            "run" => Some(format!("{}-r{round}", v.name)),
            _ => bed.addr(n).map(|a| a.to_string()),
        };
        let file = |f: &str| Some(self.dir.join("files").join(f).display().to_string());
        cmd.iter()
            .map(|a| expand(a, &|n| self.s.lookup(v, &addr, &file, n)).map_err(anyhow::Error::from))
            .collect()
    }

    fn variant(&self, bed: &mut Bed, v: &Variant, round: usize) -> anyhow::Result<VariantRun> {
        let applies = |vs: &[String]| vs.is_empty() || vs.contains(&v.name);
        let tag = format!("{}-r{round}", v.name);
        let mut started = Vec::new();
        let mut limits = Vec::new();
        let mut proxy = None;
        let mut proxy_host = None;
        let mut servers: Vec<u32> = Vec::new();
        let mut proxy_limit = None;
        let result = (|| {
            for (i, p) in self
                .s
                .processes
                .iter()
                .enumerate()
                .filter(|(_, p)| applies(&p.variants))
            {
                let args = self.args(bed, v, round, &p.command)?;
                let log = std::fs::File::create(self.dir.join(format!("{tag}-process{i}.log")))?;
                let mut cmd = bed.command(&p.host, &program(&args[0], self.lab));
                cmd.args(&args[1..]).stdout(log.try_clone()?).stderr(log);
                let pid = bed.spawn(&mut cmd)?;
                started.push((pid, p.role.as_deref() == Some("server")));
                if let Some(percent) = p.cpu_limit {
                    let limit = CpuLimit::apply(pid, percent)
                        .with_context(|| format!("process[{i}].cpu_limit"))?;
                    if p.role.as_deref() == Some("proxy") && proxy_limit.is_none() {
                        proxy_limit = Some(limits.len());
                    }
                    limits.push(limit);
                }
                if p.role.as_deref() == Some("proxy") {
                    proxy.get_or_insert(pid);
                    proxy_host.get_or_insert(p.host.clone());
                }
                if p.role.as_deref() == Some("server") {
                    servers.push(pid);
                }
                if p.settle_ms > 0 {
                    std::thread::sleep(Duration::from_millis(p.settle_ms));
                }
                if let Some(w) = &p.wait_for {
                    let w = self.args(bed, v, round, std::slice::from_ref(w))?.remove(0);
                    wait_tcp(bed, &p.host, &w, Duration::from_secs(15))
                        .with_context(|| format!("process[{i}] ({})", args.join(" ")))?;
                }
            }
            let emu_cpu = |bed: &Bed| {
                bed.emulator_pids()
                    .iter()
                    .map(|p| process_cpu(*p))
                    .sum::<f64>()
            };
            let servers_cpu = || servers.iter().map(|p| process_cpu(*p)).sum::<f64>();
            let (m0, e0, p0) = (machine_cpu(), emu_cpu(bed), proxy.map_or(0.0, process_cpu));
            let s0 = servers_cpu();
            let napi = proxy_host
                .as_deref()
                .map(|h| bed.napi_pids(h))
                .unwrap_or_default();
            let napi_cpu = || napi.iter().map(|p| own_cpu(*p)).sum::<f64>();
            let n0 = napi_cpu();
            let kworkers = ThreadsCpu::start("kworker/");
            let throttled = |limits: &[CpuLimit]| {
                proxy_limit.map_or(0.0, |i: usize| limits[i].throttled().1.as_secs_f64())
            };
            let th0 = throttled(&limits);
            let c0 = counters(bed, self.s)?;
            let l0 = bed.emulator_stats();
            let mut asked = self.s.experiment.proxy_events.clone();
            if self.s.experiment.proxy_syscalls && !asked.iter().any(|e| e == events::SYSCALLS) {
                asked.push(events::SYSCALLS.to_string());
            }
            let counting = !self.s.experiment.proxy_events.is_empty();
            let wait0 = proxy.filter(|_| counting).and_then(events::run_wait_ns);
            let switches0 = events::machine_switches().filter(|_| counting);
            let perf = proxy.and_then(|pid| PerfCount::start(pid, &asked));
            let tcp_states = match proxy_host.as_deref() {
                Some(h) if self.s.experiment.proxy_tcp_states => Some(
                    TcpStateCount::start(|lab| bed.command(h, lab), self.lab).ok_or_else(|| {
                        anyhow::anyhow!("proxy_tcp_states: {h} could not count (root?)")
                    })?,
                ),
                _ => None,
            };
            let tcp_mem = TcpMemoryPeak::start(Duration::from_millis(100));
            let every = self.s.experiment.proxy_sockets_ms;
            let sockets = proxy_host
                .as_deref()
                .filter(|_| every > 0)
                .map(|h| SocketSampler::start(bed.netns(h), Duration::from_millis(every)));
            let t0 = Instant::now();
            let mut children = Vec::new();
            for (i, l) in self
                .s
                .loads
                .iter()
                .enumerate()
                .filter(|(_, l)| applies(&l.variants))
            {
                let args = self.args(bed, v, round, &l.command)?;
                let child = bed
                    .command(&l.host, &program(&args[0], self.lab))
                    .args(&args[1..])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .with_context(|| format!("load[{i}]: cannot start {}", args[0]))?;
                children.push((i, args, child));
            }
            let mut loads = Vec::new();
            let mut load_ids = Vec::new();
            let mut failed = Vec::new();
            for (i, args, child) in children {
                let out = child.wait_with_output()?;
                std::fs::write(self.dir.join(format!("{tag}-load{i}.json")), &out.stdout)?;
                let report = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .last()
                    .and_then(|l| serde_json::from_str::<Report>(l).ok());
                match (out.status.success(), report) {
                    (true, Some(r)) => {
                        loads.push(r);
                        load_ids.push(i);
                    }
                    _ => failed.push(format!(
                        "load[{i}] ({}) failed: {}",
                        args.join(" "),
                        String::from_utf8_lossy(&out.stderr).trim()
                    )),
                }
            }
            let tcp_mem_peak_pages = tcp_mem.finish();
            let proxy_sockets = sockets.map(SocketSampler::finish);
            let wait1 = proxy.filter(|_| counting).and_then(events::run_wait_ns);
            let proxy_run_wait_s = wait0
                .zip(wait1)
                .map(|(a, b)| b.saturating_sub(a) as f64 / 1e9);
            let machine_switches = switches0
                .zip(events::machine_switches())
                .map(|(a, b)| b.saturating_sub(a));
            let mut proxy_events = perf.map(PerfCount::finish).unwrap_or_default();
            let proxy_syscalls = match self.s.experiment.proxy_syscalls {
                true => proxy_events.get(events::SYSCALLS).copied(),
                false => None,
            };
            if !self
                .s
                .experiment
                .proxy_events
                .contains(&events::SYSCALLS.to_string())
            {
                proxy_events.remove(events::SYSCALLS);
            }
            let proxy_tcp_states = tcp_states.and_then(TcpStateCount::finish);
            anyhow::ensure!(failed.is_empty(), "{}", failed.join("\n"));
            let wall_s = t0.elapsed().as_secs_f64();
            let emulator_cpu_s = emu_cpu(bed) - e0;
            let proxy_napi_cpu_s = napi_cpu() - n0;
            let kworker_cpu_s = kworkers.since();
            let c1 = counters(bed, self.s)?;
            // Emulators write their stats once a second.
            if !self.s.emulations.is_empty() {
                std::thread::sleep(Duration::from_millis(1100));
            }
            let links = self
                .s
                .emulations
                .iter()
                .zip(l0.iter().zip(bed.emulator_stats()))
                .map(|(e, (a, b))| {
                    let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
                    LinkRun {
                        link: format!("{}: {} → {}", e.router, e.from, e.to),
                        passed: b.passed.saturating_sub(a.passed),
                        bytes: b.bytes.saturating_sub(a.bytes),
                        lost: b.lost.saturating_sub(a.lost),
                        overflow: b.overflow.saturating_sub(a.overflow),
                        theory_loss: crate::bed::emulator::LossModel::theory(
                            crate::bed::emulator::Loss {
                                p: e.loss_p,
                                r: e.loss_r,
                            },
                        ),
                        late_p99_us: b.late_p99_us,
                        tcp_data: b.tcp_data.saturating_sub(a.tcp_data),
                        tcp_pure_acks: b.tcp_pure_acks.saturating_sub(a.tcp_pure_acks),
                        tcp_acks_after_ack: b
                            .tcp_acks_after_ack
                            .saturating_sub(a.tcp_acks_after_ack),
                    }
                })
                .collect();
            let tcp = c1
                .iter()
                .map(|(h, c)| {
                    let d = c.since(&c0[h]);
                    (
                        h.clone(),
                        COUNTERS.iter().map(|k| (k.to_string(), d.get(k))).collect(),
                    )
                })
                .collect();
            let whole = |f: fn(&crate::load::Second) -> u64| -> u64 {
                loads.iter().flat_map(|r| r.timeline.iter()).map(f).sum()
            };
            Ok(VariantRun {
                variant: v.name.clone(),
                round,
                wall_s,
                proxy_cpu_s: proxy.map_or(0.0, process_cpu) - p0,
                proxy_throttled_s: throttled(&limits) - th0,
                server_cpu_s: servers_cpu() - s0,
                machine_cpu_s: (machine_cpu() - m0 - emulator_cpu_s).max(0.0),
                emulator_cpu_s,
                proxy_napi_cpu_s,
                kworker_cpu_s,
                operations: whole(|s| s.completed),
                bytes: whole(|s| s.bytes),
                tcp,
                loads,
                load_ids,
                links,
                tcp_mem_peak_pages,
                proxy_sockets,
                proxy_syscalls,
                proxy_events,
                proxy_run_wait_s,
                machine_switches,
                proxy_tcp_states,
            })
        })();
        let drain = self
            .s
            .processes
            .iter()
            .filter(|p| applies(&p.variants))
            .map(|p| p.drain_ms)
            .max()
            .unwrap_or(0);
        std::thread::sleep(Duration::from_millis(drain));
        // Servers go last: a proxy still dialing an origin for a client that has left
        // (a connect retried after a lost SYN) must not meet a closed port and log a 502
        // that no load caused. The rest go in the reverse of their start.
        let (servers_started, others): (Vec<_>, Vec<_>) =
            started.into_iter().partition(|&(_, server)| server);
        for (pid, _) in others
            .into_iter()
            .rev()
            .chain(servers_started.into_iter().rev())
        {
            bed.stop(pid, Duration::from_secs(3));
        }
        // The groups go once their processes have.
        drop(limits);
        result.with_context(|| format!("variant {} round {round}", v.name))
    }
}

/// A duration as `M:SS`, or `HhMM` from an hour.
pub fn mmss(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}", s / 3600, s % 3600 / 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// The line printed before each run: where the experiment is, and how long the rest will
/// take at the pace so far.
pub fn progress(
    done: usize,
    total: usize,
    elapsed: Duration,
    round: usize,
    rounds: usize,
    name: &str,
) -> String {
    let left = if done == 0 {
        "?".to_string()
    } else {
        mmss(elapsed * (total - done) as u32 / done as u32)
    };
    format!(
        "[{}/{total}] round {} of {rounds}: {name} ({} elapsed, about {left} left)",
        done + 1,
        round + 1,
        mmss(elapsed)
    )
}

/// Runs the scenario's experiment; returns the results directory.
pub fn run(s: &Scenario, text: &str, lab: &Path, out: Option<&str>) -> anyhow::Result<PathBuf> {
    anyhow::ensure!(
        !s.loads.is_empty(),
        "load: the scenario has no [[load]] to run"
    );
    check_programs(s, lab)?;
    let dir = match out {
        Some(d) => PathBuf::from(d),
        None => {
            let ts = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            PathBuf::from("results").join(format!("{}-{ts}", s.experiment.name))
        }
    };
    std::fs::create_dir_all(dir.join("files"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    std::fs::write(dir.join("scenario.toml"), text)?;
    let mut bed = Bed::build_with_emulators(s.clone(), lab)?;
    for (name, body) in &s.files {
        anyhow::ensure!(
            !name.contains('/') && !name.starts_with('.'),
            "files.{name}: a plain file name"
        );
        // Only `{HOST}` is replaced in files: they may use braces of their own.
        let mut body = body.clone();
        for h in &s.hosts {
            if let Some(a) = bed.addr(&h.name) {
                body = body.replace(&format!("{{{}}}", h.name), &a.to_string());
            }
        }
        std::fs::write(dir.join("files").join(name), body)?;
    }
    let ctx = Ctx { s, lab, dir: &dir };
    let mut runs = Vec::new();
    let variants = s.variants();
    let total = s.experiment.rounds * variants.len();
    let started = Instant::now();
    for round in 0..s.experiment.rounds {
        for v in &variants {
            eprintln!(
                "{}",
                progress(
                    runs.len(),
                    total,
                    started.elapsed(),
                    round,
                    s.experiment.rounds,
                    &v.name
                )
            );
            runs.push(ctx.variant(&mut bed, v, round)?);
        }
    }
    drop(bed);
    std::fs::write(dir.join("runs.json"), serde_json::to_string_pretty(&runs)?)?;
    crate::experiment::summary::write(s, &runs, &dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_where_a_run_is_and_what_is_left() {
        assert_eq!(
            progress(0, 70, Duration::ZERO, 0, 2, "forward.c1"),
            "[1/70] round 1 of 2: forward.c1 (0:00 elapsed, about ? left)"
        );
        // 10 of 40 runs in 2:30: 30 more at that pace take 7:30.
        assert_eq!(
            progress(10, 40, Duration::from_secs(150), 0, 1, "copy.c10"),
            "[11/40] round 1 of 1: copy.c10 (2:30 elapsed, about 7:30 left)"
        );
        assert_eq!(mmss(Duration::from_secs(3725)), "1h02");
    }

    #[test]
    fn a_program_missing_from_the_machine_is_named_before_the_run() {
        let text = "[experiment]\nname = \"t\"\n[[host]]\nname = \"a\"\n\
                    [[variant]]\nname = \"v\"\n\
                    [[process]]\nhost = \"a\"\ncommand = [\"no-such-peer-xyz\", \"-f\"]\n\
                    [[load]]\nhost = \"a\"\ncommand = [\"lab\", \"sclient\"]\n";
        let s = Scenario::from_toml(text).unwrap();
        // `lab` resolves to this very test binary, which exists.
        let lab = std::env::current_exe().unwrap();
        let e = check_programs(&s, &lab).unwrap_err().to_string();
        assert!(e.contains("not installed: no-such-peer-xyz ("), "{e}");
        assert!(e.contains("BENCH=1 scripts/setup.sh"), "{e}");
        assert!(installed("sh") && installed(&lab.display().to_string()));
    }
}
