//! The HTTP front end's protocol handling against a real `splicer` process: what reaches the
//! origin, HTTP/1.0 clients, HEAD, pipelining, origin-form requests.

use std::time::Duration;

use splicer_testkit::recorder::{read_head, scripted, Recorder};
use splicer_testkit::{curl, origin, s, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

splicer_testkit::per_engine!(
    origin_sees_a_clean_rewritten_request,
    each_request_goes_to_the_origin_it_names,
    http10_client_gets_http10_upstream_and_keep_alive_on_request,
    head_and_pipelined_requests_keep_their_order,
    origin_form_and_bad_targets_are_400,
    upstream_pool_reuse_and_idle_timeout,
    connection_threads_serve_and_share_the_pool,
    the_shared_runtime_serves_and_shares_the_pool,
    chunked_wins_over_content_length,
    only_idempotent_requests_are_sent_again,
);

/// Reads one response with a Content-Length body; returns (head text, body).
async fn response(c: &mut TcpStream, buf: &mut Vec<u8>, head_only: bool) -> (String, Vec<u8>) {
    let (_, head, body) = splicer_testkit::recorder::read_response(c, buf, head_only).await;
    (head, body)
}

async fn origin_sees_a_clean_rewritten_request(engine: &str) {
    let o = origin::start().await;
    let p = Proxy::start(engine, "");
    let mut c = TcpStream::connect(p.http).await.unwrap();
    let req = format!(
        "GET http://127.0.0.1:{}/headers?x=1 HTTP/1.1\r\nHost: wrong.example\r\nConnection: keep-alive, X-Drop\r\n\
         X-Drop: secret\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\n\
         X-Keep: 1\r\n\r\n",
        o.port()
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let (head, body) = response(&mut c, &mut buf, false).await;
    let seen = String::from_utf8(body).unwrap();
    assert!(seen.starts_with("GET /headers?x=1 HTTP/1.1\r\n"), "{seen}");
    assert!(
        seen.contains(&format!("Host: 127.0.0.1:{}\r\n", o.port())),
        "{seen}"
    );
    assert!(
        seen.contains("X-Keep: 1\r\n") && seen.contains("Via: 1.1 splicer\r\n"),
        "{seen}"
    );
    for gone in [
        "X-Drop",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE:",
        "Connection:",
        "wrong.example",
    ] {
        assert!(!seen.contains(gone), "{gone} reached the origin:\n{seen}");
    }
    assert!(head.contains("Via: 1.1 splicer\r\n"), "{head}");
}

/// A kept-alive client naming one origin, then another, then the first again (also with
/// its default port spelled out, and in capitals) reaches each: the proxy goes on to a
/// client's last destination only while the target names it.
async fn each_request_goes_to_the_origin_it_names(engine: &str) {
    let a = origin::start().await;
    let b = origin::start().await;
    let p = Proxy::start(engine, "");
    let mut c = TcpStream::connect(p.http).await.unwrap();
    let mut buf = Vec::new();
    let (ha, hb) = (
        format!("127.0.0.1:{}", a.port()),
        format!("127.0.0.1:{}", b.port()),
    );
    let asked = [
        (&ha, "/headers?1"),
        (&ha, "/headers?2"),
        (&hb, "/headers?3"),
        (&ha, "/headers?4"),
        (&hb, "/headers?5"),
        (&hb, "/headers?6"),
    ];
    for (authority, path) in asked {
        let req = format!("GET http://{authority}{path} HTTP/1.1\r\nHost: x\r\n\r\n");
        c.write_all(req.as_bytes()).await.unwrap();
        let (head, body) = response(&mut c, &mut buf, false).await;
        let seen = String::from_utf8(body).unwrap();
        assert!(
            seen.starts_with(&format!("GET {path} HTTP/1.1\r\n")),
            "{head}\n{seen}"
        );
        assert!(seen.contains(&format!("Host: {authority}\r\n")), "{seen}");
    }
}

async fn http10_client_gets_http10_upstream_and_keep_alive_on_request(engine: &str) {
    let o = origin::start().await;
    let p = Proxy::start(engine, "");
    let mut c = TcpStream::connect(p.http).await.unwrap();
    let mut buf = Vec::new();
    for _ in 0..2 {
        let req = format!(
            "GET http://127.0.0.1:{}/headers HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            o.port()
        );
        c.write_all(req.as_bytes()).await.unwrap();
        let (head, body) = response(&mut c, &mut buf, false).await;
        assert!(head.contains("Connection: keep-alive"), "{head}");
        assert!(String::from_utf8(body)
            .unwrap()
            .starts_with("GET /headers HTTP/1.0\r\n"));
    }
    // Without keep-alive, an HTTP/1.0 exchange ends the connection.
    let (code, n, _, err) = curl(s(&[
        "-0",
        "-x",
        &format!("http://{}", p.http),
        &format!("http://127.0.0.1:{}/bytes/5000", o.port()),
    ]))
    .await;
    assert_eq!((code, n), (0, 5000), "{err}");
    // An origin that chunks a response to HTTP/1.0 anyway: the client gets the body
    // de-chunked (no Transfer-Encoding, RFC 9112 §6.1), ended by the close.
    let mut c = TcpStream::connect(p.http).await.unwrap();
    let req = format!(
        "GET http://127.0.0.1:{}/chunked/400000?seed=6 HTTP/1.0\r\n\r\n",
        o.port()
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut all))
        .await
        .expect("closed after the body")
        .unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&all[..end]).to_ascii_lowercase();
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    let want = splicer_testkit::origin::Pattern::new(6).bytes(400_000);
    assert!(all[end..] == want[..], "the de-chunked body differs");
}

