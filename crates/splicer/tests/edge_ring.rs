//! `limits.io = "ring"`: the edge's plain requests served by the rings (`io_uring`), every
//! other request handed to the connection threads with the bytes read so far, against a
//! real `splicer` process, real origins and curl: bodies whole in every framing, the
//! upstream connection reused, the hand-offs answered as the runtimes answer them, the
//! deadlines (head, kept-alive wait, upstream answer), a reused connection the origin
//! closed, the stop, and the configuration check.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use splicer_testkit::recorder::{ask_once, kept_alive_clients, read_head, read_response, scripted};
use splicer_testkit::{
    curl, eventually, expected_digest, free_port, origin, s, Blackhole, ClosedPort, Proxy,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Splicer with its edge on the rings, in front of `servers` (one group, every route),
/// `limits` added to its `[limits]` section.
fn start(servers: &[SocketAddr], limits: &str) -> (Proxy, SocketAddr) {
    start_with(servers, limits, "")
}

/// [`start`], with `group` added to the group's section.
fn start_with(servers: &[SocketAddr], limits: &str, group: &str) -> (Proxy, SocketAddr) {
    let port = free_port();
    let list: Vec<String> = servers.iter().map(|a| format!("\"{a}\"")).collect();
    let extra = format!(
        "[limits]\nio = \"ring\"\n{limits}\n[edge]\nlisten = [\"127.0.0.1:{port}\"]\nvia = \"ring-test\"\n\
         [[edge.upstream]]\nname = \"a\"\nservers = [{}]\nbalance = \"first\"\n{group}\n\
         [[edge.route]]\nupstream = \"a\"\n",
        list.join(", ")
    );
    let p = Proxy::start("pipe", &extra);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    p.wait_listening(addr);
    (p, addr)
}

fn edge_lines(p: &Proxy) -> Vec<String> {
    p.access_lines()
        .into_iter()
        .filter(|l| l.contains("\"front\":\"edge\""))
        .collect()
}

/// Waits until `n` edge access lines are written.
fn wait_lines(p: &Proxy, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = edge_lines(p);
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Plain GETs on one kept-alive connection, in every framing, come whole: the ring's,
/// but for a long body and a close-delimited one, whose answers it hands to the runtimes;
/// the upstream connection is reused; the origin sees the edge's rewrite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_requests_are_the_rings_and_come_whole() {
    let o = origin::start().await;
    let (p, edge) = start(&[o], "");
    let urls: Vec<String> = [
        "/bytes/1024?seed=1",
        "/bytes/3000000?seed=2",
        "/chunked/200000?seed=3",
        "/bytes/0?seed=4",
    ]
    .iter()
    .map(|u| format!("http://{edge}{u}"))
    .collect();
    for (i, (n, seed)) in [(1024u64, 1u64), (3_000_000, 2), (200_000, 3), (0, 4)]
        .iter()
        .enumerate()
    {
        let (code, got, digest, err) = curl(s(&["-H", "Host: w.test", &urls[i]])).await;
        assert_eq!(code, 0, "{err}\n{}", p.log());
        assert_eq!(
            (got, digest),
            (*n, expected_digest(*n, *seed)),
            "{}",
            urls[i]
        );
    }
    // Four on one connection: curl reuses it when given them together.
    let mut args = vec!["-H".to_string(), "Host: w.test".to_string()];
    args.extend(urls.iter().cloned());
    let (code, got, _, err) = curl(args).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(got, 1024 + 3_000_000 + 200_000);
    // HTTP/1.0: the chunked answer goes de-chunked, the connection ends.
    let (code, got, digest, err) = curl(s(&["-0", "-H", "Host: w.test", &urls[2]])).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!((got, digest), (200_000, expected_digest(200_000, 3)));
    // A close-delimited answer.
    let url = format!("http://{edge}/close/100000?seed=5");
    let (code, got, digest, err) = curl(s(&["-H", "Host: w.test", &url])).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!((got, digest), (100_000, expected_digest(100_000, 5)));
    let lines = wait_lines(&p, 10);
    assert_eq!(lines.len(), 10, "{}", p.log());
    // A long body, and one the close ends, go by the runtimes' engines (the ring hands the
    // answer over, its head not yet written, and the connection stays with them: the
    // requests after it on curl's one connection are theirs too).
    let ring = |l: &&String| l.contains("\"engine\":\"ring\"");
    for l in &lines {
        // The runtimes end a close-delimited body's line with `eof`.
        let end_ok = l.contains("\"end\":\"ok\"")
            || (l.contains("/close/") && l.contains("\"end\":\"eof\""));
        assert!(end_ok, "{l}");
        if l.contains("3000000") || l.contains("/close/") {
            assert!(!ring(&l), "{l}");
        }
    }
    // The short ones on their own connections, the first of the four on one, the
    // HTTP/1.0 one.
    assert_eq!(lines.iter().filter(ring).count(), 5, "{lines:#?}");
    assert!(
        lines
            .iter()
            .filter(|l| l.contains("\"up_reused\":\"yes\""))
            .count()
            >= 6,
        "upstream connections were not reused: {lines:#?}"
    );
    // What the origin sees: origin form, the client's Host, the forwarding fields, Via.
    let (st, _, body) = ask_once(edge, "GET /headers HTTP/1.1\r\nHost: A.test\r\n\r\n").await;
    assert_eq!(st, 200);
    let seen = String::from_utf8(body).unwrap();
    assert!(
        seen.starts_with("GET /headers HTTP/1.1\r\nHost: A.test\r\n"),
        "{seen}"
    );
    assert!(seen.contains("X-Forwarded-For: 127.0.0.1\r\n"), "{seen}");
    assert!(seen.contains("Via: 1.1 ring-test\r\n"), "{seen}");
}

/// Many clients at once, each with requests one after the other on its connection: every
/// request is answered (a completion lost among many at once stalls its connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_at_once_all_get_their_answers() {
    let o = origin::start().await;
    let (p, edge) = start(&[o], "");
    let request = |i: u64, j: u64| {
        let n = 100 + (i * 7 + j) % 900;
        let req = format!("GET /bytes/{n}?seed={j} HTTP/1.1\r\nHost: w.test\r\n\r\n");
        (req, n)
    };
    let all = kept_alive_clients(edge, (64, 100), request, Duration::from_secs(60)).await;
    assert!(all, "connections stalled\n{}", p.log());
}

