//! A real `splicer` process with a generated configuration, a SOCKS5 client, curl runners
//! and digests: what the end-to-end tests of the `splicer` crate drive.

use std::io::Read;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::Net;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl Default for TempDir {
    fn default() -> TempDir {
        TempDir::new()
    }
}

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "splicer-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A local address where nothing listens and nothing can start to while the value lives:
/// a socket is bound to it (without `SO_REUSEADDR`) and kept, never listening, so a connect
/// there is refused. A port merely freed ([`free_port`]) is no such address: a test running
/// in parallel may bind it a moment later and answer in its place.
pub struct ClosedPort {
    _held: tokio::net::TcpSocket,
    pub addr: SocketAddr,
}

impl ClosedPort {
    pub fn new() -> ClosedPort {
        let held = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        held.bind(([127, 0, 0, 1], 0).into())
            .expect("bind 127.0.0.1:0");
        let addr = held.local_addr().expect("the bound address");
        ClosedPort { _held: held, addr }
    }
}

impl Default for ClosedPort {
    fn default() -> ClosedPort {
        ClosedPort::new()
    }
}

/// A local address whose connects hang: a listener whose accept queue is full (held
/// with the connections that fill it), so the kernel drops the SYNs that come to it.
pub struct Blackhole {
    pub addr: SocketAddr,
    _listener: tokio::net::TcpListener,
    _fillers: Vec<tokio::net::TcpStream>,
}

impl Blackhole {
    pub async fn new() -> Blackhole {
        let sock = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
        sock.bind(([127, 0, 0, 1], 0).into())
            .expect("bind 127.0.0.1:0");
        let listener = sock.listen(0).expect("listen");
        let addr = listener.local_addr().expect("the bound address");
        let mut fillers = Vec::new();
        for _ in 0..4 {
            let connect = tokio::net::TcpStream::connect(addr);
            if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(300), connect).await {
                fillers.push(s);
            }
        }
        assert!(fillers.len() < 4, "the accept queue is full");
        Blackhole {
            addr,
            _listener: listener,
            _fillers: fillers,
        }
    }
}

