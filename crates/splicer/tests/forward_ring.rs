//! `limits.io = "ring"` with the forward proxy: a plain request to a destination the rules
//! allow, with no user to authenticate and the cache off, is the rings'; every other is
//! handed to the connection threads with the bytes read so far and answered as they
//! answer it. Against a real `splicer` process, real origins and curl: bodies whole, the
//! origin's view the same as the runtimes' rewrite, names resolved off the rings, the
//! hand-offs (a refused address, a body, CONNECT, a user to authenticate, the cache),
//! unreachable destinations and a lookup that hangs answered on the rings, many clients
//! at once.

use std::time::{Duration, Instant};

use splicer_testkit::recorder::{ask_once, kept_alive_clients, read_response};
use splicer_testkit::{curl, expected_digest, origin, s, Blackhole, ClosedPort, Proxy};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Splicer with its forward proxy on the rings, the cache off unless `extra` says.
fn start(extra: &str) -> Proxy {
    Proxy::start(
        "pipe",
        &format!("[limits]\nio = \"ring\"\n[cache]\nenabled = false\n{extra}"),
    )
}

/// Waits until `n` access lines of the forward proxy are written (at most 10 s).
fn wait_lines(p: &Proxy, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines: Vec<String> = p
            .access_lines()
            .into_iter()
            .filter(|l| l.contains("\"front\":\"http\""))
            .collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ring(l: &str) -> bool {
    l.contains("\"engine\":\"ring\"")
}

/// Plain GETs through the proxy come whole, the short ones on the rings with the
/// upstream connection reused; a long body's answer goes to the runtimes; the origin
/// sees the same request from the rings as from the runtimes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_requests_are_the_rings_and_come_whole() {
    let o = origin::start().await;
    let p = start("");
    let proxy = format!("http://{}", p.http);
    let sizes = [(1024u64, 1u64), (3_000_000, 2), (0, 4)];
    let urls: Vec<String> = sizes
        .iter()
        .map(|(n, seed)| format!("http://{o}/bytes/{n}?seed={seed}"))
        .collect();
    for (i, (n, seed)) in sizes.iter().enumerate() {
        let (code, got, digest, err) = curl(s(&["-x", &proxy, &urls[i]])).await;
        assert_eq!(code, 0, "{err}\n{}", p.log());
        assert_eq!(
            (got, digest),
            (*n, expected_digest(*n, *seed)),
            "{}",
            urls[i]
        );
    }
    let chunked = format!("http://{o}/chunked/200000?seed=3");
    let (code, got, digest, err) = curl(s(&["-x", &proxy, &chunked])).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!((got, digest), (200_000, expected_digest(200_000, 3)));
    // Three on one connection: curl reuses it when given them together.
    let mut args = s(&["-x", &proxy]);
    args.extend([urls[0].clone(), urls[2].clone(), urls[0].clone()]);
    let (code, got, _, err) = curl(args).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(got, 2048);
    let lines = wait_lines(&p, 7);
    assert_eq!(lines.len(), 7, "{}", p.log());
    for l in &lines {
        assert!(l.contains("\"end\":\"ok\""), "{l}");
        assert_eq!(ring(l), !l.contains("3000000"), "{l}");
    }
    assert!(
        lines.iter().any(|l| l.contains("\"up_reused\":\"yes\"")),
        "upstream connections were not reused: {lines:#?}"
    );
    // What the origin sees, from the rings and from the runtimes alike.
    let raw = format!("GET http://{o}/headers HTTP/1.1\r\nHost: {o}\r\nX-A: 1\r\n\r\n");
    let (st, _, from_ring) = ask_once(p.http, &raw).await;
    assert_eq!(st, 200);
    let runtimes = Proxy::start("pipe", "[cache]\nenabled = false\n");
    let (st, _, from_runtimes) = ask_once(runtimes.http, &raw).await;
    assert_eq!(st, 200);
    let (a, b) = (
        String::from_utf8(from_ring).unwrap(),
        String::from_utf8(from_runtimes).unwrap(),
    );
    assert!(a.starts_with("GET /headers HTTP/1.1\r\n"), "{a}");
    assert_eq!(a, b, "the rings' request differs from the runtimes'");
    let lines = wait_lines(&p, 8);
    assert!(
        lines.iter().any(|l| l.contains("/headers") && ring(l)),
        "{lines:#?}"
    );
}

