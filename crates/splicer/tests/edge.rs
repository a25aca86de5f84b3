//! The `edge` front end (a reverse proxy) against a real `splicer` process and real origins:
//! routing by Host and path prefix, what the origin sees (origin form, the client's Host,
//! X-Forwarded-For, Forwarded, Via), round-robin and failing over past a server that cannot
//! be reached, pooled upstream connections, curl through it with digests, and the requests
//! it refuses (no route, CONNECT, HTTP/1.1 without Host).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use splicer_testkit::recorder::{read_head, read_response, scripted};
use splicer_testkit::{curl, expected_digest, free_port, origin, s, ClosedPort, Proxy};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

splicer_testkit::per_engine!(
    routes_by_host_and_prefix_and_says_who_asked,
    servers_take_turns_and_a_dead_one_is_passed_over,
    upstream_connections_are_pooled_across_clients,
    what_the_edge_refuses,
    health_checks_take_a_server_out_and_bring_it_back,
    a_close_delimited_answer_to_a_closing_client_goes_whole,
);

/// Splicer with an `[edge]` section listening on a free port, `groups_and_routes` after it.
fn start(engine: &str, groups_and_routes: &str) -> (Proxy, SocketAddr) {
    let port = free_port();
    let extra = format!(
        "[edge]\nlisten = [\"127.0.0.1:{port}\"]\nvia = \"edge-test\"\n{groups_and_routes}"
    );
    let p = Proxy::start(engine, &extra);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    p.wait_listening(addr);
    (p, addr)
}

fn group(name: &str, servers: &[SocketAddr], balance: &str) -> String {
    let list: Vec<String> = servers.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "[[edge.upstream]]\nname = \"{name}\"\nservers = [{}]\nbalance = \"{balance}\"\n",
        list.join(", ")
    )
}

/// One request on a new connection: (status, head, body).
async fn get(edge: SocketAddr, raw: &str) -> (u16, String, Vec<u8>) {
    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(raw.as_bytes()).await.unwrap();
    read_response(&mut c, &mut Vec::new(), false).await
}

/// A close-delimited answer to an HTTP/1.0 client ends both connections: a forced kernel
/// engine takes it whole, as a tunnel, head and body intact (on loopback `ipsplice`
/// declines and says why); the other engines relay it as a body.
async fn a_close_delimited_answer_to_a_closing_client_goes_whole(engine: &str) {
    let o = origin::start().await;
    let config = format!(
        "{}[[edge.route]]\nupstream = \"a\"\n",
        group("a", &[o], "round-robin")
    );
    let (p, edge) = start(engine, &config);
    // More than the proxy's receive buffer can hold (autotuned up to 32 MiB): the origin's
    // FIN cannot arrive before the hand-off, which a kernel engine would decline.
    let n = 64 * 1024 * 1024 + 1;
    let url = format!("http://{edge}/close/{n}?seed=4");
    let (code, got, digest, err) = curl(s(&["-0", "-H", "Host: w.test", &url])).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!((got, digest), (n, expected_digest(n, 4)));
    let line = p.wait_access(&["\"front\":\"edge\"", "\"status\":200"]);
    splicer_testkit::moved_by(engine, splicer_testkit::Moved::ToTheEnd).assert(&line);
}

