//! `splicer-lab run` end to end, as root: a client — r1 — proxy — server bed with an
//! emulated leg, the lab's origin, Splicer as the proxy under test and s-clients, compared
//! with going direct. Checks the results directory and that nothing is left behind.

mod common;
use common::{ensure_splicer, netns_of, root, run_scenario, successful_run};

const SCENARIO: &str = r#"
[experiment]
name = "smoke"
server = "server"
proxy_syscalls = true
proxy_events = ["context-switches"]
[[host]]
name = "client"
[[host]]
name = "r1"
forward = true
[[host]]
name = "proxy"
forward = true
[[host]]
name = "server"
[[link]]
a = "client"
b = "r1"
[[link]]
a = "r1"
b = "proxy"
[[link]]
a = "proxy"
b = "server"
[[emulate]]
router = "r1"
from = "client"
to = "proxy"
delay_ms = 5
[[emulate]]
router = "r1"
from = "proxy"
to = "client"
delay_ms = 5
[files]
"splicer.toml" = """
[http]
listen = ["{proxy}:3128"]
[acl]
default = "deny"
[[acl.rule]]
action = "allow"
clients = ["10.231.0.0/16"]
"""
[[variant]]
name = "direct"
vars = { via = "direct" }
[[variant]]
name = "splicer"
vars = { via = "http://{proxy}:3128" }
[[process]]
host = "server"
command = ["lab", "origin", "--listen", "{server}:8080"]
wait_for = "{server}:8080"
[[process]]
host = "proxy"
variants = ["splicer"]
role = "proxy"
command = ["splicer", "run", "--config", "{file:splicer.toml}"]
wait_for = "{proxy}:3128"
[[load]]
host = "client"
command = ["lab", "sclient", "--origin", "{server}:8080", "--via", "{via}", "--clients", "20",
           "--size", "2048", "--duration", "4", "--warmup", "1", "--cooldown", "1"]
"#;

#[test]
fn run_compares_variants_and_writes_results() {
    if !root() {
        return;
    }
    ensure_splicer();
    let (dir, runs) = successful_run(SCENARIO, "ok");
    assert_eq!(runs.len(), 2);
    for r in &runs {
        let l = &r.loads[0];
        assert_eq!(l.error_total(), 0, "{}: {:?}", r.variant, l.errors);
        assert!(l.completed > 20, "{}: {} completed", r.variant, l.completed);
        // Every exchange crosses the emulated 10 ms round trip at least twice
        // (handshake, request).
        assert!(l.latency.p50_ms >= 20.0, "{}: {:?}", r.variant, l.latency);
        assert!(r.tcp["server"]["Tcp.OutSegs"] > 0);
        // The emulated links saw the traffic.
        assert!(r.links.iter().all(|k| k.passed > 0), "{:?}", r.links);
    }
    assert_eq!(runs[0].proxy_cpu_s, 0.0, "direct has no proxy process");
    assert!(runs[1].proxy_cpu_s > 0.0, "Splicer's CPU is measured");
    // What the proxy asked of the kernel, counted by perf, and its threads' waits for a
    // CPU (schedstat); none of it for a variant without a proxy process.
    assert!(runs[0].proxy_events.is_empty() && runs[0].proxy_syscalls.is_none());
    assert!(
        runs[1].proxy_syscalls.is_some_and(|n| n > 0),
        "{:?}",
        runs[1]
    );
    assert!(
        runs[1]
            .proxy_events
            .get("context-switches")
            .is_some_and(|n| *n > 0),
        "{:?}",
        runs[1].proxy_events
    );
    assert!(runs[1].proxy_run_wait_s.is_some() && runs[1].machine_switches.is_some());
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(
        md.contains("| direct |") && md.contains("| splicer |"),
        "{md}"
    );
    assert!(
        md.contains("## Events of the proxy") && md.contains("`context-switches`"),
        "{md}"
    );
    // This load is too small for the machine's TCP memory count to be sure to move (it
    // lags by up to a megabyte per CPU: measure::tcp_memory_slack_pages), so only check that
    // the peak is recorded and shown whenever one was seen; the sampler's own test holds
    // enough memory to see it.
    let json = std::fs::read_to_string(dir.join("runs.json")).unwrap();
    assert_eq!(json.matches("\"tcp_mem_peak_pages\"").count(), 2, "{json}");
    assert_eq!(
        md.contains("## TCP memory of the whole machine"),
        runs.iter().any(|r| r.tcp_mem_peak_pages > 0),
        "{md}"
    );
    for f in [
        "latency-cdf.svg",
        "throughput.svg",
        "timeline.csv",
        "scenario.toml",
        "splicer-r0-load0.json",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_failing_load_fails_the_run_and_cleans_up() {
    if !root() {
        return;
    }
    ensure_splicer();
    let bad = SCENARIO
        .replace("\"--clients\", \"20\"", "\"--clients\", \"0\"")
        .replace("name = \"smoke\"", "name = \"bad\"");
    let (out, dir, pid) = run_scenario(&bad, "bad");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("load[0]") && err.contains("--clients"),
        "{err}"
    );
    assert!(
        netns_of(pid).is_empty(),
        "namespaces left: {:?}",
        netns_of(pid)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn help_after_any_command_prints_its_usage_and_succeeds() {
    let lab = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_splicer-lab"))
            .args(args)
            .output()
            .expect("splicer-lab runs")
    };
    for (args, expect) in [
        (&["--help"][..], "relay-bench"),
        (&["relay-bench", "--help"], "--rounds <ROUNDS>"),
        (&["relay-bench", "--help"], "[default: 3]"),
        (&["run", "x.toml", "-h"], "Usage: splicer-lab run"),
    ] {
        let out = lab(args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {:?}", out.status);
        assert!(text.contains(expect), "{args:?}: {text}");
    }
    // A flag a command does not take is an error that names it, before anything runs.
    let out = lab(&["sclient", "--origin", "127.0.0.1:1", "--bogus", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--bogus"), "{err}");
    let out = lab(&["sclient", "--origin", "127.0.0.1:1", "--duration", "1e999"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("seconds, 0 or more"), "{err}");
}
