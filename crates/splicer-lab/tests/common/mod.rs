//! What the lab's root-only tests share: the root check and a look at namespaces.
#![allow(dead_code)]

use std::process::Command;

/// Whether this runs as root; says why the test is skipped when not.
pub fn root() -> bool {
    let ok = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false);
    if !ok {
        eprintln!("SKIPPED: needs root to create network namespaces (CI runs as root)");
    }
    ok
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
