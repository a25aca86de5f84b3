//! What Splicer's tests share: requirement checks (below), a real `splicer` process and
//! its clients ([`proxy`]), the lab's origin on a free port and an echo server
//! ([`origin`]), raw recording origins ([`recorder`]), and [`per_engine!`].
//!
//! Some tests need what a developer's machine may lack: root (network namespaces, eBPF
//! programs, TC filters), a package, free well-known ports. Outside CI such a test says why
//! it skips and passes. Under CI (the `CI` variable set and not `false` or `0`, as CI
//! services set `CI=true`) the machine is meant to have everything, so a missing requirement
//! fails the test instead of letting it pass without having run.

#![forbid(unsafe_code)]

pub mod origin;
pub mod proxy;
pub mod recorder;

pub use proxy::*;

/// Runs each named `async fn name(engine: &str)` of the test file once per engine, as
/// `copy::name`, `pipe::name`, `auto::name`, `sockmap::name` and `ipsplice::name`, as
/// relayd's regress runs every test with each splice mode. The kernel engines load eBPF
/// programs, so they need root (a skip outside CI, a failure under it). A case an engine
/// declines still runs: the test asserts the engine that did move it and why, with
/// [`moved_by`].
#[macro_export]
macro_rules! per_engine {
    ($($name:ident),* $(,)?) => {
        $crate::per_engine!(@user copy "copy", $($name),*);
        $crate::per_engine!(@user pipe "pipe", $($name),*);
        $crate::per_engine!(@user auto "auto", $($name),*);
        $crate::per_engine!(@kernel sockmap "sockmap", $($name),*);
        $crate::per_engine!(@kernel ipsplice "ipsplice", $($name),*);
    };
    (@user $module:ident $engine:literal, $($name:ident),*) => {
        mod $module {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
               async fn $name() { super::$name($engine).await } )*
        }
    };
    (@kernel $module:ident $engine:literal, $($name:ident),*) => {
        mod $module {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
               async fn $name() {
                   if $crate::require_root(concat!("for the ", $engine, " engine's eBPF programs")) {
                       super::$name($engine).await
                   }
               } )*
        }
    };
}

mod engines;
mod net;
pub use engines::{moved_by, Moved, MovedBy};
pub use net::Net;

/// How long [`eventually`] polls before it gives up: far beyond what any state the tests
/// wait for takes, so it bounds a hung test, not a slow one.
pub const EVENTUALLY: std::time::Duration = std::time::Duration::from_secs(10);

/// Polls `cond` every 10 ms for up to [`EVENTUALLY`]; returns whether it became true. For
/// a state no event announces (a counter in a test origin, a socket's state): the test goes
/// on as soon as it holds, and fails with its own message when it never does.
pub async fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + EVENTUALLY;
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    cond()
}

/// [`eventually`] for a test's own thread, outside a runtime.
pub fn eventually_blocking(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + EVENTUALLY;
    while std::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    cond()
}

/// Whether the tests run under CI.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Whether a test may go on: `met` says whether its requirement holds, `what` names the
/// requirement and why it is needed ("root, to load eBPF programs"). When it does not hold,
/// outside CI this prints why the test skips and returns false; under CI it panics.
pub fn require(met: bool, what: &str) -> bool {
    let go_on = decide(met, what, under_ci());
    if !go_on {
        note_skip(what);
    }
    go_on
}

/// [`require`]'s rule, with whether CI is set given.
fn decide(met: bool, what: &str, ci: bool) -> bool {
    if met {
        return true;
    }
    assert!(
        !ci,
        "this test needs {what}, and CI is set: under CI it must run, not skip"
    );
    eprintln!("SKIPPED: needs {what} (CI runs as root with everything installed)");
    false
}

/// Adds a skip to the file `SPLICER_SKIPS` names, one line per skipped test, so that
/// `scripts/test.sh` can say how many tests skipped and why (cargo keeps a passing test's
/// output to itself).
fn note_skip(what: &str) {
    use std::io::Write;
    let Some(path) = std::env::var_os("SPLICER_SKIPS") else {
        return;
    };
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path);
    if let Ok(mut f) = file {
        // One write per line: tests of one binary run in parallel.
        let _ = f.write_all(format!("{test}: needs {what}\n").as_bytes());
    }
}

/// [`require`] for root: `why` says what for ("to create network namespaces").
pub fn require_root(why: &str) -> bool {
    require(splicer_sys::process::is_root(), &format!("root {why}"))
}

/// Whether `cmd` is on the `PATH`.
pub fn have_command(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(cmd).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_met_requirement_goes_on() {
        assert!(require(true, "nothing"));
    }

    #[test]
    fn a_missing_requirement_skips_outside_ci_and_fails_under_it() {
        assert!(!decide(false, "a unicorn", false));
        let r = std::panic::catch_unwind(|| decide(false, "a unicorn", true));
        let msg = r.expect_err("under CI a missing requirement fails");
        let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("a unicorn"), "{msg}");
        assert!(decide(true, "a unicorn", true));
    }

    #[test]
    fn commands_are_found_on_the_path() {
        assert!(have_command("sh"));
        assert!(!have_command("no-such-command-splicer"));
    }
}
