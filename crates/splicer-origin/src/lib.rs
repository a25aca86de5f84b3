//! The lab's origin server: HTTP/1.0 and 1.1 with unlimited persistent connections,
//! deterministic bodies whose size, seed, cacheability and think time each request chooses,
//! and the SSL-handshake emulation of seed 000 before the first request.
//!
//! A request chooses with its path or headers (the papers used an application-specific
//! header):
//! - size: `/bytes/N` or `X-Size: N`;
//! - seed: `?seed=S` or `X-Seed: S` (default 1);
//! - cacheable: `?cache=1` or `X-Cacheable: 1` → `Cache-Control: public, max-age=3600`,
//!   `Expires`, `ETag` and `Last-Modified`, and `304` to a matching `If-None-Match`;
//!   otherwise `Cache-Control: no-store`;
//! - think time: `X-Think-Ms: 50` or `X-Think-Ms: 50-400` (uniform), else the server's.
//!
//! And what Splicer's own tests need of an origin (the same server, so that the tests and
//! the lab exercise one origin):
//! - `/chunked/N`: N bytes in chunks of varied sizes, with a chunk extension and a trailer;
//! - `/close/N`: an HTTP/1.0 response whose end is the connection's close;
//! - `/reset/N`: promises 2N bytes, sends N, then resets the connection;
//! - `/headers`: the request head as the origin received it;
//! - `/digest`: the request body's length and SHA-256 (hex), as `LEN HEX`.
//!
//! A crate of its own so that the product's tests (through `splicer-testkit`) and the lab
//! serve from one origin without the tests pulling in the lab's packet and plotting crates.
//!
//! # Layout
//! - this file: the server.
//! - [`content`]: deterministic content and a small seeded generator.
//! - [`ssl`]: the SSL-handshake emulation of seed 000, both sides.
#![forbid(unsafe_code)]

pub mod content;
pub mod ssl;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use splicer_wire::http::{BodyLength, Limits, RequestHead};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::content::{hex, Patterns, Rng, BLOCK};
use sha2::{Digest, Sha256};

/// Think time before each response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Think {
    None,
    Fixed(Duration),
    /// Uniform between the two, inclusive, in milliseconds.
    Uniform(u64, u64),
}

/// A think time that is none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadThink {
    #[error("bad think time {0:?} (use MS or LOW-HIGH)")]
    NotMilliseconds(String),
    #[error("bad think time {0:?}: LOW above HIGH")]
    Reversed(String),
}

impl std::str::FromStr for Think {
    type Err = BadThink;
    /// `0`, `50` (ms) or `50-400` (ms, uniform).
    fn from_str(s: &str) -> Result<Think, BadThink> {
        let ms = |v: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| BadThink::NotMilliseconds(s.to_string()))
        };
        match s.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (ms(lo)?, ms(hi)?);
                if lo > hi {
                    return Err(BadThink::Reversed(s.to_string()));
                }
                Ok(Think::Uniform(lo, hi))
            }
            None => Ok(match ms(s)? {
                0 => Think::None,
                n => Think::Fixed(Duration::from_millis(n)),
            }),
        }
    }
}

/// Origin settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub think: Think,
    /// Seeds the think-time generator.
    pub seed: u64,
}

/// Serves until the listener fails; one task per connection.
pub async fn serve(listener: TcpListener, config: Config) {
    let config = Arc::new(config);
    let mut n = 0u64;
    while let Ok((s, _)) = listener.accept().await {
        n += 1;
        let config = config.clone();
        tokio::spawn(async move {
            let _ = serve_connection(s, &config, n).await;
        });
    }
}

/// Binds and serves in the background; returns the bound address.
pub async fn start(listen: SocketAddr, config: Config) -> std::io::Result<SocketAddr> {
    let l = TcpListener::bind(listen).await?;
    let addr = l.local_addr()?;
    tokio::spawn(serve(l, config));
    Ok(addr)
}

async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut b = [0u8; 16384];
    let n = s.read(&mut b).await?;
    buf.extend_from_slice(&b[..n]);
    Ok(n > 0)
}

