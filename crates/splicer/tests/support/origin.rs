//! An origin server for the tests: HTTP/1.0 and 1.1 with keep-alive, deterministic bodies
//! chosen by the path, plus raw TCP servers (echo, reset).
//!
//! Paths: `/bytes/N?seed=S` (Content-Length), `/chunked/N?seed=S` (chunked, odd chunk
//! sizes), `/close/N?seed=S` (close-delimited), `/reset/N` (sends N of 2N bytes then a
//! reset), POST `/digest` (answers "LEN SHA256" of the request body, any framing),
//! `/headers` (answers with the request head it received).

use std::net::SocketAddr;

use sha2::{Digest, Sha256};
use splicer_wire::chunked;
use splicer_wire::http::{BodyLength, Limits, RequestHead};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Deterministic content: the lab's seeded block, repeated.
pub use splicer_lab::content::Pattern;

/// Starts the HTTP origin on a free loopback port.
pub async fn start() -> SocketAddr {
    start_counted().await.0
}

/// Starts the HTTP origin; the counter says how many connections it accepted.
pub async fn start_counted() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let _ = serve(s).await;
            });
        }
    });
    (addr, accepted)
}

fn query(target: &str) -> (String, u64, u64) {
    let (path, q) = target.split_once('?').unwrap_or((target, ""));
    let seed = q
        .strip_prefix("seed=")
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let kind = parts.next().unwrap_or("").to_string();
    let n = parts.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    (kind, n, seed)
}

async fn serve(mut s: TcpStream) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    let mut buf = Vec::new();
    loop {
        let head = loop {
            if let Some((h, n)) =
                RequestHead::parse(&buf, &Limits::default()).map_err(std::io::Error::other)?
            {
                buf.drain(..n);
                break h;
            }
            let mut b = [0u8; 4096];
            let n = s.read(&mut b).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&b[..n]);
        };
        let body = read_body(
            &mut s,
            &mut buf,
            head.body().map_err(std::io::Error::other)?,
        )
        .await?;
        let keep = head.keep_alive();
        let conn = if keep { "" } else { "Connection: close\r\n" };
        let (kind, n, seed) = query(&head.target);
        match kind.as_str() {
            "bytes" => {
                let h = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nX-Origin: test\r\n{conn}\r\n"
                );
                s.write_all(h.as_bytes()).await?;
                if head.method != "HEAD" {
                    splicer_lab::origin::write_content(&mut s, n, seed).await?;
                }
            }
            "chunked" => {
                s.write_all(
                    format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{conn}\r\n")
                        .as_bytes(),
                )
                .await?;
                let data = Pattern::new(seed).bytes(n as usize);
                let sizes = [1usize, 7, 100, 5000, 70_000, 300_000];
                let (mut off, mut i) = (0, 0);
                while off < data.len() {
                    let k = sizes[i % sizes.len()].min(data.len() - off);
                    s.write_all(format!("{k:x};ext=1\r\n").as_bytes()).await?;
                    s.write_all(&data[off..off + k]).await?;
                    s.write_all(b"\r\n").await?;
                    off += k;
                    i += 1;
                }
                s.write_all(b"0\r\nX-Trailer: yes\r\n\r\n").await?;
            }
            "close" => {
                s.write_all(b"HTTP/1.0 200 OK\r\n\r\n").await?;
                splicer_lab::origin::write_content(&mut s, n, seed).await?;
                return s.shutdown().await;
            }
            "reset" => {
                s.write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", 2 * n).as_bytes(),
                )
                .await?;
                splicer_lab::origin::write_content(&mut s, n, seed).await?;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                #[allow(deprecated)] // non-blocking socket: close does not block
                s.set_linger(Some(std::time::Duration::ZERO))?;
                return Ok(());
            }
            "headers" => {
                // The request head as the origin received it.
                let mut text = Vec::new();
                head.encode(&mut text);
                let h = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{conn}\r\n",
                    text.len()
                );
                s.write_all(h.as_bytes()).await?;
                s.write_all(&text).await?;
            }
            "digest" => {
                let text = format!("{} {}", body.0, body.1);
                let h = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{conn}\r\n{text}",
                    text.len()
                );
                s.write_all(h.as_bytes()).await?;
            }
            _ => {
                s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    .await?;
            }
        }
        if !keep {
            return Ok(());
        }
    }
}

async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut b = [0u8; 65536];
    let n = s.read(&mut b).await?;
    if n == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    buf.extend_from_slice(&b[..n]);
    Ok(())
}

/// Reads a request body, returning its length and SHA-256.
async fn read_body(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    framing: BodyLength,
) -> std::io::Result<(u64, String)> {
    let mut h = Sha256::new();
    let mut total = 0u64;
    match framing {
        BodyLength::None | BodyLength::Close => {}
        BodyLength::Length(n) => {
            while (buf.len() as u64) < n {
                fill(s, buf).await?;
            }
            h.update(&buf[..n as usize]);
            buf.drain(..n as usize);
            total = n;
        }
        BodyLength::Chunked => loop {
            let size = loop {
                if let Some((size, k)) =
                    chunked::parse_size_line(buf, 4096).map_err(std::io::Error::other)?
                {
                    buf.drain(..k);
                    break size as usize;
                }
                fill(s, buf).await?;
            };
            if size == 0 {
                loop {
                    if let Some((last, k)) =
                        chunked::parse_trailer_line(buf, 4096).map_err(std::io::Error::other)?
                    {
                        buf.drain(..k);
                        if last {
                            return Ok((total, super::hex(&h.finalize())));
                        }
                        continue;
                    }
                    fill(s, buf).await?;
                }
            }
            while buf.len() < size + 2 {
                fill(s, buf).await?;
            }
            h.update(&buf[..size]);
            total += size as u64;
            buf.drain(..size + 2);
        },
    }
    Ok((total, super::hex(&h.finalize())))
}

/// A raw TCP echo server: echoes until EOF, then half-closes.
pub async fn echo() -> SocketAddr {
    echo_on("127.0.0.1:0").await
}

/// The echo server on a chosen address (e.g. `[::1]:0`).
pub async fn echo_on(bind: &str) -> SocketAddr {
    let l = TcpListener::bind(bind).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}