async fn routes_by_host_and_prefix_and_says_who_asked(engine: &str) {
    let (a, a_conns) = origin::start_counted().await;
    let (b, b_conns) = origin::start_counted().await;
    let config = format!(
        "{}{}[[edge.route]]\nhosts = [\"a.test\"]\npath_prefix = \"/headers\"\nupstream = \"a\"\n\
         [[edge.route]]\nhosts = [\"*.b.test\"]\nupstream = \"b\"\n\
         [[edge.route]]\npath_prefix = \"/bytes/\"\nupstream = \"a\"\n",
        group("a", &[a], "round-robin"),
        group("b", &[b], "round-robin"),
    );
    let (p, edge) = start(engine, &config);
    let (st, _, body) = get(
        edge,
        "GET /headers HTTP/1.1\r\nHost: A.test\r\nX-Forwarded-For: 10.9.9.9\r\n\
         X-Forwarded-Proto: https\r\n\r\n",
    )
    .await;
    assert_eq!(st, 200, "{}", p.log());
    let seen = String::from_utf8(body).unwrap();
    assert!(
        seen.starts_with("GET /headers HTTP/1.1\r\nHost: A.test\r\n"),
        "{seen}"
    );
    assert!(
        seen.contains("X-Forwarded-For: 10.9.9.9, 127.0.0.1\r\n"),
        "{seen}"
    );
    assert!(
        seen.contains("Forwarded: for=127.0.0.1;host=\"A.test\";proto=http\r\n"),
        "{seen}"
    );
    assert!(seen.contains("X-Forwarded-Proto: http\r\n"), "{seen}");
    assert!(
        !seen.contains("https"),
        "the client's own proto went up: {seen}"
    );
    assert!(seen.contains("Via: 1.1 edge-test\r\n"), "{seen}");
    assert_eq!(
        (
            a_conns.load(Ordering::SeqCst),
            b_conns.load(Ordering::SeqCst)
        ),
        (1, 0)
    );
    // Absolute form: its authority is the Host.
    let (st, _, body) = get(
        edge,
        "GET http://www.b.test/headers HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert_eq!(st, 200);
    let seen = String::from_utf8(body).unwrap();
    assert!(seen.contains("Host: www.b.test\r\n"), "{seen}");
    assert_eq!(b_conns.load(Ordering::SeqCst), 1, "not routed to b");
    // A body through the edge with curl, checked whole.
    let url = format!("http://{edge}/bytes/3000000?seed=4");
    let (code, n, digest, err) = curl(s(&[&url])).await;
    assert_eq!((code, n), (0, 3_000_000), "{err}");
    assert_eq!(digest, expected_digest(3_000_000, 4));
    p.wait_access(&[
        "\"front\":\"edge\"",
        "\"status\":200",
        &format!("\"destination\":\"{a}\""),
    ]);
}

async fn servers_take_turns_and_a_dead_one_is_passed_over(engine: &str) {
    let (a, a_conns) = origin::start_counted().await;
    let (b, b_conns) = origin::start_counted().await;
    let closed = ClosedPort::new();
    let dead = closed.addr;
    let config = format!(
        "{}{}[[edge.route]]\nhosts = [\"rr.test\"]\nupstream = \"rr\"\n\
         [[edge.route]]\nupstream = \"first\"\n",
        group("rr", &[a, dead, b], "round-robin"),
        group("first", &[dead, b], "first"),
    );
    let (p, edge) = start(engine, &config);
    for _ in 0..6 {
        let (st, ..) = get(edge, "GET /bytes/10 HTTP/1.1\r\nHost: rr.test\r\n\r\n").await;
        assert_eq!(st, 200, "{}", p.log());
    }
    // In turn a, dead (passed over to b), b, a, dead → b, b: a twice, b four times.
    let served = destinations(&p, 6);
    let count = |x: SocketAddr| served.iter().filter(|d| **d == x.to_string()).count();
    assert_eq!((count(a), count(b)), (2, 4), "{served:?}");
    let (st, ..) = get(edge, "GET /bytes/10 HTTP/1.1\r\nHost: other.test\r\n\r\n").await;
    assert_eq!(st, 200);
    let served = destinations(&p, 7);
    assert_eq!(served[6], b.to_string(), "first: the dead server, then b");
    assert!(a_conns.load(Ordering::SeqCst) >= 1 && b_conns.load(Ordering::SeqCst) >= 1);
    // A group whose servers are all dead: 502.
    let (p2, edge2) = start(
        engine,
        &format!(
            "{}[[edge.route]]\nupstream = \"d\"\n",
            group("d", &[dead], "first")
        ),
    );
    let (st, ..) = get(edge2, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(st, 502, "{}", p2.log());
}

/// The destinations of the first `n` edge access lines, in order (waits for them).
fn destinations(p: &Proxy, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines: Vec<String> = p
            .access_lines()
            .into_iter()
            .filter(|l| l.contains("\"front\":\"edge\""))
            .collect();
        if lines.len() >= n {
            return lines[..n]
                .iter()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    v["destination"].as_str().unwrap().to_string()
                })
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "{} access lines:\n{}",
            lines.len(),
            p.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn upstream_connections_are_pooled_across_clients(engine: &str) {
    let (a, a_conns) = origin::start_counted().await;
    let config = format!(
        "{}[[edge.route]]\nupstream = \"a\"\n",
        group("a", &[a], "first")
    );
    let (p, edge) = start(engine, &config);
    // 40 clients one after the other, each on its own connection: a pooled upstream
    // connection carries them (a client quick enough to ask before the last exchange gave
    // its connection back gets a new one: a few at most).
    for i in 0..40u64 {
        let raw = format!("GET /bytes/{} HTTP/1.1\r\nHost: p.test\r\n\r\n", 1000 + i);
        let (st, _, body) = get(edge, &raw).await;
        assert_eq!((st, body.len() as u64), (200, 1000 + i), "{}", p.log());
    }
    let opened = a_conns.load(Ordering::SeqCst);
    assert!(
        opened <= 3,
        "{opened} upstream connections for 40 clients: not reused"
    );
}

async fn what_the_edge_refuses(engine: &str) {
    let (a, a_conns) = origin::start_counted().await;
    let config = format!(
        "{}[[edge.route]]\nhosts = [\"only.test\"]\nupstream = \"a\"\n",
        group("a", &[a], "first")
    );
    let (p, edge) = start(engine, &config);
    let (st, ..) = get(edge, "GET / HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n").await;
    assert_eq!(st, 404, "no route");
    let (st, ..) = get(edge, "GET / HTTP/1.1\r\n\r\n").await;
    assert_eq!(st, 400, "HTTP/1.1 without Host");
    let (st, ..) = get(
        edge,
        "GET / HTTP/1.1\r\nHost: only.test\r\nHost: only.test\r\n\r\n",
    )
    .await;
    assert_eq!(st, 400, "two Host fields");
    let (st, ..) = get(edge, "GET / HTTP/1.1\r\nHost: only.test:0x50\r\n\r\n").await;
    assert_eq!(st, 400, "a Host that is no authority");
    let (st, ..) = get(
        edge,
        &format!("CONNECT {a} HTTP/1.1\r\nHost: only.test\r\n\r\n"),
    )
    .await;
    assert_eq!(st, 405, "CONNECT");
    assert_eq!(
        a_conns.load(Ordering::SeqCst),
        0,
        "a refused request reached the origin"
    );
    p.wait_access(&["\"front\":\"edge\"", "\"status\":404", "no-route"]);
}

/// An origin whose `/health` answers 200 or 503 as `healthy` says, and 200 to the rest.
async fn checked_origin(healthy: Arc<AtomicBool>) -> SocketAddr {
    scripted(move |mut s| {
        let healthy = healthy.clone();
        async move {
            let mut buf = Vec::new();
            while let Some(head) = read_head(&mut s, &mut buf).await {
                let status = match head.starts_with(b"GET /health ") {
                    true if !healthy.load(Ordering::SeqCst) => "503 Busy",
                    _ => "200 OK",
                };
                let reply = format!("HTTP/1.1 {status}\r\nContent-Length: 2\r\n\r\nok");
                if s.write_all(reply.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    })
    .await
}

/// Waits for a log line with `text` after the first `seen` such lines.
fn wait_log(p: &Proxy, text: &str, seen: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.log().matches(text).count() <= seen {
        assert!(
            Instant::now() < deadline,
            "no {text:?} in the log:\n{}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn health_checks_take_a_server_out_and_bring_it_back(engine: &str) {
    let healthy = Arc::new(AtomicBool::new(true));
    let a = checked_origin(healthy.clone()).await;
    let b = checked_origin(Arc::new(AtomicBool::new(true))).await;
    let config = format!(
        "{}[edge.upstream.health]\npath = \"/health\"\ninterval = \"50ms\"\nfall = 2\nrise = 2\n\
         [[edge.route]]\nupstream = \"g\"\n",
        group("g", &[a, b], "round-robin")
    );
    let (p, edge) = start(engine, &config);
    let mut total = 0;
    // Four requests per phase; which server answered, from the access lines.
    let phase = |total: &mut usize| {
        let p = &p;
        let start = *total;
        *total += 4;
        let end = *total;
        async move {
            for _ in start..end {
                let (st, ..) = get(edge, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n").await;
                assert_eq!(st, 200, "{}", p.log());
            }
            destinations(p, end)[start..].to_vec()
        }
    };
    let served = phase(&mut total).await;
    assert!(
        served.contains(&a.to_string()) && served.contains(&b.to_string()),
        "{served:?}"
    );
    healthy.store(false, Ordering::SeqCst);
    wait_log(&p, "edge server down", 0);
    let served = phase(&mut total).await;
    assert!(
        served.iter().all(|d| *d == b.to_string()),
        "a is out: {served:?}"
    );
    healthy.store(true, Ordering::SeqCst);
    wait_log(&p, "edge server up", 0);
    let served = phase(&mut total).await;
    assert!(served.contains(&a.to_string()), "a is back: {served:?}");
}
