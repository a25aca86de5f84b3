//! The `edge` front end toward `h2c` groups (HTTP/2 to origins, with prior knowledge) against
//! a real `splicer` process: HTTP/1.x clients (curl and raw) on one side; on the other an
//! HTTP/2 origin built on the `h2` crate's server, and real nginx. Requests to a server go as
//! streams of few connections, and clients that do not read stall no one else; what the
//! origin sees; bodies both ways, byte for byte;
//! framing back to HTTP/1.1 and 1.0 clients, trailers included; streaming; a reset stream;
//! an origin going away; the warm connection; health checks over HTTP/2.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sha2::{Digest, Sha256};
use splicer_testkit::recorder::read_response;
use splicer_testkit::{curl, free_port, have_command, require, s, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the test origin counts and is told.
#[derive(Default)]
struct Origin {
    /// TCP connections accepted.
    conns: AtomicUsize,
    /// Requests (streams) received.
    streams: AtomicUsize,
    /// Whether `/health` answers 200 (else 503).
    sick: AtomicBool,
    /// Set to let `/stream` send its second part.
    go: tokio::sync::Notify,
    /// Streams served per connection before a graceful `GOAWAY` (0: never).
    goaway_after: usize,
}

/// An HTTP/2 origin (prior knowledge) on a free port. Paths:
/// `/echo` (the request body back, with `Content-Length`), `/echo-unsized` (the same
/// without), `/trailers` (`abc` and a trailer), `/stream` (one part, the second once told),
/// `/reset` (a part, then `RST_STREAM`), `/big/N` (N bytes of a pattern), `/health`. Every
/// answer says what the origin saw in `x-seen-*` fields.
async fn h2_origin(goaway_after: usize) -> (SocketAddr, Arc<Origin>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let state = Arc::new(Origin {
        goaway_after,
        ..Origin::default()
    });
    let st = state.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = l.accept().await {
            let id = st.conns.fetch_add(1, Ordering::SeqCst) + 1;
            let st = st.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                let mut served = 0;
                while let Some(Ok((req, respond))) = conn.accept().await {
                    served += 1;
                    tokio::spawn(answer(req, respond, id, st.clone()));
                    if served == st.goaway_after {
                        conn.graceful_shutdown();
                    }
                }
            });
        }
    });
    (addr, state)
}

