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