/// A name is resolved off the rings and served on them; the next request to it takes the
/// idle connection without resolving again. Names resolve to `::1` and `127.0.0.1`, and
/// the origin listens on the second only: the next address is tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_resolved_off_the_rings() {
    let o = origin::start().await;
    let p = start("");
    let port = o.port();
    let mut c = TcpStream::connect(p.http).await.unwrap();
    let mut buf = Vec::new();
    for n in 1..=3 {
        let req = format!(
            "GET http://localhost:{port}/bytes/{n} HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n"
        );
        c.write_all(req.as_bytes()).await.unwrap();
        let (st, _, body) = read_response(&mut c, &mut buf, false).await;
        assert_eq!((st, body.len()), (200, n), "{}", p.log());
    }
    let lines = wait_lines(&p, 3);
    assert_eq!(lines.len(), 3, "{}", p.log());
    assert!(lines.iter().all(|l| ring(l)), "{lines:#?}");
    let reused = lines
        .iter()
        .filter(|l| l.contains("\"up_reused\":\"yes\""))
        .count();
    assert_eq!(reused, 2, "{lines:#?}");
}

/// What the rings do not serve is handed off mid-connection with what they had read,
/// and answered as the runtimes answer it: a body, then on the same connection a request
/// the rings would serve (the connection stays with the runtimes); an address the rules
/// refuse, CONNECT, an origin-form target. A name whose addresses the rules all refuse,
/// and an address that cannot be reached, are answered by the ring, with the runtimes'
/// statuses (403, 502).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_it_does_not_serve_goes_to_the_runtimes() {
    let o = origin::start().await;
    let dead = ClosedPort::new();
    let refused = ClosedPort::new();
    let acl = format!(
        "[acl]\ndefault = \"allow\"\n[[acl.rule]]\naction = \"deny\"\nports = [{}]\n",
        refused.addr.port()
    );
    let p = start(&acl);
    let mut c = TcpStream::connect(p.http).await.unwrap();
    c.write_all(
        format!(
            "GET http://{o}/bytes/1 HTTP/1.1\r\nHost: {o}\r\n\r\n\
             POST http://{o}/bytes/2 HTTP/1.1\r\nHost: {o}\r\nContent-Length: 5\r\n\r\nhello\
             GET http://{o}/bytes/3 HTTP/1.1\r\nHost: {o}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    for n in 1..=3 {
        let (st, _, body) = read_response(&mut c, &mut buf, false).await;
        assert_eq!((st, body.len()), (200, n), "{}", p.log());
    }
    let lines = wait_lines(&p, 3);
    let engine_of = |end: &str| lines.iter().find(|l| l.contains(end)).map(|l| ring(l));
    assert_eq!(engine_of("/bytes/1\""), Some(true), "{lines:#?}");
    assert_eq!(engine_of("/bytes/2\""), Some(false), "{lines:#?}");
    assert_eq!(engine_of("/bytes/3\""), Some(false), "{lines:#?}");

    let refused_port = refused.addr.port();
    let cases = [
        (
            format!("GET http://{}/ HTTP/1.1\r\nHost: x\r\n\r\n", refused.addr),
            403,
        ),
        (
            format!("GET http://localhost:{refused_port}/ HTTP/1.1\r\nHost: x\r\n\r\n"),
            403,
        ),
        (format!("CONNECT {o} HTTP/1.1\r\nHost: {o}\r\n\r\n"), 403),
        (
            format!("GET http://{}/ HTTP/1.1\r\nHost: x\r\n\r\n", dead.addr),
            502,
        ),
        ("GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_string(), 400),
    ];
    for (raw, want) in cases {
        let (st, _, _) = ask_once(p.http, &raw).await;
        assert_eq!(st, want, "{raw:?}\n{}", p.log());
    }
    let lines = wait_lines(&p, 8);
    let on_ring: Vec<&String> = lines.iter().filter(|l| ring(l)).collect();
    assert_eq!(on_ring.len(), 3, "{lines:#?}");
    let dead_line = format!("\"destination\":\"{}\"", dead.addr);
    assert!(
        on_ring
            .iter()
            .any(|l| l.contains("\"status\":502") && l.contains(&dead_line)),
        "{lines:#?}"
    );
    assert!(
        on_ring
            .iter()
            .any(|l| l.contains("\"status\":403") && l.contains("localhost")),
        "{lines:#?}"
    );
}

/// A destination whose connects hang gets the runtimes' 504 from the ring, after one
/// `connect_timeout` (the runtimes, which would wait for it again, do not see it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_that_hangs_is_the_rings_504() {
    let hole = Blackhole::new().await;
    let p = Proxy::start(
        "pipe",
        "[limits]\nio = \"ring\"\nconnect_timeout = \"1s\"\n[cache]\nenabled = false\n",
    );
    let raw = format!("GET http://{}/ HTTP/1.1\r\nHost: x\r\n\r\n", hole.addr);
    let (st, _, _) = ask_once(p.http, &raw).await;
    assert_eq!(st, 504, "{}", p.log());
    let lines = wait_lines(&p, 1);
    assert!(ring(&lines[0]), "{lines:#?}");
    assert!(lines[0].contains("upstream:connect-timeout"), "{lines:#?}");
}

