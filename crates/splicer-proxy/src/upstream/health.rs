//! Active health checks of the `edge` front end's servers: one task per server of a group
//! with `[edge.upstream.health]` (a server a name resolved to later gets its own from
//! `crate::upstream::resolve`; a task ends when its server leaves the group), asking `GET path` first at start and then every
//! `interval`. `fall` failures in a row take the server out of its group's choices, `rise`
//! passes in a row bring it back (HAProxy's rules and defaults); each change is logged.
//! An `h2c` group's servers are asked over HTTP/2 (`probe_h2`).

use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::groups::Group;
use super::state::Upstreams;
use crate::config::{HealthConfig, Protocol};

/// Longest status line read from a server being checked.
const MAX_STATUS_LINE: usize = 1024;

/// Starts the checks of every group that has them. They hold the upstreams weakly and
/// end when it goes; the caller aborts them at stop.
pub fn spawn(upstreams: &Arc<Upstreams>) -> Vec<tokio::task::JoinHandle<()>> {
    let Some(edge) = &upstreams.edge else {
        return Vec::new();
    };
    let mut tasks = Vec::new();
    for (g, group) in edge.groups().iter().enumerate() {
        for server in group.members().servers.iter() {
            tasks.extend(spawn_one(upstreams, g, *server));
        }
    }
    tasks
}

/// Starts the checks of `server` of group `g`, when the group has checks.
pub(crate) fn spawn_one(
    upstreams: &Arc<Upstreams>,
    g: usize,
    server: SocketAddr,
) -> Option<tokio::task::JoinHandle<()>> {
    let check = group(upstreams, g)?.health.clone()?;
    Some(tokio::spawn(watch(
        Arc::downgrade(upstreams),
        g,
        server,
        check,
    )))
}

/// Checks `server` of group `g` until the proxy goes or the server leaves the group.
async fn watch(weak: Weak<Upstreams>, g: usize, server: SocketAddr, check: HealthConfig) {
    let (mut passes, mut fails) = (0u32, 0u32);
    loop {
        let protocol = {
            let Some(upstreams) = weak.upgrade() else {
                return;
            };
            let Some(group) = group(&upstreams, g) else {
                return;
            };
            if !group.has(server) {
                return;
            }
            group.protocol
        };
        let result = match protocol {
            Protocol::Http1 => probe(server, &check).await,
            Protocol::H2c => tokio::time::timeout(check.timeout, probe_h2(server, &check.path))
                .await
                .unwrap_or(Err(CheckFailed::Timeout(check.timeout))),
        };
        let Some(upstreams) = weak.upgrade() else {
            return;
        };
        let Some(group) = group(&upstreams, g) else {
            return;
        };
        match result {
            Ok(()) => {
                (passes, fails) = (passes.saturating_add(1), 0);
                if passes >= check.rise && group.set_up(server, true) {
                    tracing::info!(group = %group.name, %server, passes, "edge server up");
                }
            }
            Err(why) => {
                (passes, fails) = (0, fails.saturating_add(1));
                if fails >= check.fall && group.set_up(server, false) {
                    tracing::warn!(group = %group.name, %server, fails, "edge server down: {why}");
                }
            }
        }
        drop(upstreams);
        tokio::time::sleep(check.interval).await;
    }
}

/// Group `g` of the edge (checks run only for the edge's groups).
fn group(upstreams: &Upstreams, g: usize) -> Option<&Group> {
    upstreams.edge.as_ref().and_then(|e| e.groups().get(g))
}