/// Serves one accepted connection to its end; `n` (the connection's number) varies its
/// think times.
pub async fn serve_connection(mut s: TcpStream, config: &Config, n: u64) -> std::io::Result<()> {
    let mut rng = Rng::new(config.seed ^ n);
    s.set_nodelay(true)?;
    let mut buf = Vec::new();
    // SSL emulation first, when the client's first byte says so.
    if !fill(&mut s, &mut buf).await? {
        return Ok(());
    }
    if buf[0] == ssl::MARK {
        while buf.len() < 2 && fill(&mut s, &mut buf).await? {}
        let full = buf.get(1) == Some(&b'F');
        let first: Vec<u8> = buf.drain(..buf.len().min(98)).collect();
        ssl::exchange(&mut s, ssl::Side::Server, full, &first).await?;
    }
    loop {
        let head = loop {
            if let Some((h, n)) =
                RequestHead::parse(&buf, &Limits::default()).map_err(std::io::Error::other)?
            {
                buf.drain(..n);
                break h;
            }
            if !fill(&mut s, &mut buf).await? {
                return Ok(());
            }
        };
        let framing = head.body().map_err(std::io::Error::other)?;
        let keep = head.keep_alive();
        if head.target.split('?').next() == Some("/digest") {
            let mut hash = Sha256::new();
            let n = read_body(&mut s, &mut buf, framing, |b| hash.update(b)).await?;
            let text = format!("{n} {}", hex(&hash.finalize()));
            let h = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}\r\n{text}",
                text.len(),
                if keep { "" } else { "Connection: close\r\n" }
            );
            s.write_all(h.as_bytes()).await?;
        } else {
            read_body(&mut s, &mut buf, framing, |_| {}).await?;
            match test_route(&mut s, &head, keep).await? {
                Route::Served => {}
                Route::Closed => return Ok(()),
                Route::NotMine => respond(&mut s, &head, keep, config, &mut rng).await?,
            }
        }
        if !keep {
            return s.shutdown().await;
        }
    }
}

fn header_u64(head: &RequestHead, name: &str) -> Option<u64> {
    std::str::from_utf8(head.headers.get(name)?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn query(target: &str, key: &str) -> Option<String> {
    let q = target.split_once('?')?.1;
    q.split('&')
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .map(String::from)
}

async fn respond(
    s: &mut TcpStream,
    head: &RequestHead,
    keep: bool,
    config: &Config,
    rng: &mut Rng,
) -> std::io::Result<()> {
    let path = head.target.split('?').next().unwrap_or("");
    let size = path
        .strip_prefix("/bytes/")
        .and_then(|n| n.parse().ok())
        .or_else(|| header_u64(head, "x-size"));
    let seed = query(&head.target, "seed")
        .and_then(|v| v.parse().ok())
        .or_else(|| header_u64(head, "x-seed"))
        .unwrap_or(1);
    let cacheable = query(&head.target, "cache").as_deref() == Some("1")
        || head.headers.get("x-cacheable").is_some_and(|v| v == b"1");
    let think = match head
        .headers
        .get("x-think-ms")
        .and_then(|v| std::str::from_utf8(v).ok())
    {
        Some(t) => t.parse().unwrap_or(config.think),
        None => config.think,
    };
    match think {
        Think::None => {}
        Think::Fixed(d) => tokio::time::sleep(d).await,
        Think::Uniform(lo, hi) => {
            tokio::time::sleep(Duration::from_millis(rng.between(lo, hi))).await
        }
    }
    let version = head.version;
    let conn = match (keep, version) {
        (false, _) => "Connection: close\r\n",
        (true, 0) => "Connection: keep-alive\r\n",
        (true, _) => "",
    };
    let Some(size) = size else {
        let msg = "use /bytes/N or X-Size: N\n";
        let h = format!(
            "HTTP/1.{version} 404 Not Found\r\nContent-Length: {}\r\n{conn}\r\n{msg}",
            msg.len()
        );
        return s.write_all(h.as_bytes()).await;
    };
    let etag = format!("\"{size}-{seed}\"");
    // RFC 9110 §6.6.1: an origin with a clock sends `Date`.
    let now = std::time::SystemTime::now();
    let date = format!("Date: {}\r\n", httpdate::fmt_http_date(now));
    let caching = if cacheable {
        format!(
            // `Expires` agrees with `max-age`: a cache that reads only one of them gets the
            // same lifetime.
            "Cache-Control: public, max-age=3600\r\nExpires: {}\r\nETag: {etag}\r\n\
             Last-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\n",
            httpdate::fmt_http_date(now + std::time::Duration::from_secs(3600))
        )
    } else {
        "Cache-Control: no-store\r\n".to_string()
    };
    if cacheable
        && head
            .headers
            .get("if-none-match")
            .is_some_and(|v| v == etag.as_bytes())
    {
        let h = format!("HTTP/1.{version} 304 Not Modified\r\n{date}{caching}{conn}\r\n");
        return s.write_all(h.as_bytes()).await;
    }
    let h = format!("HTTP/1.{version} 200 OK\r\n{date}Content-Length: {size}\r\nContent-Type: application/octet-stream\r\n{caching}{conn}\r\n");
    if head.method.as_str().eq_ignore_ascii_case("HEAD") {
        return s.write_all(h.as_bytes()).await;
    }
    // A small answer's head and body go in one write, as servers send them (nginx gathers
    // both in one writev): on this TCP_NODELAY socket two writes made two segments, and
    // every proxy in front paid for the second.
    if size <= SMALL {
        let mut out = h.into_bytes();
        out.extend_from_slice(pattern(seed).block(size as usize));
        return s.write_all(&out).await;
    }
    s.write_all(h.as_bytes()).await?;
    write_content(s, size, seed).await
}

/// The largest body written in one write with its head.
const SMALL: u64 = 16 << 10;

/// The deterministic content of `seed`.
fn pattern(seed: u64) -> std::sync::Arc<crate::content::Pattern> {
    static PATTERNS: std::sync::OnceLock<Patterns> = std::sync::OnceLock::new();
    PATTERNS.get_or_init(Patterns::default).get(seed)
}

/// Writes `size` bytes of the deterministic content of `seed`.
pub async fn write_content(s: &mut TcpStream, size: u64, seed: u64) -> std::io::Result<()> {
    let pattern = pattern(seed);
    let mut left = size;
    while left > 0 {
        let k = left.min(BLOCK as u64) as usize;
        s.write_all(pattern.block(k)).await?;
        left -= k as u64;
    }
    Ok(())
}

/// What a test path did with a request.
enum Route {
    Served,
    /// Served, and the connection is over (closed or reset).
    Closed,
    NotMine,
}

/// The paths Splicer's tests use (module doc); `NotMine` for the others.
async fn test_route(s: &mut TcpStream, head: &RequestHead, keep: bool) -> std::io::Result<Route> {
    let path = head.target.split('?').next().unwrap_or("");
    let seed = query(&head.target, "seed")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let conn = if keep { "" } else { "Connection: close\r\n" };
    let sized = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|n| n.parse::<u64>().ok())
    };
    if let Some(n) = sized("/chunked/") {
        let h = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{conn}\r\n");
        s.write_all(h.as_bytes()).await?;
        let data = crate::content::Pattern::new(seed).bytes(n as usize);
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
        return Ok(Route::Served);
    }
    if let Some(n) = sized("/close/") {
        s.write_all(b"HTTP/1.0 200 OK\r\n\r\n").await?;
        write_content(s, n, seed).await?;
        s.shutdown().await?;
        return Ok(Route::Closed);
    }
    if let Some(n) = sized("/reset/") {
        let h = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", 2 * n);
        s.write_all(h.as_bytes()).await?;
        write_content(s, n, seed).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        // SO_LINGER 0: the close that follows (the caller drops the socket) is a reset.
        splicer_sys::sock::set_linger_zero(std::os::fd::AsFd::as_fd(&*s))?;
        return Ok(Route::Closed);
    }
    if path == "/headers" {
        let mut text = Vec::new();
        head.encode(&mut text);
        let h = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{conn}\r\n",
            text.len()
        );
        s.write_all(h.as_bytes()).await?;
        s.write_all(&text).await?;
        return Ok(Route::Served);
    }
    Ok(Route::NotMine)
}

