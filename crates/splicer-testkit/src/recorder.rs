//! Raw origins for the HTTP tests: one that runs a script per connection, and a lenient
//! one that records what it received.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An origin that runs `script` on every connection it accepts.
pub async fn scripted<F, Fut>(script: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let script = Arc::new(script);
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(script(s));
        }
    });
    addr
}

/// Reads up to the end of a head (`\r\n\r\n`); returns it, or `None` at EOF.
pub async fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(buf.drain(..i + 4).collect());
        }
        let mut b = [0u8; 4096];
        match s.read(&mut b).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
}

/// A lenient origin, as nginx is: line ends may be a bare LF, the trailer section ends at
/// the first empty line. It records the request line of every request it reads and all the
/// bytes it received, and answers each request `200 ok`.
#[derive(Clone, Default)]
pub struct Recorder {
    pub requests: Arc<Mutex<Vec<String>>>,
    pub received: Arc<Mutex<Vec<u8>>>,
}

impl Recorder {
    pub async fn start(&self) -> SocketAddr {
        let me = self.clone();
        scripted(move |s| {
            let me = me.clone();
            async move { me.serve(s).await }
        })
        .await
    }

    async fn serve(&self, mut s: TcpStream) {
        let mut buf = Vec::new();
        let mut at = 0;
        loop {
            // Lines end at LF, CR optional.
            let line = |buf: &[u8], at: &mut usize| -> Option<String> {
                let i = buf[*at..].iter().position(|&b| b == b'\n')?;
                let l = String::from_utf8_lossy(&buf[*at..*at + i])
                    .trim_end_matches('\r')
                    .to_string();
                *at += i + 1;
                Some(l)
            };
            // Whole requests are parsed from what arrived so far, again after each read.
            let mut cursor = at;
            let parsed = (|| {
                let request_line = line(&buf, &mut cursor)?;
                let mut chunked = false;
                let mut length = 0usize;
                loop {
                    let h = line(&buf, &mut cursor)?;
                    if h.is_empty() {
                        break;
                    }
                    let lower = h.to_ascii_lowercase();
                    chunked |= lower.starts_with("transfer-encoding:") && lower.contains("chunked");
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().ok()?;
                    }
                }
                if chunked {
                    loop {
                        let size = line(&buf, &mut cursor)?;
                        let size =
                            usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
                        if size == 0 {
                            while !line(&buf, &mut cursor)?.is_empty() {}
                            break;
                        }
                        cursor += size;
                        line(&buf, &mut cursor)?;
                    }
                } else {
                    cursor += length;
                    if cursor > buf.len() {
                        return None;
                    }
                }
                Some(request_line)
            })();
            if let Some(request_line) = parsed {
                at = cursor;
                self.requests.lock().unwrap().push(request_line);
                if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            }
            let mut b = [0u8; 4096];
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    buf.extend_from_slice(&b[..n]);
                    self.received.lock().unwrap().extend_from_slice(&b[..n]);
                }
            }
        }
    }
}

/// Reads one response whose body is framed by `Content-Length` (or has none) from a
/// kept-alive connection: (status, head text, body). Panics after 20 s or on an early close.
pub async fn read_response(
    c: &mut TcpStream,
    buf: &mut Vec<u8>,
    head_only: bool,
) -> (u16, String, Vec<u8>) {
    use splicer_wire::http::{BodyLength, Limits, Method, ResponseHead};
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some((h, n)) = ResponseHead::parse(buf, &Limits::default()).unwrap() {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            buf.drain(..n);
            let len = match h
                .body(if head_only {
                    &Method::Head
                } else {
                    &Method::Get
                })
                .unwrap()
            {
                BodyLength::Length(n) => n as usize,
                BodyLength::None => 0,
                BodyLength::Chunked => {
                    return (h.status, text, read_chunked(c, buf, deadline).await);
                }
                other => panic!("unexpected framing {other:?}: {text}"),
            };
            while buf.len() < len {
                read_some(c, buf, deadline).await;
            }
            return (h.status, text, buf.drain(..len).collect());
        }
        read_some(c, buf, deadline).await;
    }
}

/// A chunked body's data, its framing checked by the wire crate's reframer.
async fn read_chunked(
    c: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: tokio::time::Instant,
) -> Vec<u8> {
    use splicer_wire::chunked::{Reframer, Step};
    let mut reframer = Reframer::new(4096, splicer_wire::http::Limits::default());
    let (mut body, mut framing) = (Vec::new(), Vec::new());
    loop {
        let (used, step) = reframer.advance(buf, &mut framing).expect("valid chunking");
        buf.drain(..used);
        match step {
            Step::More => read_some(c, buf, deadline).await,
            Step::Data(n) => {
                let n = n as usize;
                while buf.len() < n {
                    read_some(c, buf, deadline).await;
                }
                body.extend(buf.drain(..n));
            }
            Step::Done => return body,
        }
    }
}

async fn read_some(c: &mut TcpStream, buf: &mut Vec<u8>, deadline: tokio::time::Instant) {
    let mut b = vec![0u8; 65536];
    let n = tokio::time::timeout_at(deadline, c.read(&mut b))
        .await
        .expect("response in time")
        .unwrap();
    assert!(n > 0, "closed early");
    buf.extend_from_slice(&b[..n]);
}

/// `clients` kept-alive connections to `proxy` at once, each asking `per` requests one
/// after the other: `request(i, j)` gives client `i`'s `j`th request and the length its
/// answer's body must have. Each answer must be a 200 of that length. `false` when they
/// were not all answered within `within` (a stalled connection).
pub async fn kept_alive_clients<F>(
    proxy: SocketAddr,
    (clients, per): (u64, u64),
    request: F,
    within: std::time::Duration,
) -> bool
where
    F: Fn(u64, u64) -> (String, u64) + Send + Sync + 'static,
{
    let request = Arc::new(request);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let request = request.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = TcpStream::connect(proxy).await.unwrap();
            let mut buf = Vec::new();
            for j in 0..per {
                let (req, n) = request(i, j);
                c.write_all(req.as_bytes()).await.unwrap();
                let (st, _, body) = read_response(&mut c, &mut buf, false).await;
                assert_eq!((st, body.len() as u64), (200, n), "{req}");
            }
        }));
    }
    tokio::time::timeout(within, async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .is_ok()
}

/// One request (`raw`, as written) on a new connection to `addr`: (status, head, body).
pub async fn ask_once(addr: SocketAddr, raw: &str) -> (u16, String, Vec<u8>) {
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(raw.as_bytes()).await.unwrap();
    read_response(&mut c, &mut Vec::new(), false).await
}
