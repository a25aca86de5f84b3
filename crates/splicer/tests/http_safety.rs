//! What hostile clients and misbehaving origins cannot do through the HTTP front end:
//! smuggle a request through chunked trailers, get malformed framing forwarded, use odd
//! port spellings; and what streamed responses must do: flow as they arrive. Each scenario
//! runs once per engine against a real `splicer` process and raw origins that record what
//! they received.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use splicer_testkit::recorder::{read_head, scripted, Recorder};
use splicer_testkit::{curl, origin, s, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

splicer_testkit::per_engine!(
    trailer_smuggling_reaches_no_origin,
    connection_cannot_strip_content_length,
    upstream_trailer_leftovers_never_reach_the_client,
    malformed_request_chunking_gets_400,
    http10_with_transfer_encoding_gets_400_and_close,
    odd_port_spellings_get_400,
    streamed_responses_flow_as_they_arrive,
    a_stalled_stream_is_logged_with_its_bytes_and_end,
);

const WITHIN: Duration = Duration::from_secs(10);

/// Sends `bytes`, half-closes, and reads all the proxy answers.
async fn exchange(proxy: SocketAddr, bytes: &[u8]) -> String {
    let mut c = TcpStream::connect(proxy).await.unwrap();
    c.write_all(bytes).await.unwrap();
    let _ = c.shutdown().await;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(WITHIN, c.read_to_end(&mut got)).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// Defect 1: the reproduction. A bare LF ends the trailer section for nginx; what
/// follows it used to reach the origin as a second request, past Splicer's rules and log.
async fn trailer_smuggling_reaches_no_origin(engine: &str) {
    let rec = Recorder::default();
    let o = rec.start().await;
    let p = Proxy::start(engine, "");
    let attack = format!(
        "POST http://{o}/public HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\
         X: a\n\nGET /SMUGGLED HTTP/1.1\nHost: internal.example\nX-Pad: y\r\n\r\n"
    );
    let answer = exchange(p.http, attack.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    // What followed the trailers was Splicer's to parse: an origin-form request, refused.
    assert!(answer.contains("HTTP/1.1 400 "), "{answer}");
    let requests = rec.requests.lock().unwrap().clone();
    let received = String::from_utf8_lossy(&rec.received.lock().unwrap()).into_owned();
    assert_eq!(
        requests,
        ["POST /public HTTP/1.1"],
        "origin saw:\n{received}"
    );
    assert!(!received.contains("SMUGGLED"), "{received}");
    assert!(
        received.ends_with("5\r\nhello\r\n0\r\nX: a\r\n\r\n"),
        "{received:?}"
    );
    // Trailers that are not header fields are refused before any of them goes on.
    for bad in [
        "0\r\nX: a\x00b\r\n\r\n",
        "0\r\nGET /SMUGGLED HTTP/1.1\r\n\r\n",
        "0\r\nX: a\r\n folded\r\n\r\n",
    ] {
        let before = rec.requests.lock().unwrap().len();
        let answer = exchange(
            p.http,
            format!("POST http://{o}/public HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{bad}")
                .as_bytes(),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{bad:?} → {answer}");
        let received = String::from_utf8_lossy(&rec.received.lock().unwrap()).into_owned();
        assert!(!received.contains("SMUGGLED"), "{received}");
        assert_eq!(
            rec.requests.lock().unwrap().len(),
            before,
            "{bad:?} completed a request"
        );
    }
    // Trailer fields that would change framing or routing are dropped, others go through.
    rec.received.lock().unwrap().clear();
    let answer = exchange(
        p.http,
        format!(
            "POST http://{o}/public HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=\"x\"\r\nabc\r\n\
             0\r\nContent-Length: 99\r\nHost: internal.example\r\nX-Sum: 7\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    let received = String::from_utf8_lossy(&rec.received.lock().unwrap()).into_owned();
    assert!(
        received.ends_with("\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 7\r\n\r\n"),
        "{received:?}"
    );
    p.wait_access(&["client:bad-trailer"]);
}

/// Found by the differential fuzz target: `Connection` naming `Content-Length` took the
/// framing field off with the hop-by-hop fields, and the body reached the origin as a
/// request of its own.
async fn connection_cannot_strip_content_length(engine: &str) {
    let rec = Recorder::default();
    let o = rec.start().await;
    let p = Proxy::start(engine, "");
    let body = "GET /SMUGGLED HTTP/1.1\r\n\r\n";
    // A second request after it on the same client connection: by its answer, the origin
    // has read everything the first one carried.
    let answer = exchange(
        p.http,
        format!(
            "POST http://{o}/public HTTP/1.1\r\nConnection: keep-alive, Content-Length\r\n\
             Content-Length: {}\r\n\r\n{body}GET http://{o}/after HTTP/1.1\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(answer.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{answer}");
    let requests = rec.requests.lock().unwrap().clone();
    assert_eq!(requests, ["POST /public HTTP/1.1", "GET /after HTTP/1.1"]);
}

/// Defect 1, response direction: bytes after an upstream's trailer section (here after a
/// bare-LF end) never reach the client ("Leftovers after chunking" in curl before).
async fn upstream_trailer_leftovers_never_reach_the_client(engine: &str) {
    let o = scripted(|mut s| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_some() {
            let _ = s
                .write_all(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\
                      X: a\n\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!",
                )
                .await;
            let _ = s.read(&mut [0u8; 1]).await;
        }
    })
    .await;
    let p = Proxy::start(engine, "");
    let (code, n, _, err) = curl(s(&[
        "-v",
        "-x",
        &format!("http://{}", p.http),
        &format!("http://{o}/"),
    ]))
    .await;
    assert_eq!((code, n), (0, 5), "{err}");
    assert!(!err.contains("Leftovers"), "{err}");
    // A malformed trailer from upstream: the head is out, so the client sees a reset.
    let o = scripted(|mut s| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_some() {
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX: \x01\r\n\r\n")
                .await;
            let _ = s.read(&mut [0u8; 1]).await;
        }
    })
    .await;
    let (code, _, _, err) = curl(s(&[
        "-x",
        &format!("http://{}", p.http),
        &format!("http://{o}/"),
    ]))
    .await;
    assert_ne!(code, 0, "a broken body must not look complete: {err}");
    p.wait_access(&["upstream:bad-trailer"]);
}

/// Defect 5: malformed chunked framing from a client gets a 400 (it used to get a bare
/// close), and ambiguous transfer-coding lists are refused instead of forwarded.
async fn malformed_request_chunking_gets_400(engine: &str) {
    let o = origin::start().await;
    let p = Proxy::start(engine, "");
    let post = |te: &str, body: &str| {
        format!("POST http://{o}/digest HTTP/1.1\r\nTransfer-Encoding: {te}\r\n\r\n{body}")
    };
    for body in [
        "zz\r\nhello\r\n0\r\n\r\n",
        "-1\r\nhello\r\n0\r\n\r\n",
        "0x5\r\nhello\r\n0\r\n\r\n",
        "11111111111111111\r\nhello\r\n0\r\n\r\n",
        "8000000000000000\r\nhello\r\n0\r\n\r\n",
        "5\nhello\r\n0\r\n\r\n",
        "5;a\nb\r\nhello\r\n0\r\n\r\n",
        "5;a=\x01\r\nhello\r\n0\r\n\r\n",
        "5\r\nhelloXX0\r\n\r\n",
        // Issue 34, item 6: every line ended by a bare LF. Nothing in it is a CRLF to wait
        // for: answered at once, not held until the idle timeout.
        "5\nhello\n0\n\n",
        "5\r\nhello\r\n0\n\n",
    ] {
        let answer = exchange(p.http, post("chunked", body).as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{body:?} → {answer:?}");
        assert!(answer.contains("Connection: close"), "{answer}");
    }
    for te in [
        "identity, chunked",
        "chunked, chunked",
        "chunked\r\nTransfer-Encoding: chunked",
    ] {
        let answer = exchange(p.http, post(te, "5\r\nhello\r\n0\r\n\r\n").as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{te:?} → {answer:?}");
    }
    p.wait_access(&["client:bad-chunk", "\"status\":400"]);
    // And a well-formed one still goes through, extensions and all.
    let answer = exchange(
        p.http,
        post("chunked", "5;a=b\r\nhello\r\n0\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
}

/// Defect 4: HTTP/1.0 has no transfer codings (RFC 9112 §6.1): faulty framing, 400 and close
/// (as nginx does), never forwarded as 1.0 with keep-alive.
async fn http10_with_transfer_encoding_gets_400_and_close(engine: &str) {
    let rec = Recorder::default();
    let o = rec.start().await;
    let p = Proxy::start(engine, "");
    let answer = exchange(
        p.http,
        format!(
            "POST http://{o}/x HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\
             Content-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("Connection: close"), "{answer}");
    assert_eq!(
        answer.matches("HTTP/1.1").count(),
        1,
        "closed after the 400: {answer}"
    );
    assert!(rec.requests.lock().unwrap().is_empty(), "forwarded");
}

/// Defect 6: a port has one spelling; `a:b:port` is refused, not resolved.
async fn odd_port_spellings_get_400(engine: &str) {
    let o = origin::start().await;
    let p = Proxy::start(engine, "");
    let port = o.port();
    for target in [
        format!("http://127.0.0.1:+{port}/bytes/3"),
        format!("http://127.0.0.1:0{port}/bytes/3"),
        format!("http://a:b:{port}/bytes/3"),
    ] {
        let answer = exchange(p.http, format!("GET {target} HTTP/1.1\r\n\r\n").as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{target} → {answer}");
    }
    let answer = exchange(
        p.http,
        format!("CONNECT 127.0.0.1:+{port} HTTP/1.1\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let answer = exchange(
        p.http,
        format!("GET http://127.0.0.1:{port}/bytes/3 HTTP/1.1\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
}

/// How a streamed response is framed in `streamed_responses_flow_as_they_arrive`.
#[derive(Clone, Copy, Debug)]
enum Framing {
    Chunked,
    Length,
    Close,
}

/// An origin that sends a response head and a first event, then holds the rest until
/// `go` is notified (or 20 s pass).
async fn holding_origin(framing: Framing, go: Arc<Notify>) -> SocketAddr {
    scripted(move |mut s| {
        let go = go.clone();
        async move {
            let mut buf = Vec::new();
            if read_head(&mut s, &mut buf).await.is_none() {
                return;
            }
            let (head, first, rest): (&[u8], &[u8], &[u8]) = match framing {
                Framing::Chunked => (
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
                    b"d\r\ndata: first\n\n\r\n",
                    b"e\r\ndata: second\n\n\r\n0\r\n\r\n",
                ),
                Framing::Length => (
                    b"HTTP/1.1 200 OK\r\nContent-Length: 27\r\n\r\n",
                    b"data: first\n\n",
                    b"data: second\n\n",
                ),
                Framing::Close => (
                    b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n",
                    b"data: first\n\n",
                    b"data: second\n\n",
                ),
            };
            let _ = s.write_all(head).await;
            let _ = s.write_all(first).await;
            let _ = tokio::time::timeout(Duration::from_secs(20), go.notified()).await;
            let _ = s.write_all(rest).await;
            let _ = s.shutdown().await;
            let _ = s.read(&mut [0u8; 1]).await;
        }
    })
    .await
}

/// Defect 2: every byte received from upstream reaches the client without waiting for more:
/// the first event arrives while the origin still holds the second.
async fn streamed_responses_flow_as_they_arrive(engine: &str) {
    let p = Proxy::start(engine, "");
    for framing in [Framing::Chunked, Framing::Length, Framing::Close] {
        let go = Arc::new(Notify::new());
        let o = holding_origin(framing, go.clone()).await;
        let mut c = TcpStream::connect(p.http).await.unwrap();
        c.write_all(format!("GET http://{o}/events HTTP/1.1\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut got = Vec::new();
        let first = tokio::time::timeout(WITHIN, async {
            while !String::from_utf8_lossy(&got).contains("data: first") {
                let mut b = [0u8; 4096];
                let n = c.read(&mut b).await.unwrap();
                assert!(n > 0, "closed early");
                got.extend_from_slice(&b[..n]);
            }
        })
        .await;
        assert!(
            first.is_ok(),
            "{framing:?}: the first event was held back; got {:?}",
            String::from_utf8_lossy(&got)
        );
        go.notify_one();
        let _ = tokio::time::timeout(WITHIN, c.read_to_end(&mut got)).await;
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("data: second"), "{framing:?}: {text}");
    }
}

/// Defect 2: a stream that stalls gives the client what arrived, then ends at the idle
/// timeout; the access line says how (upstream idle) and counts the bytes that went out.
async fn a_stalled_stream_is_logged_with_its_bytes_and_end(engine: &str) {
    let p = Proxy::start(engine, "[limits]\nidle_timeout = \"1s\"\n");
    let never = Arc::new(Notify::new());
    let o = holding_origin(Framing::Chunked, never).await;
    let mut c = TcpStream::connect(p.http).await.unwrap();
    c.write_all(format!("GET http://{o}/events HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(WITHIN, c.read_to_end(&mut got)).await;
    // The proxy's log goes with a failure: a fresh-clone CI run once saw no byte at all
    // here, and the bytes alone could not say where they stopped.
    assert!(
        String::from_utf8_lossy(&got).contains("data: first"),
        "{got:?}\nthe proxy's log:\n{}",
        p.log()
    );
    let line = p.wait_access(&["\"end\":\"upstream:idle\""]);
    let bytes_down: u64 = line
        .split("\"bytes_down\":")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(
        bytes_down >= 19,
        "the head and first chunk were counted: {line}"
    );
}

/// Issue 34, item 4: a request with both `Transfer-Encoding` and `Content-Length` is read by
/// its chunked body and forwarded without the length, but a front end before Splicer may
/// have framed it by the length: what follows is not surely the client's next request, so
/// the connection closes after the response (RFC 9112 §6.1), in the HTTP front end and the
/// edge alike. What followed never reaches the origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn content_length_beside_chunked_closes_the_connection() {
    let rec = Recorder::default();
    let o = rec.start().await;
    let port = splicer_testkit::free_port();
    let edge: SocketAddr = ([127, 0, 0, 1], port).into();
    let p = Proxy::start(
        "pipe",
        &format!(
            "[edge]\nlisten = [\"{edge}\"]\n[[edge.upstream]]\nname = \"o\"\nservers = [\"{o}\"]\n\
             [[edge.route]]\nupstream = \"o\"\n"
        ),
    );
    p.wait_listening(edge);
    for (front, target) in [(p.http, format!("http://{o}/post")), (edge, "/post".into())] {
        let attack = format!(
            "POST {target} HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\
             Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n\
             GET {target}/SMUGGLED HTTP/1.1\r\nHost: a.test\r\n\r\n"
        );
        let before = rec.requests.lock().unwrap().len();
        let mut c = TcpStream::connect(front).await.unwrap();
        c.write_all(attack.as_bytes()).await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(WITHIN, c.read_to_end(&mut got))
            .await
            .expect("the connection was kept open")
            .unwrap();
        let answer = String::from_utf8_lossy(&got).into_owned();
        assert!(answer.starts_with("HTTP/1.1 200 "), "{front}: {answer}");
        assert!(answer.contains("Connection: close"), "{front}: {answer}");
        assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{front}: {answer}");
        let requests = rec.requests.lock().unwrap()[before..].to_vec();
        assert_eq!(requests, ["POST /post HTTP/1.1"], "{front}");
    }
}
