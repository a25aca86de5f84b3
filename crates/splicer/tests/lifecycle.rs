//! Connection lifecycle against a real `splicer` process: every connection leaves an access
//! line (even one cut at the end of the shutdown grace), a slow upstream connect is the
//! upstream's fault, idle pooled connections are swept on a timer, failed logins are limited
//! per client address, and log files hold no colour codes.

use std::net::SocketAddr;
use std::time::Duration;

use splicer_testkit::{eventually, origin, sockets_to, socks_connect, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An origin that answers each request on a connection with a kept-alive `200` and then,
/// per `after`, keeps the connection, closes it, or sends unasked-for bytes. It counts the
/// connections it accepted and those the proxy closed.
struct PoolOrigin {
    addr: SocketAddr,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    closed_by_proxy: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Unasked-for answers written (`After::Junk`).
    junk_sent: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

#[derive(Clone, Copy)]
enum After {
    Keep,
    Close,
    Junk,
}

impl PoolOrigin {
    async fn start(after: After) -> PoolOrigin {
        use std::sync::atomic::Ordering::SeqCst;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let closed_by_proxy = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let junk_sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (a, c, j) = (accepted.clone(), closed_by_proxy.clone(), junk_sent.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                a.fetch_add(1, SeqCst);
                let (c, j) = (c.clone(), j.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    loop {
                        let mut b = [0u8; 4096];
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => {
                                c.fetch_add(1, SeqCst);
                                return;
                            }
                            Ok(n) => buf.extend_from_slice(&b[..n]),
                        }
                        while let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..i + 4);
                            let _ = s
                                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nless")
                                .await;
                            match after {
                                After::Keep => {}
                                After::Close => {
                                    tokio::time::sleep(Duration::from_millis(200)).await;
                                    return;
                                }
                                After::Junk => {
                                    tokio::time::sleep(Duration::from_millis(200)).await;
                                    let _ = s
                                        .write_all(
                                            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTALE",
                                        )
                                        .await;
                                    j.fetch_add(1, SeqCst);
                                }
                            }
                        }
                    }
                });
            }
        });
        PoolOrigin {
            addr,
            accepted,
            closed_by_proxy,
            junk_sent,
        }
    }
}

/// One `GET` through the proxy on a new client connection; returns the response text.
async fn get(proxy: SocketAddr, url: &str) -> String {
    let mut c = TcpStream::connect(proxy).await.unwrap();
    c.write_all(format!("GET {url} HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut got)).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// Defect 9: an idle pooled connection is closed by a timer once `pool_idle_timeout`
/// passes, with no later request to trigger it.
#[tokio::test(flavor = "multi_thread")]
async fn idle_pooled_connections_expire_on_a_timer() {
    use std::sync::atomic::Ordering::SeqCst;
    let o = PoolOrigin::start(After::Keep).await;
    let p = Proxy::start_with("copy", "", "pool_idle_timeout = \"1s\"");
    let answer = get(p.http, &format!("http://{}/a", o.addr)).await;
    assert!(answer.ends_with("less"), "{answer}");
    assert!(
        eventually(|| o.closed_by_proxy.load(SeqCst) == 1).await,
        "the idle upstream connection outlived pool_idle_timeout"
    );
}

/// `pool_per_origin = 0` keeps no upstream connection: each request opens one and the
/// proxy closes it after the answer (putting it back once panicked the worker).
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_of_zero_connects_per_request() {
    use std::sync::atomic::Ordering::SeqCst;
    let o = PoolOrigin::start(After::Keep).await;
    let p = Proxy::start_with("copy", "", "pool_per_origin = 0");
    // Three requests on one kept-alive client connection: the client's connection lives
    // on after each answer (the panic took it down after the first).
    let mut c = TcpStream::connect(p.http).await.unwrap();
    for i in 0..3 {
        c.write_all(format!("GET http://{}/a HTTP/1.1\r\nHost: x\r\n\r\n", o.addr).as_bytes())
            .await
            .unwrap();
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            while !got.ends_with(b"less") {
                let mut b = [0u8; 4096];
                match c.read(&mut b).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&b[..n]),
                }
            }
        });
        let _ = read.await;
        assert!(
            got.ends_with(b"less"),
            "answer {i}: {}",
            String::from_utf8_lossy(&got)
        );
    }
    assert_eq!(
        o.accepted.load(SeqCst),
        3,
        "one upstream connection per request"
    );
    assert!(
        eventually(|| o.closed_by_proxy.load(SeqCst) == 3).await,
        "the proxy kept an upstream connection"
    );
}