async fn answer(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    conn: usize,
    st: Arc<Origin>,
) {
    st.streams.fetch_add(1, Ordering::SeqCst);
    let (parts, mut body) = req.into_parts();
    let mut got = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        got.extend_from_slice(&chunk);
    }
    let seen = |name: &str| {
        parts
            .headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or("?"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let path = parts.uri.path().to_string();
    let mut r = http::Response::builder()
        .header("x-seen-method", parts.method.as_str())
        .header(
            "x-seen-target",
            parts.uri.path_and_query().unwrap().as_str(),
        )
        .header("x-seen-authority", parts.uri.authority().unwrap().as_str())
        .header("x-seen-xff", seen("x-forwarded-for"))
        .header("x-seen-via", seen("via"))
        .header("x-seen-length", got.len().to_string())
        .header("x-seen-conn", conn.to_string());
    let (status, sized, data): (u16, bool, Vec<u8>) = match path.as_str() {
        "/echo" => (200, true, got),
        "/echo-unsized" => (200, false, got),
        "/health" if st.sick.load(Ordering::SeqCst) => (503, true, b"sick".to_vec()),
        "/health" => (200, true, b"ok".to_vec()),
        p if p.starts_with("/big/") => (200, true, pattern(p[5..].parse().unwrap())),
        _ => (200, false, Vec::new()),
    };
    if sized {
        r = r.header("content-length", data.len().to_string());
    }
    let head = r.status(status).body(()).unwrap();
    let Ok(mut tx) = respond.send_response(head, false) else {
        return;
    };
    match path.as_str() {
        "/trailers" => {
            tx.send_data(Bytes::from_static(b"abc"), false).unwrap();
            let mut t = http::HeaderMap::new();
            t.insert("x-checksum", "900150983cd24fb0".parse().unwrap());
            tx.send_trailers(t).unwrap();
        }
        "/stream" => {
            tx.send_data(Bytes::from_static(b"first\n"), false).unwrap();
            st.go.notified().await;
            tx.send_data(Bytes::from_static(b"second\n"), true).unwrap();
        }
        p if p.starts_with("/fill/") => {
            let mut left: usize = p[6..].parse().unwrap();
            while left > 0 {
                let n = left.min(1 << 16);
                left -= n;
                if !send_part(&mut tx, Bytes::from(vec![b'x'; n]), left == 0).await {
                    return;
                }
            }
        }
        "/reset" => {
            tx.send_data(Bytes::from_static(b"partial"), false).unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            tx.send_reset(h2::Reason::INTERNAL_ERROR);
        }
        _ => send_all(&mut tx, Bytes::from(data)).await,
    }
}

/// Sends a whole body.
async fn send_all(tx: &mut h2::SendStream<Bytes>, data: Bytes) {
    send_part(tx, data, true).await;
}

/// Sends part of a body within the stream's flow-control window, as a server must; false
/// when the stream is gone.
async fn send_part(tx: &mut h2::SendStream<Bytes>, mut data: Bytes, end: bool) -> bool {
    if data.is_empty() {
        return tx.send_data(data, end).is_ok();
    }
    while !data.is_empty() {
        tx.reserve_capacity(data.len());
        let Some(Ok(n)) = std::future::poll_fn(|cx| tx.poll_capacity(cx)).await else {
            return false;
        };
        let part = data.split_to(n.min(data.len()));
        if tx.send_data(part, end && data.is_empty()).is_err() {
            return false;
        }
    }
    true
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

fn sha(b: &[u8]) -> String {
    splicer_testkit::hex(&Sha256::digest(b))
}

/// Splicer with an `[edge]` whose one group `o` speaks h2c to `servers`, `group_extra`
/// added to the group.
fn start(servers: &[SocketAddr], group_extra: &str) -> (Proxy, SocketAddr) {
    let port = free_port();
    let list: Vec<String> = servers.iter().map(|a| format!("\"{a}\"")).collect();
    let extra = format!(
        "[edge]\nlisten = [\"127.0.0.1:{port}\"]\nvia = \"edge-test\"\n\
         [[edge.upstream]]\nname = \"o\"\nservers = [{}]\nprotocol = \"h2c\"\n{group_extra}\n\
         [[edge.route]]\nupstream = \"o\"\n",
        list.join(", ")
    );
    let p = Proxy::start("pipe", &extra);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    p.wait_listening(addr);
    (p, addr)
}

/// One request on a new connection: (status, head, body).
async fn ask(edge: SocketAddr, raw: &[u8]) -> (u16, String, Vec<u8>) {
    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(raw).await.unwrap();
    read_response(&mut c, &mut Vec::new(), false).await
}

/// One request, and everything the edge sends until it closes the connection.
async fn until_close(edge: SocketAddr, raw: &[u8]) -> String {
    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(raw).await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut all))
        .await
        .expect("the edge closes the connection")
        .unwrap();
    String::from_utf8_lossy(&all).into_owned()
}

fn field<'a>(head: &'a str, name: &str) -> &'a str {
    head.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then_some(v.trim())
        })
        .unwrap_or_else(|| panic!("no {name} in:\n{head}"))
}

/// Many clients, few connections: 24 clients at once, each on its own connection to the
/// edge, get their own answers, and the origin accepted at most two connections (16
/// streams each). What it saw: the method,
/// the origin-form target, the client's Host as `:authority`, X-Forwarded-For and Via; the
/// client sees `Via: 2 edge-test`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_go_as_streams_of_few_connections() {
    let (o, st) = h2_origin(0).await;
    let (p, edge) = start(&[o], "");
    let mut set = tokio::task::JoinSet::new();
    for i in 0..24 {
        set.spawn(async move {
            let size = 1000 * i + 1;
            let ask_for = format!("GET /big/{size}?n={i} HTTP/1.1\r\nHost: site{i}.test\r\n\r\n");
            (i, size, ask(edge, ask_for.as_bytes()).await)
        });
    }
    while let Some(r) = set.join_next().await {
        let (i, size, (status, head, body)) = r.unwrap();
        assert_eq!(status, 200, "{head}\n{}", p.log());
        assert_eq!(body, pattern(size), "request {i}");
        assert_eq!(field(&head, "x-seen-method"), "GET");
        assert_eq!(field(&head, "x-seen-target"), format!("/big/{size}?n={i}"));
        assert_eq!(field(&head, "x-seen-authority"), format!("site{i}.test"));
        assert_eq!(field(&head, "x-seen-xff"), "127.0.0.1");
        assert!(
            field(&head, "x-seen-via").contains("1.1 edge-test"),
            "{head}"
        );
        assert!(field(&head, "via").contains("2 edge-test"), "{head}");
        let conn: usize = field(&head, "x-seen-conn").parse().unwrap();
        assert!(conn <= 2, "{head}");
    }
    // 16 streams a connection at most: 24 requests at once need two.
    let conns = st.conns.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&conns),
        "{conns} connections for 24 streams"
    );
    p.wait_access(&["\"engine\":\"h2\"", "\"status\":200"]);
}

