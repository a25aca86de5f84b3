//! Active health checks of the `edge` front end's servers: one task per server of a group
//! with `[edge.upstream.health]`, asking `GET path` first at start and then every
//! `interval`. `fall` failures in a row take the server out of its group's choices, `rise`
//! passes in a row bring it back (HAProxy's rules and defaults); each change is logged.
//! An `h2c` group's servers are asked over HTTP/2 (`crate::upstream::h2c::probe`).

use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::groups::Group;
use super::h2c;
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
        if group.health.is_some() {
            for k in 0..group.servers.len() {
                tasks.push(tokio::spawn(watch(Arc::downgrade(upstreams), g, k)));
            }
        }
    }
    tasks
}

/// Checks server `k` of group `g` until the proxy goes.
async fn watch(weak: Weak<Upstreams>, g: usize, k: usize) {
    let (mut passes, mut fails) = (0u32, 0u32);
    loop {
        let (check, server, protocol) = {
            let Some(upstreams) = weak.upgrade() else {
                return;
            };
            let group = group(&upstreams, g);
            (
                group.health.clone().expect("a checked group"),
                group.servers[k],
                group.protocol,
            )
        };
        let result = match protocol {
            Protocol::Http1 => probe(server, &check).await,
            Protocol::H2c => tokio::time::timeout(check.timeout, h2c::probe(server, &check.path))
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {:?}", check.timeout))),
        };
        let Some(upstreams) = weak.upgrade() else {
            return;
        };
        let group = group(&upstreams, g);
        match result {
            Ok(()) => {
                (passes, fails) = (passes.saturating_add(1), 0);
                if passes >= check.rise && group.set_up(k, true) {
                    tracing::info!(group = %group.name, %server, passes, "edge server up");
                }
            }
            Err(why) => {
                (passes, fails) = (0, fails.saturating_add(1));
                if fails >= check.fall && group.set_up(k, false) {
                    tracing::warn!(group = %group.name, %server, fails, "edge server down: {why}");
                }
            }
        }
        drop(upstreams);
        tokio::time::sleep(check.interval).await;
    }
}

fn group(upstreams: &Upstreams, g: usize) -> &Group {
    &upstreams
        .edge
        .as_ref()
        .expect("checks run for the edge")
        .groups()[g]
}

/// One check: `Ok` when the server answered `GET path` with a 2xx or 3xx status within the
/// timeout; else why not.
async fn probe(server: SocketAddr, check: &HealthConfig) -> Result<(), String> {
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(server)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let req = format!(
            "GET {} HTTP/1.1\r\nHost: {server}\r\nUser-Agent: splicer-health-check\r\n\
             Connection: close\r\n\r\n",
            check.path
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        // Only the status line matters.
        let mut buf = Vec::with_capacity(256);
        loop {
            if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
                return status_passes(&buf[..end]);
            }
            if buf.len() >= MAX_STATUS_LINE {
                return Err("a status line too long".into());
            }
            let mut b = [0u8; 512];
            match s.read(&mut b).await {
                Ok(0) => return Err("closed before a status line".into()),
                Ok(n) => buf.extend_from_slice(&b[..n]),
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    };
    tokio::time::timeout(check.timeout, ask)
        .await
        .map_err(|_| format!("no answer within {:?}", check.timeout))?
}

/// Whether a status line says 2xx or 3xx.
fn status_passes(line: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(line);
    let mut parts = text.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().and_then(|c| c.parse::<u16>().ok());
    match code {
        Some(c) if version.starts_with("HTTP/1.") && (200..400).contains(&c) => Ok(()),
        Some(c) if version.starts_with("HTTP/1.") => Err(format!("status {c}")),
        _ => Err(format!("not an HTTP status line: {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_2xx_and_3xx_pass() {
        assert!(status_passes(b"HTTP/1.1 200 OK").is_ok());
        assert!(status_passes(b"HTTP/1.0 302 Found").is_ok());
        assert_eq!(
            status_passes(b"HTTP/1.1 503 Busy"),
            Err("status 503".into())
        );
        assert!(status_passes(b"HTTP/1.1 404").is_err());
        assert!(status_passes(b"SSH-2.0-OpenSSH").is_err());
        assert!(status_passes(b"HTTP/1.1 2000 OK").is_err());
        assert!(status_passes(b"").is_err());
    }
}
