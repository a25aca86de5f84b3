//! `splicer-lab`: build a scenario's test bed, run its experiment, emulate links, serve
//! origins and sinks, generate load, or clean up after crashed runs. The commands and their
//! flags are in `cli`.
#![forbid(unsafe_code)]

mod calibrate;
mod cli;

use std::io::Read;
use std::path::Path;

use clap::Parser;
use cli::Command;
use splicer_lab::bed::emulator;
use splicer_lab::load;
use splicer_lab::load::pingpong;
use splicer_lab::{bed, experiment, origin, Bed, Scenario};

fn load_scenario(path: &Path) -> anyhow::Result<Scenario> {
    let name = path.display();
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {name}: {e}"))?;
    Scenario::from_toml(&text).map_err(|e| anyhow::anyhow!("{name}: {e}"))
}

/// Runs a benchmark's generated scenario as an experiment and says where its results are.
fn run_generated(text: &str, out: Option<String>) -> anyhow::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let s = Scenario::from_toml(text)?;
    let dir = experiment::run(&s, text, &exe, out.as_deref())?;
    println!("results in {}", dir.display());
    Ok(dir)
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
    let result = run(cli::Cli::parse().command);
    if result.is_err() && bed::interrupted() {
        // The interrupt handler is removing the bed and exits with 130 when done.
        std::thread::sleep(std::time::Duration::from_secs(30));
    }
    result
}