/// Bodies keep every byte both ways: a 3 MiB upload with Content-Length (more than the
/// stream window, so flow control paces it) and a chunked one from curl, echoed back; the
/// echo without Content-Length reaches an HTTP/1.1 client chunked, with its trailers, and an
/// HTTP/1.0 client delimited by the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_keep_their_bytes_and_are_framed_for_each_client() {
    let (o, _) = h2_origin(0).await;
    let (p, edge) = start(&[o], "");
    let upload = pattern(3 << 20);
    let file = p.dir.0.join("upload.bin");
    std::fs::write(&file, &upload).unwrap();
    let at = format!("@{}", file.display());
    for (path, chunked) in [("/echo", false), ("/echo-unsized", false), ("/echo", true)] {
        let url = format!("http://{edge}{path}");
        let mut args = s(&["--data-binary", &at, &url]);
        if chunked {
            args.extend(s(&["-H", "Transfer-Encoding: chunked"]));
        }
        let (code, n, digest, err) = curl(args).await;
        assert_eq!(code, 0, "{path} chunked={chunked}: {err}\n{}", p.log());
        assert_eq!(
            (n, digest),
            (upload.len() as u64, sha(&upload)),
            "{path}\n{}",
            p.log()
        );
    }
    // Without Content-Length, to HTTP/1.1: chunked (read and checked by read_response).
    let post = b"POST /echo-unsized HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello";
    let (status, head, body) = ask(edge, post).await;
    assert_eq!((status, body.as_slice()), (200, &b"hello"[..]), "{head}");
    assert_eq!(field(&head, "transfer-encoding"), "chunked");
    // Trailers reach a chunked client.
    let text = until_close(
        edge,
        b"GET /trailers HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        text.ends_with("\r\n\r\n3\r\nabc\r\n0\r\nx-checksum: 900150983cd24fb0\r\n\r\n"),
        "{text}"
    );
    // To HTTP/1.0: the body ends with the connection.
    let post = b"POST /echo-unsized HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello";
    let text = until_close(edge, post).await;
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("transfer-encoding"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\nhello"), "{text}");
    assert!(text.contains("x-seen-authority: "), "{text}");
}

/// A streamed answer is passed on as it arrives: the first part reaches the client while the
/// origin holds the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_streamed_answer_flows_as_it_arrives() {
    let (o, st) = h2_origin(0).await;
    let (_p, edge) = start(&[o], "");
    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(b"GET /stream HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let first = async {
        let mut b = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains("first\n") {
            let n = c.read(&mut b).await.unwrap();
            assert!(n > 0, "closed early");
            got.extend_from_slice(&b[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(5), first)
        .await
        .expect("the first part before the origin sent the rest");
    st.go.notify_one();
    let (status, _, body) = read_response(&mut c, &mut got, false).await;
    assert_eq!((status, body.as_slice()), (200, &b"first\nsecond\n"[..]));
}

/// Clients that do not read stall only their own streams: 20 of them, each with a small
/// receive buffer, ask for 16 MB; their streams hold their windows, more than one
/// connection's window in all. A client after them still gets its answer, on a second
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_that_do_not_read_stall_only_their_own_streams() {
    let (o, st) = h2_origin(0).await;
    let (p, edge) = start(&[o], "");
    let mut stalled = Vec::new();
    for _ in 0..20 {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        let mut c = sock.connect(edge).await.unwrap();
        c.write_all(b"GET /fill/16000000 HTTP/1.1\r\nHost: a.test\r\n\r\n")
            .await
            .unwrap();
        stalled.push(c);
    }
    // Every stalled request has reached the origin (its stream holds its window).
    let arrived = splicer_testkit::eventually(|| st.streams.load(Ordering::SeqCst) >= 20).await;
    assert!(arrived, "the stalled requests did not arrive");
    let asked = curl(s(&[&format!("http://{edge}/big/100000")]));
    let (code, n, digest, err) = tokio::time::timeout(Duration::from_secs(20), asked)
        .await
        .unwrap_or_else(|_| panic!("stalled behind clients that do not read:\n{}", p.log()));
    assert_eq!(code, 0, "{err}");
    assert_eq!((n, digest), (100000, sha(&pattern(100000))));
    assert!(
        st.conns.load(Ordering::SeqCst) >= 2,
        "one connection for 21 streams"
    );
    drop(stalled);
}

/// A stream the origin resets after the head cuts its client (no clean end it could take
/// for a whole answer); the connection and the other clients go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reset_stream_cuts_its_client_only() {
    let (o, st) = h2_origin(0).await;
    let (p, edge) = start(&[o], "");
    let (code, _, _, err) = curl(s(&[&format!("http://{edge}/reset")])).await;
    assert_ne!(code, 0, "a cut answer is not a success: {err}");
    p.wait_access(&["\"end\":\"upstream:closed-in-stream\""]);
    let (code, n, digest, err) = curl(s(&[&format!("http://{edge}/big/70000")])).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!((n, digest), (70000, sha(&pattern(70000))));
    assert_eq!(
        st.conns.load(Ordering::SeqCst),
        1,
        "the connection survived the reset"
    );
}

/// An origin that sends `GOAWAY` after every 3 streams: each request is answered once, on a
/// connection opened again as the old one goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_origin_going_away_is_replaced() {
    let (o, st) = h2_origin(3).await;
    let (p, edge) = start(&[o], "");
    for i in 0..10 {
        let (code, n, digest, err) = curl(s(&[&format!("http://{edge}/big/{}", 100 + i)])).await;
        assert_eq!(code, 0, "request {i}: {err}\n{}", p.log());
        assert_eq!((n, digest), (100 + i, sha(&pattern(100 + i as usize))));
    }
    assert!(
        st.conns.load(Ordering::SeqCst) >= 4,
        "10 requests, 3 per connection"
    );
}

