//! Relay engines in a client — r1 — proxy — r2 — server bed, through Splicer's SOCKS5 front
//! end: bulk transfers both ways at once, checked byte by byte at both ends (each client
//! half-closes while still receiving), and nothing left behind afterwards. `copy` and `pipe`
//! run with two-state loss (1% first loss, 40% after a loss) on both legs, the proxy's TCP
//! recovering each leg's losses. `ipsplice` and `sockmap` run lossless and lossy; with
//! `ipsplice` the client and the server recover the losses end to end, with `sockmap` the
//! proxy's TCP does, and its program must have cut partly overlapping retransmissions
//! (docs/engines.md). The scenarios run one at a time.
//! Needs root (namespaces, eBPF); CI runs as root.

mod common;

use common::{ensure_splicer, lossy_bed, process_logs, root, successful_run};

const CONNS: u64 = 4;
const BYTES: u64 = 24 << 20;

fn scenario(loss: f64, engines: &[&str]) -> String {
    let mut s = lossy_bed("engines", loss);
    s += "[files]\n";
    for e in engines {
        s += &format!(
            "\"{e}.toml\" = \"\"\"\n[log]\nformat = \"json\"\n[relay]\nengine = \"{e}\"\n\
             [socks]\nlisten = [\"{{proxy}}:1080\"]\n\
             [acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"10.231.0.0/16\"]\n\"\"\"\n"
        );
    }
    for e in engines {
        s += &format!("[[variant]]\nname = \"{e}\"\n");
        s += &format!(
            "[[process]]\nhost = \"proxy\"\nrole = \"proxy\"\nvariants = [\"{e}\"]\n\
             command = [\"splicer\", \"run\", \"--config\", \"{{file:{e}.toml}}\"]\n\
             wait_for = \"{{proxy}}:1080\"\n"
        );
    }
    s += "[[process]]\nhost = \"server\"\n\
          command = [\"lab\", \"loadserver\", \"--listen\", \"{server}:7000\"]\n\
          wait_for = \"{server}:7000\"\n";
    s += &format!(
        "[[load]]\nhost = \"client\"\ncommand = [\"lab\", \"loadclient\", \"--sink\", \
         \"{{server}}:7000\", \"--via\", \"socks5://{{proxy}}:1080\", \"--conns\", \"{CONNS}\", \
         \"--bytes\", \"{BYTES}\", \"--both-ways\", \"--timeout\", \"120\"]\n"
    );
    s
}

/// The bulk scenarios run one at a time, each with the machine to itself as a measurement
/// would have it: on two CPUs, concurrent ones compete with each other's emulators (in the
/// CI run where the four ran at once, a `sockmap` tunnel was reset on the legs without
/// emulated loss).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Segments the client, the proxy and the server resent during a run.
fn resent(r: &splicer_lab::experiment::run::VariantRun) -> u64 {
    ["client", "proxy", "server"]
        .iter()
        .map(|h| r.tcp[*h]["Tcp.RetransSegs"])
        .sum()
}