async fn head_and_pipelined_requests_keep_their_order(engine: &str) {
    let o = origin::start().await;
    let p = Proxy::start(engine, "");
    let mut c = TcpStream::connect(p.http).await.unwrap();
    let port = o.port();
    // Three requests in one write: a HEAD (Content-Length but no body), then two GETs.
    let reqs = format!(
        "HEAD http://127.0.0.1:{port}/bytes/777 HTTP/1.1\r\n\r\n\
         GET http://127.0.0.1:{port}/bytes/10?seed=5 HTTP/1.1\r\n\r\n\
         GET http://127.0.0.1:{port}/bytes/20?seed=6 HTTP/1.1\r\n\r\n"
    );
    c.write_all(reqs.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let (head, body) = response(&mut c, &mut buf, true).await;
    assert!(
        head.contains("Content-Length: 777") && body.is_empty(),
        "{head}"
    );
    let (_, b1) = response(&mut c, &mut buf, false).await;
    let (_, b2) = response(&mut c, &mut buf, false).await;
    assert_eq!(b1, origin::Pattern::new(5).bytes(10));
    assert_eq!(b2, origin::Pattern::new(6).bytes(20));
}

async fn origin_form_and_bad_targets_are_400(engine: &str) {
    let p = Proxy::start(engine, "");
    for req in [
        "GET / HTTP/1.1\r\nHost: example.org\r\n\r\n",
        "GET ftp://example.org/ HTTP/1.1\r\n\r\n",
        "GET http://user@example.org/ HTTP/1.1\r\n\r\n",
        "CONNECT example.org HTTP/1.1\r\n\r\n",
        "POST http://127.0.0.1:1/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        "POST http://127.0.0.1:1/ HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        // Request smuggling: framings a parser after Splicer could read otherwise.
        "POST http://127.0.0.1:1/ HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n",
        "POST http://127.0.0.1:1/ HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
        "POST http://127.0.0.1:1/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "POST http://127.0.0.1:1/ HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        "POST http://127.0.0.1:1/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST http://127.0.0.1:1/ HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n",
        "POST http://127.0.0.1:1/ HTTP/1.1\r\nTransfer-Encoding: \x0bchunked\r\n\r\n",
    ] {
        let mut c = TcpStream::connect(p.http).await.unwrap();
        c.write_all(req.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut got))
            .await
            .unwrap()
            .unwrap();
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.1 400 "), "{req:?} → {got}");
    }
}

/// Idle upstream connections are reused across client connections, and dropped after
/// `pool_idle_timeout`.
async fn upstream_pool_reuse_and_idle_timeout(engine: &str) {
    let (o, accepted) = origin::start_counted().await;
    let p = Proxy::start_with(engine, "", "pool_idle_timeout = \"1s\"");
    let url = format!("http://127.0.0.1:{}/bytes/100", o.port());
    let proxy = format!("http://{}", p.http);
    let count = || accepted.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..3 {
        let (code, n, _, err) = curl(s(&["-x", &proxy, &url])).await;
        assert_eq!((code, n), (0, 100), "{err}");
    }
    assert_eq!(count(), 1, "three clients, one upstream connection");
    // The proxy closes it once it has been idle for the timeout.
    assert!(
        splicer_testkit::eventually(|| splicer_testkit::sockets_to(o.port(), "established") == 0)
            .await,
        "the idle upstream connection outlived pool_idle_timeout"
    );
    let (code, _, _, err) = curl(s(&["-x", &proxy, &url])).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(count(), 2, "the idle connection expired");
}

/// With `limits.threads = 2`, clients at once are served on both connection threads and
/// every byte arrives; clients one after the other reuse one upstream connection (a thread
/// with none of its own takes the other's).
async fn connection_threads_serve_and_share_the_pool(engine: &str) {
    let log = serve_and_share_the_pool(engine, "2").await;
    assert!(
        log.contains("connection threads started") && log.contains("\"threads\":2"),
        "{log}"
    );
}

/// `limits.threads = "shared"`, the work-stealing runtime the connection threads replaced
/// as the default, serves the same clients as well; unset, connection threads serve them.
async fn the_shared_runtime_serves_and_shares_the_pool(engine: &str) {
    let log = serve_and_share_the_pool(engine, "\"shared\"").await;
    assert!(
        log.contains("client connections served by the shared runtime")
            && !log.contains("connection threads started"),
        "{log}"
    );
    let p = Proxy::start(engine, "");
    assert!(
        splicer_testkit::eventually(|| p.log().contains("connection threads started")).await,
        "the default is not connection threads: {}",
        p.log()
    );
}

