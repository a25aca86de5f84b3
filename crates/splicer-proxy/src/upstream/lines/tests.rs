//! The lines against an origin on loopback: the memory budget, requests written together.

use super::*;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// An origin on loopback answering every request on a connection with `size` bytes of
/// `b'x'`, as pipelined requests come (it reads heads only).
async fn origin(size: usize) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..i + 4);
                        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n");
                        let mut out = head.into_bytes();
                        out.resize(out.len() + size, b'x');
                        if c.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                    match c.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

fn settings() -> Settings {
    Settings {
        depth: 4,
        cutoff: 64 << 10,
        timeout: Duration::from_secs(10),
        limits: Limits {
            max_head: 16 << 10,
            max_headers: 100,
        },
    }
}

/// Sends a `GET` on the origin's line with room, or on a new one.
async fn ask(p: &Pipelines, origin: SocketAddr, pool: &Arc<Pool>) -> oneshot::Receiver<Reply> {
    let key = origin.to_string();
    let line = match p.choose(&key, 4) {
        Some(l) => l,
        None => {
            let s = TcpStream::connect(origin).await.unwrap();
            p.start(key, (s, origin, false), settings(), pool.clone())
        }
    };
    let (tx, rx) = oneshot::channel();
    line.send(Job {
        request: b"GET / HTTP/1.1\r\nHost: o\r\n\r\n".to_vec(),
        method: "GET".into(),
        reply: tx,
    });
    rx
}

async fn body_of(reply: oneshot::Receiver<Reply>) -> Body {
    match reply.await.unwrap() {
        Reply::Buffered { body, .. } => body,
        _ => panic!("not buffered"),
    }
}

/// Requests queued for a line before it takes them go upstream in one write: four
/// `GET`s reach the origin as one data segment (on loopback one write is one segment;
/// a write per request made four, or two with Nagle's algorithm), and each gets its
/// own answer, in order, its body with its head.
#[tokio::test]
async fn requests_queued_together_go_in_one_write() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let o = l.local_addr().unwrap();
    let p = Pipelines::new(1 << 20);
    let pool = Arc::new(Pool::new(4, Duration::from_secs(30)));
    let mut upstream = Some(TcpStream::connect(o).await.unwrap());
    let (mut c, _) = l.accept().await.unwrap();
    let key = o.to_string();
    let mut replies = Vec::new();
    for n in 0..4 {
        let line = match upstream.take() {
            Some(s) => p.start(key.clone(), (s, o, false), settings(), pool.clone()),
            None => p.choose(&key, 4).expect("room on the line"),
        };
        let (tx, rx) = oneshot::channel();
        line.send(Job {
            request: format!("GET /{n} HTTP/1.1\r\nHost: o\r\n\r\n").into_bytes(),
            method: "GET".into(),
            reply: tx,
        });
        replies.push(rx);
    }
    // The origin: the four heads, then an answer each saying which it answers.
    let mut got = Vec::new();
    while got.windows(4).filter(|w| w == b"\r\n\r\n").count() < 4 {
        let mut chunk = [0u8; 4096];
        let n = c.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the line closed");
        got.extend_from_slice(&chunk[..n]);
    }
    let info = splicer_sys::sock::tcp_info(std::os::fd::AsFd::as_fd(&c)).unwrap();
    for n in 0..4 {
        let answer = format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n/{n}");
        c.write_all(answer.as_bytes()).await.unwrap();
    }
    for (n, reply) in replies.into_iter().enumerate() {
        let mut body = body_of(reply).await;
        assert!(
            body.rest.is_none(),
            "a body read with its head came apart from it"
        );
        let chunk = body.recv().await.unwrap().unwrap();
        assert_eq!(chunk.bytes, format!("/{n}").into_bytes());
    }
    assert_eq!(
        info.data_segs_in, 1,
        "four requests in {} segments",
        info.data_segs_in
    );
}