/// Two free ports, never the same one (two [`free_port`] calls in a row may get the same
/// port back, which Splicer refuses as one address given twice).
pub fn free_ports() -> (u16, u16) {
    let a = StdListener::bind("127.0.0.1:0").unwrap();
    let b = StdListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

/// The `splicer` binary of this build: `SPLICER_BIN` when set, else the one cargo built
/// beside the test executable (`target/<profile>/splicer`, the tests living in `deps/`).
pub fn splicer_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("SPLICER_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe
        .parent()
        .and_then(|d| {
            if d.ends_with("deps") {
                d.parent()
            } else {
                Some(d)
            }
        })
        .expect("a target directory");
    let bin = dir.join("splicer");
    assert!(
        bin.exists(),
        "no splicer binary at {} (build it, or set SPLICER_BIN)",
        bin.display()
    );
    bin
}

/// A running `splicer` process; killed (by PID) on drop.
pub struct Proxy {
    pub child: Child,
    pub socks: SocketAddr,
    pub http: SocketAddr,
    pub dir: TempDir,
}

/// The proxies' log level: `info`, and what a cache fill does after its client left (a
/// debug line, the one event the quick-abort tests can wait on).
const LOG_LEVEL: &str = "info,splicer_proxy::exchange::fill=debug";

impl Proxy {
    /// Starts splicer with both front ends on free loopback ports, JSON logs, the given
    /// engine, and `extra` TOML appended (sections other than [socks]/[http]/[relay]/[log]).
    pub fn start(engine: &str, extra: &str) -> Proxy {
        Proxy::start_with(engine, extra, "")
    }

    /// Like `start`, with `http_extra` lines added to the [http] section.
    ///
    /// `free_port` lets a port go before splicer binds it, and in the meantime a test's own
    /// outgoing connections (1,000 tunnels at once in e2e) may take it as their ephemeral
    /// port: when splicer exits saying it cannot listen, it is started again on other ports.
    pub fn start_with(engine: &str, extra: &str, http_extra: &str) -> Proxy {
        Proxy::start_in(&Net::loopback(), engine, extra, http_extra)
    }

    /// Like `start_with`, listening on `net`'s proxy address (in its namespace, when it
    /// has one).
    pub fn start_in(net: &Net, engine: &str, extra: &str, http_extra: &str) -> Proxy {
        let prefix = net.exec_prefix();
        let prefix: Option<Vec<&str>> = prefix
            .as_ref()
            .map(|p| p.iter().map(String::as_str).collect());
        Proxy::start_prefixed(net, prefix.as_deref(), engine, extra, http_extra)
    }

    /// Like `start`, run through the command `prefix` (an `unshare` that mounts the test's
    /// /etc files first, say), which must end by running the command it is given.
    pub fn start_under(prefix: &[&str], engine: &str, extra: &str) -> Proxy {
        Proxy::start_prefixed(&Net::loopback(), Some(prefix), engine, extra, "")
    }

    fn start_prefixed(
        net: &Net,
        prefix: Option<&[&str]>,
        engine: &str,
        extra: &str,
        http_extra: &str,
    ) -> Proxy {
        let ip = net.proxy();
        let acl = net.acl();
        for _ in 0..5 {
            let dir = TempDir::new();
            let (sp, hp) = free_ports();
            let (socks, http) = (SocketAddr::new(ip, sp), SocketAddr::new(ip, hp));
            let config = format!(
                "[log]\nformat = \"json\"\nlevel = \"{LOG_LEVEL}\"\n[relay]\nengine = \"{engine}\"\n\
                 [socks]\nlisten = [\"{socks}\"]\n[http]\nlisten = [\"{http}\"]\n{http_extra}\n{acl}{extra}\n"
            );
            let mut p = Proxy {
                child: spawn_splicer(&dir.0, &config, prefix),
                socks,
                http,
                dir,
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if std::net::TcpStream::connect(p.socks).is_ok()
                    && std::net::TcpStream::connect(p.http).is_ok()
                {
                    return p;
                }
                if let Ok(Some(status)) = p.child.try_wait() {
                    let log = p.log();
                    // A port was taken meanwhile, or is one the test's own sections chose
                    // too (refused as given twice): again, on other ports.
                    assert!(
                        log.contains("cannot listen") || log.contains("is given twice"),
                        "splicer exited ({status}) before listening:\n{log}"
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "splicer did not listen on {} and {}:\n{}",
                    p.socks,
                    p.http,
                    p.log()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("splicer could not listen on free ports five times");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("splicer.log")).unwrap_or_default()
    }

    /// Access-log lines (JSON) so far.
    pub fn access_lines(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains("\"target\":\"access\""))
            .map(String::from)
            .collect()
    }

    /// Waits until an access line containing all `parts` shows up.
    pub fn wait_access(&self, parts: &[&str]) -> String {
        let mut with = vec!["\"target\":\"access\""];
        with.extend_from_slice(parts);
        self.wait_log(&with)
    }

    /// Waits until a log line containing all `parts` shows up, at most 10 s (then the test
    /// fails with the log).
    pub fn wait_log(&self, parts: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(l) = self
                .log()
                .lines()
                .find(|l| parts.iter().all(|p| l.contains(p)))
            {
                return l.to_string();
            }
            if Instant::now() > deadline {
                panic!("no log line with {parts:?}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn signal(&self, name: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status();
    }

    pub fn sigterm(&self) {
        self.signal("TERM");
    }

    /// Waits until `addr` (a listener of a front end the test configured itself) accepts
    /// connections, at most 10 s (then the test fails with the log).
    pub fn wait_listening(&self, addr: SocketAddr) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "not listening on {addr}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for splicer to exit, polling, at most `within` (then the test fails with its
    /// log; dropping the `Proxy` kills it).
    pub async fn exited(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "splicer did not exit within {within:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed (by its PID) and reaped when dropped, so that a test that fails
/// halfway leaves no process behind. Derefs to the [`Child`].
pub struct Running(pub Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes the config and spawns splicer (optionally through a command prefix such as
/// `ip netns exec NAME`), logging to `dir/splicer.log`.
pub fn spawn_splicer(dir: &Path, config: &str, prefix: Option<&[&str]>) -> Child {
    let cfg = dir.join("splicer.toml");
    std::fs::write(&cfg, config).unwrap();
    let log = std::fs::File::create(dir.join("splicer.log")).unwrap();
    let mut cmd = match prefix {
        Some(p) => {
            let mut c = Command::new(p[0]);
            c.args(&p[1..]).arg(splicer_bin());
            c
        }
        None => Command::new(splicer_bin()),
    };
    cmd.arg("run")
        .arg("--config")
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    cmd.env_remove("RUST_LOG");
    cmd.spawn().expect("spawn splicer")
}

pub fn wait_listening(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "splicer did not listen on {addr}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs curl with `args`, hashing its stdout; returns (exit code, bytes, sha256 hex, stderr).
pub async fn curl(args: Vec<String>) -> (i32, u64, String, String) {
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new("curl")
            .args(["-sS", "--max-time", "120"])
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("curl is installed (the README's test command installs it)");
        let mut out = child.stdout.take().unwrap();
        let mut h = Sha256::new();
        let mut n = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let k = out.read(&mut buf).unwrap();
            if k == 0 {
                break;
            }
            h.update(&buf[..k]);
            n += k as u64;
        }
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let code = child.wait().unwrap().code().unwrap_or(-1);
        (code, n, hex(&h.finalize()), err)
    })
    .await
    .unwrap()
}

pub fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

pub use splicer_origin::content::hex;

/// SHA-256 of several pieces of the origin's content, one after the other: `(len, seed)`
/// each (what curl prints for several URLs fetched in a row).
pub fn expected_digest_of(parts: &[(u64, u64)]) -> String {
    let mut h = Sha256::new();
    for &(len, seed) in parts {
        crate::origin::Pattern::new(seed).feed(len, |chunk| h.update(chunk));
    }
    hex(&h.finalize())
}

/// SHA-256 of the origin's deterministic content.
pub fn expected_digest(len: u64, seed: u64) -> String {
    let mut h = Sha256::new();
    crate::origin::Pattern::new(seed).feed(len, |chunk| h.update(chunk));
    hex(&h.finalize())
}

/// SOCKS5 CONNECT through `proxy`; `Err(reply code)` on a failure reply, `Err(255)` when the
/// proxy closed the connection instead.
pub async fn socks_connect(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    auth: Option<(&str, &str)>,
) -> Result<TcpStream, u8> {
    use splicer_wire::socks5::{Addr, Command, Greeting, Method, Reply, Request, UserPass};
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let mut out = Vec::new();
    let method = if auth.is_some() {
        Method::UserPass
    } else {
        Method::NoAuth
    };
    Greeting::new(vec![method]).unwrap().encode(&mut out);
    s.write_all(&out).await.map_err(|_| 255u8)?;
    let mut sel = [0u8; 2];
    s.read_exact(&mut sel).await.map_err(|_| 255u8)?;
    if sel[1] == 0xff {
        return Err(0xff);
    }
    if let Some((u, p)) = auth {
        out.clear();
        UserPass::new(u.as_bytes(), p.as_bytes())
            .unwrap()
            .encode(&mut out);
        s.write_all(&out).await.unwrap();
        let mut r = [0u8; 2];
        s.read_exact(&mut r).await.map_err(|_| 255u8)?;
        if r[1] != 0 {
            return Err(0xfe);
        }
    }
    let addr = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(a)) => Addr::V4(a),
        Ok(std::net::IpAddr::V6(a)) => Addr::V6(a),
        Err(_) => Addr::domain(host).unwrap(),
    };
    out.clear();
    Request {
        command: Command::Connect,
        addr,
        port,
    }
    .encode(&mut out);
    s.write_all(&out).await.unwrap();
    // Read exactly the reply, so bytes the upstream sends right after it stay in the socket.
    let mut head = [0u8; 5];
    s.read_exact(&mut head).await.map_err(|_| 255u8)?;
    let rest = match head[3] {
        1 => 4 + 2 - 1,
        4 => 16 + 2 - 1,
        3 => head[4] as usize + 2,
        _ => panic!("bad reply {head:?}"),
    };
    let mut buf = head.to_vec();
    buf.resize(5 + rest, 0);
    s.read_exact(&mut buf[5..]).await.map_err(|_| 255u8)?;
    let (reply, n) = Reply::parse(&buf).unwrap().unwrap();
    assert_eq!(n, buf.len());
    if reply.code.to_byte() == 0 {
        Ok(s)
    } else {
        Err(reply.code.to_byte())
    }
}

/// Sockets of this host in TCP state `state` (as `ss` names it: `established`,
/// `close-wait`, ...) toward `port`: the proxy's side of its upstream connections to an
/// origin listening there.
pub fn sockets_to(port: u16, state: &str) -> usize {
    let out = Command::new("ss")
        .args(["-Htn", "state", state, "dport", &format!("= :{port}")])
        .output()
        .expect("ss (iproute2) is installed by scripts/setup.sh");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// The capabilities a systemd unit grants (`AmbientCapabilities=`), lower case without
/// `CAP_`, as `setpriv` takes them.
pub fn unit_capabilities(unit: &str) -> Vec<String> {
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("the unit grants capabilities");
    line.split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_ascii_lowercase())
        .collect()
}

/// A command prefix running a program as user and group `ids` ("uid:gid" or names) with
/// only `caps` (inheritable and ambient), as a systemd unit with `User=` and
/// `AmbientCapabilities=` does.
pub fn as_unit_user(ids: (&str, &str), caps: &[String]) -> Vec<String> {
    let caps = caps
        .iter()
        .map(|c| format!("+{c}"))
        .collect::<Vec<_>>()
        .join(",");
    vec![
        "setpriv".into(),
        format!("--reuid={}", ids.0),
        format!("--regid={}", ids.1),
        "--clear-groups".into(),
        format!("--inh-caps={caps}"),
        format!("--ambient-caps={caps}"),
        "--".into(),
    ]
}

/// One scrape of a Splicer admin listener: the whole response (head and OpenMetrics text).
pub async fn scrape_metrics(admin: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut m = tokio::net::TcpStream::connect(admin).await.unwrap();
    m.write_all(b"GET /metrics HTTP/1.1\r\nHost: splicer\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    m.read_to_string(&mut text).await.unwrap();
    text
}
