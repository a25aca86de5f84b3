//! The per-request path's guard (`splicer-lab perf-guard`): the cheapest request a proxy
//! forwards — a 1 KiB response that cannot be cached, on kept-alive connections — through
//! Splicer's forward proxy (cache off) and its edge, beside HAProxy (http mode, `http-reuse
//! always`, `option http-no-delay`) and nginx (`proxy_pass` with upstream `keepalive`), in
//! one interleaved run, printed as ratios to HAProxy. Run it before and after a change to
//! the per-request path and keep the change only if the ratios did not fall.
//!
//! By default the origin is nginx sending a static file and the clients are `wrk` (50
//! connections, one thread): the bed's own work per request is then as small as it gets on
//! two cores, so more of the machine is left to the proxies (`--origin lab`, `--generator
//! sclient` give the lab's).
//!
//! Two more variants run only when `--only` names them: `splicer-forward-shared` and
//! `splicer-edge-shared`, the same on the shared work-stealing runtime (`[limits] threads
//! = "shared"`) instead of the default connection threads.
//!
//! With `--bulk N` every variant is a mixed load: beside the small requests, N more
//! clients download [`BULK`]-byte answers over and over through the same proxy, each on
//! its own kept-alive connection. It asks what a proxy that keeps each connection on one
//! thread (HAProxy; Splicer's connection threads) does to the small requests' rate and
//! tail when a thread also carries a large body, against a runtime whose threads share
//! the work.

use std::fmt::Write as _;

use crate::bench::bench_variant;
use crate::experiment::run::VariantRun;
use crate::experiment::stats::{paired_ratios, Interval, Level, Verdict};
use crate::experiment::summary::Spread;

/// What to run.
pub type Params = crate::bench::HttpBench;

/// The guard's defaults: 3 rounds of 10 s, 50 wrk connections to an nginx origin.
pub fn defaults() -> Params {
    Params {
        seconds: 10,
        origin: crate::bench::Origin::Nginx,
        generator: crate::bench::Generator::Wrk,
        ..Params::default()
    }
}

/// The response size, bytes.
pub const SIZE: u64 = 1024;

/// The bulk clients' answer size (`--bulk`), bytes.
pub const BULK: u64 = 1 << 20;

/// A variant's name, the command on the proxy host, and how the clients reach the origin
/// (`--via`, `--origin`).
type Proxy = (
    &'static str,
    Option<&'static [&'static str]>,
    &'static str,
    &'static str,
);

const PROXIES: [Proxy; 7] = [
    ("direct", None, "direct", "{server}:8080"),
    (
        "haproxy",
        Some(&["haproxy", "-db", "-f", "{file:haproxy.cfg}"]),
        "direct",
        "{proxy}:9000",
    ),
    (
        "nginx",
        Some(&["nginx", "-c", "{file:nginx.conf}", "-e", "stderr"]),
        "direct",
        "{proxy}:9080",
    ),
    (
        "splicer-forward",
        Some(&["splicer", "run", "--config", "{file:forward.toml}"]),
        "http://{proxy}:3128",
        "{server}:8080",
    ),
    (
        "splicer-edge",
        Some(&["splicer", "run", "--config", "{file:edge.toml}"]),
        "direct",
        "{proxy}:8080",
    ),
    (
        "splicer-forward-shared",
        Some(&["splicer", "run", "--config", "{file:forward-shared.toml}"]),
        "http://{proxy}:3128",
        "{server}:8080",
    ),
    (
        "splicer-edge-shared",
        Some(&["splicer", "run", "--config", "{file:edge-shared.toml}"]),
        "direct",
        "{proxy}:8080",
    ),
];

/// The variants that run only when `--only` names them.
const OPT_IN: [&str; 2] = ["splicer-forward-shared", "splicer-edge-shared"];

/// The proxies' files: each as edge-bench and cache-bench run it, HAProxy with
/// `http-no-delay` (small responses sent at once), the forward proxy without its cache.
fn files() -> String {
    use crate::bench::files;
    let no_cache = "[cache]\nenabled = false\n";
    let shared = "[limits]\nthreads = \"shared\"\n";
    [
        "[files]\n".to_string(),
        files::splicer_forward("forward.toml", "", "", no_cache),
        files::splicer_edge("edge.toml", "", ""),
        files::splicer_forward("forward-shared.toml", "", "", &[no_cache, shared].concat()),
        files::splicer_edge("edge-shared.toml", "", shared),
        files::haproxy("haproxy.cfg", 9000, &["http-no-delay"]),
        files::nginx_reverse("nginx.conf", "guard", 9080, "", ""),
    ]
    .concat()
}