/// The `sockmap` program's trim counts in the proxy's last counters line: no cut may have
/// failed. How many skbs needed one (partly overlapping retransmissions) is printed, not
/// asserted: 1 to 922 in lossy runs on the 2-CPU VM, often 0 without loss, so a bound would
/// be a guess (the loopback test in splicer-bpf makes one cut deterministically).
fn check_trims(log: &str) {
    let line = log
        .lines()
        .rfind(|l| l.contains("relay counters"))
        .unwrap_or_else(|| panic!("no counters line in\n{log}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let trimmed = v["sockmap_trimmed"].as_str().unwrap_or_default();
    let n: Vec<u64> = trimmed
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    // skbs cut, bytes cut, failed cuts, bare FINs dropped.
    let [_skbs, _bytes, failed, _bare_fins] = n[..] else {
        panic!("sockmap_trimmed: {trimmed:?}");
    };
    assert_eq!(failed, 0, "{trimmed}");
    eprintln!("sockmap trims: {trimmed}");
}

/// Runs the scenario with `splicer-lab run` and checks every variant.
fn run_and_check(tag: &str, loss: f64, engines: &[&str]) {
    let (dir, runs) = successful_run(&scenario(loss, engines), tag);
    check_every_byte(&dir, &runs, tag, loss, engines);
}

/// Every tunnel of every variant carried every byte both ways, losses (if any) were resent
/// by whom the engine says, and each access line names its engine.
fn check_every_byte(
    dir: &std::path::Path,
    runs: &[splicer_lab::experiment::run::VariantRun],
    tag: &str,
    loss: f64,
    engines: &[&str],
) {
    assert_eq!(runs.len(), engines.len());
    for r in runs {
        let l = &r.loads[0];
        assert_eq!(
            l.error_total(),
            0,
            "{}: {:?} {:?}",
            r.variant,
            l.errors,
            l.first_errors
        );
        // Both ways: what each connection sent and what it got back.
        assert_eq!(
            (l.completed, l.bytes),
            (CONNS, 2 * CONNS * BYTES),
            "{}",
            r.variant
        );
        if loss > 0.0 {
            // The emulators dropped packets on both legs, and the proxy's TCP resent its share.
            assert!(
                r.links.iter().all(|k| k.lost > 0),
                "{}: {:?}",
                r.variant,
                r.links
            );
            // Who resends: the proxy's TCP for the engines that terminate both legs, the
            // endpoints for ipsplice (end-to-end TCP; the proxy only forwards).
            let hosts: &[&str] = if r.variant == "ipsplice" {
                &["client", "server"]
            } else {
                &["proxy"]
            };
            for h in hosts {
                let retrans = r.tcp[*h]["Tcp.RetransSegs"];
                assert!(retrans > 0, "{} {h}: {:?}", r.variant, r.tcp[*h]);
            }
        }
        eprintln!(
            "{tag} {}: {:.0} Mbit/s, proxy {:.2} CPU s, losses {:?}, {} segments resent",
            r.variant,
            l.extra["gbit_per_second"].as_f64().unwrap_or(0.0) * 1000.0,
            r.proxy_cpu_s,
            r.links.iter().map(|k| k.lost).collect::<Vec<_>>(),
            resent(r)
        );
    }
    // Each tunnel's access line names its variant's engine.
    for e in engines {
        let log = process_logs(dir, e);
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("\"front\":\"socks\"") && l.contains("\"method\":\"CONNECT\""))
            .collect();
        assert_eq!(lines.len() as u64, CONNS, "{e}: access lines in\n{log}");
        let engine = format!("\"engine\":\"{e}\"");
        assert!(lines.iter().all(|l| l.contains(&engine)), "{e}: {lines:?}");
        if *e == "sockmap" {
            check_trims(&log);
        }
        if *e == "ipsplice" {
            // Each client waited for its SOCKS reply before sending: every tunnel was
            // spliced before the reply, so none of its bytes went through user space.
            let early = format!("({CONNS} before the reply)");
            assert!(
                log.lines()
                    .any(|l| l.contains("relay counters") && l.contains(&early)),
                "{e}: no counters line with {early} in\n{log}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn copy_and_pipe_carry_bulk_both_ways_through_lossy_legs() {
    if !root() {
        return;
    }
    ensure_splicer();
    let _turn = one_at_a_time();
    run_and_check("lossy", 0.01, &["copy", "pipe"]);
}

#[test]
fn sockmap_carries_bulk_both_ways_on_lossless_and_lossy_legs() {
    if !root() {
        return;
    }
    ensure_splicer();
    let _turn = one_at_a_time();
    // Without emulated loss TCP still resends thousands of segments a run here (full
    // emulator queues, late timers), so both runs meet partly overlapping retransmissions.
    run_and_check("sockmap-lossless", 0.0, &["sockmap"]);
    run_and_check("sockmap-lossy", 0.01, &["sockmap"]);
}

#[test]
fn ipsplice_carries_bulk_both_ways_on_lossless_and_lossy_legs() {
    if !root() {
        return;
    }
    ensure_splicer();
    let _turn = one_at_a_time();
    run_and_check("ipsplice-lossless", 0.0, &["ipsplice"]);
    run_and_check("ipsplice-lossy", 0.01, &["ipsplice"]);
}
