//! `splicer-lab`: build a scenario's test bed, run its experiment, emulate links, serve
//! origins and sinks, generate load, or clean up after crashed runs.
#![forbid(unsafe_code)]

mod calibrate;
mod flags;

use std::io::Read;

use flags::Flags;
use splicer_lab::load::{self, Via};
use splicer_lab::{bed, emulator, experiment, origin, pingpong, Bed, Scenario};

const USAGE: &str = "usage: splicer-lab COMMAND [FLAGS]
the seeds' experiments:
  reproduce --list                list them, with how long each grid takes
  reproduce NAME [--quick | --tiny] [--out DIR] [--from results/reproduce-NAME-TS]
        run one end to end and write DIR/NAME.md (plots, the paper's figures beside ours)
        and DIR/NAME/ (raw results). The default grid is the paper's (reduced only where
        this machine cannot: the report says how) and writes to docs/experiments; --quick
        is a reduced grid of minutes, --tiny checks the machinery in seconds (both write
        to results/experiments unless --out is given); root
test bed:
  run SCENARIO.toml [--out DIR]   build the bed, run its processes and loads, write results
  up SCENARIO.toml                build the bed, print its hosts, tear down at end of input
  check SCENARIO.toml             validate a scenario file
  clean                           delete namespaces left by crashed runs
  calibrate                       measure the emulator against configured RTTs and rates (root)
  emulate --queue N [--delay-ms D] [--rate-bps R] [--queue-limit P] [--loss-p P --loss-r R]
          [--per-client-rate-bps R] [--seed S] [--stats FILE]
          [--spin-us 300]
                                  emulate one link direction fed by NFQUEUE N
servers:
  origin [--listen ADDR] [--think MS|LOW-HIGH] [--seed N]     (default 127.0.0.1:8080)
  loadserver --listen ADDR        bulk sink: counts and checks every byte
  pingpong-server --listen ADDR
load generators (each prints one JSON report):
  sclient --origin ADDR [--via V] [--clients 20] [--size 1024] [--cacheable] [--ssl] [--keep-alive] [--pause S]
          [--abbreviated 0.6] [--duration 60] [--warmup 20] [--cooldown 20] [--timeout 60] [--seed 1]
  surge --origin ADDR [--via V] [--users 100] [--files 2000] [--max-size 16777216]
        [--time-scale 1] [--duration 60] [--warmup 10] [--cooldown 10] [--timeout 60] [--seed 1]
  loadclient --sink ADDR [--via V] [--conns 1] [--bytes 1073741824] [--both-ways]
             [--timeout 600] [--seed 1]
  persist --origin ADDR [--via V] [--rate 10] [--count 1000] [--size 50000] [--rtt-ms MS] [--seed 1]
  queries --target ADDR [--clients 10] [--sessions 10] [--queries 6] [--drop 2] [--size 55000]
          [--think-ms 50-400] [--timeout 30] [--seed 1]
        seed 004's sessions of queries, each on a new connection, to an origin or an edge
  pingpong --connect ADDR [--via V] [--count 100] [--pause-ms 0]   one-byte round trips on one
        connection (after one exchange and a pause, when given)
  cache-bench [--rounds 3] [--seconds 20] [--clients 50] [--only PROXY,..] [--loads LOAD,..] [--out DIR]
  edge-bench [--rounds 3] [--seconds 20] [--clients 50] [--only PROXY,..] [--loads 1k,64k] [--out DIR]
        reverse proxies side by side: Splicer's edge (alone and pipelined), HAProxy, nginx;
        needs root and BENCH=1 scripts/setup.sh
  rosu-mixed [--rounds 1] [--seconds 30] [--sizes 1,10,45,128] [--engines copy,pipe,sockmap,ipsplice]
             [--proxy-cpu 5] [--figs 16,17] [--out DIR]
        seed 000's mixed load (Figs 16-17) on the corporate setting: hits beside spliced
        requests, Splicer held to --proxy-cpu percent of one CPU (0: no limit); root
  relay-bench [--rounds 3] [--gib 1] [--count 20000] [--only RELAY,..] [--loads LOAD,..] [--out DIR]
              [--receive-buffer BYTES]
        TCP relays side by side (IP forwarding, Splicer's engines, HAProxy, nginx stream,
        Dante, socat): bulk one way and both ways with 1/10/100 connections, 1-byte round
        trips; needs root and BENCH=1 scripts/setup.sh. --receive-buffer fixes the receive
        buffer of Splicer's (limits.receive_buffer) and HAProxy's (tune.rcvbuf.*) sockets
V: direct, http://PROXY (forward proxy), connect://PROXY (HTTP CONNECT) or socks5://PROXY";

fn load_scenario(path: &str) -> anyhow::Result<Scenario> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {path}: {e}"))?;
    Scenario::from_toml(&text).map_err(|e| anyhow::anyhow!("{path}: {e}"))
}