/// The guard's scenario: every proxy's baseline is HAProxy (HAProxy's and the direct
/// load's their own), so the summary's ratios are to HAProxy.
pub fn scenario(p: &Params) -> String {
    let mut s = crate::bench::three_hosts("perf-guard", p.rounds);
    s += &files();
    for (name, command, via, origin) in PROXIES {
        let wanted = if OPT_IN.contains(&name) {
            p.only.iter().any(|o| o == name)
        } else {
            Params::wanted(&p.only, name)
        };
        if !(matches!(name, "direct" | "haproxy") || wanted) {
            continue;
        }
        let cmd = p.client(origin, via, SIZE, &[]);
        let base = if name == "direct" {
            "direct"
        } else {
            "haproxy"
        };
        // A proxy listens where the clients connect: the forward proxy at `--via`.
        let listen = via.strip_prefix("http://").unwrap_or(origin);
        bench_variant(&mut s, name, base, command.map(|c| (c, listen)), &cmd);
        if p.bulk > 0 {
            // The variant's second load; the table reads the small load as the first.
            let bulk = Params {
                clients: p.bulk,
                ..p.clone()
            };
            let cmd = bulk.client(origin, via, BULK, &[]);
            writeln!(
                s,
                "[[load]]\nhost = \"client\"\nvariants = [\"{name}\"]\ncommand = {cmd:?}"
            )
            .expect("a String takes any write");
        }
    }
    let sizes: &[u64] = if p.bulk > 0 { &[SIZE, BULK] } else { &[SIZE] };
    s += &p.origin_process(sizes);
    s
}

/// The printed table: per variant, medians over rounds (min–max) of the requests a second,
/// the machine's and the proxy's CPU per request, p99, and the origin's connections
/// accepted; and the ratios to HAProxy of the rate and the machine's CPU per request.
pub fn table(runs: &[VariantRun]) -> String {
    let mut names: Vec<&str> = vec![];
    for r in runs {
        if !names.contains(&r.variant.as_str()) {
            names.push(&r.variant);
        }
    }
    let of = |v: &str, f: &dyn Fn(&VariantRun) -> f64| spread_of(runs, v, f);
    // The small requests are each variant's first load; a mixed load's bulk clients its
    // second.
    let rate = |r: &VariantRun| r.loads.first().map_or(f64::NAN, |l| l.per_second);
    let p99 = |r: &VariantRun| r.loads.first().map_or(f64::NAN, |l| l.latency.p99_ms);
    if runs.iter().any(|r| r.loads.len() > 1) {
        return mixed_table(runs, &names, &rate, &p99);
    }
    let opens = |r: &VariantRun| {
        r.tcp
            .get("server")
            .and_then(|c| c.get("Tcp.PassiveOpens"))
            .map_or(f64::NAN, |n| *n as f64)
    };
    let base_rate = of("haproxy", &rate).median;
    let base_cpu = of("haproxy", &|r| r.machine_ms_per_op()).median;
    let mut t = String::from(
        "| variant | req/s | × HAProxy | machine ms/req | × HAProxy | proxy ms/req | p99 ms | \
         origin connections |\n|---|---|---|---|---|---|---|---|\n",
    );
    for v in names {
        let r = of(v, &rate);
        let m = of(v, &|r| r.machine_ms_per_op());
        let proxy = if v == "direct" {
            "–".to_string()
        } else {
            of(v, &|r| r.proxy_ms_per_op()).show(4)
        };
        writeln!(
            t,
            "| {v} | {} | {} | {} | {} | {proxy} | {} | {} |",
            r.show(0),
            ratio_to(v, r.median, base_rate),
            m.show(4),
            ratio_to(v, m.median, base_cpu),
            of(v, &p99).show(2),
            of(v, &opens).show(0),
        )
        .expect("a String takes any write");
    }
    t
}

