//! The generators' HTTP/1 client side: write a GET for a deterministic object of the lab's
//! origin, read the response and check every byte of its body against the content of its
//! seed, so a proxy that loses, reorders or corrupts data shows up as an error.

use std::net::SocketAddr;

use splicer_wire::http::{BodyLength, Limits, ResponseHead};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::dial::Failed;
use crate::content::{Pattern, BLOCK};

/// One GET of `/bytes/{size}?seed={seed}` (and `&cache=1` if cacheable).
#[derive(Debug, Clone, Copy)]
pub struct Get {
    pub origin: SocketAddr,
    pub size: u64,
    pub seed: u64,
    pub cacheable: bool,
    /// Absolute-form request line (to an HTTP forward proxy).
    pub absolute: bool,
    /// HTTP/1.1 keep-alive instead of HTTP/1.0 with the connection closed after.
    pub keep_alive: bool,
}

impl Get {
    pub fn encode(&self) -> String {
        let path = format!(
            "/bytes/{}?seed={}{}",
            self.size,
            self.seed,
            if self.cacheable { "&cache=1" } else { "" }
        );
        let target = if self.absolute {
            format!("http://{}{path}", self.origin)
        } else {
            path
        };
        let version = if self.keep_alive { "1.1" } else { "1.0" };
        format!(
            "GET {target} HTTP/{version}\r\nHost: {}\r\nUser-Agent: splicer-lab\r\n\r\n",
            self.origin
        )
    }

    pub async fn send(&self, s: &mut TcpStream) -> Result<(), Failed> {
        s.write_all(self.encode().as_bytes())
            .await
            .map_err(|e| Failed::new("send", e))
    }
}

/// Checks a body against the content of its seed, piece by piece.
pub struct Verifier<'a> {
    pattern: &'a Pattern,
    offset: u64,
}

impl<'a> Verifier<'a> {
    pub fn new(pattern: &'a Pattern) -> Verifier<'a> {
        Verifier { pattern, offset: 0 }
    }

    /// Whether `piece`, the next bytes of the body, is what the origin should have sent.
    pub fn check(&mut self, mut piece: &[u8]) -> bool {
        let block = self.pattern.block(BLOCK);
        while !piece.is_empty() {
            let at = (self.offset % BLOCK as u64) as usize;
            let k = piece.len().min(BLOCK - at);
            if piece[..k] != block[at..at + k] {
                return false;
            }
            piece = &piece[k..];
            self.offset += k as u64;
        }
        true
    }
}

/// Reads one response from `s` (with `buf` holding bytes already read, and keeping bytes
/// past this response), checks its status and body. Returns the body length.
pub async fn read_response<R: tokio::io::AsyncRead + Unpin>(
    s: &mut R,
    buf: &mut Vec<u8>,
    pattern: &Pattern,
    want: u64,
) -> Result<u64, Failed> {
    let mut chunk = vec![0u8; 65536];
    let head = loop {
        match ResponseHead::parse(buf, &Limits::default()) {
            Ok(Some((h, n))) => {
                buf.drain(..n);
                break h;
            }
            Ok(None) => {}
            Err(e) => return Err(Failed::msg("bad-response", e.to_string())),
        }
        let n = s
            .read(&mut chunk)
            .await
            .map_err(|e| Failed::new("recv", e))?;
        if n == 0 {
            return Err(Failed::msg(
                "short",
                "closed before the response head".into(),
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if head.status != 200 {
        return Err(Failed::msg("status", format!("status {}", head.status)));
    }
    let framing = head
        .body(&splicer_wire::http::Method::Get)
        .map_err(|e| Failed::msg("bad-response", e.to_string()))?;
    let limit = match framing {
        BodyLength::Length(n) => Some(n),
        BodyLength::Close => None,
        _ => return Err(Failed::msg("bad-response", format!("framing {framing:?}"))),
    };
    let mut v = Verifier::new(pattern);
    let mut got = 0u64;
    loop {
        if let Some(n) = limit {
            if got == n {
                break;
            }
        }
        if buf.is_empty() {
            let n = s
                .read(&mut chunk)
                .await
                .map_err(|e| Failed::new("recv", e))?;
            if n == 0 {
                if limit.is_none() {
                    break;
                }
                return Err(Failed::msg("short", format!("body ended at {got} bytes")));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let k = match limit {
            Some(n) => (buf.len() as u64).min(n - got) as usize,
            None => buf.len(),
        };
        if !v.check(&buf[..k]) {
            return Err(Failed::msg(
                "corrupt",
                format!("body differs near byte {got}"),
            ));
        }
        buf.drain(..k);
        got += k as u64;
    }
    if got != want {
        return Err(Failed::msg("short", format!("{got} bytes, wanted {want}")));
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifier_checks_across_blocks() {
        let p = Pattern::new(3);
        let body = p.bytes(BLOCK + 100);
        let mut v = Verifier::new(&p);
        assert!(
            v.check(&body[..10]) && v.check(&body[10..BLOCK + 50]) && v.check(&body[BLOCK + 50..])
        );
        let mut bad = body.clone();
        bad[BLOCK + 3] ^= 1;
        let mut v = Verifier::new(&p);
        assert!(!v.check(&bad));
    }

    #[test]
    fn request_lines() {
        let g = Get {
            origin: "10.0.0.1:80".parse().unwrap(),
            size: 1024,
            seed: 5,
            cacheable: true,
            absolute: true,
            keep_alive: false,
        };
        assert!(g.encode().starts_with(
            "GET http://10.0.0.1:80/bytes/1024?seed=5&cache=1 HTTP/1.0\r\nHost: 10.0.0.1:80\r\n"
        ));
    }
}
