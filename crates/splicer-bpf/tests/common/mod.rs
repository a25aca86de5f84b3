//! What the eBPF tests share.

/// Whether the tests run as root; says why they skip otherwise.
pub fn root() -> bool {
    let ok = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false);
    if !ok {
        eprintln!("SKIPPED: needs root to load eBPF programs (CI runs as root)");
    }
    ok
}