/// What the rounds carry of the guard's two claims for each proxy: a rate at least
/// HAProxy's and a machine CPU per request at most its. Per-round ratios (a round's
/// variants ran minutes apart on the same machine, where the machine's rate drifts by
/// more between rounds), their mean and 95% interval (Student's t), and the verdict:
/// `holds` when the whole interval is on the claim's side of 1, `in direction` when only
/// the mean is. Five rounds on the 2-vCPU bed did not resolve a 5% difference; eight did
/// (docs/benchmarks.md, 2026-12-07). Nothing for a mixed load (its CPU is the bulk's too).
pub fn verdicts(runs: &[VariantRun]) -> String {
    if runs.iter().any(|r| r.loads.len() > 1) {
        return String::new();
    }
    let rate = |r: &VariantRun| r.loads.first().map_or(f64::NAN, |l| l.per_second);
    let cpu = |r: &VariantRun| r.machine_ms_per_op();
    let by = |v: &str, f: &dyn Fn(&VariantRun) -> f64| -> Vec<(usize, f64)> {
        runs.iter()
            .filter(|r| r.variant == v)
            .map(|r| (r.round, f(r)))
            .collect()
    };
    let (base_rate, base_cpu) = (by("haproxy", &rate), by("haproxy", &cpu));
    if base_rate.is_empty() {
        return String::new();
    }
    let mut names: Vec<&str> = vec![];
    for r in runs {
        if !names.contains(&r.variant.as_str()) && !["haproxy", "direct"].contains(&&*r.variant) {
            names.push(&r.variant);
        }
    }
    let mut t = String::from(
        "| variant | req/s × HAProxy, per round (95%) | rate ≥ HAProxy's | machine CPU/req × \
         HAProxy (95%) | CPU ≤ HAProxy's |\n|---|---|---|---|---|\n",
    );
    for v in names {
        let r = Interval::of(&paired_ratios(&by(v, &rate), &base_rate), Level::P95);
        let m = Interval::of(&paired_ratios(&by(v, &cpu), &base_cpu), Level::P95);
        let at_most = match m.known() {
            false => Verdict::Unknown,
            true if m.hi() < 1.0 => Verdict::Holds,
            true if m.mean < 1.0 => Verdict::InDirection,
            true => Verdict::Not,
        };
        writeln!(
            t,
            "| {v} | {} | {} | {} | {} |",
            r.show(3),
            Verdict::above(r, 1.0).word(),
            m.show(3),
            at_most.word()
        )
        .expect("a String takes any write");
    }
    t
}

/// One figure of one variant over its rounds.
fn spread_of(runs: &[VariantRun], variant: &str, f: &dyn Fn(&VariantRun) -> f64) -> Spread {
    Spread::of(
        runs.iter()
            .filter(|r| r.variant == variant)
            .map(f)
            .collect(),
    )
}

/// `x` as a multiple of HAProxy's `base`, "–" for the direct path (no proxy to compare)
/// or where HAProxy gave no figure.
fn ratio_to(variant: &str, x: f64, base: f64) -> String {
    if variant == "direct" || base.is_nan() || base <= 0.0 {
        "–".to_string()
    } else {
        format!("{:.2}", x / base)
    }
}