fn run(command: Command) -> anyhow::Result<()> {
    if matches!(
        command,
        Command::Run { .. }
            | Command::Up { .. }
            | Command::Calibrate
            | Command::RelayBench(_)
            | Command::SlowReader(_)
            | Command::SpliceCost(_)
            | Command::PaceBench(_)
            | Command::CacheBench(_)
            | Command::EdgeBench(_)
            | Command::PerfGuard(_)
            | Command::RosuMixed(_)
            | Command::Reproduce(_)
    ) {
        bed::clean_up_on_interrupt();
    }
    let exe = std::env::current_exe()?;
    match command {
        Command::Check { scenario } => {
            let s = load_scenario(&scenario)?;
            println!(
                "{}: OK ({} hosts, {} links)",
                scenario.display(),
                s.hosts.len(),
                s.links.len()
            );
        }
        Command::Reproduce(r) => reproduce(r, &exe)?,
        Command::Scrape {
            admin,
            every_ms,
            seconds,
        } => splicer_lab::load::scrape::run(admin, every_ms, seconds)?,
        Command::Run { scenario, out } => {
            let s = load_scenario(&scenario)?;
            let text = std::fs::read_to_string(&scenario)?;
            let dir = experiment::run(&s, &text, &exe, out.as_deref())?;
            println!("results in {}", dir.display());
        }
        Command::RelayBench(b) => {
            let p = splicer_lab::bench::relay::Params {
                rounds: b.rounds,
                bytes: (b.gib * (1u64 << 30) as f64) as u64,
                count: b.count,
                only: b.only,
                loads: b.loads,
                receive_buffer: b.receive_buffer,
            };
            run_generated(&splicer_lab::bench::relay::scenario(&p, &exe), b.out)?;
        }
        Command::PaceBench(b) => {
            let p = splicer_lab::bench::pace::Params {
                rounds: b.rounds,
                seconds: b.seconds,
                clients: b.clients,
                size: b.size,
                rate: b.rate,
                only: b.only,
            };
            run_generated(&splicer_lab::bench::pace::scenario(&p), b.out)?;
        }
        Command::SlowReader(b) => {
            let p = splicer_lab::bench::slowread::Params {
                rounds: b.rounds,
                seconds: b.seconds,
                rate: b.rate,
                size: b.size,
                only: b.only,
            };
            run_generated(&splicer_lab::bench::slowread::scenario(&p), b.out)?;
        }
        Command::SpliceCost(b) => {
            use splicer_lab::bench::splicecost;
            anyhow::ensure!(
                b.cases.iter().all(|c| c == "close" || c == "kept"),
                "--cases: close, kept"
            );
            let p = splicecost::Params {
                rounds: b.rounds,
                seconds: b.seconds,
                clients: b.clients,
                sizes: b.sizes,
                cases: b.cases,
                only: b.only,
            };
            let text = splicecost::scenario(&p);
            let s = Scenario::from_toml(&text)?;
            let dir = experiment::run(&s, &text, &exe, b.out.as_deref())?;
            println!("engines that moved the bodies (requests, all rounds):");
            for (v, used) in splicecost::engines_used(&dir) {
                let list: Vec<String> = used.iter().map(|(e, n)| format!("{e} {n}")).collect();
                println!("  {v}: {}", list.join(", "));
            }
            println!("results in {}", dir.display());
        }
        Command::CacheBench(b) => {
            anyhow::ensure!(b.bulk == 0, "--bulk is perf-guard's only");
            let (p, out) = http_bench(b, splicer_lab::bench::HttpBench::default());
            run_generated(&splicer_lab::bench::cache::scenario(&p), out)?;
        }
        Command::EdgeBench(b) => {
            anyhow::ensure!(b.bulk == 0, "--bulk is perf-guard's only");
            let (p, out) = http_bench(b, splicer_lab::bench::HttpBench::default());
            run_generated(&splicer_lab::bench::edge::scenario(&p), out)?;
        }
        Command::PerfGuard(b) => {
            use splicer_lab::bench::guard;
            let (p, out) = http_bench(b, guard::defaults());
            let dir = run_generated(&guard::scenario(&p), out)?;
            let runs: Vec<experiment::run::VariantRun> =
                serde_json::from_slice(&std::fs::read(dir.join("runs.json"))?)?;
            println!("\n{}", guard::table(&runs));
            println!("{}", guard::verdicts(&runs));
        }
        Command::RosuMixed(m) => {
            let p = splicer_lab::reproduce::rosumixed::Params {
                rounds: m.rounds,
                seconds: m.seconds,
                sizes: m.sizes,
                engines: m.engines,
                proxy_cpu: m.proxy_cpu,
                steal: m.steal,
                figs: m.figs,
            };
            p.check()?;
            let dir = match m.from {
                Some(d) => {
                    let d = std::path::PathBuf::from(d);
                    p.same_as_kept(&d)?;
                    d
                }
                None => {
                    let text = splicer_lab::reproduce::rosumixed::scenario(&p, &exe);
                    let s = Scenario::from_toml(&text)?;
                    experiment::run(&s, &text, &exe, m.out.as_deref())?
                }
            };
            splicer_lab::reproduce::rosumixed::report(&dir, &p)?;
            println!(
                "results in {} (figures.md, fig16.svg, fig17.svg)",
                dir.display()
            );
        }
        Command::Up { scenario } => {
            let s = load_scenario(&scenario)?;
            let bed = Bed::build_with_emulators(s.clone(), &exe)?;
            for h in &s.hosts {
                let addr = bed.addr(&h.name).map_or("-".to_string(), |a| a.to_string());
                println!("{:<12} netns {:<24} {addr}", h.name, bed.netns(&h.name));
            }
            println!("up; end of input (Ctrl-D) or Ctrl-C tears it down");
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            drop(bed);
        }
        Command::Steal {
            cpu,
            share,
            period_ms,
        } => {
            let p = splicer_lab::bed::steal::Params {
                cpu,
                share,
                period: std::time::Duration::try_from_secs_f64(period_ms / 1000.0)
                    .map_err(|_| anyhow::anyhow!("--period-ms: a number of milliseconds"))?,
            };
            splicer_lab::bed::steal::run(&p, None)?
        }
        Command::TcpStates => splicer_lab::measure::tcpstates::serve()?,
        Command::Origin {
            listen,
            think,
            seed,
        } => serve_forever(&listen, move |l| {
            Box::pin(origin::serve(l, origin::Config { think, seed }))
        })?,
        Command::Loadserver { listen } => {
            serve_forever(&listen, |l| Box::pin(load::bulk::serve(l)))?
        }
        Command::Emulate(e) => {
            let params = emulator::Params {
                delay: std::time::Duration::from_secs_f64(e.delay_ms / 1000.0),
                rate: (e.rate_bps > 0).then_some(e.rate_bps),
                queue_limit: e.queue_limit,
                loss: emulator::Loss {
                    p: e.loss_p,
                    r: e.loss_r,
                },
                seed: e.seed,
                per_flow_rate: (e.per_client_rate_bps > 0).then_some(e.per_client_rate_bps),
                spin: std::time::Duration::from_micros(e.spin_us),
            };
            let stop = std::sync::atomic::AtomicBool::new(false);
            let stats = emulator::run(e.queue, params, &stop, e.stats.as_deref())?;
            println!("{stats:?}");
        }
        Command::PingpongServer { listen } => pingpong::serve(std::net::TcpListener::bind(listen)?),
        Command::Pingpong {
            connect,
            via,
            count,
            pause_ms,
        } => {
            let pause = std::time::Duration::from_millis(pause_ms);
            let r = pingpong::report(connect, via, count, pause);
            println!("{}", r.json());
            anyhow::ensure!(
                r.error_total() == 0,
                "pingpong failed: {:?}",
                r.first_errors
            );
        }
        Command::Sclient(c) => report(load::sclient::run(c.params()))?,
        Command::Wrk(c) => println!("{}", load::wrk::run(c.params())?.json()),
        Command::NginxOrigin {
            listen,
            mut sizes,
            seed,
            surge,
            max_size,
        } => {
            if let Some(files) = surge {
                sizes.extend(load::surge::sizes(files, max_size, seed));
                sizes.sort_unstable();
                sizes.dedup();
            }
            let p = splicer_lab::bench::nginx_origin::Params {
                listen,
                sizes,
                seed,
            };
            return Err(splicer_lab::bench::nginx_origin::exec(&p));
        }
        Command::Surge(c) => report(load::surge::run(c.params()))?,
        Command::Loadclient(c) => report(load::bulk::run(c.params()))?,
        Command::Persist(c) => report(load::persist::run(c.params()))?,
        Command::Windows(c) => report(load::windows::run(c.params()))?,
        Command::Queries(c) => report(load::queries::run(c.params()))?,
        Command::Slowread(c) => report(load::slowread::run(c.params()))?,
        Command::Calibrate => calibrate::run(&exe)?,
        Command::Clean => {
            let mut removed = bed::clean()?;
            removed.extend(splicer_lab::bed::cpulimit::clean());
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
    }
    Ok(())
}

/// Runs one seed's experiment, or lists them.
fn reproduce(r: cli::Reproduce, exe: &Path) -> anyhow::Result<()> {
    use splicer_lab::reproduce::Grid;
    let Some(name) = r.name.filter(|_| !r.list) else {
        print!("{}", splicer_lab::reproduce::list());
        return Ok(());
    };
    let grid = match (r.quick, r.tiny) {
        (true, _) => Grid::Quick,
        (_, true) => Grid::Tiny,
        _ => Grid::Full,
    };
    let out = r.out.unwrap_or_else(|| match grid {
        Grid::Full => "docs/experiments".into(),
        _ => "results/experiments".into(),
    });
    // The report names the command that made it, as it was typed.
    let command = std::iter::once("splicer-lab".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(part) = r.part {
        let into = r.into.unwrap_or_else(|| out.join(format!("{name}-parts")));
        let kept = splicer_lab::reproduce::run_part(&name, grid, &part, &into, exe, &command)?;
        println!("part {part}: {}", kept.display());
        return Ok(());
    }
    let report = if r.render {
        splicer_lab::reproduce::render_again(&name, &out)?
    } else {
        splicer_lab::reproduce::run(&name, grid, &out, exe, &command, r.from.as_deref())?
    };
    println!("report: {}", report.display());
    Ok(())
}

/// The HTTP benchmarks' parameters, and where their results go.
fn http_bench(
    b: cli::HttpBench,
    defaults: splicer_lab::bench::HttpBench,
) -> (splicer_lab::bench::HttpBench, Option<String>) {
    let p = splicer_lab::bench::HttpBench {
        rounds: b.rounds,
        seconds: b.seconds.unwrap_or(defaults.seconds),
        clients: b.clients,
        only: b.only,
        loads: b.loads,
        origin: b.origin.unwrap_or(defaults.origin),
        generator: b.generator.unwrap_or(defaults.generator),
        bulk: b.bulk,
    };
    (p, b.out)
}
