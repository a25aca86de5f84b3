//! The Debian package (packaging/deb.sh): built from the binary under test, installed with
//! `dpkg -i`, its files where the unit and the man page say, and the installed binary
//! started as the unit starts it (user `splicer`, the unit's capabilities only, the
//! installed configuration, systemd's readiness message), serving a SOCKS tunnel and an
//! HTTP request; then purged. systemd is not PID 1 on the test machines, so the unit
//! itself is checked with `systemd-analyze verify` and its start is done by hand.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use splicer_testkit::{curl, eventually, expected_digest, origin, s, splicer_bin, Running};

/// Purges the package when dropped, so a failing test leaves the machine as it was.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg")
            .args(["--purge", "splicer"])
            .stdout(Stdio::null())
            .status();
    }
}

/// Runs `cmd`, which must succeed; its standard output.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{stdout}{stderr}",
        out.status
    );
    stdout.into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_debian_package_installs_and_starts() {
    if !splicer_testkit::require_root("to install a package with dpkg")
        || !splicer_testkit::require(
            ["dpkg-deb", "dpkg", "setpriv", "gzip"]
                .iter()
                .all(|c| splicer_testkit::have_command(c)),
            "dpkg-deb, dpkg, setpriv and gzip (packages dpkg, util-linux, gzip)",
        )
    {
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = splicer_testkit::TempDir::new();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let built = run(Command::new("bash")
        .arg(repo.join("packaging/deb.sh"))
        .arg("--binary")
        .arg(splicer_bin())
        .arg("--out")
        .arg(&dir.0));
    let deb = built.lines().last().unwrap().trim().to_string();
    assert!(deb.ends_with(".deb") && Path::new(&deb).exists(), "{built}");

    let contents = run(Command::new("dpkg-deb").args(["--contents", &deb]));
    for path in [
        "./usr/bin/splicer",
        "./lib/systemd/system/splicer.service",
        "./usr/share/man/man1/splicer.1.gz",
        "./etc/splicer/splicer.toml",
        "./usr/share/splicer/grafana/splicer.json",
        "./usr/share/doc/splicer/copyright",
    ] {
        assert!(
            contents.lines().any(|l| l.ends_with(path)),
            "{path} not in the package:\n{contents}"
        );
    }
    let info = run(Command::new("dpkg-deb").args(["--info", &deb, "conffiles"]));
    assert!(
        info.contains("/etc/splicer/splicer.toml"),
        "a conffile:\n{info}"
    );

    let installed = Installed;
    let out = run(Command::new("dpkg").args(["-i", &deb]));
    println!("dpkg -i:\n{out}");
    run(Command::new("getent").args(["passwd", "splicer"]));
    let version = run(Command::new("/usr/bin/splicer").arg("--version"));
    assert!(version.starts_with("splicer 0."), "{version}");
    let man = run(Command::new("sh").args(["-c", "gzip -dc /usr/share/man/man1/splicer.1.gz"]));
    assert!(
        man.contains(".TH splicer 1") && man.contains("splicer run") && man.contains("SIGUSR2"),
        "{man}"
    );
    // The unit's ExecStartPre.
    run(Command::new("/usr/bin/splicer").args(["check", "--config", "/etc/splicer/splicer.toml"]));
    let unit = std::fs::read_to_string("/lib/systemd/system/splicer.service").unwrap();
    if splicer_testkit::have_command("systemd-analyze") {
        run(Command::new("systemd-analyze").args([
            "verify",
            "--man=no",
            "/lib/systemd/system/splicer.service",
        ]));
    }

    // Started as the unit starts it, with the installed configuration (SOCKS5 on
    // 127.0.0.1:1080, HTTP on 127.0.0.1:3128).
    for port in [1080, 3128] {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "port {port} is taken: the installed configuration cannot be started here"
        );
    }
    let notify = dir.0.join("notify.sock");
    let sock = UnixDatagram::bind(&notify).unwrap();
    std::fs::set_permissions(&notify, std::fs::Permissions::from_mode(0o777)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let prefix = splicer_testkit::as_unit_user(
        ("splicer", "splicer"),
        &splicer_testkit::unit_capabilities(&unit),
    );
    let log_path = dir.0.join("splicer.log");
    let mut child = Running(
        Command::new(&prefix[0])
            .args(&prefix[1..])
            .args([
                "/usr/bin/splicer",
                "run",
                "--config",
                "/etc/splicer/splicer.toml",
            ])
            .env("NOTIFY_SOCKET", &notify)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let mut buf = [0u8; 256];
    let n = sock
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no READY=1 ({e}):\n{}", log()));
    assert!(
        String::from_utf8_lossy(&buf[..n]).contains("READY=1"),
        "{}",
        log()
    );

    let o = origin::start().await;
    let url = format!("http://{o}/bytes/100000?seed=9");
    for via in [
        ["--socks5", "127.0.0.1:1080"],
        ["-x", "http://127.0.0.1:3128"],
    ] {
        let (code, n, digest, err) = curl(s(&[via[0], via[1], &url])).await;
        assert_eq!(code, 0, "{err}\n{}", log());
        assert_eq!((n, digest), (100000, expected_digest(100000, 9)));
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let uid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .unwrap()
        .to_string();
    let splicer_uid = run(Command::new("id").args(["-u", "splicer"]));
    assert_eq!(
        uid.split_whitespace().nth(2),
        Some(splicer_uid.trim()),
        "{uid}"
    );

    run(Command::new("kill").args(["-TERM", &child.id().to_string()]));
    assert!(
        eventually(|| matches!(child.try_wait(), Ok(Some(s)) if s.success())).await,
        "no clean exit on SIGTERM:\n{}",
        log()
    );
    drop(installed);
    assert!(!Path::new("/usr/bin/splicer").exists(), "purged");
}
