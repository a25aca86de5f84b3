//! Reaching upstream: name resolution, the rule check on each resolved address, and
//! connecting under a deadline with the relay's socket options.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use splicer_wire::http::Authority;
use splicer_wire::socks5::ReplyCode;
use tokio::net::TcpStream;

use crate::error::{Error, Kind};
use crate::policy::{self, Policy};

/// Why no upstream connection could be had.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot resolve {0}")]
    Resolve(String),
    #[error("denied by rule")]
    Denied,
    #[error("connection refused")]
    Refused,
    #[error("network unreachable")]
    NetworkUnreachable,
    #[error("host unreachable")]
    HostUnreachable,
    #[error("connect timed out")]
    Timeout,
    #[error("connect failed: {0}")]
    Other(io::Error),
}

impl ConnectError {
    /// The SOCKS5 reply for this failure (RFC 1928 §6).
    pub fn socks_reply(&self) -> ReplyCode {
        match self {
            ConnectError::Resolve(_) | ConnectError::HostUnreachable => ReplyCode::HostUnreachable,
            ConnectError::Denied => ReplyCode::NotAllowed,
            ConnectError::Refused => ReplyCode::ConnectionRefused,
            ConnectError::NetworkUnreachable => ReplyCode::NetworkUnreachable,
            ConnectError::Timeout => ReplyCode::TtlExpired,
            ConnectError::Other(_) => ReplyCode::GeneralFailure,
        }
    }
    /// The HTTP status for this failure.
    pub fn http_status(&self) -> u16 {
        match self {
            ConnectError::Denied => 403,
            ConnectError::Timeout => 504,
            _ => 502,
        }
    }
    /// Short name for the access log.
    pub fn name(&self) -> &'static str {
        match self {
            ConnectError::Resolve(_) => "resolve-failed",
            ConnectError::Denied => "denied",
            ConnectError::Refused => "refused",
            ConnectError::NetworkUnreachable => "network-unreachable",
            ConnectError::HostUnreachable => "host-unreachable",
            ConnectError::Timeout => "connect-timeout",
            ConnectError::Other(_) => "connect-failed",
        }
    }
    pub(crate) fn from_io(e: io::Error) -> ConnectError {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => ConnectError::Refused,
            io::ErrorKind::NetworkUnreachable => ConnectError::NetworkUnreachable,
            io::ErrorKind::HostUnreachable => ConnectError::HostUnreachable,
            io::ErrorKind::TimedOut => ConnectError::Timeout,
            _ => ConnectError::Other(e),
        }
    }
}

impl From<ConnectError> for Error {
    /// A denied destination is the client's doing; anything else, the upstream's, with the
    /// connect error as its cause.
    fn from(e: ConnectError) -> Error {
        match e {
            ConnectError::Denied => Error::client(Kind::Refused("denied")),
            e => Error::upstream(Kind::Connect(e.name())).because(e),
        }
    }
}

/// Where a request goes upstream: the authority, and its text (made once), which is the
/// pool's key and the access line's destination. An edge group's servers are named so once
/// at start (the requests and the warm pool must agree on the key).
#[derive(Debug, Clone)]
pub struct Destination {
    pub authority: Authority,
    /// `host:port`.
    pub key: String,
}

impl Destination {
    pub fn new(authority: Authority) -> Destination {
        let key = authority.to_string();
        Destination { authority, key }
    }

    /// Whether `written`, an authority as a request target spells it, names this
    /// destination without being parsed: it is the key itself (`host:port`, lower case, the
    /// port in its one spelling: a key parses back to the same authority) or the key
    /// without its default port 80. Any other spelling of the same authority is parsed.
    pub fn is_named_by(&self, written: &str) -> bool {
        self.key == written || self.key.strip_suffix(":80") == Some(written)
    }
}

/// Who is asking, for the rule check.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    pub client: IpAddr,
    pub user: Option<&'a str>,
}

/// How an upstream connection is set up.
#[derive(Debug, Clone, Copy)]
pub struct Dial {
    /// Resolving and connecting must finish within it.
    pub timeout: Duration,
    /// What the relay wants on the socket before it connects (for a tunnel).
    pub socket: splicer_relay::UpstreamSocket,
    /// `limits.receive_buffer` (0: kernel autotuning).
    pub receive_buffer: usize,
}

impl Dial {
    /// Dialling under the configured limits; `socket`: what the relay wants on a tunnel's
    /// upstream socket (the default for forwarded requests).
    pub fn new(limits: &crate::config::Limits, socket: splicer_relay::UpstreamSocket) -> Dial {
        Dial {
            timeout: limits.connect_timeout,
            socket,
            receive_buffer: limits.receive_buffer,
        }
    }
}