/// Reads a request body of any framing, handing its bytes to `sink`; returns its length.
async fn read_body(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    framing: BodyLength,
    mut sink: impl FnMut(&[u8]),
) -> std::io::Result<u64> {
    use splicer_wire::chunked;
    let eof = || std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
    let mut total = 0u64;
    match framing {
        BodyLength::None | BodyLength::Close => Ok(0),
        BodyLength::Length(mut n) => loop {
            let k = (buf.len() as u64).min(n);
            sink(&buf[..k as usize]);
            buf.drain(..k as usize);
            total += k;
            n -= k;
            if n == 0 {
                return Ok(total);
            }
            if !fill(s, buf).await? {
                return Err(eof());
            }
        },
        BodyLength::Chunked => loop {
            let size = loop {
                if let Some((size, k)) =
                    chunked::parse_size_line(buf, 4096).map_err(std::io::Error::other)?
                {
                    buf.drain(..k);
                    break size;
                }
                if !fill(s, buf).await? {
                    return Err(eof());
                }
            };
            if size == 0 {
                loop {
                    if let Some((last, k)) =
                        chunked::parse_trailer_line(buf, 4096).map_err(std::io::Error::other)?
                    {
                        buf.drain(..k);
                        if last {
                            return Ok(total);
                        }
                    } else if !fill(s, buf).await? {
                        return Err(eof());
                    }
                }
            }
            let mut left = size + 2;
            loop {
                let k = (buf.len() as u64).min(left);
                // The chunk's data, not its CRLF.
                let data = k.min(left.saturating_sub(2)) as usize;
                sink(&buf[..data]);
                total += data as u64;
                buf.drain(..k as usize);
                left -= k;
                if left == 0 {
                    break;
                }
                if !fill(s, buf).await? {
                    return Err(eof());
                }
            }
        },
    }
}