/// What the ring does not serve is handed off mid-connection, with what it had read: a
/// POST after a GET on one connection (both sent at once), a CONNECT, a request with no
/// route, a head that does not parse, an HTTP/1.1 request without Host. Each answered as
/// the runtimes answer it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_it_does_not_serve_goes_to_the_runtimes() {
    let o = origin::start().await;
    let (p, edge) = start(&[o], "");
    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(
        b"GET /bytes/1 HTTP/1.1\r\nHost: w.test\r\n\r\n\
          POST /bytes/2 HTTP/1.1\r\nHost: w.test\r\nContent-Length: 5\r\n\r\nhello\
          GET /bytes/3 HTTP/1.1\r\nHost: w.test\r\n\r\n",
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    for _ in 0..3 {
        let (st, _, _) = read_response(&mut c, &mut buf, false).await;
        assert_eq!(st, 200, "{}", p.log());
    }
    let lines = wait_lines(&p, 3);
    let engine_of = |url: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!("\"url\":\"{url}\"")))
            .map(|l| l.contains("\"engine\":\"ring\""))
    };
    assert_eq!(engine_of("/bytes/1"), Some(true), "{lines:#?}");
    assert_eq!(engine_of("/bytes/2"), Some(false), "{lines:#?}");
    // Once handed off, the connection stays with the runtimes.
    assert_eq!(engine_of("/bytes/3"), Some(false), "{lines:#?}");

    let cases = [
        (
            "CONNECT w.test:443 HTTP/1.1\r\nHost: w.test:443\r\n\r\n",
            405,
        ),
        ("GET / HTTP/1.1\r\n\r\n", 400),
        (
            "GET / HTTP/1.1\r\nHost: w.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            400,
        ),
        ("GET /\x01 HTTP/1.1\r\nHost: w.test\r\n\r\n", 400),
    ];
    for (raw, want) in cases {
        let (st, _, _) = ask_once(edge, raw).await;
        assert_eq!(st, want, "{raw:?}\n{}", p.log());
    }
}

