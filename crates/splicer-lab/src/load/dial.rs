//! How a generator reaches its target: directly, through an HTTP proxy (the request line
//! then carries the absolute URL), through an HTTP CONNECT tunnel, or through SOCKS5.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Direct,
    /// Forward proxy: connect to it and send absolute-form requests.
    HttpProxy(SocketAddr),
    /// `CONNECT host:port` through an HTTP proxy, then talk to the target.
    Connect(SocketAddr),
    /// SOCKS5 CONNECT, no authentication.
    Socks5(SocketAddr),
}

/// A `--via` that names no way to the target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadVia {
    #[error("{via:?}: {addr:?} is not an IP:PORT address")]
    Address { via: String, addr: String },
    #[error("{0:?}: use direct, http://IP:PORT, connect://IP:PORT or socks5://IP:PORT")]
    Scheme(String),
}

impl std::str::FromStr for Via {
    type Err = BadVia;
    /// `direct`, `http://ADDR`, `connect://ADDR` or `socks5://ADDR`.
    fn from_str(s: &str) -> Result<Via, BadVia> {
        let addr = |a: &str| {
            a.parse::<SocketAddr>().map_err(|_| BadVia::Address {
                via: s.to_string(),
                addr: a.to_string(),
            })
        };
        if s == "direct" {
            Ok(Via::Direct)
        } else if let Some(a) = s.strip_prefix("http://") {
            Ok(Via::HttpProxy(addr(a)?))
        } else if let Some(a) = s.strip_prefix("connect://") {
            Ok(Via::Connect(addr(a)?))
        } else if let Some(a) = s.strip_prefix("socks5://") {
            Ok(Via::Socks5(addr(a)?))
        } else {
            Err(BadVia::Scheme(s.to_string()))
        }
    }
}

/// Reports show a `Via` as it is written on the command line.
impl serde::Serialize for Via {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl std::fmt::Display for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Via::Direct => write!(f, "direct"),
            Via::HttpProxy(a) => write!(f, "http://{a}"),
            Via::Connect(a) => write!(f, "connect://{a}"),
            Via::Socks5(a) => write!(f, "socks5://{a}"),
        }
    }
}

/// An error with the kind a report counts it under.
#[derive(Debug)]
pub struct Failed {
    pub kind: &'static str,
    pub error: io::Error,
}

impl Failed {
    pub fn new(kind: &'static str, error: io::Error) -> Failed {
        Failed { kind, error }
    }
    pub fn msg(kind: &'static str, msg: String) -> Failed {
        Failed::new(kind, io::Error::other(msg))
    }
}

/// Opens a connection towards `target` as `via` says. For [`Via::HttpProxy`] the stream is
/// connected to the proxy; the caller writes absolute-form requests.
pub async fn dial(via: Via, target: SocketAddr) -> Result<TcpStream, Failed> {
    let first = match via {
        Via::Direct => target,
        Via::HttpProxy(p) | Via::Connect(p) | Via::Socks5(p) => p,
    };
    let mut s = TcpStream::connect(first)
        .await
        .map_err(|e| Failed::new("connect", e))?;
    s.set_nodelay(true).map_err(|e| Failed::new("connect", e))?;
    match via {
        Via::Direct | Via::HttpProxy(_) => {}
        Via::Connect(_) => {
            let req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
            s.write_all(req.as_bytes())
                .await
                .map_err(|e| Failed::new("proxy", e))?;
            // Read the reply head byte by byte: nothing after it may be consumed.
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                if head.len() > 8192 {
                    return Err(Failed::msg("proxy", "CONNECT reply head too long".into()));
                }
                let b = s.read_u8().await.map_err(|e| Failed::new("proxy", e))?;
                head.push(b);
            }
            let status = head.get(9..12).unwrap_or(b"");
            if status != b"200" {
                return Err(Failed::msg(
                    "refused",
                    format!(
                        "CONNECT: {}",
                        String::from_utf8_lossy(&head).lines().next().unwrap_or("")
                    ),
                ));
            }
        }
        Via::Socks5(_) => {
            s.write_all(&[5, 1, 0])
                .await
                .map_err(|e| Failed::new("proxy", e))?;
            let mut m = [0u8; 2];
            s.read_exact(&mut m)
                .await
                .map_err(|e| Failed::new("proxy", e))?;
            if m != [5, 0] {
                return Err(Failed::msg("refused", format!("SOCKS5 method reply {m:?}")));
            }
            let mut req = vec![5, 1, 0];
            match target {
                SocketAddr::V4(a) => {
                    req.push(1);
                    req.extend_from_slice(&a.ip().octets());
                }
                SocketAddr::V6(a) => {
                    req.push(4);
                    req.extend_from_slice(&a.ip().octets());
                }
            }
            req.extend_from_slice(&target.port().to_be_bytes());
            s.write_all(&req)
                .await
                .map_err(|e| Failed::new("proxy", e))?;
            let mut rep = [0u8; 4];
            s.read_exact(&mut rep)
                .await
                .map_err(|e| Failed::new("proxy", e))?;
            if rep[1] != 0 {
                return Err(Failed::msg("refused", format!("SOCKS5 reply {}", rep[1])));
            }
            let rest = match rep[3] {
                1 => 4 + 2,
                4 => 16 + 2,
                _ => {
                    return Err(Failed::msg(
                        "proxy",
                        format!("SOCKS5 address type {}", rep[3]),
                    ))
                }
            };
            let mut skip = vec![0u8; rest];
            s.read_exact(&mut skip)
                .await
                .map_err(|e| Failed::new("proxy", e))?;
        }
    }
    Ok(s)
}
