//! Relay engines in a client — r1 — proxy — r2 — server bed, through Splicer's SOCKS5 front
//! end: bulk transfers both ways at once, checked byte by byte at both ends (each client
//! half-closes while still receiving), and nothing left behind afterwards. `copy` and `pipe`
//! run with two-state loss (1% first loss, 40% after a loss) on both legs, the proxy's TCP
//! recovering each leg's losses. `ipsplice` runs lossless and lossy, the client and the
//! server recovering the losses end to end. For `sockmap`, this kernel's redirect
//! sometimes keeps the last bytes of a stream from the other socket once segments are
//! resent, which happens with and without emulated loss (docs/engines.md), so its tests
//! assert what the engine guarantees: every tunnel either delivers every byte or is reset
//! promptly, never a stall or a wrong byte. The scenarios run one at a time.
//! Needs root (namespaces, eBPF); CI runs as root.

mod common;

use common::{ensure_splicer, root, successful_run};

const CONNS: u64 = 4;
const BYTES: u64 = 24 << 20;

fn scenario(loss: f64, engines: &[&str]) -> String {
    let leg = |router: &str, a: &str, b: &str, seed: u32| {
        let one = |from: &str, to: &str, seed: u32| {
            format!(
                "[[emulate]]\nrouter = \"{router}\"\nfrom = \"{from}\"\nto = \"{to}\"\n\
                 delay_ms = 2\nloss_p = {loss}\nloss_r = 0.4\nseed = {seed}\n"
            )
        };
        one(a, b, seed) + &one(b, a, seed + 1)
    };
    let mut s = String::from("[experiment]\nname = \"engines\"\n");
    for h in ["client", "r1", "proxy", "r2", "server"] {
        let fwd = if h == "client" || h == "server" {
            ""
        } else {
            "forward = true\n"
        };
        s += &format!("[[host]]\nname = \"{h}\"\n{fwd}");
    }
    for (a, b) in [
        ("client", "r1"),
        ("r1", "proxy"),
        ("proxy", "r2"),
        ("r2", "server"),
    ] {
        s += &format!("[[link]]\na = \"{a}\"\nb = \"{b}\"\n");
    }
    s += &leg("r1", "client", "proxy", 11);
    s += &leg("r2", "proxy", "server", 21);
    s += "[files]\n";
    for e in engines {
        s += &format!(
            "\"{e}.toml\" = \"\"\"\n[log]\nformat = \"json\"\n[relay]\nengine = \"{e}\"\n\
             experimental_sockmap = true\n[socks]\nlisten = [\"{{proxy}}:1080\"]\n\
             [[acl.rule]]\naction = \"allow\"\nclients = [\"10.231.0.0/16\"]\n\"\"\"\n"
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

/// The logs of variant `e`'s processes in the first round, concatenated.
fn process_logs(dir: &std::path::Path, e: &str) -> String {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|f| f.ok())
        .filter(|f| {
            f.file_name()
                .to_string_lossy()
                .starts_with(&format!("{e}-r0-process"))
        })
        .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
        .collect()
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
fn resent(r: &splicer_lab::experiment::VariantRun) -> u64 {
    ["client", "proxy", "server"]
        .iter()
        .map(|h| r.tcp[*h]["Tcp.RetransSegs"])
        .sum()
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
    runs: &[splicer_lab::experiment::VariantRun],
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

/// What `sockmap` guarantees where a leg loses packets: every tunnel either carries every
/// byte both ways or is reset promptly with the reset logged, never a stall (the client's
/// timeout) or a wrong byte ("short", "corrupt"). Returns the number reset.
fn check_every_byte_or_reset(
    dir: &std::path::Path,
    r: &splicer_lab::experiment::VariantRun,
) -> u64 {
    let l = &r.loads[0];
    let failed: u64 = l.errors.values().sum();
    assert!(
        l.errors.keys().all(|k| k == "send" || k == "recv")
            && l.first_errors
                .values()
                .all(|m| m.contains("reset") || m.contains("Broken pipe")),
        "{:?} {:?}",
        l.errors,
        l.first_errors
    );
    assert_eq!(l.completed + failed, CONNS);
    assert_eq!(
        l.bytes,
        2 * BYTES * l.completed,
        "completed tunnels carry every byte"
    );
    let log = process_logs(dir, "sockmap");
    let resets = log
        .lines()
        .filter(|l| l.contains("sockmap:") && l.contains("tunnel reset"))
        .count() as u64;
    assert!(
        resets >= failed,
        "{failed} failed, {resets} resets logged:\n{log}"
    );
    failed
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

/// Runs `sockmap` alone with `loss` on both legs and checks its guarantee.
fn sockmap_every_byte_or_reset(tag: &str, loss: f64) {
    let (dir, runs) = successful_run(&scenario(loss, &["sockmap"]), tag);
    let r = &runs[0];
    let failed = check_every_byte_or_reset(&dir, r);
    eprintln!(
        "{tag}: {} of {CONNS} tunnels complete, {failed} reset, {} segments resent, {} \
         packets dropped by full emulator queues",
        r.loads[0].completed,
        resent(r),
        r.links.iter().map(|k| k.overflow).sum::<u64>()
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sockmap_without_emulated_loss_delivers_every_byte_or_resets_never_stalls() {
    if !root() {
        return;
    }
    ensure_splicer();
    let _turn = one_at_a_time();
    // No emulated loss, yet TCP resends here too (10,000 to 17,000 segments a run on the
    // 2-CPU VM, with 0 to 178 packets dropped by full emulator queues), and resent segments
    // are what the kernel's redirect trips on (docs/engines.md): one tunnel of a CI run was
    // reset. So the same guarantee as with loss is all that holds.
    sockmap_every_byte_or_reset("sockmap-lossless", 0.0);
}

#[test]
fn sockmap_through_lossy_legs_delivers_every_byte_or_resets_never_stalls() {
    if !root() {
        return;
    }
    ensure_splicer();
    let _turn = one_at_a_time();
    sockmap_every_byte_or_reset("sockmap-lossy", 0.01);
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