/// What origins answer badly: interim answers go to an HTTP/1.1 client (not to an
/// HTTP/1.0 one) before the final one; a head that does not parse is a 502; a body cut
/// short resets the client's connection (its answer cannot look whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_origins_answer_badly() {
    let o = scripted(|mut s| async move {
        let mut buf = Vec::new();
        while let Some(head) = read_head(&mut s, &mut buf).await {
            let head = String::from_utf8_lossy(&head).into_owned();
            let answer: &[u8] = if head.starts_with("GET /hints") {
                b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n\
                  HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            } else if head.starts_with("GET /garbage") {
                b"HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\nok"
            } else {
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n\r\npartial")
                    .await;
                return;
            };
            if s.write_all(answer).await.is_err() {
                return;
            }
        }
    })
    .await;
    let (p, edge) = start(&[o], "");
    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(b"GET /hints HTTP/1.1\r\nHost: w.test\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let (st, head, _) = read_response(&mut c, &mut buf, false).await;
    assert_eq!(st, 103, "{head}\n{}", p.log());
    assert!(head.contains("Link: </s.css>"), "{head}");
    let (st, _, body) = read_response(&mut c, &mut buf, false).await;
    assert_eq!((st, body), (200, b"ok".to_vec()));
    // An HTTP/1.0 client gets the final answer only.
    let (st, _, body) = ask_once(edge, "GET /hints HTTP/1.0\r\nHost: w.test\r\n\r\n").await;
    assert_eq!((st, body), (200, b"ok".to_vec()), "{}", p.log());

    let (st, _, _) = ask_once(edge, "GET /garbage HTTP/1.1\r\nHost: w.test\r\n\r\n").await;
    assert_eq!(st, 502, "{}", p.log());

    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(b"GET /cut HTTP/1.1\r\nHost: w.test\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut got)).await;
    let read = read.expect("the cut answer's connection did not end");
    assert!(
        read.is_err() || got.len() < 20_000,
        "a cut body looked whole ({} bytes)",
        got.len()
    );
    let lines = wait_lines(&p, 4);
    let cut = lines.iter().find(|l| l.contains("\"url\":\"/cut\""));
    assert!(
        cut.is_some_and(|l| l.contains("\"engine\":\"ring\"") && !l.contains("\"end\":\"ok\"")),
        "{lines:#?}"
    );
}

/// Servers that cannot be reached, one refusing and one whose connects hang past
/// `connect_timeout`, are passed over on the ring to the group's next, as the runtimes
/// pass them over; a group none of whose servers can be reached gets the runtimes' 502
/// from the ring (the runtimes, which would try again, do not see it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_passed_over() {
    let dead = ClosedPort::new();
    let hole = Blackhole::new().await;
    let o = origin::start().await;
    let (p, edge) = start(&[dead.addr, hole.addr, o], "connect_timeout = \"1s\"");
    let url = format!("http://{edge}/bytes/5000?seed=7");
    let (code, got, digest, err) = curl(s(&["-H", "Host: w.test", &url])).await;
    assert_eq!(code, 0, "{err}\n{}", p.log());
    assert_eq!((got, digest), (5000, expected_digest(5000, 7)));
    let lines = wait_lines(&p, 1);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].contains("\"engine\":\"ring\""), "{lines:#?}");
    assert!(
        lines[0].contains(&format!("\"destination\":\"{o}\"")),
        "{lines:#?}"
    );

    let (p2, edge2) = start(&[dead.addr], "");
    let (st, ..) = ask_once(edge2, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(st, 502, "{}", p2.log());
    let lines = wait_lines(&p2, 1);
    assert!(lines[0].contains("\"engine\":\"ring\""), "{lines:#?}");
    assert!(lines[0].contains("upstream:refused"), "{lines:#?}");
}

/// The edge's warm pool (`min_idle`) serves the rings too: a ring with no connection of its
/// own to the server takes a warm one, so its first request goes without a handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_connections_serve_the_rings_first_requests() {
    let (o, accepted) = origin::start_counted().await;
    let (p, edge) = start_with(&[o], "", "min_idle = 2");
    let warm = || accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2;
    assert!(
        eventually(warm).await,
        "the warm pool opened its connections"
    );
    let (st, ..) = ask_once(edge, "GET /bytes/10 HTTP/1.1\r\nHost: w.test\r\n\r\n").await;
    assert_eq!(st, 200, "{}", p.log());
    let lines = wait_lines(&p, 1);
    assert!(lines[0].contains("\"engine\":\"ring\""), "{lines:#?}");
    assert!(lines[0].contains("\"up_reused\":\"yes\""), "{lines:#?}");
}

/// The deadlines: a head that trickles gets its 408, an idle kept-alive client is closed,
/// an upstream that does not answer gets the client a 504.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_hold() {
    // Reads the request and never answers, until the proxy closes the connection.
    let silent = scripted(|mut s| async move {
        let mut buf = Vec::new();
        let _ = read_head(&mut s, &mut buf).await;
        let mut rest = [0u8; 64];
        while matches!(s.read(&mut rest).await, Ok(1..)) {}
    })
    .await;
    let (p, edge) = start(
        &[silent],
        "handshake_timeout = \"1s\"\nkeepalive_timeout = \"1s\"\nidle_timeout = \"1s\"\n",
    );
    // Part of a head, then nothing.
    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: w").await.unwrap();
    let started = Instant::now();
    let (st, _, _) = read_response(&mut c, &mut Vec::new(), false).await;
    assert_eq!(st, 408, "{}", p.log());
    assert!(started.elapsed() < Duration::from_secs(5));
    // No answer upstream.
    let started = Instant::now();
    let (st, _, _) = ask_once(edge, "GET / HTTP/1.1\r\nHost: w.test\r\n\r\n").await;
    assert_eq!(st, 504, "{}", p.log());
    assert!(started.elapsed() < Duration::from_secs(5));
    // A connection that sends nothing is closed after the kept-alive wait.
    let mut c = TcpStream::connect(edge).await.unwrap();
    let mut b = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut b))
        .await
        .expect("the idle connection was not closed");
    assert_eq!(n.unwrap_or(0), 0);
}

