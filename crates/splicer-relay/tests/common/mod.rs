//! What the relay's test binaries share: connected socket pairs, patterned bytes, and
//! writing into a splice until it holds the writer back.
// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Engines the pacer paces: the user-space ones, and `sockmap` as root (it loads an eBPF
/// program; CI runs as root).
pub fn paced_engines() -> Vec<splicer_relay::Engine> {
    use splicer_relay::Engine;
    if splicer_testkit::require_root("for sockmap, to load eBPF programs") {
        vec![Engine::Copy, Engine::Pipe, Engine::Sockmap]
    } else {
        vec![Engine::Copy, Engine::Pipe]
    }
}

/// Two ends of one loopback TCP connection.
pub async fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (b, _) = l.accept().await.unwrap();
    (a, b)
}

/// `len` bytes that differ with `seed` and along their length.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Writes `total` into `w` a MiB at a time until a write has made no progress for
/// `patience` (the writer is held back) or all of it went; returns the bytes written.
pub async fn write_until_held(w: &mut TcpStream, total: &[u8], patience: Duration) -> usize {
    let mut written = 0usize;
    while written < total.len() {
        let end = (written + (1 << 20)).min(total.len());
        match tokio::time::timeout(patience, w.write(&total[written..end])).await {
            Ok(n) => written += n.unwrap(),
            Err(_) => break,
        }
    }
    written
}

/// A SOCKS tunnel through `r` whose destination does not read: of 96 MiB offered, less
/// than 64 MiB may go in (the sockets' buffers, `sockmap`'s gate); then `release` (what
/// held the tunnel goes), the reader reads, and every byte must follow in order. `what`
/// names the case in failures.
pub async fn behind_a_reader_that_does_not_read(
    r: &splicer_relay::Relay,
    what: &str,
    release: impl FnOnce(),
) {
    use tokio::io::AsyncReadExt;
    let (mut client, client_side) = pair().await;
    let (upstream_side, mut stuck) = pair().await;
    let socks = r.front(splicer_relay::Front::Socks);
    let tunnel = tokio::spawn(async move {
        socks
            .tunnel(&client_side, &upstream_side, b"", b"", None)
            .await
    });
    let total = pattern(96 << 20, 2);
    let written = write_until_held(&mut client, &total, Duration::from_secs(2)).await;
    assert!(
        written < 64 << 20,
        "{what}: {written} bytes went into a tunnel whose destination does not read"
    );
    let reader = tokio::spawn(async move {
        let mut all = Vec::new();
        stuck.read_to_end(&mut all).await.unwrap();
        (stuck, all)
    });
    release();
    client.write_all(&total[written..]).await.unwrap();
    client.shutdown().await.unwrap();
    let (mut stuck, all) = reader.await.unwrap();
    assert!(all == total, "{what}: the held-back tunnel's bytes differ");
    stuck.shutdown().await.unwrap();
    let out = tunnel.await.unwrap();
    assert_eq!(out.up.bytes, total.len() as u64, "{what}: {out:?}");
}
