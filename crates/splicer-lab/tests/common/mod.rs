//! What the lab's root-only tests share: the root check and a look at namespaces.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// Whether this runs as root; says why the test is skipped when not (and fails under CI).
pub fn root() -> bool {
    splicer_testkit::require_root("to create network namespaces")
}

/// `ip netns list`.
pub fn namespaces() -> String {
    String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned()
}

/// Namespaces of the lab run of process `pid`.
pub fn netns_of(pid: u32) -> Vec<String> {
    namespaces()
        .lines()
        .filter(|l| l.starts_with(&format!("splab-{pid}-")))
        .map(String::from)
        .collect()
}

pub fn lab() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_splicer-lab"))
}

/// The Splicer binary beside splicer-lab (`cargo test --workspace` builds it); built here
/// when this crate's tests run alone.
pub fn ensure_splicer() {
    if lab().with_file_name("splicer").exists() {
        return;
    }
    let st = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "-q", "-p", "splicer"])
        .status()
        .unwrap();
    assert!(st.success(), "cannot build the splicer binary");
}

/// Runs `splicer-lab run` on a scenario text; returns its output, the results directory and
/// the run's PID (which names its namespaces).
pub fn run_scenario(scenario: &str, tag: &str) -> (std::process::Output, std::path::PathBuf, u32) {
    let dir = std::env::temp_dir().join(format!("splab-run-{}-{tag}", std::process::id()));
    let file = dir.with_extension("toml");
    std::fs::write(&file, scenario).unwrap();
    let child = Command::new(lab())
        .arg("run")
        .arg(&file)
        .arg("--out")
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(file);
    (out, dir, pid)
}

/// Like [`run_scenario`], for a run that must succeed and leave no namespace behind;
/// returns the results directory and its `runs.json`.
pub fn successful_run(
    scenario: &str,
    tag: &str,
) -> (
    std::path::PathBuf,
    Vec<splicer_lab::experiment::run::VariantRun>,
) {
    let (out, dir, pid) = run_scenario(scenario, tag);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        netns_of(pid).is_empty(),
        "namespaces left: {:?}",
        netns_of(pid)
    );
    let runs =
        serde_json::from_str(&std::fs::read_to_string(dir.join("runs.json")).unwrap()).unwrap();
    (dir, runs)
}

/// The head of a scenario named `name`: client — r1 — proxy — r2 — server, each router
/// emulating 2 ms and two-state loss (`loss` first, 40% after a loss) both ways on its leg,
/// the proxy host and the routers forwarding.
pub fn lossy_bed(name: &str, loss: f64) -> String {
    let leg = |router: &str, a: &str, b: &str, seed: u32| {
        let one = |from: &str, to: &str, seed: u32| {
            format!(
                "[[emulate]]\nrouter = \"{router}\"\nfrom = \"{from}\"\nto = \"{to}\"\n\
                 delay_ms = 2\nloss_p = {loss}\nloss_r = 0.4\nseed = {seed}\n"
            )
        };
        one(a, b, seed) + &one(b, a, seed + 1)
    };
    let mut s = format!("[experiment]\nname = \"{name}\"\n");
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
    s
}

/// The logs of variant `variant`'s processes in the first round of a run in `dir`,
/// concatenated.
pub fn process_logs(dir: &Path, variant: &str) -> String {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|f| f.ok())
        .filter(|f| {
            f.file_name()
                .to_string_lossy()
                .starts_with(&format!("{variant}-r0-process"))
        })
        .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
        .collect()
}

/// Starts the `splicer` beside this crate's binary in `host` of `bed`, with the file `cfg`,
/// its output to `log` (created); returns its PID (the bed stops it at teardown).
pub fn spawn_splicer(bed: &mut splicer_lab::Bed, host: &str, cfg: &Path, log: &Path) -> u32 {
    let out = std::fs::File::create(log).unwrap();
    let bin = lab().with_file_name("splicer");
    bed.spawn(
        bed.command(host, bin.to_str().unwrap())
            .args(["run", "--config", cfg.to_str().unwrap()])
            .stdout(out.try_clone().unwrap())
            .stderr(out),
    )
    .unwrap()
}