/// A name whose lookup hangs holds no ring: the lookup waits on the resolver's threads
/// while the ring serves other clients, and after one `connect_timeout` the ring answers
/// the runtimes' 504. Splicer runs in a mount namespace whose /etc/hosts knows no such
/// name and whose /etc/resolv.conf names a server that never answers (a socket the test
/// holds and does not read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_that_hangs_holds_no_ring_and_is_its_504() {
    if !splicer_testkit::require_root("for a mount namespace with the test's /etc files")
        || !splicer_testkit::require(
            splicer_testkit::have_command("unshare"),
            "unshare (package util-linux)",
        )
    {
        return;
    }
    // A loopback address of this test's own for the silent name server (port 53).
    let silent = (2..250)
        .map(|i| std::net::Ipv4Addr::new(127, 0, (std::process::id() % 200) as u8 + 20, i))
        .find_map(|ip| std::net::UdpSocket::bind((ip, 53)).ok())
        .expect("no loopback address with port 53 free");
    let server = silent.local_addr().unwrap().ip();
    let dir = splicer_testkit::TempDir::new();
    let (hosts, resolv) = (dir.0.join("hosts"), dir.0.join("resolv.conf"));
    std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
    std::fs::write(
        &resolv,
        format!("nameserver {server}\noptions timeout:8 attempts:1\n"),
    )
    .unwrap();
    let script = format!(
        "mount --bind {} /etc/hosts && mount --bind {} /etc/resolv.conf && exec \"$@\"",
        hosts.display(),
        resolv.display()
    );
    let p = Proxy::start_under(
        &["unshare", "--mount", "--", "sh", "-c", &script, "sh"],
        "pipe",
        "[limits]\nio = \"ring\"\nconnect_timeout = \"1s\"\n[cache]\nenabled = false\n",
    );
    let o = origin::start().await;
    let hang = format!(
        "GET http://never.test:{}/ HTTP/1.1\r\nHost: never.test\r\n\r\n",
        o.port()
    );
    let proxy = p.http;
    let started = Instant::now();
    let hung = tokio::spawn(async move {
        let (st, _, _) = ask_once(proxy, &hang).await;
        (st, started.elapsed())
    });
    // The lookup is under way once its query reaches the silent server.
    let listen = silent.try_clone().unwrap();
    let asked = tokio::task::spawn_blocking(move || {
        listen
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        listen.recv_from(&mut [0u8; 512]).is_ok()
    });
    assert!(asked.await.unwrap(), "no lookup reached the name server");
    // Meanwhile the ring serves another client (there is one ring per connection thread:
    // every client of this test may be on the one the lookup is for).
    for n in 1..=3 {
        let raw = format!("GET http://{}/bytes/{n} HTTP/1.1\r\nHost: x\r\n\r\n", o);
        let t = Instant::now();
        let (st, _, body) = ask_once(p.http, &raw).await;
        assert_eq!((st, body.len()), (200, n), "{}", p.log());
        assert!(
            t.elapsed() < Duration::from_millis(700),
            "{:?}",
            t.elapsed()
        );
    }
    assert!(!hung.is_finished(), "the lookup did not hang: {}", p.log());
    let (st, took) = hung.await.unwrap();
    assert_eq!(st, 504, "{}", p.log());
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "{took:?}"
    );
    let lines = wait_lines(&p, 4);
    assert_eq!(lines.len(), 4, "{}", p.log());
    assert!(lines.iter().all(|l| ring(l)), "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("never.test") && l.contains("\"status\":504")),
        "{lines:#?}"
    );
    drop(silent);
}