/// Defect 9: a pooled connection the origin closed is closed by the proxy too (no
/// CLOSE-WAIT until the next request), and one that received unasked-for bytes is never
/// handed out.
#[tokio::test(flavor = "multi_thread")]
async fn closed_or_chatty_pooled_connections_are_not_kept() {
    use std::sync::atomic::Ordering::SeqCst;
    let o = PoolOrigin::start(After::Close).await;
    let p = Proxy::start_with("copy", "", "pool_idle_timeout = \"60s\"");
    assert!(get(p.http, &format!("http://{}/a", o.addr))
        .await
        .ends_with("less"));
    let port = o.addr.port();
    assert!(
        eventually(|| sockets_to(port, "close-wait") == 0 && sockets_to(port, "established") == 0)
            .await,
        "a pooled connection sat in CLOSE-WAIT"
    );

    let o = PoolOrigin::start(After::Junk).await;
    let url = format!("http://{}/a", o.addr);
    assert!(get(p.http, &url).await.ends_with("less"));
    // The junk comes 200 ms after the response; the second request waits until it is sent
    // (on loopback it is then in the pooled connection's receive queue).
    assert!(
        eventually(|| o.junk_sent.load(SeqCst) >= 1).await,
        "no junk sent"
    );
    let answer = get(p.http, &url).await;
    assert!(
        answer.ends_with("less") && !answer.contains("STALE"),
        "{answer}"
    );
    assert_eq!(
        o.accepted.load(SeqCst),
        2,
        "the chatty connection was reused"
    );
}

