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
