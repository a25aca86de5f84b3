//! `splicer-lab reproduce` end to end on its tiny grids, as root: the runner builds the
//! experiments' beds, runs every point, writes the report, the plots and the raw results,
//! and leaves no namespace behind. The figures of a tiny grid mean nothing; what is checked
//! is that each part of the machinery did its job.

mod common;
use common::{ensure_splicer, lab, namespaces, root};

use std::path::Path;
use std::process::Command;

fn reproduce(name: &str, dir: &Path) -> String {
    let out = Command::new(lab())
        .args(["reproduce", name, "--tiny", "--out"])
        .arg(dir.join("docs"))
        // The runs' scratch results go to ./results.
        .current_dir(dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name}: {err}");
    // A progress line before every run, with how long the rest will take.
    assert!(err.contains("[1/") && err.contains("left)"), "{err}");
    std::fs::read_to_string(dir.join("docs").join(format!("{name}.md"))).unwrap()
}

/// Runs the tiny grid of `name` one part at a time (`--part`), checks that the report
/// cannot be written before the last part ran, then writes it (`--from`); returns it.
fn reproduce_in_parts(name: &str, parts: &[&str], dir: &Path) -> String {
    let docs = dir.join("docs");
    let into = docs.join(format!("{name}-parts"));
    let lab_in = |args: &[&str]| {
        Command::new(lab())
            .args(["reproduce", name, "--tiny", "--out"])
            .arg(&docs)
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap()
    };
    for (i, part) in parts.iter().enumerate() {
        let out = lab_in(&["--part", part]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name} part {part}: {err}");
        assert!(into.join(part).join("ran.json").is_file(), "{err}");
        if i + 1 < parts.len() {
            assert!(err.contains("parts still to run"), "{err}");
            let early = lab_in(&["--from", &into.to_string_lossy()]);
            let e = String::from_utf8_lossy(&early.stderr);
            assert!(!early.status.success() && e.contains("have not run"), "{e}");
        }
    }
    let again = lab_in(&["--part", parts[0]]);
    assert!(!again.status.success(), "a part runs once into a directory");
    let out = lab_in(&["--from", &into.to_string_lossy()]);
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(docs.join(format!("{name}.md"))).unwrap();
    assert!(md.contains("they ran part by part"), "{md}");
    for part in parts {
        assert!(
            md.contains(&format!(
                "part `{part}` with `splicer-lab reproduce {name} --tiny"
            )),
            "{md}"
        );
    }
    md
}

fn svg(path: &Path) {
    let s = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        s.starts_with("<svg") && s.len() > 2000,
        "{}",
        path.display()
    );
}

