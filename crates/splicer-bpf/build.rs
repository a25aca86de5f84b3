//! Builds the eBPF programs under `bpf/` with clang into `$OUT_DIR`, to be embedded in the
//! crate. Prerequisites (Debian): `clang` (14 or later) and `libbpf-dev` (for
//! `bpf/bpf_helpers.h`); `scripts/setup.sh` installs them.
//!
//! Without them the crate still builds, as aya's templates do, with empty objects in place
//! of the programs and a warning naming what is missing: `cargo check --workspace` and the
//! tests of the crates that need no kernel engine work on a machine without clang. Loading
//! a program then fails with `Error::NotBuilt`, which says the same. Under CI (`CI` set) or
//! with `SPLICER_BPF_REQUIRED` set, a missing prerequisite stops the build instead: there
//! the kernel engines must be tested, not skipped.

use std::path::Path;
use std::process::Command;

const PROGRAMS: &[&str] = &["sockmap", "ipsplice", "tune", "tcpstate"];

fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=CI");
    println!("cargo:rerun-if-env-changed=SPLICER_BPF_REQUIRED");
    if let Some((missing, watch)) = missing(&clang) {
        // Installing what is missing must rebuild the programs: without this the empty
        // objects outlive `apt-get install clang` (nothing cargo watches changed).
        println!("cargo:rerun-if-changed={watch}");
        let required =
            std::env::var_os("CI").is_some() || std::env::var_os("SPLICER_BPF_REQUIRED").is_some();
        if required {
            panic!("{missing}");
        }
        println!("cargo:warning={missing}; built with empty eBPF objects, so the sockmap, ipsplice and tune programs will not load");
        for p in PROGRAMS {
            let obj = Path::new(&out).join(format!("{p}.bpf.o"));
            std::fs::write(&obj, b"").expect("OUT_DIR is writable");
        }
        return;
    }
    // The multiarch include directory holds asm/types.h, which linux/bpf.h includes.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = match arch.as_str() {
        "x86_64" => "/usr/include/x86_64-linux-gnu",
        "aarch64" => "/usr/include/aarch64-linux-gnu",
        _ => "/usr/include",
    };
    for p in PROGRAMS {
        let src = format!("bpf/{p}.bpf.c");
        println!("cargo:rerun-if-changed={src}");
        let obj = Path::new(&out).join(format!("{p}.bpf.o"));
        // -g: BTF for the maps; -mcpu=v3: 32-bit atomics and jumps (docs/kernel-notes.md).
        let st = Command::new(&clang)
            .args([
                "-O2", "-g", "-target", "bpf", "-mcpu=v3", "-Wall", "-Werror",
            ])
            .arg(format!("-I{multiarch}"))
            .args(["-c", &src, "-o"])
            .arg(&obj)
            .status()
            .expect("clang runs");
        assert!(st.success(), "clang failed on {src}");
    }
}

/// What is missing to build the programs, said as the fix, and the directory that installing
/// it changes.
fn missing(clang: &str) -> Option<(String, &'static str)> {
    let version = Command::new(clang).arg("--version").output();
    if !version.is_ok_and(|o| o.status.success()) {
        return Some((
            "splicer-bpf needs clang to build its eBPF programs (the sockmap and ipsplice \
             engines, per-leg tuning): apt-get install clang libbpf-dev (scripts/setup.sh does), \
             or set CLANG to a clang binary"
                .into(),
            "/usr/bin",
        ));
    }
    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        return Some((
            "splicer-bpf needs bpf/bpf_helpers.h: apt-get install libbpf-dev (scripts/setup.sh \
             does)"
                .into(),
            "/usr/include",
        ));
    }
    None
}
