//! `splicer-bench`: commands that print figures (never tests). Every comparison runs its
//! candidates interleaved in one invocation (A B A B …) and reports medians and ratios, as
//! docs/design.md asks; CPU is counted for the proxy process and for the whole machine.
//!
//! # Layout
//! - `main`: argument handling and the report tables.
//! - `measure`: CPU accounting (`/proc/PID/stat`, `/proc/stat`), RSS, medians.
//! - `tunnel`: bulk transfer through a SOCKS5 tunnel per engine; idle-tunnel memory.
//! - `http`: wrk against nginx directly, through Splicer and through HAProxy.
//! - `floor`: a TCP relay with no HTTP work, on `io_uring` or `epoll` (a proxy for lab
//!   scenarios: the least a user-space proxy costs per request).
#![forbid(unsafe_code)]

mod floor;
mod http;
mod measure;
mod tunnel;

use std::path::PathBuf;

const USAGE: &str = "usage: splicer-bench tunnel [--gib N] [--rounds N]
       splicer-bench idle [--tunnels N]
       splicer-bench http [--seconds N] [--rounds N]
       splicer-bench relay-floor --listen ADDR --upstream ADDR [--threads N] [--io uring|epoll|tokio-ring]
Environment: SPLICER_BIN (default target/release/splicer).";

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn splicer_bin() -> anyhow::Result<PathBuf> {
    let p = std::env::var_os("SPLICER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| "target/release/splicer".into());
    anyhow::ensure!(
        p.exists(),
        "{} not found: build with `cargo build --release -p splicer` or set SPLICER_BIN",
        p.display()
    );
    Ok(p)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    splicer_sys::process::raise_nofile_limit()?;
    match args.first().map(String::as_str) {
        Some("tunnel") => tunnel::bulk(
            &splicer_bin()?,
            arg(&args, "--gib", 2.0),
            arg(&args, "--rounds", 3),
        ),
        Some("idle") => tunnel::idle_memory(&splicer_bin()?, arg(&args, "--tunnels", 10_000)),
        Some("http") => http::run(
            &splicer_bin()?,
            arg(&args, "--seconds", 10),
            arg(&args, "--rounds", 3),
        ),
        Some("relay-floor") => {
            let addr = |name: &str| -> anyhow::Result<std::net::SocketAddr> {
                let v = args
                    .iter()
                    .position(|a| a == name)
                    .and_then(|i| args.get(i + 1))
                    .ok_or_else(|| anyhow::anyhow!("relay-floor needs {name} ADDR\n{USAGE}"))?;
                v.parse().map_err(|e| anyhow::anyhow!("{name} {v}: {e}"))
            };
            floor::run(
                addr("--listen")?,
                addr("--upstream")?,
                arg(&args, "--threads", 0),
                &arg(&args, "--io", "uring".to_string()),
            )
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
}