fn secs(f: &mut Flags, name: &str, default: f64) -> anyhow::Result<f64> {
    let v: f64 = f.get(name, default)?;
    anyhow::ensure!(v.is_finite() && v >= 0.0, "{name}: seconds, 0 or more");
    Ok(v)
}

fn via(f: &mut Flags) -> anyhow::Result<Via> {
    f.get("--via", "direct".to_string())?
        .parse()
        .map_err(|e: splicer_lab::load::dial::BadVia| anyhow::anyhow!("--via {e}"))
}

/// A comma-separated flag value as a list (absent: empty).
fn list(v: Option<String>) -> Vec<String> {
    v.map(|s| s.split(',').map(String::from).collect())
        .unwrap_or_default()
}

/// Runs a benchmark's generated scenario as an experiment and says where its results are.
fn run_generated(text: &str, out: Option<String>) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let s = Scenario::from_toml(text)?;
    let dir = experiment::run(&s, text, &exe, out.as_deref())?;
    println!("results in {}", dir.display());
    Ok(())
}

/// Runs a generator on its own runtime and prints its report.
fn report(
    fut: impl std::future::Future<Output = anyhow::Result<load::Report>>,
) -> anyhow::Result<()> {
    let r = load::runtime()?.block_on(fut)?;
    println!("{}", r.json());
    Ok(())
}

fn serve_forever(
    listen: &str,
    serve: impl FnOnce(
        tokio::net::TcpListener,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>,
) -> anyhow::Result<()> {
    let rt = load::runtime()?;
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
        println!("listening on {}", l.local_addr()?);
        tokio::select! {
            _ = serve(l) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        anyhow::Ok(())
    })
}

fn main() -> anyhow::Result<()> {
    let result = run();
    if result.is_err() && bed::interrupted() {
        // The interrupt handler is removing the bed and exits with 130 when done.
        std::thread::sleep(std::time::Duration::from_secs(30));
    }
    result
}