/// Resolves `host` (a name or an IP literal), keeps the addresses the rules allow, and
/// connects to the first that answers, as `dial_as` says.
pub async fn connect(
    policy: &Policy,
    asker: Asker<'_>,
    host: &str,
    port: u16,
    dial_as: Dial,
) -> Result<TcpStream, ConnectError> {
    let deadline = tokio::time::Instant::now() + dial_as.timeout;
    let (domain, addrs): (Option<&str>, Vec<SocketAddr>) = match host.parse::<IpAddr>() {
        Ok(ip) => (None, vec![SocketAddr::new(ip, port)]),
        Err(_) => {
            let found = tokio::time::timeout_at(deadline, tokio::net::lookup_host((host, port)))
                .await
                .map_err(|_| ConnectError::Timeout)?
                .map_err(|_| ConnectError::Resolve(host.to_string()))?;
            (Some(host), found.collect())
        }
    };
    if addrs.is_empty() {
        return Err(ConnectError::Resolve(host.to_string()));
    }
    let allowed: Vec<SocketAddr> = addrs
        .into_iter()
        .filter(|a| {
            policy.allows(&policy::Request {
                client: asker.client,
                user: asker.user,
                domain,
                destination: a.ip(),
                port,
            })
        })
        .collect();
    let mut last = ConnectError::Denied;
    for addr in allowed {
        match attempt(addr, dial_as, deadline).await {
            Ok(s) => return Ok(s),
            Err(ConnectError::Timeout) => return Err(ConnectError::Timeout),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Connects to `addr` as `dial_as` says, with no rule check: for an address the operator
/// configured (an `edge` server), not one a client named.
pub async fn connect_addr(addr: SocketAddr, dial_as: Dial) -> Result<TcpStream, ConnectError> {
    let deadline = tokio::time::Instant::now() + dial_as.timeout;
    attempt(addr, dial_as, deadline).await
}

/// One address, by the deadline, with the socket options set.
async fn attempt(
    addr: SocketAddr,
    dial_as: Dial,
    deadline: tokio::time::Instant,
) -> Result<TcpStream, ConnectError> {
    match tokio::time::timeout_at(deadline, dial(addr, dial_as.socket)).await {
        Err(_) => Err(ConnectError::Timeout),
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            crate::sockbuf::apply(&s, dial_as.receive_buffer);
            Ok(s)
        }
        Ok(Err(e)) => Err(ConnectError::from_io(e)),
    }
}

/// One connection attempt, with the relay's socket options.
async fn dial(
    addr: SocketAddr,
    socket: splicer_relay::UpstreamSocket,
) -> std::io::Result<TcpStream> {
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.apply(std::os::fd::AsFd::as_fd(&sock));
    let started = std::time::Instant::now();
    let s = sock.connect(addr).await?;
    crate::metrics::events().connected(started.elapsed());
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A destination is named without parsing only by spellings that parse to it: the
    /// forward proxy reuses a client's last destination on that word alone.
    #[test]
    fn only_spellings_of_the_same_authority_name_a_destination() {
        let written = [
            "example.org",
            "example.org:80",
            "Example.org",
            "example.org:8080",
            "example.org:080",
            "example.org.:80",
            "[::1]",
            "[::1]:80",
            "[::1]:8080",
            "[::0001]:80",
            "127.0.0.1",
            "127.0.0.1:80",
            "127.0.0.1:81",
            "a@example.org",
            "example.org:",
            ":80",
            "",
        ];
        let mut named = 0;
        for a in written {
            let Ok(authority) = Authority::parse(a, Some(80)) else {
                continue;
            };
            let d = Destination::new(authority);
            assert!(d.is_named_by(&d.key), "{} does not name itself", d.key);
            for b in written {
                if d.is_named_by(b) {
                    named += 1;
                    assert_eq!(
                        Authority::parse(b, Some(80)).as_ref(),
                        Ok(&d.authority),
                        "{b:?} names {} without being it",
                        d.key
                    );
                }
            }
        }
        // `example.org` and `example.org:80` name each other's destination, as do the
        // loopback's two spellings and `[::1]`'s.
        assert!(named >= 12, "{named}");
        let d = Destination::new(Authority::parse("Example.org", Some(80)).unwrap());
        assert!(d.is_named_by("example.org") && d.is_named_by("example.org:80"));
        assert!(!d.is_named_by("Example.org"), "another spelling is parsed");
    }

    #[test]
    fn a_denied_destination_is_the_clients_doing() {
        assert_eq!(Error::from(ConnectError::Denied).end(), "client:denied");
        assert_eq!(Error::from(ConnectError::Refused).end(), "upstream:refused");
    }
}