/// An idle upstream connection the origin closed: the request goes again on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_connection_the_origin_closed_is_asked_again() {
    // Answers one request per connection, then closes it: the connection the ring pooled
    // is dead when the next request takes it.
    let o = scripted(|mut s| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_some() {
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await;
        }
    })
    .await;
    let (p, edge) = start(&[o], "");
    let mut c = TcpStream::connect(edge).await.unwrap();
    let mut buf = Vec::new();
    for _ in 0..3 {
        c.write_all(b"GET / HTTP/1.1\r\nHost: w.test\r\n\r\n")
            .await
            .unwrap();
        let (st, _, body) = read_response(&mut c, &mut buf, false).await;
        assert_eq!((st, body), (200, b"ok".to_vec()), "{}", p.log());
    }
}

/// At SIGTERM the rings close their idle clients and the process ends within its grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_closes_idle_clients() {
    let o = origin::start().await;
    let (mut p, edge) = start(&[o], "shutdown_grace = \"10s\"\n");
    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(b"GET /bytes/10 HTTP/1.1\r\nHost: w.test\r\n\r\n")
        .await
        .unwrap();
    let (st, _, _) = read_response(&mut c, &mut Vec::new(), false).await;
    assert_eq!(st, 200);
    let started = Instant::now();
    p.sigterm();
    let mut b = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut b))
        .await
        .expect("the idle client was not closed at the stop");
    assert_eq!(n.unwrap_or(0), 0);
    let status = p.exited(Duration::from_secs(9)).await;
    assert!(status.success(), "{status:?}\n{}", p.log());
    assert!(started.elapsed() < Duration::from_secs(9));
}

/// The voluntary context switches of the process's ring threads so far, by thread.
fn ring_switches(pid: u32) -> Vec<u64> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("splicer-ring-") {
            continue;
        }
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let n = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap();
        out.push(n);
    }
    out
}

/// A ring with nothing to look after sleeps until it is given a connection: no wake-up
/// per tick (twenty a second) while the proxy is idle, and the first client after the
/// sleep is served on it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_ring_sleeps_until_a_client_comes() {
    let o = origin::start().await;
    let (p, edge) = start(&[o], "");
    let pid = p.child.id();
    let before = ring_switches(pid);
    assert!(!before.is_empty(), "no ring threads");
    // The window the wake-ups are counted over (a ticking ring wakes 20 times in it).
    std::thread::sleep(Duration::from_secs(1));
    let after = ring_switches(pid);
    for (b, a) in before.iter().zip(&after) {
        assert!(a - b <= 2, "an idle ring woke {} times in a second", a - b);
    }
    let t = Instant::now();
    let url = format!("http://{edge}/bytes/100?seed=1");
    let (code, got, digest, err) = curl(s(&["-H", "Host: w.test", &url])).await;
    assert_eq!((code, got), (0, 100), "{err}\n{}", p.log());
    assert_eq!(digest, expected_digest(100, 1));
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    let lines = wait_lines(&p, 1);
    assert!(lines[0].contains("\"engine\":\"ring\""), "{lines:#?}");
}

/// `io = "ring"` needs connection threads; an unknown value is refused by name.
#[test]
fn the_configuration_is_checked() {
    use splicer_proxy::config::Config;
    let edge = "[edge]\nlisten = [\"127.0.0.1:1\"]\n[[edge.upstream]]\nname = \"a\"\nservers = [\"127.0.0.1:2\"]\n[[edge.route]]\nupstream = \"a\"\n";
    let shared = format!("[limits]\nio = \"ring\"\nthreads = \"shared\"\n{edge}");
    let e = Config::from_toml(&shared).unwrap_err().to_string();
    assert!(e.contains("limits.io"), "{e}");
    let typo = format!("[limits]\nio = \"rings\"\n{edge}");
    let e = Config::from_toml(&typo).unwrap_err().to_string();
    assert!(e.contains("io"), "{e}");
    let ok = format!("[limits]\nio = \"ring\"\n{edge}");
    assert!(Config::from_toml(&ok).is_ok());
}
