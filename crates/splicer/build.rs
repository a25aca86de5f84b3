//! Records the commit the binary is built from, for `splicer --version` and the start-up
//! log: `SPLICER_COMMIT` when the builder sets it (a package built from a tarball),
//! otherwise `git describe` of the checkout, otherwise `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SPLICER_COMMIT");
    let commit = std::env::var("SPLICER_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SPLICER_COMMIT={commit}");
}

/// The checkout's commit, `-dirty` when files differ from it; rebuilt when `HEAD` or a
/// branch moves.
fn git_commit() -> Option<String> {
    let dir = Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let dir = String::from_utf8(dir.stdout).ok()?;
    let dir = std::path::Path::new(dir.trim());
    for f in ["HEAD", "refs/heads", "packed-refs"] {
        let p = dir.join(f);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    let out = Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}