/// Why a server failed its check (logged when it is taken out).
#[derive(Debug, thiserror::Error)]
pub enum CheckFailed {
    #[error("connect: {0}")]
    Connect(#[source] std::io::Error),
    #[error("send: {0}")]
    Send(#[source] std::io::Error),
    #[error("read: {0}")]
    Read(#[source] std::io::Error),
    #[error("closed before a status line")]
    Closed,
    #[error("a status line too long")]
    LongStatusLine,
    #[error("not an HTTP status line: {0:?}")]
    NotAStatusLine(String),
    #[error("status {0}")]
    Status(u16),
    #[error("HTTP/2: {0}")]
    H2(#[source] h2::Error),
    #[error("no answer within {0:?}")]
    Timeout(std::time::Duration),
    #[error("{0:?} is not a path a request can name")]
    BadPath(String),
}

/// One check: `Ok` when the server answered `GET path` with a 2xx or 3xx status within the
/// timeout; else why not.
async fn probe(server: SocketAddr, check: &HealthConfig) -> Result<(), CheckFailed> {
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(server)
            .await
            .map_err(CheckFailed::Connect)?;
        let req = format!(
            "GET {} HTTP/1.1\r\nHost: {server}\r\nUser-Agent: splicer-health-check\r\n\
             Connection: close\r\n\r\n",
            check.path
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(CheckFailed::Send)?;
        // Only the status line matters.
        let mut buf = Vec::with_capacity(256);
        loop {
            if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
                return status_passes(&buf[..end]);
            }
            if buf.len() >= MAX_STATUS_LINE {
                return Err(CheckFailed::LongStatusLine);
            }
            let mut b = [0u8; 512];
            match s.read(&mut b).await {
                Ok(0) => return Err(CheckFailed::Closed),
                Ok(n) => buf.extend_from_slice(&b[..n]),
                Err(e) => return Err(CheckFailed::Read(e)),
            }
        }
    };
    tokio::time::timeout(check.timeout, ask)
        .await
        .map_err(|_| CheckFailed::Timeout(check.timeout))?
}

/// A health check over HTTP/2 (for an `h2c` group): `GET path` on a
/// connection of its own; `Ok` for a 2xx or 3xx status. The caller bounds the time.
async fn probe_h2(server: SocketAddr, path: &str) -> Result<(), CheckFailed> {
    let tcp = tokio::net::TcpStream::connect(server)
        .await
        .map_err(CheckFailed::Connect)?;
    let (send, connection) = h2::client::handshake(tcp).await.map_err(CheckFailed::H2)?;
    let task = tokio::spawn(connection);
    let asked = async {
        let Ok(request) = http::Request::get(format!("http://{server}{path}"))
            .header("user-agent", "splicer-health-check")
            .body(())
        else {
            return Err(CheckFailed::BadPath(path.to_string()));
        };
        let mut send = send.ready().await.map_err(CheckFailed::H2)?;
        let (response, _) = send.send_request(request, true).map_err(CheckFailed::H2)?;
        Ok(response.await.map_err(CheckFailed::H2)?.status())
    }
    .await;
    task.abort();
    let status = asked?;
    if status.is_success() || status.is_redirection() {
        Ok(())
    } else {
        Err(CheckFailed::Status(status.as_u16()))
    }
}

/// Whether a status line says 2xx or 3xx.
fn status_passes(line: &[u8]) -> Result<(), CheckFailed> {
    let text = String::from_utf8_lossy(line);
    let mut parts = text.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().and_then(|c| c.parse::<u16>().ok());
    match code {
        Some(c) if version.starts_with("HTTP/1.") && (200..400).contains(&c) => Ok(()),
        Some(c) if version.starts_with("HTTP/1.") => Err(CheckFailed::Status(c)),
        _ => Err(CheckFailed::NotAStatusLine(text.into_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_2xx_and_3xx_pass() {
        assert!(status_passes(b"HTTP/1.1 200 OK").is_ok());
        assert!(status_passes(b"HTTP/1.0 302 Found").is_ok());
        assert!(matches!(
            status_passes(b"HTTP/1.1 503 Busy"),
            Err(CheckFailed::Status(503))
        ));
        assert!(status_passes(b"HTTP/1.1 404").is_err());
        assert!(status_passes(b"SSH-2.0-OpenSSH").is_err());
        assert!(status_passes(b"HTTP/1.1 2000 OK").is_err());
        assert!(status_passes(b"").is_err());
    }
}
