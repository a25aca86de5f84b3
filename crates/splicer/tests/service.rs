//! Splicer as a service: `--version` names the commit and the features, readiness and
//! stopping reach systemd's notification socket, the unit file passes `systemd-analyze
//! verify`, and the unit's capabilities alone (an unprivileged user, no root) run the
//! kernel engines.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use splicer_testkit::{curl, eventually, free_port, origin, s, spawn_splicer, splicer_bin};

/// The unit file, from the repository.
fn unit() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/splicer.service");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn version_names_the_commit_and_the_features() {
    let out = Command::new(splicer_bin())
        .arg("--version")
        .output()
        .unwrap();
    let v = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{v}");
    assert!(
        v.starts_with(&format!("splicer {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    // The tests build the default features: the kernel engines.
    assert!(v.contains("features: bpf (sockmap, ipsplice)"), "{v}");
    assert!(!v.contains("commit unknown"), "built from a checkout: {v}");
}

/// `Type=notify`: READY=1 once listening, STOPPING=1 at SIGTERM, on `NOTIFY_SOCKET`.
#[tokio::test(flavor = "multi_thread")]
async fn readiness_and_stopping_reach_the_service_manager() {
    let dir = splicer_testkit::TempDir::new();
    let sock_path = dir.0.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let hp = free_port();
    let config = format!("[http]\nlisten = [\"127.0.0.1:{hp}\"]\n");
    std::fs::write(dir.0.join("splicer.toml"), &config).unwrap();
    let mut child = splicer_testkit::Running(
        Command::new(splicer_bin())
            .args(["run", "--config"])
            .arg(dir.0.join("splicer.toml"))
            .env("NOTIFY_SOCKET", &sock_path)
            .stderr(std::fs::File::create(dir.0.join("splicer.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("READY=1 within 20 s");
    let ready = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    // Ready means listening.
    assert!(std::net::TcpStream::connect(("127.0.0.1", hp)).is_ok());
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let n = sock.recv(&mut buf).expect("STOPPING=1 within 20 s");
    let stopping = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping}");
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// The unit file as systemd reads it, pointed at the binary under test.
#[test]
fn the_unit_file_passes_systemd_analyze() {
    if !splicer_testkit::require(
        splicer_testkit::have_command("systemd-analyze"),
        "systemd-analyze (package systemd) to check the unit file",
    ) {
        return;
    }
    let dir = splicer_testkit::TempDir::new();
    let bin = splicer_bin();
    let unit = unit().replace("/usr/bin/splicer", &bin.display().to_string());
    let path = dir.0.join("splicer.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Lines about the unit itself (not about units of the host it mentions).
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("splicer.service"))
        .collect();
    assert!(out.status.success() && ours.is_empty(), "{err}");
}

/// An unprivileged user (`nobody`) holding only the unit's capabilities runs the kernel
/// engines: a forced `sockmap` loads its program and splices a tunnel.
#[tokio::test(flavor = "multi_thread")]
async fn the_units_capabilities_run_the_kernel_engines_without_root() {
    if !splicer_testkit::require_root("to hand capabilities to an unprivileged user")
        || !splicer_testkit::require(
            splicer_testkit::have_command("setpriv"),
            "setpriv (package util-linux)",
        )
    {
        return;
    }
    let o = origin::start().await;
    let dir = splicer_testkit::TempDir::new();
    // The unprivileged user reads the configuration.
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (sp, hp) = (free_port(), free_port());
    let config = format!(
        "[log]\nformat = \"json\"\n[relay]\nengine = \"sockmap\"\n\
         [socks]\nlisten = [\"127.0.0.1:{sp}\"]\n[http]\nlisten = [\"127.0.0.1:{hp}\"]\n"
    );
    let prefix = splicer_testkit::as_unit_user(
        ("65534", "65534"),
        &splicer_testkit::unit_capabilities(&unit()),
    );
    let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let mut child = splicer_testkit::Running(spawn_splicer(&dir.0, &config, Some(&prefix)));
    let log_path = dir.0.join("splicer.log");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let listening = eventually(|| std::net::TcpStream::connect(("127.0.0.1", sp)).is_ok()).await;
    assert!(listening, "{}", log());
    let url = format!("http://{o}/bytes/100000?seed=4");
    let (code, n, digest, err) = curl(s(&["--socks5", &format!("127.0.0.1:{sp}"), &url])).await;
    assert_eq!(code, 0, "{err}\n{}", log());
    assert_eq!(
        (n, digest),
        (100000, splicer_testkit::expected_digest(100000, 4))
    );
    assert!(
        eventually(|| log().contains("\"engine\":\"sockmap\",\"fallback\":\"-\"")).await,
        "not spliced by sockmap without root:\n{}",
        log()
    );
    // It really ran unprivileged.
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(uid.split_whitespace().nth(2) == Some("65534"), "{uid}");
    let _ = child.kill();
    let _ = child.wait();
}