/// Three clients one after the other, then 16 at once, each fetching 70,000 bytes through
/// a proxy with `limits.threads = {threads}`; returns the proxy's log.
async fn serve_and_share_the_pool(engine: &str, threads: &str) -> String {
    let (o, accepted) = origin::start_counted().await;
    let p = Proxy::start(engine, &format!("[limits]\nthreads = {threads}\n"));
    let url = format!("http://127.0.0.1:{}/bytes/70000", o.port());
    let proxy = format!("http://{}", p.http);
    let count = || accepted.load(std::sync::atomic::Ordering::SeqCst);
    for _ in 0..3 {
        let (code, n, _, err) = curl(s(&["-x", &proxy, &url])).await;
        assert_eq!((code, n), (0, 70000), "{err}");
    }
    assert_eq!(
        count(),
        1,
        "three clients one after the other, one upstream connection"
    );
    let at_once: Vec<_> = (0..16)
        .map(|_| tokio::spawn(curl(s(&["-x", &proxy, &url]))))
        .collect();
    for c in at_once {
        let (code, n, _, err) = c.await.unwrap();
        assert_eq!((code, n), (0, 70000), "{err}");
    }
    assert!(count() <= 17, "at most one upstream connection per client");
    p.log()
}

/// A request with both Transfer-Encoding and Content-Length is framed by the chunked coding,
/// and the Content-Length never reaches the origin (no request smuggling); the connection
/// closes after the response (RFC 9112 §6.1: a front end before Splicer may have framed it
/// by the length), so what followed on it is never read as a request.
async fn chunked_wins_over_content_length(engine: &str) {
    // A lenient origin that records the bytes it got: what matters is what Splicer sent.
    let rec = Recorder::default();
    let o = rec.start().await;
    let p = Proxy::start(engine, "");
    let mut c = TcpStream::connect(p.http).await.unwrap();
    // The Content-Length would end the body after "5\r\nhel"; the chunks say "hello world".
    let req = format!(
        "POST http://{o}/digest HTTP/1.1\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n\
         5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n\
         GET http://{o}/headers HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let (head, _) = response(&mut c, &mut buf, false).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("Connection: close"), "{head}");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut rest)).await;
    assert!(closed.is_ok() && rest.is_empty(), "kept open: {rest:?}");
    // The origin got one framing (chunked, no Content-Length beside it) and the body whole:
    // nothing else.
    let got = String::from_utf8_lossy(&rec.received.lock().unwrap()).into_owned();
    let (post_head, rest) = got.split_once("\r\n\r\n").expect("a head");
    let lower = post_head.to_ascii_lowercase();
    assert!(
        post_head.starts_with("POST /digest HTTP/1.1\r\n"),
        "{got:?}"
    );
    assert!(lower.contains("\r\ntransfer-encoding: chunked"), "{got:?}");
    assert!(
        !lower.contains("content-length"),
        "both framings forwarded: {got:?}"
    );
    assert_eq!(rest, "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "{got:?}");
    assert_eq!(*rec.requests.lock().unwrap(), ["POST /digest HTTP/1.1"]);
}

/// The keep-alive race made certain: an origin that answers the first request on each
/// connection and drops the connection when the second arrives. A GET on the pooled
/// connection is sent again on a new one; a POST (even without a body) is not (RFC 9110
/// §9.2.2): its client gets a 502. On the runtimes (`io = "runtime"`), whose pool the POST
/// takes the connection from: a ring keeps its own and hands a POST to the runtimes (the
/// ring's own retry: edge_ring.rs, `a_reused_connection_the_origin_closed_is_asked_again`).
async fn only_idempotent_requests_are_sent_again(engine: &str) {
    let o = scripted(|mut s| async move {
        let mut buf = Vec::new();
        let mut n = 0;
        while read_head(&mut s, &mut buf).await.is_some() {
            n += 1;
            if n == 2 {
                return;
            }
            let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
            if s.write_all(ok).await.is_err() {
                return;
            }
        }
    })
    .await;
    let p = Proxy::start(
        engine,
        "[cache]\nenabled = false\n[limits]\nio = \"runtime\"\n",
    );
    let mut c = TcpStream::connect(p.http).await.unwrap();
    let mut buf = Vec::new();
    let ask = |method: &str| format!("{method} http://{o}/x HTTP/1.1\r\nHost: x\r\n\r\n");
    for (method, status) in [("GET", 200), ("GET", 200), ("POST", 502)] {
        c.write_all(ask(method).as_bytes()).await.unwrap();
        let (head, _) = response(&mut c, &mut buf, false).await;
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status}")),
            "{method}: {head}\n{}",
            p.log()
        );
    }
}
