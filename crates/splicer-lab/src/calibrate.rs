//! `splicer-lab calibrate`: builds client — router — server beds and compares what the
//! emulator gives with what was configured: round trips (ping-pong through the router) and
//! rates (a bulk TCP transfer's goodput, converted to link rate).

use std::path::Path;
use std::process::Stdio;

use splicer_lab::{Bed, Scenario};

const CHAIN: &str = "[[host]]\nname = \"client\"\n[[host]]\nname = \"router\"\nforward = true\n[[host]]\nname = \"server\"\n\
                     [[link]]\na = \"client\"\nb = \"router\"\n[[link]]\na = \"router\"\nb = \"server\"\n";

fn bed(lab: &Path, each_way: &str) -> anyhow::Result<Bed> {
    let s = format!(
        "{CHAIN}[[emulate]]\nrouter = \"router\"\nfrom = \"client\"\nto = \"server\"\n{each_way}\n\
         [[emulate]]\nrouter = \"router\"\nfrom = \"server\"\nto = \"client\"\n{each_way}\n"
    );
    Bed::build_with_emulators(Scenario::from_toml(&s)?, lab)
}

/// Runs `splicer-lab ARGS` in a host and returns its standard output.
fn lab_in(b: &Bed, lab: &Path, host: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = b
        .command(host, lab.to_str().unwrap_or("splicer-lab"))
        .args(args)
        .stderr(Stdio::inherit())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "splicer-lab {args:?} failed in {host}"
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn field(json: &str, key: &str) -> f64 {
    json.split(&format!("\"{key}\":"))
        .nth(1)
        .and_then(|r| r.split([',', '}']).next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

pub fn run(lab: &Path) -> anyhow::Result<()> {
    println!("| configured RTT ms | measured mean ms | p50 | p99 | cv | error ms | error % |");
    println!("|---|---|---|---|---|---|---|");
    for rtt in [10.0, 50.0, 100.0, 200.0] {
        let mut b = bed(lab, &format!("delay_ms = {}", rtt / 2.0))?;
        let server = b.addr("server").expect("server has an address");
        let target = format!("{server}:7000");
        let mut cmd = {
            let mut c = b.command("server", lab.to_str().unwrap_or("splicer-lab"));
            c.args(["pingpong-server", "--listen", &target])
                .stdout(Stdio::null());
            c
        };
        b.spawn(&mut cmd)?;
        std::thread::sleep(std::time::Duration::from_millis(300));
        let count = if rtt >= 100.0 { "50" } else { "200" };
        let j = lab_in(
            &b,
            lab,
            "client",
            &["pingpong", "--connect", &target, "--count", count],
        )?;
        let mean = field(&j, "mean_ms");
        println!(
            "| {rtt} | {mean:.3} | {:.3} | {:.3} | {:.4} | {:+.3} | {:+.2} |",
            field(&j, "p50_ms"),
            field(&j, "p99_ms"),
            field(&j, "cv"),
            mean - rtt,
            (mean - rtt) / rtt * 100.0
        );
    }
    println!(
        "\n| configured rate | transfer | goodput | link rate (goodput × 1538/1448) | error % |"
    );
    println!("|---|---|---|---|---|");
    for (label, each_way, rate, bytes) in [
        ("56 kbit/s", "rate_bps = 56000", 56_000u64, 150_000u64),
        (
            "56 kbit/s per client",
            "per_client_rate_bps = 56000",
            56_000,
            150_000,
        ),
        ("1 Mbit/s", "rate_bps = 1000000", 1_000_000, 1_000_000),
        ("10 Mbit/s", "rate_bps = 10000000", 10_000_000, 10_000_000),
        (
            "100 Mbit/s",
            "rate_bps = 100000000",
            100_000_000,
            60_000_000,
        ),
        (
            "1 Gbit/s",
            "rate_bps = 1000000000",
            1_000_000_000,
            400_000_000,
        ),
    ] {
        let mut b = bed(lab, &format!("delay_ms = 1\n{each_way}"))?;
        let dir = std::env::temp_dir().join(format!("splab-cal-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("f"), vec![1u8; bytes as usize])?;
        let (url, _) = b.serve_http("server", 8000, Some(&dir))?;
        b.wait_http("client", &url, std::time::Duration::from_secs(20))?;
        let out = b
            .command("client", "curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{speed_download}",
                &format!("{url}f"),
            ])
            .output()?;
        let goodput = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<f64>()
            .unwrap_or(f64::NAN)
            * 8.0;
        // Full-size segments carry 1448 payload bytes in 1538 bytes on the wire (TCP/IP
        // headers with timestamps, Ethernet framing, preamble and gap).
        let link = goodput * 1538.0 / 1448.0;
        println!(
            "| {label} | {bytes} B | {:.4} Mbit/s | {:.4} Mbit/s | {:+.2} |",
            goodput / 1e6,
            link / 1e6,
            (link - rate as f64) / rate as f64 * 100.0
        );
        drop(b);
        let _ = std::fs::remove_dir_all(&dir);
    }
    high_rate_delay(lab)
}

/// Delay accuracy under load: 5 ms each way, the link capped at 1 Gbit/s, 4 connections
/// pushing 2 GB of MTU-size packets through it (the kernel cuts offload super-packets
/// before queueing); the emulator reports how late its verdicts were against their due
/// times.
fn high_rate_delay(lab: &Path) -> anyhow::Result<()> {
    let mut b = bed(
        lab,
        "delay_ms = 5\nrate_bps = 1000000000\nqueue_limit = 20000",
    )?;
    let server = b.addr("server").expect("server has an address");
    let sink = format!("{server}:7001");
    let mut cmd = b.command("server", lab.to_str().unwrap_or("splicer-lab"));
    cmd.args(["loadserver", "--listen", &sink])
        .stdout(Stdio::null());
    b.spawn(&mut cmd)?;
    std::thread::sleep(std::time::Duration::from_millis(300));
    let before = b.emulator_stats();
    let j = lab_in(
        &b,
        lab,
        "client",
        &[
            "loadclient",
            "--sink",
            &sink,
            "--conns",
            "4",
            "--bytes",
            "500000000",
        ],
    )?;
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let after = b.emulator_stats();
    let gbit = field(&j, "gbit_per_second");
    let errors = j.contains("\"errors\":{}");
    println!("\n| direction | packets | max packet B | throughput | verdict lateness p50 / p99 / max µs |");
    println!("|---|---|---|---|---|");
    for (i, name) in ["client → server", "server → client"].iter().enumerate() {
        let (a, z) = (before[i].unwrap_or_default(), after[i].unwrap_or_default());
        println!(
            "| {name} | {} | {} | {} | {} / {} / {} |",
            z.passed - a.passed,
            z.max_packet,
            if i == 0 {
                format!(
                    "{gbit:.3} Gbit/s goodput{}",
                    if errors { "" } else { " (errors!)" }
                )
            } else {
                "(ACKs)".into()
            },
            z.late_p50_us,
            z.late_p99_us,
            z.late_max_us
        );
    }
    Ok(())
}
