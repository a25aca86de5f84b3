//! Builds the eBPF programs under `bpf/` with clang into `$OUT_DIR`, to be embedded in the
//! crate. Prerequisites (Debian): `clang` (14 or later) and `libbpf-dev` (for
//! `bpf/bpf_helpers.h`); `scripts/setup.sh` installs them. The build stops with a message
//! naming what is missing rather than failing inside clang.

use std::path::Path;
use std::process::Command;

const PROGRAMS: &[&str] = &["sockmap", "ipsplice", "tune"];

fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let version = Command::new(&clang).arg("--version").output();
    if !version.is_ok_and(|o| o.status.success()) {
        panic!(
            "splicer-bpf needs clang to build its eBPF programs (the sockmap and ipsplice engines): \
             apt-get install clang libbpf-dev (scripts/setup.sh does), set CLANG to a clang \
             binary, or build without them: cargo build -p splicer --no-default-features"
        );
    }
    if !Path::new("/usr/include/bpf/bpf_helpers.h").exists() {
        panic!(
            "splicer-bpf needs bpf/bpf_helpers.h: apt-get install libbpf-dev (scripts/setup.sh \
             does), or build without the kernel engines: cargo build -p splicer --no-default-features"
        );
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
    println!("cargo:rerun-if-env-changed=CLANG");
}
