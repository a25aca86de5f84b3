//! `splicer-lab`: build a scenario's test bed, or clean up after crashed runs.
#![forbid(unsafe_code)]

mod calibrate;

use std::io::Read;

use splicer_lab::{bed, emulator, origin, pingpong, Bed, Scenario};

const USAGE: &str = "usage: splicer-lab up SCENARIO.toml   build the bed, print its hosts, tear down at end of input
       splicer-lab check SCENARIO.toml   validate a scenario file
       splicer-lab clean                 delete namespaces left by crashed runs
       splicer-lab origin [--listen ADDR] [--think MS|LOW-HIGH] [--seed N]
                                         run the origin server (default 127.0.0.1:8080)
       splicer-lab emulate --queue N [--delay-ms D] [--rate-bps R] [--queue-limit P]
                           [--loss-p P --loss-r R] [--seed S]
                                         emulate one link direction fed by NFQUEUE N
       splicer-lab pingpong-server --listen ADDR
       splicer-lab pingpong --connect ADDR [--count N]
                                         one-byte round trips; prints a JSON summary (ms)
       splicer-lab calibrate             measure the emulator against configured RTTs and rates (root)";

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn load(path: &str) -> anyhow::Result<Scenario> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {path}: {e}"))?;
    Scenario::from_toml(&text).map_err(|e| anyhow::anyhow!("{path}: {e}"))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match (args.first().map(String::as_str), args.get(1)) {
        (Some("check"), Some(path)) => {
            let s = load(path)?;
            println!(
                "{path}: OK ({} hosts, {} links)",
                s.hosts.len(),
                s.links.len()
            );
        }
        (Some("up"), Some(path)) => {
            let bed = Bed::build_with_emulators(load(path)?, &std::env::current_exe()?)?;
            for h in &load(path)?.hosts {
                let addr = bed.addr(&h.name).map_or("-".to_string(), |a| a.to_string());
                println!("{:<12} netns {:<24} {addr}", h.name, bed.netns(&h.name));
            }
            println!("up; end of input (Ctrl-D) tears it down");
            // Ctrl-C ends the process too; `splicer-lab clean` then removes the namespaces.
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            drop(bed);
        }
        (Some("origin"), _) => {
            let listen: std::net::SocketAddr = flag(&args, "--listen")
                .unwrap_or("127.0.0.1:8080")
                .parse()?;
            let think = flag(&args, "--think")
                .unwrap_or("0")
                .parse()
                .map_err(|e: String| anyhow::anyhow!(e))?;
            let seed = flag(&args, "--seed").unwrap_or("1").parse()?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let l = tokio::net::TcpListener::bind(listen).await?;
                println!("origin listening on {}", l.local_addr()?);
                tokio::select! {
                    _ = origin::serve(l, origin::Config { think, seed }) => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
                anyhow::Ok(())
            })?;
        }
        (Some("emulate"), _) => {
            let num = |name: &str, default: &str| -> anyhow::Result<f64> {
                let v = flag(&args, name).unwrap_or(default);
                v.parse::<f64>()
                    .map_err(|_| anyhow::anyhow!("{name}: {v:?} is not a number"))
            };
            let queue = flag(&args, "--queue")
                .ok_or_else(|| anyhow::anyhow!("--queue is required"))?
                .parse()?;
            let rate = num("--rate-bps", "0")? as u64;
            let params = emulator::Params {
                delay: std::time::Duration::from_secs_f64(num("--delay-ms", "0")? / 1000.0),
                rate: (rate > 0).then_some(rate),
                queue_limit: num("--queue-limit", "1000")? as usize,
                loss: emulator::Loss {
                    p: num("--loss-p", "0")?,
                    r: num("--loss-r", "0")?,
                },
                seed: num("--seed", "1")? as u64,
            };
            let stop = std::sync::atomic::AtomicBool::new(false);
            let stats = emulator::run(queue, params, &stop)?;
            println!("{stats:?}");
        }
        (Some("pingpong-server"), _) => {
            let listen =
                flag(&args, "--listen").ok_or_else(|| anyhow::anyhow!("--listen is required"))?;
            pingpong::serve(std::net::TcpListener::bind(listen)?);
        }
        (Some("pingpong"), _) => {
            let target = flag(&args, "--connect")
                .ok_or_else(|| anyhow::anyhow!("--connect is required"))?
                .parse()?;
            let count = flag(&args, "--count").unwrap_or("100").parse()?;
            println!(
                "{}",
                pingpong::Summary::of(&pingpong::run(target, count)?).json()
            );
        }
        (Some("calibrate"), None) => calibrate::run(&std::env::current_exe()?)?,
        (Some("clean"), None) => {
            let removed = bed::clean()?;
            println!(
                "removed {} namespace(s){}",
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