#[test]
fn the_tiny_grids_run_end_to_end() {
    if !root() {
        return;
    }
    ensure_splicer();
    let list = Command::new(lab())
        .args(["reproduce", "--list"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for name in [
        "maltz-throughput",
        "maltz-latency",
        "rosu-sweep",
        "rosu-forwarding",
        "rosu-modem",
        "kong",
        "panteleenko",
        "pathak-latency",
        "pathak-loss",
        "pathak-windows",
        "pathak-stress",
    ] {
        assert!(list.contains(name), "{list}");
    }
    let unknown = Command::new(lab())
        .args(["reproduce", "maltz"])
        .output()
        .unwrap();
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("--list"));
    // A list does not run a part: asking for both is an error, not a silent list.
    let both = Command::new(lab())
        .args(["reproduce", "--list", "--part", "loss1-sack-off"])
        .output()
        .unwrap();
    assert!(!both.status.success());
    assert!(String::from_utf8_lossy(&both.stderr).contains("--part"));

    let dir = std::env::temp_dir().join(format!("splab-reproduce-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let before = namespaces();

    // Seed 003's forwarding latency: two parts, captures at the proxy, Table 1 and Fig 12.
    let md = reproduce("maltz-latency", &dir);
    let data = dir.join("docs/maltz-latency");
    for part in [
        "paper-buffers",
        "default-buffers",
        "paper-buffers-cpu-bound",
    ] {
        assert!(md.contains(&format!("## Table 1, {part}")), "{md}");
        svg(&data.join(format!("fig12-{part}.svg")));
        let lat: Vec<serde_json::Value> = serde_json::from_str(
            &std::fs::read_to_string(data.join(format!("{part}-latency.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(lat.len(), 5, "one run per relay");
        for run in &lat {
            let (relay, l) = (&run["relay"], &run["latency"]);
            assert!(run["failed"].is_null(), "{run}");
            // Every byte of the transfer matched across the two captures. (Bytes lost on
            // the client's link and retransmitted once later bytes had arrived went
            // unmatched until 2026-12-04: up to 2% of a run under load.)
            let (bytes, unmatched) = (
                l["bytes"].as_u64().unwrap(),
                l["unmatched_bytes"].as_u64().unwrap(),
            );
            assert!(bytes >= 2u64 << 20 && unmatched == 0, "{relay}: {l}");
            assert!(l["mean_ms"].as_f64().unwrap() > 0.0, "{relay}: {l}");
        }
        // The captures are read, then removed (they are large).
        let left: Vec<_> = std::fs::read_dir(dir.join("results"))
            .unwrap()
            .flat_map(|d| std::fs::read_dir(d.unwrap().path().join(part)).unwrap())
            .filter(|f| f.as_ref().unwrap().path().extension() == Some("pcap".as_ref()))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
    assert!(
        md.contains("| paper-buffers | mean, copy (SOCKS), ms | 3.2273 |"),
        "{md}"
    );
    assert!(md.contains("Linux ") && md.contains("splicer-lab reproduce maltz-latency --tiny"));
    assert!(md.contains("003-5 ipsplice's mean / forwarding's"), "{md}");
    // The captures are gone; the figures read from them write the report again.
    render_again("maltz-latency", &dir.join("docs"), &dir.join("again"));

    // Seed 003's throughput: the grid's points, the budget, the 1 Gbit/s wire.
    let md = reproduce("maltz-throughput", &dir);
    let data = dir.join("docs/maltz-throughput");
    svg(&data.join("fig9.svg"));
    svg(&data.join("fig10.svg"));
    let csv = std::fs::read_to_string(data.join("points.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 2 * 5, "{csv}");
    for r in &rows {
        let mbit: f64 = r[3].parse().unwrap();
        // Data moved, and no faster than the links' tbf lets it (a bare veth does 10+ Gbit/s).
        assert!(mbit > 1.0 && mbit < 1100.0, "{r:?}");
        if r[0] != "forward" {
            let pct: f64 = r[4].parse().unwrap();
            assert!(pct <= 10.0 * 1.3, "Splicer over its budget: {r:?}");
        }
    }
    assert!(md.contains("## Fig 9: throughput, Mbit/s"), "{md}");
    assert!(data.join("bulk-runs.json").exists() && data.join("bulk-scenario.toml").exists());
    assert!(md.contains("003-1 throughput, ipsplice / relay"), "{md}");
    render_again("maltz-throughput", &dir.join("docs"), &dir.join("again"));

    seed_000(&dir);
    seed_001(&dir);
    seed_002(&dir);
    seed_004(&dir);

    assert_eq!(namespaces(), before, "namespaces left behind");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Seed 001's hits beside spliced requests: every variant ran with both loads and no
/// error; the figures, the plots and the claims' table are there; a hit (no delay to the
/// proxy) is faster than a spliced request (40 ms each way to the server); and the report
/// is written again from its raw files alone.
fn seed_001(dir: &Path) {
    let md = reproduce("kong", dir);
    let data = dir.join("docs/kong");
    for f in ["fig4.svg", "fig5.svg", "fig6.svg"] {
        svg(&data.join(f));
    }
    for part in [
        "## Fig 4",
        "## Fig 5",
        "## Fig 6",
        "## The paper's claims",
        "Conservative: hits",
    ] {
        assert!(md.contains(part), "{part}: {md}");
    }
    let rows = csv_rows(&data.join("points.csv"));
    // Ten variants: `copy`, `pipe`, the two kernel engines unpaced, and `sockmap`,
    // `ipsplice` and `pipe` under both demand-following modes.
    assert_eq!(rows.len(), 10, "one run per variant: {rows:?}");
    for r in &rows {
        let num = |i: usize| r[i].parse::<f64>().unwrap();
        let (cpu, spliced, hit, errors) = (num(3), num(4), num(5), num(7));
        assert!(cpu > 0.0 && errors == 0.0, "{r:?}");
        assert!(hit < spliced && spliced >= 160.0, "{r:?}");
    }
    render_again("kong", &dir.join("docs"), &dir.join("again"));
}

/// Seed 002's booster: every variant served its load without error; the edge spared the
/// origin connections; the clients' packets were counted on their line, the foldable ACKs
/// among the pure ACKs; and the report is written again from its raw files alone.
fn seed_002(dir: &Path) {
    let md = reproduce("panteleenko", dir);
    let data = dir.join("docs/panteleenko");
    for f in [
        "server-connections.svg",
        "server-segments.svg",
        "packets-by-requests.svg",
        "cost-by-requests.svg",
    ] {
        svg(&data.join(f));
    }
    let runs = |part: &str| -> Vec<serde_json::Value> {
        serde_json::from_str(
            &std::fs::read_to_string(data.join(format!("{part}-runs.json"))).unwrap(),
        )
        .unwrap()
    };
    let server = runs("server");
    assert_eq!(server.len(), 4, "direct, edge, edge-pipelined, nginx");
    let opens = |r: &serde_json::Value| r["tcp"]["origin"]["Tcp.PassiveOpens"].as_u64().unwrap();
    for r in &server {
        let l = &r["loads"][0];
        assert!(l["completed"].as_u64().unwrap() > 0, "{l}");
        assert!(l["errors"].as_object().unwrap().is_empty(), "{l}");
        // nginx serves the objects itself: the origin sees none of them.
        if r["variant"] == "nginx" {
            assert_eq!(opens(r), 0, "{r}");
        }
    }
    let (direct, edge) = (&server[0], &server[1]);
    assert!(
        opens(direct) > opens(edge),
        "{} vs {}",
        opens(direct),
        opens(edge)
    );
    for r in &runs("base") {
        let l = &r["loads"][0];
        assert!(l["errors"].as_object().unwrap().is_empty(), "{l}");
        let line = r["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["link"] == "r1: client → edge")
            .unwrap();
        let (acks, folded) = (
            line["tcp_pure_acks"].as_u64().unwrap(),
            line["tcp_acks_after_ack"].as_u64().unwrap(),
        );
        assert!(acks > 0 && folded > 0 && folded < acks, "{line}");
        // The edge's segments from the clients' side, by the state of the socket taking
        // each: the clients' SYNs (LISTEN), and their requests and ACKs on open
        // connections; none on the origin's side is counted as the clients'.
        let states = &r["proxy_tcp_states"]["segments"]["v1r1"];
        let n = |s: &str| states[s].as_u64().unwrap_or(0);
        assert!(n("LISTEN") > 0 && n("ESTABLISHED") > 0, "{r}");
        assert!(
            r["proxy_tcp_states"]["segments"]["v2origin"].is_object(),
            "{r}"
        );
    }
    for row in [
        "002-1 ",
        "002-3 ",
        "002-4 ",
        "002-9 ",
        "## The server's load",
    ] {
        assert!(md.contains(row), "{row}: {md}");
    }
    render_again("panteleenko", &dir.join("docs"), &dir.join("again"));
}

/// Seed 004's stress test: both parts ran every load without error, the counts add up, and
/// the report is written again from its raw files alone, byte for byte.
fn seed_004(dir: &Path) {
    let md = reproduce("pathak-stress", dir);
    assert!(
        md.contains("## The claim, rate by rate") && md.contains("Clopper–Pearson"),
        "{md}"
    );
    let data = dir.join("docs/pathak-stress");
    let rates: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(data.join("rates-runs.json")).unwrap())
            .unwrap();
    assert_eq!(rates.len(), 4, "cold and warm at two rates");
    for run in &rates {
        let l = &run["loads"][0];
        let (done, count) = (l["completed"].as_u64(), l["params"]["count"].as_u64());
        assert_eq!(done, count, "{}", run["variant"]);
        let e = &l["extra"];
        // The warm-up is the requests due in the first second.
        let rate = l["params"]["rate"].as_f64().unwrap() as u64;
        assert_eq!(e["warmup_requests"].as_u64(), Some(rate.min(done.unwrap())));
        assert!(e["at_least_2rtt_after_warmup"].as_u64() <= e["at_least_2rtt"].as_u64());
    }
    // The cold origin restarts every answer of 1 a second from its initial window: 50 KB
    // takes three round trips, every time.
    assert!(
        md.contains("| rates | cold | 1 | 1 | 2 of 2 (100.0%;"),
        "{md}"
    );
    let long: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(data.join("long-runs.json")).unwrap())
            .unwrap();
    assert_eq!(
        long[0]["loads"].as_array().unwrap().len(),
        2,
        "1/s and 10/s at once"
    );
    assert!(data.join("provenance.json").exists());
    let again = dir.join("again");
    render_again("pathak-stress", &dir.join("docs"), &again);

    // Figs 5–6: both parts, every variant's queries counted, a plot each.
    let md = reproduce("pathak-latency", dir);
    let data = dir.join("docs/pathak-latency");
    for part in ["kernel-windows", "paper-windows"] {
        svg(&data.join(format!("latency-{part}.svg")));
        let runs: Vec<serde_json::Value> = serde_json::from_str(
            &std::fs::read_to_string(data.join(format!("{part}-runs.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(runs.len(), 3, "{part}");
        for run in &runs {
            let l = &run["loads"][0];
            // 2 clients × 1 session × queries 3–6.
            assert_eq!(l["completed"], 8, "{part}: {}", run["variant"]);
            assert!(l["errors"].as_object().unwrap().is_empty(), "{l}");
        }
    }
    assert!(
        md.contains("004-1 `edge-tuned` cuts the p95") && md.contains("6x + y"),
        "{md}"
    );
    render_again("pathak-latency", &dir.join("docs"), &again);

    // Fig 7: the same queries with loss on the client leg; the lossy ones' distribution kept.
    let md = reproduce("pathak-loss", dir);
    let runs: Vec<serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(dir.join("docs/pathak-loss/loss-runs.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(runs.len(), 3);
    for run in &runs {
        let l = &run["loads"][0];
        assert_eq!(l["completed"], 8, "{}", run["variant"]);
        assert!(l["extra"]["lossy_cdf"].is_array(), "{l}");
    }
    svg(&dir.join("docs/pathak-loss/fig7.svg"));
    assert!(md.contains("004-5 76% of the lossy queries"), "{md}");
    render_again("pathak-loss", &dir.join("docs"), &again);

    // Table 1: the paper's first window, 2 segments (the head's and one of 1,448 bytes),
    // then twice that; this kernel's 10.
    let md = reproduce("pathak-windows", dir);
    for row in [
        "| ours: first window 2 segments (median of 2 fetches) | ",
        "| 2, 4, 8, 16, ",
        "| ours: first window 10 segments (median of 2 fetches) | ",
        "| 10, 20, ",
    ] {
        assert!(md.contains(row), "{row}: {md}");
    }
    render_again("pathak-windows", &dir.join("docs"), &again);
}

/// Copies `from/NAME.md` and `from/NAME/` into `to`, writes the report again there with
/// `reproduce NAME --render`, and checks that every file came out byte for byte the same.
fn render_again(name: &str, from: &Path, to: &Path) {
    let data = to.join(name);
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(&data).unwrap();
    let mut files = Vec::new();
    for f in std::fs::read_dir(from.join(name)).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, data.join(f.file_name().unwrap())).unwrap();
        files.push(Path::new(name).join(f.file_name().unwrap()));
    }
    let out = Command::new(lab())
        .args(["reproduce", name, "--render", "--out"])
        .arg(to)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    files.push(format!("{name}.md").into());
    for f in files {
        let (a, b) = (from.join(&f), to.join(&f));
        let (a, b) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert!(
            a == b,
            "{}: not the same bytes when written again:\n{}",
            f.display(),
            String::from_utf8_lossy(&b)
        );
    }
}

/// Each committed report that can be written from its raw files alone is what they give:
/// written again with `--render`, byte for byte. No root needed: nothing runs.
#[test]
fn committed_reports_are_what_their_raw_files_give() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/experiments");
    let mut checked = Vec::new();
    for e in splicer_lab::reproduce::all() {
        let name = e.name();
        if !e.renders_from_runs() || !docs.join(name).join("provenance.json").exists() {
            continue;
        }
        let to = std::env::temp_dir().join(format!("splab-render-{name}-{}", std::process::id()));
        render_again(name, &docs, &to);
        let _ = std::fs::remove_dir_all(&to);
        checked.push(name);
    }
    // Runs kept beside an experiment's own report, in directories of their own.
    for (name, dir) in [
        // Seed 001's full grid, apart from its quick grid's `kong.md`.
        ("kong", "kong-full"),
        // Seed 001 on the bed before 2026-12-02 (half of CPU 1 stolen): both grids.
        ("kong", "kong-full-2026-11-28"),
        ("kong", "kong-2026-11-28"),
        // Seed 002's quick grid, the run that counted the packets taken in FIN_WAIT_1.
        ("panteleenko", "panteleenko-quick"),
        // Seed 000's modem clients at 3 rounds, before the paper's 6 ran part by part.
        ("rosu-modem", "rosu-modem-2026-12-02"),
        // Seed 000's sweep at 3 rounds, before the paper's 6 ran part by part.
        ("rosu-sweep", "rosu-sweep-2026-11-27"),
    ] {
        let to = std::env::temp_dir().join(format!("splab-render-{dir}-{}", std::process::id()));
        render_again(name, &docs.join(dir), &to);
        let _ = std::fs::remove_dir_all(&to);
        checked.push(dir);
    }
    assert_eq!(
        checked,
        [
            "maltz-throughput",
            "maltz-latency",
            "rosu-sweep",
            "rosu-forwarding",
            "rosu-modem",
            "kong",
            "panteleenko",
            "pathak-latency",
            "pathak-loss",
            "pathak-windows",
            "pathak-stress",
            "kong-full",
            "kong-full-2026-11-28",
            "kong-2026-11-28",
            "panteleenko-quick",
            "rosu-modem-2026-12-02",
            "rosu-sweep-2026-11-27"
        ]
    );
}

/// Seed 000's mixed load (`splicer-lab rosu-mixed`, a command of its own): each committed
/// run with its raw runs is what they give, drawn again with the grid it kept.
#[test]
fn committed_rosu_mixed_runs_are_what_their_raw_files_give() {
    use splicer_lab::reproduce::rosumixed::{report, Params};
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/experiments/rosu-mixed");
    let mut checked = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(&docs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|d| d.join("runs.json").exists())
        .collect();
    dirs.sort();
    for from in dirs {
        let name = from.file_name().unwrap().to_string_lossy().to_string();
        let kept = from.join("params.json");
        let p: Params = serde_json::from_str(
            &std::fs::read_to_string(&kept).unwrap_or_else(|e| panic!("{}: {e}", kept.display())),
        )
        .unwrap();
        let to = std::env::temp_dir().join(format!("splab-mixed-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&to);
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(from.join("runs.json"), to.join("runs.json")).unwrap();
        report(&to, &p).unwrap();
        let plots = ["fig16.svg", "fig17.svg"]
            .into_iter()
            .filter(|f| from.join(f).exists());
        for f in ["figures.md", "points.csv", "params.json"]
            .into_iter()
            .chain(plots)
        {
            let (a, b) = (
                std::fs::read(from.join(f)).unwrap(),
                std::fs::read(to.join(f)).unwrap(),
            );
            assert!(
                a == b,
                "{name}/{f}: not the same bytes when written again:\n{}",
                String::from_utf8_lossy(&b)
            );
        }
        let _ = std::fs::remove_dir_all(&to);
        checked.push(name);
    }
    // Every run the report cites (docs/experiments/rosu-mixed.md) is here.
    assert_eq!(
        checked,
        [
            "fig16-steal",
            "fig16-steal-mid",
            "fig16-steal-pipe",
            "fig17-kernel",
            "fig17-pool-off",
            "fig17-steal",
            "fig17-steal-1k",
            "fig17-steal-all",
            "fig17-steal-mid",
            "fig17-steal-pipe"
        ]
    );
}

fn csv_rows(path: &Path) -> Vec<Vec<String>> {
    let csv = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').map(String::from).collect())
        .collect()
}

fn no_pcap_left(dir: &Path) {
    let left: Vec<_> = walk(&dir.join("results"))
        .into_iter()
        .filter(|p| p.extension() == Some("pcap".as_ref()))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Seed 000's three experiments on their tiny grids.
fn seed_000(dir: &Path) {
    // Table IV: both captures paired into request and response delays for every variant.
    let md = reproduce("rosu-forwarding", dir);
    let data = dir.join("docs/rosu-forwarding");
    let runs: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(data.join("delays.json")).unwrap()).unwrap();
    assert_eq!(runs.len(), 9, "one run per variant");
    for r in &runs {
        let exchanges = r["exchanges"].as_u64().unwrap();
        let (req, resp) = (
            r["requests"].as_u64().unwrap(),
            r["responses"].as_u64().unwrap(),
        );
        // One client, 20 ms apart: about 150 exchanges, nearly all paired.
        assert!(exchanges > 50, "{r}");
        assert!(
            req * 10 >= exchanges * 8 && resp * 10 >= exchanges * 8,
            "{r}"
        );
        let (a, b) = (
            r["request_mean_us"].as_f64().unwrap(),
            r["response_mean_us"].as_f64().unwrap(),
        );
        assert!(a > 0.0 && a < 100_000.0 && b > 0.0 && b < 100_000.0, "{r}");
    }
    no_pcap_left(dir);
    assert!(
        md.contains("| pipe.tunnel |")
            && md.contains("first response packet: the splice's gain over the relay")
    );

    // Figs 4–15: plain GETs and SSL tunnels on the corporate network, under the budget.
    let md = reproduce("rosu-sweep", dir);
    let data = dir.join("docs/rosu-sweep");
    for f in [
        "fig5.svg",
        "fig5-process.svg",
        "fig9.svg",
        "fig13.svg",
        "fig14.svg",
    ] {
        svg(&data.join(f));
    }
    let rows = csv_rows(&data.join("points.csv"));
    assert_eq!(rows.len(), 4 + 4, "{rows:?}");
    for r in &rows {
        let num = |i: usize| r[i].parse::<f64>().unwrap();
        assert!(num(5) > 0.0, "requests: {r:?}");
        assert!(num(6) <= 5.0 * 1.3, "Splicer over its budget: {r:?}");
        assert!(
            num(8) >= num(7) && (num(8) - num(7) - num(9) - num(10)).abs() < 1e-3,
            "with its kernel work: the process, the receive threads and the workers: {r:?}"
        );
        assert!(
            num(14) > 0.0,
            "the emulator counted the server's data and ACKs: {r:?}"
        );
        assert_eq!(r[16], "0", "failed requests: {r:?}");
    }
    assert!(rows.iter().any(|r| r[0] == "get" && r[1] == "sockmap"));
    assert!(rows.iter().any(|r| r[0] == "ssl" && r[1] == "ipsplice"));
    // Like the paper's proxy, Splicer connects to the server for every request.
    let runs: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(data.join("small-runs.json")).unwrap())
            .unwrap();
    for r in &runs {
        let opens = r["tcp"]["proxy"]["Tcp.ActiveOpens"].as_u64().unwrap();
        assert!(
            opens >= r["operations"].as_u64().unwrap(),
            "{}",
            r["variant"]
        );
    }
    assert!(md.contains("## Figs 4–11: plain GETs") && md.contains("## Figs 12–15: SSL tunnels"));

    // Figs 18–20: four parts, modem clients straight and through the proxy, each part run
    // alone (as the default grid's six rounds must) and the report written from them all.
    let parts = [
        "loss1-sack-off",
        "loss2-sack-off",
        "loss1-sack-on",
        "loss2-sack-on",
    ];
    let md = reproduce_in_parts("rosu-modem", &parts, dir);
    let data = dir.join("docs/rosu-modem");
    svg(&data.join("fig18-20.svg"));
    let rows = csv_rows(&data.join("points.csv"));
    assert_eq!(rows.len(), 3 + 3 + 2 + 2, "{rows:?}");
    for r in &rows {
        let lat: f64 = r[3].parse().unwrap();
        // Straight or through a proxy that connects per request: two round trips of
        // 2 × (50 + 90) ms at least (connect, then the GET); with the upstream connection
        // kept, a round trip to the proxy less the 2 × 50 ms.
        let least = if r[1].starts_with("pooled") {
            0.38
        } else {
            0.56
        };
        assert!(lat >= least, "{r:?}");
        assert!(r[5].parse::<u64>().unwrap() > 0 && r[6] == "0", "{r:?}");
    }
    assert!(md.contains("| Fig 20 |"), "{md}");
}

/// The decimal figures of `text` (`12.5`, `1,133.8`, `0.037`), as written.
fn figures(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() || ((c == '.' || c == ',') && !cur.is_empty()) {
            cur.push(c);
            continue;
        }
        let f = cur.trim_end_matches(['.', ',']);
        if f.contains('.') {
            out.push(f.to_string());
        }
        cur.clear();
    }
    out
}

/// The pages' blocks marked `<!-- figures from: A.md B.md -->` … `<!-- end -->` (in the
/// README and the seeds' pages) quote only figures their reports hold: every decimal
/// figure in a block is in one of them.
#[test]
fn the_claims_quote_their_reports() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/experiments");
    let mut blocks = 0;
    for page in std::fs::read_dir(&docs).unwrap() {
        let page = page.unwrap().path();
        if page.extension() != Some("md".as_ref()) {
            continue;
        }
        let text = std::fs::read_to_string(&page).unwrap();
        for block in text.split("<!-- figures from: ").skip(1) {
            let (names, rest) = block.split_once(" -->").unwrap();
            let (body, _) = rest
                .split_once("<!-- end -->")
                .expect("a block has its end");
            let reports: String = names
                .split_whitespace()
                .map(|n| {
                    std::fs::read_to_string(docs.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"))
                })
                .collect();
            for f in figures(body) {
                assert!(
                    reports.contains(&f),
                    "{}: {f} is in none of {names}",
                    page.display()
                );
            }
            blocks += 1;
        }
    }
    assert!(blocks >= 1, "no block of quoted figures");
    assert_eq!(
        figures("p95 −35.2 ± 1.0%, 1,133.8 ms; 7 windows."),
        ["35.2", "1.0", "1,133.8"]
    );
}
