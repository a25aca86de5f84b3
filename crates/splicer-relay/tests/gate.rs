//! `sockmap`'s gate gives the stream back to the kernel: once a destination that paused
//! reads as fast as the source sends, the bytes past the pause go through the kernel again,
//! not through the proxy (issue: the gate used to stay closed for the rest of a stream
//! that never paused, and the proxy relayed all of it in user space).

use std::time::Duration;

use splicer_relay::{End, Engine, EngineChoice, Relay, RelayConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::{pair, pattern};

/// A reader that does not read until the gate has closed (a 256 KiB bound); then it reads
/// as fast as it can. Every byte arrives in order, and the proxy relays only
/// a small part of the 128 MiB itself: before the fix it relayed about all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_gate_opens_again_once_the_reader_keeps_up() {
    if !splicer_testkit::require_root("to load the sockmap program") {
        return;
    }
    let r = Relay::new(RelayConfig {
        engine: EngineChoice::Forced(Engine::Sockmap),
        sockmap_max_queue: 256 << 10,
        ..RelayConfig::default()
    });
    let (mut client, client_side) = pair().await;
    let (upstream_side, mut server) = pair().await;
    let tunnel = tokio::spawn({
        let r = r.clone();
        async move {
            let out = r.tunnel(&client_side, &upstream_side, b"", b"", None).await;
            (out, client_side, upstream_side)
        }
    });
    let data = pattern(128 << 20, 11);
    let writer = tokio::spawn({
        let data = data.clone();
        async move {
            client.write_all(&data).await.unwrap();
            client.shutdown().await.unwrap();
            client
        }
    });
    // The reader waits until the gate has closed (the writer fills the redirect queue
    // past its bound while nobody reads), for 10 s at most.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while r.sockmap_stats().map_or(0, |s| s.gate_closings) == 0
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut got = Vec::with_capacity(data.len());
    server.read_to_end(&mut got).await.unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "the bytes differ");
    server.shutdown().await.unwrap();
    let mut client = writer.await.unwrap();
    let mut back = Vec::new();
    client.read_to_end(&mut back).await.unwrap();
    let (out, _, _) = tunnel.await.unwrap();
    assert_eq!((out.up.end, out.down.end), (End::Eof, End::Eof), "{out:?}");
    let s = r.sockmap_stats().expect("the sockmap program is loaded");
    assert!(
        s.gate_closings > 0,
        "the gate never closed: the test did not test it"
    );
    // Each closing costs the proxy what the source's receive side held then (the buffer
    // is fixed at four bounds and 512 KiB, 1.5 MiB here): it then catches up and the
    // kernel takes the stream back. A gate that stayed closed left the rest to the proxy.
    assert!(
        s.held_relayed <= s.gate_closings * (4 << 20),
        "the proxy relayed {} of {} bytes itself over {} closings: a gate stayed closed",
        s.held_relayed,
        data.len(),
        s.gate_closings
    );
    eprintln!(
        "{} closings, {} of {} bytes relayed by the proxy",
        s.gate_closings,
        s.held_relayed,
        data.len()
    );
}