/// A server that speaks only HTTP/1.1 where the group says h2c: a 502 for the client, and a
/// log line that says what is likely wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_origin_without_http2_is_a_502_and_a_warning() {
    let o = splicer_testkit::origin::start().await;
    let (p, edge) = start(&[o], "");
    let (status, head, _) = ask(edge, b"GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n").await;
    assert_eq!(status, 502, "{head}");
    wait_log(
        &p,
        "does the server speak HTTP/2",
        Instant::now() + Duration::from_secs(10),
    );
}

/// `min_idle = 1` opens the connection before any client; health checks over HTTP/2 take the
/// server out and bring it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_warm_connection_and_health_checks() {
    let (o, st) = h2_origin(0).await;
    let health = "min_idle = 1\n[edge.upstream.health]\npath = \"/health\"\n\
                  interval = \"100ms\"\nfall = 2\nrise = 2\n";
    let (p, _edge) = start(&[o], health);
    let deadline = Instant::now() + Duration::from_secs(10);
    // The warm connection and the checks' own connections.
    while st.conns.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "no warm connection:\n{}",
            p.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    st.sick.store(true, Ordering::SeqCst);
    wait_log(&p, "edge server down", deadline);
    st.sick.store(false, Ordering::SeqCst);
    wait_log(&p, "edge server up", deadline + Duration::from_secs(10));
}

fn wait_log(p: &Proxy, text: &str, deadline: Instant) {
    while !p.log().contains(text) {
        assert!(Instant::now() < deadline, "no {text:?} in:\n{}", p.log());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Real nginx as an h2c origin (`listen ... http2`, prior knowledge): 16 curl clients at
/// once through the edge get its files whole, over one connection (nginx's `$connection`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nginx_as_an_h2c_origin() {
    if !require(
        have_command("nginx"),
        "nginx (scripts/setup.sh installs nginx-light)",
    ) {
        return;
    }
    let dir = splicer_testkit::TempDir::new();
    let root = dir.0.join("www");
    std::fs::create_dir(&root).unwrap();
    let file = pattern(300_000);
    std::fs::write(root.join("f.bin"), &file).unwrap();
    let port = free_port();
    let d = dir.0.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nuser root;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 256; }}\nhttp {{\n  log_format c '$connection $status';\n\
         access_log {d}/access.log c;\n  client_body_temp_path {d};\n  proxy_temp_path {d};\n\
         fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  scgi_temp_path {d};\n\
         server {{ listen 127.0.0.1:{port} http2; root {}; }}\n}}\n",
        root.display()
    );
    std::fs::write(dir.0.join("nginx.conf"), conf).unwrap();
    let mut nginx = std::process::Command::new("nginx")
        .args([
            "-c",
            &format!("{d}/nginx.conf"),
            "-e",
            &format!("{d}/error.log"),
        ])
        .spawn()
        .unwrap();
    let o: SocketAddr = ([127, 0, 0, 1], port).into();
    splicer_testkit::wait_listening(o);
    let (p, edge) = start(&[o], "");
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..16 {
        set.spawn(curl(s(&[&format!("http://{edge}/f.bin")])));
    }
    while let Some(r) = set.join_next().await {
        let (code, n, digest, err) = r.unwrap();
        assert_eq!(code, 0, "{err}\n{}", p.log());
        assert_eq!((n, digest), (file.len() as u64, sha(&file)));
    }
    let _ = nginx.kill();
    let _ = nginx.wait();
    let log = std::fs::read_to_string(dir.0.join("access.log")).unwrap();
    let conns: HashSet<&str> = log.lines().filter_map(|l| l.split(' ').next()).collect();
    assert_eq!(log.lines().count(), 16, "{log}");
    assert_eq!(conns.len(), 1, "nginx saw more than one connection:\n{log}");
}