/// A mixed load's table (`--bulk`): the small requests' rate and tail beside the bulk
/// clients' throughput, and the CPU of the whole run (a CPU figure per small request would
/// charge them the bulk answers' work).
fn mixed_table(
    runs: &[VariantRun],
    names: &[&str],
    rate: &dyn Fn(&VariantRun) -> f64,
    p99: &dyn Fn(&VariantRun) -> f64,
) -> String {
    let of = |v: &str, f: &dyn Fn(&VariantRun) -> f64| spread_of(runs, v, f);
    let p50 = |r: &VariantRun| r.loads.first().map_or(f64::NAN, |l| l.latency.p50_ms);
    let bulk = |r: &VariantRun| r.loads.get(1).map_or(f64::NAN, |l| l.mbit_per_second);
    let cpu = |r: &VariantRun| r.machine_cpu_s / r.wall_s.max(1e-9) * 100.0;
    let proxy = |r: &VariantRun| r.proxy_cpu_s / r.wall_s.max(1e-9) * 100.0;
    let base = |f: &dyn Fn(&VariantRun) -> f64| of("haproxy", f).median;
    let mut t = String::from(
        "| variant | req/s | × HAProxy | p50 ms | p99 ms | × HAProxy | bulk Mbit/s | × HAProxy \
         | machine CPU % | proxy CPU % |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for &v in names {
        let (r, l, b) = (of(v, rate), of(v, p99), of(v, &bulk));
        let proxy = if v == "direct" {
            "–".to_string()
        } else {
            of(v, &proxy).show(0)
        };
        writeln!(
            t,
            "| {v} | {} | {} | {} | {} | {} | {} | {} | {} | {proxy} |",
            r.show(0),
            ratio_to(v, r.median, base(rate)),
            of(v, &p50).show(2),
            l.show(2),
            ratio_to(v, l.median, base(p99)),
            b.show(0),
            ratio_to(v, b.median, base(&bulk)),
            of(v, &cpu).show(0),
        )
        .expect("a String takes any write");
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_compares_every_proxy_with_haproxy() {
        let p = defaults();
        let text = scenario(&p);
        let names = crate::bench::checked_variants(&text);
        assert_eq!(
            names,
            [
                "direct",
                "haproxy",
                "nginx",
                "splicer-forward",
                "splicer-edge"
            ]
        );
        assert!(text.contains("baseline = \"haproxy\""));
        assert!(text.contains("option http-no-delay") && text.contains("enabled = false"));
        assert!(text.contains("\"lab\", \"wrk\"") && text.contains("\"nginx-origin\""));
        assert!(!text.contains("--cooldown"), "wrk has no cool-down");
        assert!(text.contains("{file:forward.toml}\"]\nwait_for = \"{proxy}:3128\""));
        let lab = Params {
            origin: crate::bench::Origin::Lab,
            generator: crate::bench::Generator::Sclient,
            only: vec!["splicer-edge".into()],
            ..p
        };
        let text = scenario(&lab);
        let names = crate::bench::checked_variants(&text);
        assert_eq!(names, ["direct", "haproxy", "splicer-edge"]);
        assert!(text.contains("\"lab\", \"origin\"") && text.contains("\"sclient\""));
        // The shared runtime's variants run when named, with their own files.
        let shared = Params {
            only: vec![
                "splicer-forward-shared".into(),
                "splicer-edge-shared".into(),
            ],
            ..defaults()
        };
        let text = scenario(&shared);
        let names = crate::bench::checked_variants(&text);
        assert_eq!(
            names,
            [
                "direct",
                "haproxy",
                "splicer-forward-shared",
                "splicer-edge-shared"
            ]
        );
        assert!(text.contains("{file:forward-shared.toml}\"]\nwait_for = \"{proxy}:3128\""));
        assert!(text.contains("{file:edge-shared.toml}\"]\nwait_for = \"{proxy}:8080\""));
        let table: toml::Table = toml::from_str(&text).unwrap();
        let file = |n: &str| -> toml::Table {
            toml::from_str(table["files"][n].as_str().unwrap()).unwrap()
        };
        for n in ["forward-shared.toml", "edge-shared.toml"] {
            assert_eq!(file(n)["limits"]["threads"].as_str(), Some("shared"), "{n}");
        }
        assert_eq!(
            file("forward-shared.toml")["cache"]["enabled"].as_bool(),
            Some(false)
        );
        assert!(!file("forward.toml").contains_key("limits"));
    }

    #[test]
    fn a_mixed_load_adds_bulk_clients_to_every_variant() {
        let p = Params {
            bulk: 4,
            only: vec!["splicer-edge".into()],
            ..defaults()
        };
        let text = scenario(&p);
        assert_eq!(
            crate::bench::checked_variants(&text),
            ["direct", "haproxy", "splicer-edge"]
        );
        let s = crate::bed::scenario::Scenario::from_toml(&text).unwrap();
        for v in ["direct", "haproxy", "splicer-edge"] {
            let loads: Vec<&Vec<String>> = s
                .loads
                .iter()
                .filter(|l| l.variants.iter().any(|x| x == v))
                .map(|l| &l.command)
                .collect();
            assert_eq!(loads.len(), 2, "{v}");
            let flag = |cmd: &[String], f: &str| {
                let i = cmd.iter().position(|x| x == f).unwrap();
                cmd[i + 1].clone()
            };
            // The small requests first (the table reads them there), the bulk second.
            assert_eq!(flag(loads[0], "--size"), "1024", "{v}");
            assert_eq!(flag(loads[0], "--clients"), "50", "{v}");
            assert_eq!(flag(loads[1], "--size"), "1048576", "{v}");
            assert_eq!(flag(loads[1], "--clients"), "4", "{v}");
            assert_eq!(flag(loads[0], "--via"), flag(loads[1], "--via"), "{v}");
        }
        // nginx serves both sizes.
        assert!(text.contains("\"--sizes\", \"1024,1048576\""), "{text}");
        assert!(!scenario(&defaults()).contains("1048576"));
    }

    #[test]
    fn a_mixed_table_reads_the_small_load_and_the_bulk_apart() {
        let mixed = |variant: &str, rate: f64, p99: f64, mbit: f64| {
            let mut r = run(variant, rate, 10.0, 50);
            let mut b = r.loads[0].clone();
            b.per_second = 40.0;
            b.mbit_per_second = mbit;
            r.loads[0].latency.p99_ms = p99;
            r.loads.push(b);
            r
        };
        let runs = vec![
            mixed("haproxy", 20000.0, 4.0, 3000.0),
            mixed("splicer-edge", 25000.0, 6.0, 4500.0),
        ];
        let t = table(&runs);
        // The rate is the small load's alone (not 25,040), p99 and bulk as ratios.
        assert!(
            t.contains("| splicer-edge | 25000 | 1.25 | 1.00 | 6.00 | 1.50 | 4500 | 1.50 | 100 |"),
            "{t}"
        );
        assert!(t.contains("| haproxy | 20000 | 1.00 |"), "{t}");
    }

    fn run(variant: &str, rate: f64, machine_cpu_s: f64, opens: u64) -> VariantRun {
        in_round(0, variant, rate, machine_cpu_s, opens)
    }

    fn in_round(round: usize, variant: &str, rate: f64, cpu: f64, opens: u64) -> VariantRun {
        let machine_cpu_s = cpu;
        let json = serde_json::json!({
            "variant": variant, "round": round, "wall_s": 10.0, "proxy_cpu_s": 1.0,
            "machine_cpu_s": machine_cpu_s, "emulator_cpu_s": 0.0, "operations": 100000,
            "bytes": 0, "links": [], "load_ids": [0],
            "tcp": { "server": { "Tcp.PassiveOpens": opens } },
            "loads": [{
                "generator": "wrk", "params": null, "measured_s": 8.0, "completed": 1,
                "bytes": 1, "per_second": rate, "mbit_per_second": 0.0, "errors": {},
                "latency": { "n": 1, "mean_ms": 1.0, "p50_ms": 1.0, "p95_ms": 2.0,
                             "p99_ms": 3.0, "max_ms": 4.0, "cv": 0.1 },
                "extra": null, "timeline": [], "cdf": []
            }]
        });
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_table_gives_ratios_to_haproxy_s_medians() {
        let runs = vec![
            run("haproxy", 40000.0, 4.0, 50),
            run("splicer-edge", 30000.0, 6.0, 4),
            run("haproxy", 44000.0, 5.0, 50),
            run("splicer-edge", 34000.0, 5.0, 4),
            run("haproxy", 42000.0, 4.5, 50),
            run("splicer-edge", 31500.0, 5.4, 4),
        ];
        let t = table(&runs);
        // Medians: HAProxy 42,000 req/s at 0.045 ms; the edge 31,500 at 0.054 ms.
        assert!(
            t.contains(
                "| splicer-edge | 31500 (30000–34000) | 0.75 | 0.0540 (0.0500–0.0600) | 1.20 |"
            ),
            "{t}"
        );
        assert!(
            t.contains("| haproxy | 42000 (40000–44000) | 1.00 |"),
            "{t}"
        );
        assert!(t.contains("| 4 |\n"), "{t}");
    }

    #[test]
    fn the_verdicts_say_what_the_rounds_carry() {
        // Three rounds: the edge faster in each (ratios 1.10, 1.12, 1.08: holds) at a CPU
        // per request below HAProxy's in two and above in one (mean below 1, interval
        // reaching above: in direction); the forward proxy slower in each (not).
        let mut runs = vec![];
        for (round, (h, e, f)) in [
            (40000.0, 44000.0, 36000.0),
            (42000.0, 47040.0, 37800.0),
            (41000.0, 44280.0, 36900.0),
        ]
        .iter()
        .enumerate()
        {
            let cpu = [(5.0, 4.5), (5.0, 4.6), (5.0, 5.2)][round];
            runs.push(in_round(round, "haproxy", *h, cpu.0, 50));
            runs.push(in_round(round, "splicer-edge", *e, cpu.1, 4));
            runs.push(in_round(round, "splicer-forward", *f, 5.5, 4));
        }
        let t = verdicts(&runs);
        assert!(t.contains("| splicer-edge | 1.100 ± "), "{t}");
        let edge = t.lines().find(|l| l.starts_with("| splicer-edge")).unwrap();
        assert!(
            edge.contains("| holds |") && edge.ends_with("| in direction |"),
            "{t}"
        );
        let fwd = t
            .lines()
            .find(|l| l.starts_with("| splicer-forward"))
            .unwrap();
        assert!(
            fwd.contains("| 0.900 ± 0.000 | not |") && fwd.ends_with("| not |"),
            "{t}"
        );
        assert!(!t.contains("| haproxy |"), "{t}");
        // Without HAProxy there is nothing to compare with.
        runs.retain(|r| r.variant != "haproxy");
        assert!(verdicts(&runs).is_empty());
    }
}