fn run() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first().map(String::as_str) else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    if cmd == "help" || args.iter().any(|a| matches!(a.as_str(), "-h" | "--help")) {
        println!("{USAGE}");
        return Ok(());
    }
    // Subcommands with a positional scenario path.
    let path = args.get(1).filter(|a| !a.starts_with("--")).cloned();
    let rest = &args[1 + path.is_some() as usize..];
    let switches = [
        "--cacheable",
        "--ssl",
        "--both-ways",
        "--keep-alive",
        "--list",
        "--quick",
        "--tiny",
    ];
    let mut f = Flags::parse(rest, &switches)?;
    if matches!(
        cmd,
        "run"
            | "up"
            | "calibrate"
            | "relay-bench"
            | "cache-bench"
            | "edge-bench"
            | "rosu-mixed"
            | "reproduce"
    ) {
        bed::clean_up_on_interrupt();
    }
    match (cmd, path) {
        ("check", Some(path)) => {
            let s = load_scenario(&path)?;
            f.finish()?;
            println!(
                "{path}: OK ({} hosts, {} links)",
                s.hosts.len(),
                s.links.len()
            );
        }
        ("reproduce", None) if f.switch("--list") => {
            f.finish()?;
            print!("{}", splicer_lab::reproduce::list());
        }
        ("reproduce", Some(name)) => {
            use splicer_lab::reproduce::Grid;
            let grid = match (f.switch("--quick"), f.switch("--tiny")) {
                (false, false) => Grid::Full,
                (true, false) => Grid::Quick,
                (false, true) => Grid::Tiny,
                (true, true) => anyhow::bail!("--quick or --tiny, not both"),
            };
            let out = f.str("--out").unwrap_or_else(|| {
                if grid == Grid::Full {
                    "docs/experiments".into()
                } else {
                    "results/experiments".into()
                }
            });
            let from = f.str("--from").map(std::path::PathBuf::from);
            f.finish()?;
            let command = std::iter::once("splicer-lab".to_string())
                .chain(args.iter().cloned())
                .collect::<Vec<_>>()
                .join(" ");
            let report = splicer_lab::reproduce::run(
                &name,
                grid,
                std::path::Path::new(&out),
                &std::env::current_exe()?,
                &command,
                from.as_deref(),
            )?;
            println!("report: {}", report.display());
        }
        ("run", Some(path)) => {
            let out = f.str("--out");
            f.finish()?;
            let s = load_scenario(&path)?;
            let text = std::fs::read_to_string(&path)?;
            let dir = experiment::run(&s, &text, &std::env::current_exe()?, out.as_deref())?;
            println!("results in {}", dir.display());
        }
        ("relay-bench", None) => {
            let p = splicer_lab::relaybench::Params {
                rounds: f.get("--rounds", 3)?,
                bytes: (f.get("--gib", 1.0f64)? * (1u64 << 30) as f64) as u64,
                count: f.get("--count", 20_000)?,
                only: list(f.str("--only")),
                loads: list(f.str("--loads")),
                receive_buffer: f.get("--receive-buffer", 0)?,
            };
            let out = f.str("--out");
            f.finish()?;
            let exe = std::env::current_exe()?;
            run_generated(&splicer_lab::relaybench::scenario(&p, &exe), out)?;
        }
        ("cache-bench", None) | ("edge-bench", None) => {
            let d = splicer_lab::benchgen::HttpBench::default();
            let p = splicer_lab::benchgen::HttpBench {
                rounds: f.get("--rounds", d.rounds)?,
                seconds: f.get("--seconds", d.seconds)?,
                clients: f.get("--clients", d.clients)?,
                only: list(f.str("--only")),
                loads: list(f.str("--loads")),
            };
            let out = f.str("--out");
            f.finish()?;
            let text = match cmd {
                "cache-bench" => splicer_lab::cachebench::scenario(&p),
                _ => splicer_lab::edgebench::scenario(&p),
            };
            run_generated(&text, out)?;
        }
        ("rosu-mixed", None) => {
            let d = splicer_lab::rosumixed::Params::default();
            let nums = |v: Option<String>, d: Vec<u64>| -> anyhow::Result<Vec<u64>> {
                match v {
                    None => Ok(d),
                    Some(v) => v
                        .split(',')
                        .map(|x| {
                            x.parse()
                                .map_err(|_| anyhow::anyhow!("not a number: {x:?}"))
                        })
                        .collect(),
                }
            };
            let p = splicer_lab::rosumixed::Params {
                rounds: f.get("--rounds", d.rounds)?,
                seconds: f.get("--seconds", d.seconds)?,
                sizes: nums(f.str("--sizes"), d.sizes)
                    .map_err(|e| anyhow::anyhow!("--sizes: {e}"))?,
                engines: f.str("--engines").map_or(d.engines, |v| list(Some(v))),
                proxy_cpu: f.get("--proxy-cpu", d.proxy_cpu)?,
                figs: nums(f.str("--figs"), vec![16, 17])
                    .map_err(|e| anyhow::anyhow!("--figs: {e}"))?
                    .into_iter()
                    .map(|x| x as u32)
                    .collect(),
            };
            let out = f.str("--out");
            f.finish()?;
            p.check()?;
            let text = splicer_lab::rosumixed::scenario(&p);
            let s = Scenario::from_toml(&text)?;
            let dir = experiment::run(&s, &text, &std::env::current_exe()?, out.as_deref())?;
            splicer_lab::rosumixed::report(&dir, &p)?;
            println!(
                "results in {} (figures.md, fig16.svg, fig17.svg)",
                dir.display()
            );
        }
        ("up", Some(path)) => {
            f.finish()?;
            let s = load_scenario(&path)?;
            let bed = Bed::build_with_emulators(s.clone(), &std::env::current_exe()?)?;
            for h in &s.hosts {
                let addr = bed.addr(&h.name).map_or("-".to_string(), |a| a.to_string());
                println!("{:<12} netns {:<24} {addr}", h.name, bed.netns(&h.name));
            }
            println!("up; end of input (Ctrl-D) or Ctrl-C tears it down");
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            drop(bed);
        }
        ("origin", None) => {
            let listen = f.get("--listen", "127.0.0.1:8080".to_string())?;
            let think = f.get("--think", origin::Think::None)?;
            let seed = f.get("--seed", 1u64)?;
            f.finish()?;
            serve_forever(&listen, move |l| {
                Box::pin(origin::serve(l, origin::Config { think, seed }))
            })?;
        }
        ("loadserver", None) => {
            let listen: String = f.required("--listen")?;
            f.finish()?;
            serve_forever(&listen, |l| Box::pin(load::bulk::serve(l)))?;
        }
        ("emulate", None) => {
            let queue = f.required("--queue")?;
            let rate: u64 = f.get("--rate-bps", 0)?;
            let per_client: u64 = f.get("--per-client-rate-bps", 0)?;
            let params = emulator::Params {
                delay: std::time::Duration::from_secs_f64(f.get("--delay-ms", 0.0)? / 1000.0),
                rate: (rate > 0).then_some(rate),
                queue_limit: f.get("--queue-limit", 1000)?,
                loss: emulator::Loss {
                    p: f.get("--loss-p", 0.0)?,
                    r: f.get("--loss-r", 0.0)?,
                },
                seed: f.get("--seed", 1)?,
                per_flow_rate: (per_client > 0).then_some(per_client),
                spin: std::time::Duration::from_micros(
                    f.get("--spin-us", emulator::SPIN.as_micros() as u64)?,
                ),
            };
            let stats_file = f.str("--stats").map(std::path::PathBuf::from);
            f.finish()?;
            let stop = std::sync::atomic::AtomicBool::new(false);
            let stats = emulator::run(queue, params, &stop, stats_file.as_deref())?;
            println!("{stats:?}");
        }
        ("pingpong-server", None) => {
            let listen: String = f.required("--listen")?;
            f.finish()?;
            pingpong::serve(std::net::TcpListener::bind(listen)?);
        }
        ("pingpong", None) => {
            let target = f.required("--connect")?;
            let count = f.get("--count", 100)?;
            let via = via(&mut f)?;
            let pause = std::time::Duration::from_millis(f.get("--pause-ms", 0)?);
            f.finish()?;
            let r = pingpong::report(target, via, count, pause);
            println!("{}", r.json());
            anyhow::ensure!(
                r.error_total() == 0,
                "pingpong failed: {:?}",
                r.first_errors
            );
        }
        ("sclient", None) => {
            let p = load::sclient::Params {
                origin: f.required("--origin")?,
                via: via(&mut f)?,
                clients: f.get("--clients", 20)?,
                size: f.get("--size", 1024)?,
                cacheable: f.switch("--cacheable"),
                ssl: f.switch("--ssl"),
                abbreviated: f.get("--abbreviated", 0.6)?,
                duration_s: secs(&mut f, "--duration", 60.0)?,
                warmup_s: secs(&mut f, "--warmup", 20.0)?,
                cooldown_s: secs(&mut f, "--cooldown", 20.0)?,
                timeout_s: secs(&mut f, "--timeout", 60.0)?,
                seed: f.get("--seed", 1)?,
                keep_alive: f.switch("--keep-alive"),
                pause_s: secs(&mut f, "--pause", 0.0)?,
            };
            f.finish()?;
            report(load::sclient::run(p))?;
        }
        ("surge", None) => {
            let p = load::surge::Params {
                origin: f.required("--origin")?,
                via: via(&mut f)?,
                users: f.get("--users", 100)?,
                files: f.get("--files", 2000)?,
                max_size: f.get("--max-size", 16 << 20)?,
                time_scale: f.get("--time-scale", 1.0)?,
                duration_s: secs(&mut f, "--duration", 60.0)?,
                warmup_s: secs(&mut f, "--warmup", 10.0)?,
                cooldown_s: secs(&mut f, "--cooldown", 10.0)?,
                timeout_s: secs(&mut f, "--timeout", 60.0)?,
                seed: f.get("--seed", 1)?,
            };
            f.finish()?;
            report(load::surge::run(p))?;
        }
        ("loadclient", None) => {
            let p = load::bulk::Params {
                sink: f.required("--sink")?,
                via: via(&mut f)?,
                conns: f.get("--conns", 1)?,
                bytes: f.get("--bytes", 1 << 30)?,
                both_ways: f.switch("--both-ways"),
                seed: f.get("--seed", 1)?,
                timeout_s: secs(&mut f, "--timeout", 600.0)?,
            };
            f.finish()?;
            report(load::bulk::run(p))?;
        }
        ("persist", None) => {
            let p = load::persist::Params {
                origin: f.required("--origin")?,
                via: via(&mut f)?,
                rate: f.get("--rate", 10.0)?,
                count: f.get("--count", 1000)?,
                size: f.get("--size", 50_000)?,
                rtt_ms: f.str("--rtt-ms").map(|v| v.parse()).transpose()?,
                seed: f.get("--seed", 1)?,
            };
            f.finish()?;
            report(load::persist::run(p))?;
        }
        ("queries", None) => {
            let think = f.str("--think-ms").unwrap_or_else(|| "50-400".into());
            let think_ms = match think.split_once('-') {
                Some((lo, hi)) => (lo.parse()?, hi.parse()?),
                None => (think.parse()?, think.parse()?),
            };
            let p = load::queries::Params {
                target: f.required("--target")?,
                clients: f.get("--clients", 10)?,
                sessions: f.get("--sessions", 10)?,
                queries: f.get("--queries", 6)?,
                drop: f.get("--drop", 2)?,
                size: f.get("--size", 55_000)?,
                think_ms,
                timeout_s: f.get("--timeout", 30.0)?,
                seed: f.get("--seed", 1)?,
            };
            f.finish()?;
            report(load::queries::run(p))?;
        }
        ("calibrate", None) => {
            f.finish()?;
            calibrate::run(&std::env::current_exe()?)?
        }
        ("clean", None) => {
            f.finish()?;
            let mut removed = bed::clean()?;
            removed.extend(splicer_lab::cpulimit::clean());
            println!(
                "removed {} leftover(s) (namespaces, CPU-limit groups){}",
                removed.len(),
                if removed.is_empty() {
                    String::new()
                } else {
                    format!(": {}", removed.join(" "))
                }
            );
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
    Ok(())
}
