//! The link emulator in a real bed: client — router — server, the router's forwarding
//! path fed through NFQUEUE to `splicer-lab emulate`. Generous bounds: calibration figures
//! belong to a calibration command, the tests only guard against gross error.

use std::process::Stdio;

use std::time::Duration;

use splicer_lab::{Bed, Scenario};

const CHAIN: &str = "[[host]]\nname = \"client\"\n[[host]]\nname = \"router\"\nforward = true\n[[host]]\nname = \"server\"\n\
                     [[link]]\na = \"client\"\nb = \"router\"\n[[link]]\na = \"router\"\nb = \"server\"\n";

fn usable() -> bool {
    splicer_testkit::require_root("to create network namespaces")
        && splicer_testkit::require(
            splicer_testkit::have_command("iptables"),
            "iptables (scripts/setup.sh installs it)",
        )
}

/// Builds the bed with one emulated direction each way on the router (scenario
/// `[[emulate]]` entries), and an HTTP server with a 1 MB file.
fn bed(client_to_server: &str, server_to_client: &str) -> (Bed, String, std::path::PathBuf) {
    let scenario = format!(
        "{CHAIN}[[emulate]]\nrouter = \"router\"\nfrom = \"client\"\nto = \"server\"\n{client_to_server}\n\
         [[emulate]]\nrouter = \"router\"\nfrom = \"server\"\nto = \"client\"\n{server_to_client}\n"
    );
    let lab = std::path::Path::new(env!("CARGO_BIN_EXE_splicer-lab"));
    let mut b = Bed::build_with_emulators(Scenario::from_toml(&scenario).unwrap(), lab).unwrap();
    let dir = std::env::temp_dir().join(format!(
        "splab-www-{}-{}",
        std::process::id(),
        client_to_server.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("1m"), vec![7u8; 1_000_000]).unwrap();
    std::fs::write(dir.join("20k"), vec![7u8; 20_000]).unwrap();
    let (url, _) = b.serve_http("server", 8000, Some(&dir)).unwrap();
    b.wait_http("client", &url, Duration::from_secs(20))
        .unwrap();
    (b, url, dir)
}

fn curl(b: &Bed, args: &[&str]) -> String {
    let out = b
        .command("client", "curl")
        .args(["-s", "--max-time", "20"])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn delay_and_rate_are_emulated() {
    if !usable() {
        return;
    }
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // 20 ms each way; 4 Mbit/s from the server to the client.
    let (b, url, dir) = bed("delay_ms = 20", "delay_ms = 20\nrate_bps = 4000000");
    // The TCP handshake takes one round trip: ~40 ms.
    let mut rtts = Vec::new();
    for _ in 0..10 {
        let t: f64 = curl(&b, &["-o", "/dev/null", "-w", "%{time_connect}", &url])
            .parse()
            .unwrap();
        rtts.push(t * 1000.0);
    }
    let mean = rtts.iter().sum::<f64>() / rtts.len() as f64;
    eprintln!("RTT mean {mean:.2} ms (40 ms configured)");
    // No packet crosses before its delay: every handshake takes the configured round trip
    // at least (how close it stays above is `splicer-lab calibrate`'s figure, not a test).
    let min = rtts.iter().copied().fold(f64::MAX, f64::min);
    assert!(
        min >= 39.5,
        "a round trip of {min:.2} ms under 40 ms of delay: {rtts:?}"
    );
    // 1 MB down at 4 Mbit/s: about 2 s, so 3.2–4.1 Mbit/s of goodput.
    let speed: f64 = curl(
        &b,
        &[
            "-o",
            "/dev/null",
            "-w",
            "%{speed_download}",
            &format!("{url}1m"),
        ],
    )
    .parse()
    .unwrap();
    let mbit = speed * 8.0 / 1e6;
    eprintln!("goodput {mbit:.2} Mbit/s (4 Mbit/s cap)");
    // Nothing passes faster than the cap (payload is less than what the link carries).
    assert!(mbit <= 4.0, "{mbit:.2} Mbit/s through a 4 Mbit/s cap");
    drop(b);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn loss_is_recovered_by_tcp_end_to_end() {
    if !usable() {
        return;
    }
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // 2% first loss, 40% loss after a loss, both ways: the transfer still completes, intact.
    let loss = "delay_ms = 5\nloss_p = 0.02\nloss_r = 0.4\nseed = 9";
    let (b, url, dir) = bed(loss, loss);
    let before = splicer_lab::measure::TcpCounters::read(Some(&b.netns("server"))).unwrap();
    let size = curl(
        &b,
        &[
            "-o",
            "/dev/null",
            "-w",
            "%{size_download}",
            &format!("{url}1m"),
        ],
    );
    assert_eq!(size, "1000000");
    let d = splicer_lab::measure::TcpCounters::read(Some(&b.netns("server")))
        .unwrap()
        .since(&before);
    assert!(
        d.get("Tcp.RetransSegs") > 0,
        "losses show as retransmissions: {d:?}"
    );
    drop(b);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn each_client_gets_its_own_cap() {
    if !usable() {
        return;
    }
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // Modem clients of seed 000: 56 kbit/s down each (28 kbit/s up).
    let (b, url, dir) = bed(
        "delay_ms = 5\nper_client_rate_bps = 28000",
        "delay_ms = 5\nper_client_rate_bps = 56000",
    );
    // Two downloads of 20,000 B at once: ~3.1 s each at 56 kbit/s on the wire (framing
    // and headers counted). A shared cap would make each take about twice that.
    let started = std::time::Instant::now();
    let downloads: Vec<_> = (0..2)
        .map(|_| {
            b.command("client", "curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{time_total}",
                    "--max-time",
                    "20",
                ])
                .arg(format!("{url}20k"))
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for d in downloads {
        let out = d.wait_with_output().unwrap();
        let secs: f64 = String::from_utf8_lossy(&out.stdout).parse().unwrap();
        eprintln!("20,000 B at 56 kbit/s per client: {secs:.2} s");
        // Not faster than its own cap: 20,000 B at 56 kbit/s is 2.86 s of payload alone.
        assert!(secs >= 2.6, "{secs:.2} s");
    }
    eprintln!("both done after {:.2} s", started.elapsed().as_secs_f64());
    // Each download had a cap of its own: the emulator held both flows (and the set-up's
    // probes, still remembered for a second) to their own serialisation clocks at once;
    // with only a shared cap it holds none.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let flows = loop {
        let flows = b
            .emulator_stats()
            .iter()
            .flatten()
            .map(|s| s.capped_flows_max)
            .max()
            .unwrap_or(0);
        if flows >= 2 || std::time::Instant::now() >= deadline {
            break flows;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(flows >= 2, "{flows} flows held to their own cap at once");
    drop(b);
    let _ = std::fs::remove_dir_all(dir);
}

static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