/// The memory budget bounds what a line holds for clients: with 64 KiB and a first
/// body of 40,000 bytes not yet taken by its client, no byte of the second body is read
/// until those are let go; then it all comes, and both came on one connection.
#[tokio::test]
async fn the_budget_holds_lines_until_clients_take_their_bytes() {
    let o = origin(40_000).await;
    let p = Pipelines::new(64 << 10);
    let pool = Arc::new(Pool::new(4, Duration::from_secs(30)));
    let first = ask(&p, o, &pool).await;
    let second = ask(&p, o, &pool).await;
    assert_eq!(p.lines(), 1, "both requests on one line");
    let mut first = body_of(first).await;
    let mut second = body_of(second).await;
    let mut held = Vec::new();
    let mut got = 0;
    while got < 40_000 {
        let c = first.recv().await.unwrap().unwrap();
        got += c.bytes.len();
        held.push(c);
    }
    let waited = tokio::time::timeout(Duration::from_millis(300), second.recv()).await;
    assert!(waited.is_err(), "the second body was read past the budget");
    drop(held);
    let mut got = 0;
    while let Some(c) = second.recv().await {
        got += c.unwrap().bytes.len();
    }
    assert_eq!(got, 40_000);
    // The queue emptied: the connection went back to the pool.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!((p.lines(), pool.len()), (0, 1));
}

/// A line on a connection of its own to a listener, and the origin's side of it.
async fn line_and_origin(p: &Pipelines, pool: &Arc<Pool>) -> (Chosen, TcpStream, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let o = l.local_addr().unwrap();
    let s = TcpStream::connect(o).await.unwrap();
    let (c, _) = l.accept().await.unwrap();
    let key = o.to_string();
    (
        p.start(key.clone(), (s, o, false), settings(), pool.clone()),
        c,
        key,
    )
}

fn job(path: &str, method: &str) -> (Job, oneshot::Receiver<Reply>) {
    let (tx, rx) = oneshot::channel();
    let request = format!("{method} {path} HTTP/1.1\r\nHost: o\r\n\r\n").into_bytes();
    let job = Job {
        request,
        method: method.into(),
        reply: tx,
    };
    (job, rx)
}

/// Reads from the origin's side until `n` request heads came.
async fn heads(c: &mut TcpStream, n: usize) {
    let mut got = Vec::new();
    while got.windows(4).filter(|w| w == b"\r\n\r\n").count() < n {
        let mut chunk = [0u8; 4096];
        let k = c.read(&mut chunk).await.unwrap();
        assert!(k > 0, "the line closed");
        got.extend_from_slice(&chunk[..k]);
    }
}

/// What a request got, with its body read whole.
async fn outcome(rx: oneshot::Receiver<Reply>) -> String {
    match rx.await {
        Ok(Reply::Buffered { mut body, .. }) => {
            let mut got = Vec::new();
            while let Some(Ok(c)) = body.recv().await {
                got.extend_from_slice(&c.bytes);
            }
            format!("answer {}", String::from_utf8_lossy(&got))
        }
        Ok(Reply::Reissue { .. }) | Err(_) => "reissue".into(),
        Ok(Reply::Failed(e)) => format!("failed {}", e.end()),
        Ok(Reply::Handoff { .. }) => "handoff".into(),
    }
}

/// Issue 34, item 2: bytes an origin sends past a framed answer are never the next client's
/// answer. Past `Content-Length`, and as the body of a `HEAD`, a `204` or a `304`, they
/// close the line and the request behind is asked again elsewhere (not failed, not answered
/// with them); after an answer that says it closes, nothing more is taken.
#[tokio::test]
async fn surplus_after_an_answer_closes_the_line_and_the_next_request_is_asked_again() {
    let answers: [(&str, &str); 5] = [
        (
            "GET",
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA BYTES",
        ),
        ("HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"),
        ("GET", "HTTP/1.1 204 No Content\r\n\r\nbody"),
        (
            "GET",
            "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\nbody",
        ),
        (
            "GET",
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok\
             HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!",
        ),
    ];
    for (method, answer) in answers {
        let p = Pipelines::new(1 << 20);
        let pool = Arc::new(Pool::new(4, Duration::from_secs(30)));
        let (line, mut c, key) = line_and_origin(&p, &pool).await;
        let (a, first) = job("/a", method);
        let (b, second) = job("/b", "GET");
        line.send(a);
        p.choose(&key, 4).expect("room").send(b);
        heads(&mut c, 2).await;
        c.write_all(answer.as_bytes()).await.unwrap();
        let first = outcome(first).await;
        assert!(first.starts_with("answer"), "{answer:?}: {first}");
        assert_eq!(outcome(second).await, "reissue", "{answer:?}");
        assert_eq!(p.lines(), 0, "{answer:?}: the line still runs");
    }
}

