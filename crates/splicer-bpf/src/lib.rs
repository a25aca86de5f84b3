//! Splicer's eBPF programs and their loaders. With `splicer-sys`, the only crate allowed
//! `unsafe`, and only to declare the map keys and values plain data for aya: the system
//! calls go through aya and `splicer-sys`.
//!
//! The programs are C under `bpf/`, compiled by `build.rs` with clang and embedded in the
//! binary. They are loaded with [aya](https://aya-rs.dev): a pure-Rust loader, so the build
//! needs clang for the programs but no C library (libbpf-rs would compile and link libbpf,
//! libelf and zlib as well), and it reads the BTF map definitions clang writes.
//!
//! # Layout
//! - [`ipsplice`]: the `ipsplice` engine's TC ingress program, which rewrites the packets of
//!   one TCP connection into another and forwards them like a router (seed 003).
//! - [`sockmap`]: the `sockmap` engine's SOCKHASH and its `sk_skb` verdict program, which
//!   moves every byte arriving on one socket of a pair to the other inside the kernel.
//! - [`tcpstate`]: the lab's TC ingress program that counts received TCP segments by the
//!   state of the socket that takes them (seed 002's packets in `FIN_WAIT_1`).
//! - [`tune`]: the cgroup `sockops` program that tunes each leg's TCP connections as they
//!   are established (initial window, congestion control, minimum RTO, delayed ACKs).
// A panic is not an error path: product code handles what it can and names why it cannot
// (each exception to these is allowed where it stands, with the invariant it rests on).
#![deny(clippy::unwrap_used, clippy::expect_used)]
// Every dependency is used (checked for the library itself, whose tests have dev-dependencies
// too; CI runs clippy with -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod ipsplice;
pub mod sockmap;
pub mod tcpstate;
pub mod tune;

pub use ipsplice::Ipsplice;
pub use sockmap::{Sockmap, Stats as SockmapStats};
pub use tcpstate::TcpStates;
pub use tune::{Leg, Tuner, Tuning};

/// Why a program could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("loading the eBPF object: {}", chain(.0))]
    Load(#[from] aya::EbpfError),
    #[error("eBPF program: {}", chain(.0))]
    Program(#[from] aya::programs::ProgramError),
    #[error("eBPF map: {}", chain(.0))]
    Map(#[from] aya::maps::MapError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the eBPF object lacks {0}")]
    Missing(&'static str),
    /// The crate was built without clang or libbpf's headers: the program is an empty
    /// object (`build.rs`).
    #[error(
        "the {0} eBPF program was not built (no clang or libbpf-dev when Splicer was \
         compiled): apt-get install clang libbpf-dev, then rebuild"
    )]
    NotBuilt(&'static str),
    /// A sockmap pair could not be completed, and the program had already kept bytes of
    /// the first socket for the proxy: taking it out of the map again discarded them, so
    /// the connection cannot go on with another engine.
    #[error("{source}; {kept} skb(s) kept meanwhile were lost with it")]
    KeptThenFailed { kept: u64, source: Box<Error> },
}

/// Locks a mutex even if a holder panicked: what these guard mirrors kernel objects (maps,
/// attachments), which a panic in user space left as they were.
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An error and its sources, so "`bpf_map_update_elem` failed" says why.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// A program's object as `build.rs` embedded it; [`Error::NotBuilt`] when it is the empty
/// stand-in of a build without clang.
fn object(bytes: &'static [u8], name: &'static str) -> Result<&'static [u8], Error> {
    if bytes.is_empty() {
        Err(Error::NotBuilt(name))
    } else {
        Ok(bytes)
    }
}

/// Attaches a TC classifier to interface `ifname`'s ingress: a TCX link on Linux 6.6 and
/// later (dropped with the process), else a netlink filter under a `clsact` qdisc added for
/// it (which outlives the process: the caller removes it, or the namespace goes).
fn attach_ingress(
    prog: &mut aya::programs::tc::SchedClassifier,
    ifname: &str,
) -> Result<(), Error> {
    use aya::programs::tc::TcAttachType;
    if let Err(e) = prog.attach(ifname, TcAttachType::Ingress) {
        // Kernels before 6.6 need the clsact qdisc for a netlink filter.
        let _ = aya::programs::tc::qdisc_add_clsact(ifname);
        prog.attach(ifname, TcAttachType::Ingress).map_err(|_| e)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_object_says_it_was_not_built() {
        let e = object(&[], "sockmap").unwrap_err();
        assert!(matches!(e, Error::NotBuilt("sockmap")));
        assert!(
            e.to_string().contains("apt-get install clang libbpf-dev"),
            "{e}"
        );
        assert_eq!(object(b"\x7fELF", "tune").unwrap(), b"\x7fELF");
    }
}
