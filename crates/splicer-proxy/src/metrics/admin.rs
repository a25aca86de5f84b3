//! The admin listener: `GET /metrics` (OpenMetrics text) and `GET /healthz`, one request
//! per connection. It is off unless `[admin]` is configured, on loopback unless the
//! operator allows otherwise (`crate::config::AdminConfig`), and it cannot take the
//! proxy's capacity: a few connections at a time, each with a deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use splicer_wire::http::{Limits, Method, RequestHead};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::shared::Shared;

/// Admin connections served at once; more wait in the listen backlog.
const AT_ONCE: usize = 4;
/// A request must arrive, and its answer leave, within this.
const DEADLINE: Duration = Duration::from_secs(10);
/// Largest request head read.
const MAX_HEAD: usize = 8 << 10;
/// The content type of OpenMetrics text, as Prometheus asks for it.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The admin listeners, bound.
#[derive(Debug)]
pub struct Admin {
    listeners: Vec<TcpListener>,
}

impl Admin {
    /// Binds every address of `[admin] listen`.
    pub async fn bind(addrs: &[SocketAddr]) -> std::io::Result<Admin> {
        let mut listeners = Vec::new();
        for a in addrs {
            let l = TcpListener::bind(a).await.map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot listen on {a} (admin): {e}"))
            })?;
            listeners.push(l);
        }
        Ok(Admin { listeners })
    }

    /// Serves the current configuration's figures (`current` follows reloads) until the
    /// tasks are aborted, as the server does at stop.
    pub fn spawn(self, current: &watch::Receiver<Arc<Shared>>) -> Vec<tokio::task::JoinHandle<()>> {
        let slots = Arc::new(Semaphore::new(AT_ONCE));
        self.listeners
            .into_iter()
            .map(|l| {
                if let Ok(addr) = l.local_addr() {
                    tracing::info!(%addr, "admin listener: /metrics");
                }
                tokio::spawn(accept(l, current.clone(), slots.clone()))
            })
            .collect()
    }
}

async fn accept(
    listener: TcpListener,
    current: watch::Receiver<Arc<Shared>>,
    slots: Arc<Semaphore>,
) {
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!("admin listener: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let shared = current.borrow().clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(DEADLINE, answer(stream, shared)).await;
            drop(slot);
        });
    }
}

/// Reads one request head and writes its answer.
async fn answer(mut stream: TcpStream, shared: Arc<Shared>) {
    let mut buf = Vec::with_capacity(512);
    let limits = Limits {
        max_head: MAX_HEAD,
        max_headers: 32,
    };
    let head = loop {
        match RequestHead::parse(&buf, &limits) {
            Ok(Some((head, _))) => break head,
            Ok(None) => {}
            Err(_) => return respond(&mut stream, "400 Bad Request", "text/plain", "").await,
        }
        let mut chunk = [0u8; 1024];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let path = head.target.split('?').next().unwrap_or_default();
    if head.method != Method::Get {
        return respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n",
        )
        .await;
    }
    let (status, kind, body) = match path {
        "/metrics" => ("200 OK", OPENMETRICS, super::encode(&shared)),
        "/healthz" => {
            let stopping = *shared.shutdown.borrow();
            match stopping {
                false => ("200 OK", "text/plain", "ok\n".to_string()),
                true => ("503 Service Unavailable", "text/plain", "stopping\n".into()),
            }
        }
        _ => (
            "404 Not Found",
            "text/plain",
            "/metrics or /healthz\n".to_string(),
        ),
    };
    respond(&mut stream, status, kind, &body).await;
}

async fn respond(stream: &mut TcpStream, status: &str, kind: &str, body: &str) {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}