/// Issue 34, item 2: an answer cannot come before its request was written. Bytes already
/// in the line's socket when a request is written (an origin that answered one request
/// twice, before the next was sent) are not that request's answer: the line closes and the
/// request is asked again, whichever the line takes first (the new request or the bytes).
/// Each round is such a race; without the check about half of them handed the second
/// answer to the second request.
#[tokio::test]
async fn an_answer_that_came_before_its_request_is_surplus() {
    for round in 0..12 {
        let p = Pipelines::new(1 << 20);
        let pool = Arc::new(Pool::new(4, Duration::from_secs(30)));
        let (line, mut c, key) = line_and_origin(&p, &pool).await;
        let (a, first) = job("/a", "GET");
        line.send(a);
        heads(&mut c, 1).await;
        // Half of the first answer: the line reads it and waits for the rest.
        c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab")
            .await
            .unwrap();
        let mut body = match first.await.unwrap() {
            Reply::Buffered { body, .. } => body,
            _ => panic!("round {round}: not buffered"),
        };
        assert_eq!(body.recv().await.unwrap().unwrap().bytes, b"ab");
        // The rest, then a second answer to the same request, both in the line's socket
        // before the next request is given to the line (this runtime has one thread: the
        // line runs again only when this task waits).
        c.write_all(b"cdHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!")
            .await
            .unwrap();
        let (b, second) = job("/b", "GET");
        p.choose(&key, 4).expect("room").send(b);
        assert_eq!(body.recv().await.unwrap().unwrap().bytes, b"cd");
        assert_eq!(outcome(second).await, "reissue", "round {round}");
    }
}

/// A line is chosen while its connection opens: requests that come meanwhile queue on it
/// (up to the depth) and are answered once it runs, instead of each opening a connection
/// (a burst of 60 first requests opened 60). An opening that gets no connection leaves the
/// registry, and what queued on it is dropped, which its senders take as "ask again".
#[tokio::test]
async fn requests_queue_on_a_line_while_it_connects() {
    let o = origin(10).await;
    let key = o.to_string();
    let pool = Arc::new(Pool::new(4, Duration::from_secs(60)));
    let p = Pipelines::new(1 << 20);
    let opening = p.open(key.clone(), settings());
    let mut replies = Vec::new();
    for path in ["/b", "/c", "/d"] {
        let line = p.choose(&key, 4).expect("the opening line has room");
        let (job, rx) = job(path, "GET");
        line.send(job);
        replies.push(rx);
    }
    assert!(p.choose(&key, 4).is_none(), "four on a line of depth four");
    assert_eq!(p.lines(), 1);
    let s = TcpStream::connect(o).await.unwrap();
    let (first, rx) = job("/a", "GET");
    opening.run((s, o, false), pool).send(first);
    replies.insert(0, rx);
    for rx in replies {
        assert!(matches!(rx.await.unwrap(), Reply::Buffered { .. }));
    }

    // No connection: the opening goes, and a request queued on it hears nothing.
    let failed = p.open("192.0.2.1:80".into(), settings());
    let line = p
        .choose("192.0.2.1:80", 4)
        .expect("choosable while it connects");
    let (job, rx) = job("/e", "GET");
    line.send(job);
    drop(failed);
    assert!(p.choose("192.0.2.1:80", 4).is_none(), "out of the registry");
    assert!(rx.await.is_err(), "its sender asks again");
}