/// With users to authenticate, or with the cache on, the runtimes serve every request:
/// the 407 and the cache's answers are theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_and_the_cache_are_the_runtimes() {
    let o = origin::start().await;
    let url = format!("http://{o}/bytes/100?seed=9");
    let p = start("[[users]]\nname = \"bob\"\npassword = \"pw\"\n");
    let proxy = format!("http://{}", p.http);
    let (code, _, _, err) = curl(s(&["-f", "-x", &proxy, &url])).await;
    assert_ne!(code, 0, "no 407 without credentials: {err}");
    let (code, got, digest, err) = curl(s(&["-x", &proxy, "-U", "bob:pw", &url])).await;
    assert_eq!(code, 0, "{err}\n{}", p.log());
    assert_eq!((got, digest), (100, expected_digest(100, 9)));
    let lines = wait_lines(&p, 2);
    assert!(
        lines.iter().any(|l| l.contains("\"status\":407")),
        "{lines:#?}"
    );
    assert!(!lines.iter().any(|l| ring(l)), "{lines:#?}");

    let cached = Proxy::start("pipe", "[limits]\nio = \"ring\"\n");
    let proxy = format!("http://{}", cached.http);
    let url = format!("http://{o}/bytes/100?seed=9");
    for _ in 0..2 {
        let (code, _, _, err) = curl(s(&["-x", &proxy, &url])).await;
        assert_eq!(code, 0, "{err}\n{}", cached.log());
    }
    let lines = wait_lines(&cached, 2);
    assert_eq!(lines.len(), 2, "{}", cached.log());
    assert!(!lines.iter().any(|l| ring(l)), "{lines:#?}");
}

/// Many clients at once, each with its requests one after the other on one connection,
/// all get their answers whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_at_once_all_get_their_answers() {
    let o = origin::start().await;
    let p = start("");
    let request = move |i: u64, j: u64| {
        let n = 100 + (i * 7 + j) % 900;
        let req = format!("GET http://{o}/bytes/{n}?seed={j} HTTP/1.1\r\nHost: {o}\r\n\r\n");
        (req, n)
    };
    let all = kept_alive_clients(p.http, (32, 50), request, Duration::from_secs(60)).await;
    assert!(all, "connections stalled\n{}", p.log());
    let lines = wait_lines(&p, 1600);
    assert_eq!(
        lines.iter().filter(|l| ring(l)).count(),
        1600,
        "{}",
        p.log()
    );
}
