//! The tests' origin is the lab's (`splicer_origin`, whose module doc lists its paths:
//! `/bytes/N`, `/chunked/N`, `/close/N`, `/reset/N`, `/headers`, `/digest`), on a free
//! loopback port; plus a raw TCP echo server.

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// Deterministic content: the lab's seeded block, repeated.
pub use splicer_origin::content::Pattern;

/// Starts the HTTP origin on a free loopback port.
pub async fn start() -> SocketAddr {
    start_counted().await.0
}

/// Starts the HTTP origin; the counter says how many connections it accepted.
pub async fn start_counted() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    start_counted_on(std::net::Ipv4Addr::LOCALHOST.into()).await
}

/// The HTTP origin on `ip` (a [`crate::Net`]'s host), on a free port.
pub async fn start_on(ip: std::net::IpAddr) -> SocketAddr {
    start_counted_on(ip).await.0
}

async fn start_counted_on(
    ip: std::net::IpAddr,
) -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    start_counted_at(SocketAddr::new(ip, 0)).await.unwrap()
}

/// The HTTP origin on `addr` (port 0: a free one); the counter says how many connections
/// it accepted. An error when `addr` cannot be bound.
pub async fn start_counted_at(
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>)> {
    let l = TcpListener::bind(addr).await?;
    let addr = l.local_addr()?;
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    let config = std::sync::Arc::new(splicer_origin::Config {
        think: splicer_origin::Think::None,
        seed: 1,
    });
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) as u64;
            let config = config.clone();
            tokio::spawn(async move {
                let _ = splicer_origin::serve_connection(s, &config, n).await;
            });
        }
    });
    Ok((addr, accepted))
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