/// Defect 7: connections cut when the shutdown grace ends still get their access lines,
/// saying so.
#[tokio::test(flavor = "multi_thread")]
async fn connections_cut_at_the_end_of_the_grace_are_logged() {
    let echo = origin::echo().await;
    // An origin that sends a head and then nothing: a response in progress.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let slow = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut s, _)) = l.accept().await {
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nstart")
                .await;
            held.push(s);
        }
    });
    let mut p = Proxy::start("auto", "[limits]\nshutdown_grace = \"1s\"\n");
    let mut tunnel = socks_connect(p.socks, "127.0.0.1", echo.port(), None)
        .await
        .unwrap();
    tunnel.write_all(b"ping").await.unwrap();
    let mut b = [0u8; 4];
    tunnel.read_exact(&mut b).await.unwrap();
    let mut c = TcpStream::connect(p.http).await.unwrap();
    c.write_all(format!("GET http://{slow}/ HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut b = [0u8; 64];
    let _ = c.read(&mut b).await.unwrap();
    p.sigterm();
    let (status, p) = tokio::task::spawn_blocking(move || (p.child.wait().unwrap(), p))
        .await
        .unwrap();
    assert!(status.success());
    let log = p.log();
    assert!(log.contains("grace period over"), "{log}");
    let cut: Vec<_> = p
        .access_lines()
        .into_iter()
        .filter(|l| l.contains("internal:shutdown-grace"))
        .collect();
    assert!(
        cut.iter().any(|l| l.contains("\"front\":\"socks\"")),
        "no line for the cut tunnel:\n{log}"
    );
    assert!(
        cut.iter().any(|l| l.contains("\"front\":\"http\"")),
        "no line for the cut request:\n{log}"
    );
}

/// Defect 8: the SOCKS handshake timeout covers the client's messages only; a slow upstream
/// connect runs to `connect_timeout` and gets reply 6, blamed on the upstream.
#[tokio::test(flavor = "multi_thread")]
async fn slow_socks_connect_gets_its_own_timeout() {
    let hole = splicer_testkit::Blackhole::new().await;
    let p = Proxy::start(
        "copy",
        "[limits]\nhandshake_timeout = \"1s\"\nconnect_timeout = \"3s\"\n",
    );
    let reply = socks_connect(p.socks, "127.0.0.1", hole.addr.port(), None)
        .await
        .err();
    assert_eq!(reply, Some(6), "TTL expired, SOCKS5's timeout reply");
    let line = p.wait_access(&["\"front\":\"socks\"", "upstream:connect-timeout"]);
    assert!(line.contains("\"status\":6"), "{line}");
}

/// Defect 10: a 408 line says how long the client took; a text log written to a file has
/// no colour codes.
#[tokio::test(flavor = "multi_thread")]
async fn access_log_details() {
    let p = Proxy::start("copy", "[limits]\nhandshake_timeout = \"1s\"\n");
    let mut c = TcpStream::connect(p.http).await.unwrap();
    c.write_all(b"GET http://127.0.0.1:1/ HTTP/1.1\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut got)).await;
    assert!(
        got.starts_with(b"HTTP/1.1 408 "),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    let line = p.wait_access(&["\"status\":408"]);
    assert!(!line.contains("\"duration_ms\":0,"), "{line}");

    let dir = splicer_testkit::TempDir::new();
    let (sp, hp) = (splicer_testkit::free_port(), splicer_testkit::free_port());
    let config = format!(
        "[log]\nformat = \"text\"\n[socks]\nlisten = [\"127.0.0.1:{sp}\"]\n[http]\nlisten = [\"127.0.0.1:{hp}\"]\n"
    );
    let mut child = splicer_testkit::Running(splicer_testkit::spawn_splicer(&dir.0, &config, None));
    splicer_testkit::wait_listening(([127, 0, 0, 1], hp).into());
    let _ = get(([127, 0, 0, 1], hp).into(), "http://127.0.0.1:1/").await;
    let log_path = dir.0.join("splicer.log");
    assert!(
        eventually(|| std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .contains("access"))
        .await
    );
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read(&log_path).unwrap();
    assert!(
        !log.contains(&0x1b),
        "colour codes in a log file:\n{}",
        String::from_utf8_lossy(&log)
    );
}

/// Defect 11: after `auth_failures` failed logins from one address, its logins are refused
/// unchecked for the window, the right password included (SOCKS: failure reply; HTTP: 429).
#[tokio::test(flavor = "multi_thread")]
async fn failed_logins_are_limited_per_client() {
    let o = origin::echo().await;
    let p = Proxy::start(
        "copy",
        "[limits]\nauth_failures = 3\nauth_failure_window = \"1h\"\n\
         [[users]]\nname = \"alice\"\npassword = \"secret\"\n",
    );
    assert!(
        socks_connect(p.socks, "127.0.0.1", o.port(), Some(("alice", "secret")))
            .await
            .is_ok()
    );
    for _ in 0..3 {
        assert_eq!(
            socks_connect(p.socks, "127.0.0.1", o.port(), Some(("alice", "guess")))
                .await
                .err(),
            Some(0xfe)
        );
    }
    assert_eq!(
        socks_connect(p.socks, "127.0.0.1", o.port(), Some(("alice", "secret")))
            .await
            .err(),
        Some(0xfe),
        "the right password, from a throttled address"
    );
    p.wait_access(&["client:auth-throttled"]);
    // alice:secret
    let mut c = TcpStream::connect(p.http).await.unwrap();
    c.write_all(
        b"GET http://127.0.0.1:1/ HTTP/1.1\r\nProxy-Authorization: Basic YWxpY2U6c2VjcmV0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut got)).await;
    assert!(
        got.starts_with(b"HTTP/1.1 429 "),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

/// The log and the access lines in files of their own, the access lines in Squid's native
/// format (a miss, a hit and a CONNECT through the HTTP front end, a SOCKS tunnel), written
/// whatever `level` says; SIGUSR2 reopens both after logrotate moved them away; the
/// combined format; and a Squid format without a file of its own is refused by `check`.
#[tokio::test(flavor = "multi_thread")]
async fn access_logs_in_files_in_squid_and_combined_formats() {
    let o = origin::start().await;
    let dir = splicer_testkit::TempDir::new();
    let (log, access) = (dir.0.join("splicer.log"), dir.0.join("access.log"));
    let (sp, hp) = (splicer_testkit::free_port(), splicer_testkit::free_port());
    let config = format!(
        "[log]\nlevel = \"warn\"\nfile = \"{}\"\naccess_file = \"{}\"\naccess_format = \"squid\"\n\
         [socks]\nlisten = [\"127.0.0.1:{sp}\"]\n[http]\nlisten = [\"127.0.0.1:{hp}\"]\n\
         connect_ports = [{}]\n",
        log.display(),
        access.display(),
        o.port()
    );
    let mut child = splicer_testkit::Running(splicer_testkit::spawn_splicer(&dir.0, &config, None));
    let (socks, http): (SocketAddr, SocketAddr) =
        (([127, 0, 0, 1], sp).into(), ([127, 0, 0, 1], hp).into());
    splicer_testkit::wait_listening(http);
    splicer_testkit::wait_listening(socks);
    let url = format!("http://{o}/bytes/1000?cache=1");
    let proxy = format!("http://{http}");
    for _ in 0..2 {
        let (code, n, _, err) =
            splicer_testkit::curl(splicer_testkit::s(&["-x", &proxy, &url])).await;
        assert_eq!((code, n), (0, 1000), "{err}");
    }
    let plain = format!("http://{o}/bytes/500");
    let (code, n, _, err) =
        splicer_testkit::curl(splicer_testkit::s(&["-p", "-x", &proxy, &plain])).await;
    assert_eq!((code, n), (0, 500), "{err}");
    let (code, n, _, err) = splicer_testkit::curl(splicer_testkit::s(&[
        "--socks5",
        &socks.to_string(),
        &plain,
    ]))
    .await;
    assert_eq!((code, n), (0, 500), "{err}");
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    // The probes of the listeners (closed in the handshake) come first; four more.
    let lines = || -> Vec<String> {
        read(&access)
            .lines()
            .filter(|l| !l.contains(" NONE/000 "))
            .map(String::from)
            .collect()
    };
    assert!(eventually(|| lines().len() >= 4).await, "{}", read(&access));
    let got = lines();
    // time.ms elapsed client code/status bytes method URL user hierarchy/peer type
    for l in &got {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(f.len(), 10, "{l}");
        let (secs, ms) = f[0].split_once('.').unwrap();
        assert!(
            secs.parse::<u64>().unwrap() > 1_700_000_000 && ms.len() == 3,
            "{l}"
        );
        assert!(f[1].parse::<u64>().is_ok() && f[2] == "127.0.0.1", "{l}");
    }
    let one = |what: &str| got.iter().filter(|l| l.contains(what)).count();
    let miss = " TCP_MISS/200 ";
    let miss_tail = format!(" GET {url} - HIER_DIRECT/127.0.0.1 application/octet-stream");
    assert_eq!(one(miss), 1, "{got:?}");
    assert!(
        got.iter()
            .any(|l| l.contains(miss) && l.ends_with(&miss_tail)),
        "{got:?}"
    );
    let hit = " TCP_MEM_HIT/200 ";
    assert!(
        got.iter()
            .any(|l| l.contains(hit) && l.contains(" HIER_NONE/- ")),
        "{got:?}"
    );
    // The HTTP CONNECT and the SOCKS tunnel: Squid logs a tunnel's destination as its URL.
    let tunnel = " TCP_TUNNEL/200 ";
    let tunnel_tail = format!(" CONNECT {o} - HIER_DIRECT/127.0.0.1 -");
    assert_eq!(
        got.iter()
            .filter(|l| l.contains(tunnel) && l.ends_with(&tunnel_tail))
            .count(),
        2,
        "{got:?}"
    );
    // Not in the log, which has its own file and level.
    assert!(!read(&log).contains("access"), "{}", read(&log));

    // logrotate: move both away, signal, and the next lines go to new files.
    let (old_log, old_access) = (dir.0.join("splicer.log.1"), dir.0.join("access.log.1"));
    std::fs::rename(&log, &old_log).unwrap();
    std::fs::rename(&access, &old_access).unwrap();
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-USR2", &pid])
        .status()
        .unwrap()
        .success());
    assert!(
        eventually(|| access.exists() && log.exists()).await,
        "the files were not reopened"
    );
    let (code, _, _, err) =
        splicer_testkit::curl(splicer_testkit::s(&["-x", &proxy, &plain])).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        eventually(|| read(&access).contains(" TCP_MISS/200 ")).await,
        "{}",
        read(&access)
    );
    assert_eq!(
        read(&old_access)
            .lines()
            .filter(|l| !l.contains(" NONE/000 "))
            .count(),
        4
    );
    let _ = child.kill();
    let _ = child.wait();

    // The combined format, the log on standard error (text, as given).
    let dir = splicer_testkit::TempDir::new();
    let access = dir.0.join("access.log");
    let hp = splicer_testkit::free_port();
    let config = format!(
        "[log]\naccess_file = \"{}\"\naccess_format = \"combined\"\n[http]\nlisten = [\"127.0.0.1:{hp}\"]\n",
        access.display()
    );
    let mut child = splicer_testkit::Running(splicer_testkit::spawn_splicer(&dir.0, &config, None));
    splicer_testkit::wait_listening(([127, 0, 0, 1], hp).into());
    let proxy = format!("http://127.0.0.1:{hp}");
    let (code, _, _, err) = splicer_testkit::curl(splicer_testkit::s(&[
        "-x",
        &proxy,
        "-A",
        "tester \"1\"",
        "-e",
        "http://ref.example/",
        &plain,
    ]))
    .await;
    assert_eq!(code, 0, "{err}");
    // The request, the status, the bytes sent (the head and 500 of body), the referer and
    // the agent, its quotes escaped.
    let (request, tail) = (
        format!("\"GET {plain} HTTP/1.1\" 200 "),
        " \"http://ref.example/\" \"tester \\\"1\\\"\"",
    );
    let want = |l: &str| {
        l.split_once(&request)
            .and_then(|(_, rest)| rest.split_once(' '))
            .is_some_and(|(bytes, rest)| {
                bytes.parse::<u64>().is_ok_and(|b| b > 500) && format!(" {rest}") == tail
            })
    };
    assert!(
        eventually(|| read(&access).lines().any(want)).await,
        "{}",
        read(&access)
    );
    let line = read(&access).lines().find(|l| want(l)).unwrap().to_string();
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(line.contains(" +0000] "), "{line}");
    let _ = child.kill();
    let _ = child.wait();

    // `check` refuses the Squid format without a file of its own, naming the key.
    let cfg = dir.0.join("bad.toml");
    std::fs::write(
        &cfg,
        "[log]\naccess_format = \"squid\"\n[http]\nlisten = [\"127.0.0.1:1\"]\n",
    )
    .unwrap();
    let out = std::process::Command::new(splicer_testkit::splicer_bin())
        .args(["check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("log.access_format"),
        "{err}"
    );
}
