//! Splice and tunnel behaviour over real loopback sockets, once per engine.

use std::os::fd::AsFd;
use std::time::Duration;

use splicer_relay::{End, Engine, EngineChoice, Relay, RelayConfig, SpliceSpec, Trailing};
use splicer_sys::sock::{readable_bytes, set_send_buffer, tcp_info};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;
use common::{pair, pattern, write_until_held};

const ENGINES: [Engine; 2] = [Engine::Copy, Engine::Pipe];

/// Engines that take whole tunnels: the user-space ones, and `sockmap` as root (it loads an
/// eBPF program; CI runs as root).
fn tunnel_engines() -> Vec<Engine> {
    if splicer_testkit::require_root("for sockmap, to load eBPF programs") {
        vec![Engine::Copy, Engine::Pipe, Engine::Sockmap]
    } else {
        ENGINES.to_vec()
    }
}

fn relay(engine: Engine) -> Relay {
    Relay::new(RelayConfig {
        engine: EngineChoice::Forced(engine),
        pipe_size: 65536,
        ..RelayConfig::default()
    })
}

#[tokio::test]
async fn bounded_splice_stops_exactly_at_max() {
    for engine in ENGINES {
        let r = relay(engine);
        let (mut src_w, src) = pair().await;
        let (dst, mut dst_r) = pair().await;
        let data = pattern(300_000, 1);
        let writer = tokio::spawn(async move {
            src_w.write_all(&data).await.unwrap();
            src_w
        });
        let out = r
            .splice(
                &src,
                &dst,
                b"PRE",
                SpliceSpec {
                    max: Some(200_003),
                    idle: None,
                    ..SpliceSpec::default()
                },
            )
            .await;
        assert_eq!(out.end, End::Max, "{engine}");
        assert_eq!(out.bytes, 200_003);
        assert_eq!(out.engine, engine);
        let mut got = vec![0u8; 200_003];
        dst_r.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[..3], b"PRE");
        assert_eq!(got[3..], pattern(300_000, 1)[..200_000]);
        // The rest is still in the source socket, unread: the caller gets it back intact.
        let _w = writer.await.unwrap();
        let mut rest = vec![0u8; 100_000];
        src.readable().await.unwrap();
        let mut src = src;
        src.read_exact(&mut rest).await.unwrap();
        assert_eq!(rest, pattern(300_000, 1)[200_000..]);
    }
}

#[tokio::test]
async fn small_bounds_use_copy_even_with_pipe() {
    let r = relay(Engine::Pipe);
    let (mut w, src) = pair().await;
    let (dst, mut rd) = pair().await;
    w.write_all(b"0123456789").await.unwrap();
    let out = r
        .splice(
            &src,
            &dst,
            b"",
            SpliceSpec {
                max: Some(4),
                idle: None,
                ..SpliceSpec::default()
            },
        )
        .await;
    assert_eq!(
        (out.engine, out.bytes, out.end),
        (Engine::Copy, 4, End::Max)
    );
    let mut got = [0u8; 4];
    rd.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"0123");
}

#[tokio::test]
async fn idle_timeout_ends_splice() {
    for engine in ENGINES {
        let r = relay(engine);
        let (_w, src) = pair().await;
        let (dst, _rd) = pair().await;
        let out = r
            .splice(
                &src,
                &dst,
                b"",
                SpliceSpec {
                    max: None,
                    idle: Some(Duration::from_millis(200)),
                    ..SpliceSpec::default()
                },
            )
            .await;
        assert_eq!((out.end, out.bytes), (End::Idle, 0), "{engine}");
    }
}

#[tokio::test]
async fn tunnel_half_close_both_ways() {
    for engine in tunnel_engines() {
        let r = relay(engine);
        let (mut client, client_side) = pair().await;
        let (upstream_side, mut upstream) = pair().await;
        let t = tokio::spawn(async move {
            r.tunnel(&client_side, &upstream_side, b"", b"hi ", None)
                .await
        });
        client.write_all(b"request").await.unwrap();
        // The data arrives before the client half-closes, so the splice is running by then
        // (a socket that already got its FIN cannot enter a sockmap: the engine declines).
        let mut got = vec![0u8; 10];
        upstream.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"hi request", "{engine}");
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        upstream.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "{engine}: EOF propagated after the data");
        // The other direction still flows after the half-close.
        let reply = pattern(1 << 20, 7);
        upstream.write_all(&reply).await.unwrap();
        upstream.shutdown().await.unwrap();
        let mut back = Vec::new();
        let r = client.read_to_end(&mut back).await;
        let out = t.await.unwrap();
        r.unwrap_or_else(|e| panic!("{engine}: {e} after {} bytes; {out:?}", back.len()));
        assert!(back == reply, "{engine}");
        assert_eq!((out.up.end, out.down.end), (End::Eof, End::Eof), "{engine}");
        assert_eq!((out.up.bytes, out.down.bytes), (10, 1 << 20), "{engine}");
        assert_eq!((out.up.engine, out.up.fallback.as_deref()), (engine, None));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_moves_both_ways_at_once_intact() {
    for engine in tunnel_engines() {
        let r = relay(engine);
        let (client, client_side) = pair().await;
        let (upstream_side, upstream) = pair().await;
        let t =
            tokio::spawn(
                async move { r.tunnel(&client_side, &upstream_side, b"", b"", None).await },
            );
        let (up, down) = (pattern(24 << 20, 3), pattern(24 << 20, 4));
        let talk = |mut s: TcpStream, data: Vec<u8>| {
            tokio::spawn(async move {
                let (mut rd, mut wr) = s.split();
                let send = async {
                    wr.write_all(&data).await.unwrap();
                    wr.shutdown().await.unwrap();
                };
                let mut got = Vec::new();
                let recv = rd.read_to_end(&mut got);
                let (_, n) = tokio::join!(send, recv);
                n.unwrap();
                got
            })
        };
        let (at_upstream, at_client) = (talk(upstream, down.clone()), talk(client, up.clone()));
        assert!(
            at_upstream.await.unwrap() == up,
            "{engine}: client → upstream differs"
        );
        assert!(
            at_client.await.unwrap() == down,
            "{engine}: upstream → client differs"
        );
        let out = t.await.unwrap();
        assert_eq!((out.up.end, out.down.end), (End::Eof, End::Eof), "{engine}");
        assert_eq!(
            (out.up.bytes, out.down.bytes),
            (24 << 20, 24 << 20),
            "{engine}"
        );
        assert_eq!(out.up.engine, engine);
    }
}

#[tokio::test]
async fn sockmap_leaves_bounded_splices_with_what_follows_kept_to_pipe() {
    let r = relay(Engine::Sockmap);
    let (mut src_w, src) = pair().await;
    let (dst, mut dst_r) = pair().await;
    src_w.write_all(&pattern(100_000, 9)).await.unwrap();
    let spec = SpliceSpec {
        max: Some(100_000),
        idle: None,
        ..SpliceSpec::default()
    };
    let out = r.splice(&src, &dst, b"", spec).await;
    assert_eq!((out.engine, out.end), (Engine::Pipe, End::Max));
    let why = out.fallback.unwrap();
    assert!(why.contains("what follows a bounded body"), "{why}");
    let mut got = vec![0u8; 100_000];
    dst_r.read_exact(&mut got).await.unwrap();
    assert_eq!(got, pattern(100_000, 9));
}

/// An answer's body with `sockmap` (seed 000's splice of a body on a kept-alive
/// connection): the head first, then exactly the body's length through the kernel, then
/// both sockets back with the proxy: the client's next request unread on its socket, the
/// upstream usable again. Below `small_threshold` the size rule picks `copy`.
#[tokio::test]
async fn sockmap_moves_a_bounded_body_and_hands_both_sockets_back() {
    if !splicer_testkit::require_root("for sockmap, to load eBPF programs") {
        return;
    }
    let r = relay(Engine::Sockmap);
    let (mut origin, mut src) = pair().await;
    let (mut dst, mut client) = pair().await;
    for (i, size) in [0usize, 1, 4095, 4096, 65536, 10 << 20]
        .into_iter()
        .enumerate()
    {
        let body = pattern(size, i as u8);
        client.write_all(b"NEXT").await.unwrap();
        let writer = tokio::spawn({
            let body = body.clone();
            async move {
                origin.write_all(&body).await.unwrap();
                origin
            }
        });
        let spec = SpliceSpec {
            max: Some(4 + size as u64),
            idle: Some(Duration::from_secs(10)),
            trailing: Trailing::Surplus,
        };
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 4 + size];
            client.read_exact(&mut got).await.unwrap();
            (client, got)
        });
        let out = r.splice(&src, &dst, b"HEAD", spec).await;
        let engine = if 4 + size < 4096 {
            Engine::Copy
        } else {
            Engine::Sockmap
        };
        assert_eq!(
            (out.engine, out.end, out.bytes),
            (engine, End::Max, 4 + size as u64),
            "{size}: {out:?}"
        );
        let got;
        (client, got) = reader.await.unwrap();
        assert!(
            got[..4] == *b"HEAD" && got[4..] == body[..],
            "{size}: body differs"
        );
        origin = writer.await.unwrap();
        // The next request waits, unread, on the client's socket; the upstream is an
        // ordinary socket again, with nothing of it taken.
        let mut next = [0u8; 4];
        dst.read_exact(&mut next).await.unwrap();
        assert_eq!(&next, b"NEXT", "{size}");
        origin.write_all(b"ping").await.unwrap();
        let mut ping = [0u8; 4];
        src.read_exact(&mut ping).await.unwrap();
        assert_eq!(&ping, b"ping", "{size}");
    }
    let (_, splices, _, declined) = r.counters().get(Engine::Sockmap);
    assert_eq!((splices, declined), (4, 0));
}

/// A body behind a client slower than its origin: the gate closes (a 64 KiB bound on the
/// redirect queue), the proxy relays the held bytes, and the body's end comes while some
/// are still held (a watch that took the bytes passed at the bound for queued ones waited
/// forever here). Every byte in order, the body ended by its length.
#[tokio::test]
async fn sockmap_ends_a_bounded_body_held_back_by_a_slow_client() {
    if !splicer_testkit::require_root("for sockmap, to load eBPF programs") {
        return;
    }
    let r = Relay::new(RelayConfig {
        engine: EngineChoice::Forced(Engine::Sockmap),
        sockmap_max_queue: 64 << 10,
        ..RelayConfig::default()
    });
    let (mut origin, src) = pair().await;
    let (dst, mut client) = pair().await;
    let body = pattern(8 << 20, 5);
    let writer = tokio::spawn({
        let body = body.clone();
        async move { origin.write_all(&body).await.unwrap() }
    });
    let reader = tokio::spawn(async move {
        let mut got = vec![0u8; 8 << 20];
        for piece in got.chunks_mut(256 << 10) {
            client.read_exact(piece).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        got
    });
    let spec = SpliceSpec {
        max: Some(body.len() as u64),
        idle: Some(Duration::from_secs(10)),
        trailing: Trailing::Surplus,
    };
    let out = r.splice(&src, &dst, b"", spec).await;
    assert_eq!(
        (out.engine, out.end, out.bytes),
        (Engine::Sockmap, End::Max, body.len() as u64),
        "{out:?}"
    );
    writer.await.unwrap();
    assert!(reader.await.unwrap() == body, "the body differs");
    let closings = r.sockmap_stats().map_or(0, |s| s.gate_closings);
    assert!(
        closings > 0,
        "the gate never closed: the test did not test it"
    );
}

/// Bytes an origin sends after the body never reach the client, and the upstream
/// connection is shut so that no pool reuses it.
#[tokio::test]
async fn sockmap_keeps_an_origins_surplus_from_the_client_and_shuts_the_upstream() {
    if !splicer_testkit::require_root("for sockmap, to load eBPF programs") {
        return;
    }
    let r = relay(Engine::Sockmap);
    let (mut origin, mut src) = pair().await;
    let (dst, mut client) = pair().await;
    let body = pattern(1 << 20, 7);
    let mut wire = body.clone();
    wire.extend_from_slice(b"SURPLUS");
    let writer = tokio::spawn(async move {
        origin.write_all(&wire).await.unwrap();
        origin
    });
    let reader = tokio::spawn({
        let n = body.len();
        async move {
            let mut got = vec![0u8; n];
            client.read_exact(&mut got).await.unwrap();
            (client, got)
        }
    });
    let spec = SpliceSpec {
        max: Some(body.len() as u64),
        idle: Some(Duration::from_secs(10)),
        trailing: Trailing::Surplus,
    };
    let out = r.splice(&src, &dst, b"", spec).await;
    assert_eq!(
        (out.engine, out.end),
        (Engine::Sockmap, End::Max),
        "{out:?}"
    );
    let (mut client, got) = reader.await.unwrap();
    assert!(got == body, "body differs");
    let _origin = writer.await.unwrap();
    drop(dst);
    let mut after = Vec::new();
    client.read_to_end(&mut after).await.unwrap();
    assert!(
        after.is_empty(),
        "the client got {} bytes more",
        after.len()
    );
    let mut probe = [0u8; 8];
    let n = src.read(&mut probe).await.unwrap();
    assert_eq!(
        n,
        0,
        "the upstream reads end of stream, not {:?}",
        &probe[..n]
    );
}

#[tokio::test]
async fn tunnel_reset_reaches_other_side() {
    for engine in tunnel_engines() {
        let r = relay(engine);
        let (mut client, client_side) = pair().await;
        let (upstream_side, upstream) = pair().await;
        let t =
            tokio::spawn(
                async move { r.tunnel(&client_side, &upstream_side, b"", b"", None).await },
            );
        let mut upstream = upstream;
        upstream.write_all(b"partial").await.unwrap();
        let mut got = [0u8; 7];
        client.read_exact(&mut got).await.unwrap();
        #[allow(deprecated)] // non-blocking socket: close does not block
        upstream.set_linger(Some(Duration::ZERO)).unwrap();
        drop(upstream); // RST
        let mut rest = Vec::new();
        let err = client.read_to_end(&mut rest).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{engine}");
        let out = t.await.unwrap();
        assert!(out.end().is_error(), "{out:?}");
    }
}

#[tokio::test]
async fn idle_tunnel_holds_no_buffer_or_pipe() {
    let r = relay(Engine::Pipe);
    let (mut client, client_side) = pair().await;
    let (upstream_side, mut upstream) = pair().await;
    let r2 = r.clone();
    let t = tokio::spawn(async move {
        r2.tunnel(&client_side, &upstream_side, b"", b"", None)
            .await
    });
    client.write_all(&pattern(100_000, 3)).await.unwrap();
    let mut got = vec![0u8; 100_000];
    upstream.read_exact(&mut got).await.unwrap();
    // The pipe goes back to the pool once the client is drained (the relay's task gets
    // there a moment after the last byte).
    let pooled = until(|| r.pool_stats().idle_pipes == 1).await;
    assert!(pooled, "idle pipes: {}", r.pool_stats().idle_pipes);
    drop(client);
    drop(upstream);
    t.await.unwrap();
}

#[tokio::test]
async fn tunnel_takes_bytes_queued_before_it_started() {
    for engine in tunnel_engines() {
        for fin_first in [false, true] {
            let r = relay(engine);
            let (mut client, client_side) = pair().await;
            let (upstream_side, mut upstream) = pair().await;
            client.write_all(b"early").await.unwrap();
            if fin_first {
                client.shutdown().await.unwrap();
            }
            // Until the bytes (and the FIN) are in the proxy's socket.
            let queued = until(|| {
                let fd = client_side.as_fd();
                readable_bytes(fd).is_ok_and(|n| n >= 5)
                    && (!fin_first || tcp_info(fd).is_ok_and(|i| i.state != 1))
            })
            .await;
            assert!(queued, "the early bytes never reached the proxy's socket");
            let t = tokio::spawn(async move {
                r.tunnel(&client_side, &upstream_side, b"", b"", None).await
            });
            let mut got = vec![0u8; 5];
            upstream.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"early", "{engine} fin_first={fin_first}");
            if !fin_first {
                client.shutdown().await.unwrap();
            }
            let mut rest = Vec::new();
            upstream.read_to_end(&mut rest).await.unwrap();
            upstream.write_all(b"late").await.unwrap();
            upstream.shutdown().await.unwrap();
            let mut back = Vec::new();
            client.read_to_end(&mut back).await.unwrap();
            assert_eq!(back, b"late", "{engine} fin_first={fin_first}");
            let out = t.await.unwrap();
            eprintln!("{engine} fin_first={fin_first}: {out:?}");
            assert_eq!((out.up.bytes, out.down.bytes), (5, 4), "{engine}");
        }
    }
}

/// An upstream that speaks and half-closes at once, racing the tunnel's set-up, many times:
/// its bytes always reach the client, then its EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_speaking_first_races_the_setup() {
    for engine in tunnel_engines() {
        for i in 0..100 {
            let r = relay(engine);
            let (mut client, client_side) = pair().await;
            let (upstream_side, mut upstream) = pair().await;
            let server = tokio::spawn(async move {
                upstream.write_all(b"hello").await.unwrap();
                upstream.shutdown().await.unwrap();
                let mut got = Vec::new();
                upstream.read_to_end(&mut got).await.map(|_| got)
            });
            let t = tokio::spawn(async move {
                r.tunnel(&client_side, &upstream_side, b"", b"", None).await
            });
            let mut hello = Vec::new();
            client.read_to_end(&mut hello).await.unwrap();
            assert_eq!(hello, b"hello", "{engine} try {i}");
            client.write_all(b"after").await.unwrap();
            client.shutdown().await.unwrap();
            let got = server.await.unwrap();
            let out = t.await.unwrap();
            assert_eq!(got.unwrap(), b"after", "{engine} try {i}: {out:?}");
        }
    }
}

/// Polls `cond` every millisecond until it holds, for at most five seconds; whether it did.
async fn until(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !cond() {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}

/// Collects what a tap is given; stops after `stop_after` bytes when set.
struct Collect {
    got: Vec<u8>,
    stop_after: Option<usize>,
}

impl splicer_relay::Tap for Collect {
    fn tap(&mut self, bytes: &[u8]) -> bool {
        self.got.extend_from_slice(bytes);
        self.stop_after.is_none_or(|n| self.got.len() < n)
    }
}

/// A tapped splice gives the tap exactly the bytes read from the source (not the prefix)
/// and the destination every byte, for each engine that can tap; a forced `sockmap` falls
/// back to one that can and says why.
#[tokio::test]
async fn a_tap_sees_exactly_the_spliced_bytes() {
    for engine in [Engine::Copy, Engine::Pipe, Engine::Sockmap] {
        let r = relay(engine);
        let (mut src_w, src) = pair().await;
        let (dst, mut dst_r) = pair().await;
        let data = pattern(700_000, 9);
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            src_w.write_all(&sent).await.unwrap();
            src_w
        });
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 3 + 600_000];
            dst_r.read_exact(&mut got).await.unwrap();
            got
        });
        let mut tap = Collect {
            got: Vec::new(),
            stop_after: None,
        };
        let spec = SpliceSpec {
            max: Some(3 + 600_000),
            idle: Some(Duration::from_secs(10)),
            ..SpliceSpec::default()
        };
        let o = r.splice_tapped(&src, &dst, b"PRE", spec, &mut tap).await;
        assert_eq!(o.end, End::Max, "{engine}");
        let expect = if engine == Engine::Sockmap {
            assert!(
                o.fallback.as_deref().is_some_and(|f| f.contains("sockmap")),
                "{o:?}"
            );
            Engine::Pipe
        } else {
            engine
        };
        assert_eq!(o.engine, expect);
        assert!(
            tap.got == data[..600_000],
            "{engine}: tap got {} bytes, not the source's",
            tap.got.len()
        );
        let got = reader.await.unwrap();
        assert_eq!(&got[..3], b"PRE");
        assert!(got[3..] == data[..600_000], "{engine}: destination differs");
        drop(writer.await.unwrap());
    }
}

/// A tap that stops wanting bytes leaves the splice going: every byte still arrives.
#[tokio::test]
async fn a_tap_that_stops_does_not_stop_the_splice() {
    for engine in ENGINES {
        let r = relay(engine);
        let (mut src_w, src) = pair().await;
        let (dst, mut dst_r) = pair().await;
        let data = pattern(400_000, 4);
        let sent = data.clone();
        tokio::spawn(async move { src_w.write_all(&sent).await.unwrap() });
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 400_000];
            dst_r.read_exact(&mut got).await.unwrap();
            got
        });
        let mut tap = Collect {
            got: Vec::new(),
            stop_after: Some(1000),
        };
        let spec = SpliceSpec {
            max: Some(400_000),
            idle: Some(Duration::from_secs(10)),
            ..SpliceSpec::default()
        };
        let o = r.splice_tapped(&src, &dst, b"", spec, &mut tap).await;
        assert_eq!((o.end, o.bytes), (End::Max, 400_000), "{engine}");
        assert!(
            tap.got.len() >= 1000 && tap.got.len() < 400_000,
            "{engine}: {}",
            tap.got.len()
        );
        assert_eq!(tap.got[..], data[..tap.got.len()]);
        assert!(reader.await.unwrap() == data, "{engine}");
    }
}

/// `sockmap`'s back-pressure: its program takes every skb off the source's receive queue,
/// so without a bound the source's window never closes and a destination that does not
/// read makes the kernel queue without bound (1.7 GiB in 3 s, and a reset past
/// `sockmap_max_queue`, before the gate). Now the gate holds the source back: the writer
/// blocks with a bounded amount in the proxy's kernel, and once the destination reads, every
/// byte arrives, in order, and both directions end cleanly. A tunnel beside it is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockmap_holds_back_a_source_whose_destination_does_not_read() {
    if !splicer_testkit::require_root("to load the sockmap program") {
        return;
    }
    let r = relay(Engine::Sockmap);
    // The stuck tunnel: its upstream's peer does not read until told.
    let (mut client, client_side) = pair().await;
    let (upstream_side, mut slow) = pair().await;
    let stuck = tokio::spawn(async move {
        let out = r.tunnel(&client_side, &upstream_side, b"", b"", None).await;
        (out, client_side, upstream_side)
    });
    // A healthy tunnel at the same time.
    let (mut other, other_side) = pair().await;
    let (other_up_side, mut other_up) = pair().await;
    let healthy = tokio::spawn(async move {
        relay(Engine::Sockmap)
            .tunnel(&other_side, &other_up_side, b"", b"", None)
            .await
    });
    let data = pattern(16 << 20, 9);
    let sent = data.clone();
    let feed = tokio::spawn(async move {
        other.write_all(&sent).await.unwrap();
        other.shutdown().await.unwrap();
        other
    });
    let mut got = Vec::new();
    other_up.read_to_end(&mut got).await.unwrap();
    assert!(got == data, "the healthy tunnel's bytes differ");
    drop(feed.await.unwrap());
    drop(other_up);
    let h = healthy.await.unwrap();
    assert_eq!(h.up.end, End::Eof);

    // Write until a write has blocked for a second: the sender is held back.
    let total = pattern(96 << 20, 4);
    let written = write_until_held(&mut client, &total, Duration::from_secs(1)).await;
    // Everything written is in the client's send queue, the proxy's kernel or the slow
    // peer's receive queue: each TCP buffer is a few MiB (autotuned, at most
    // `net.ipv4.tcp_wmem`/`tcp_rmem`'s maximum), the redirect queue at most the bound.
    assert!(
        written < 64 << 20,
        "{written} bytes went into a tunnel whose destination does not read"
    );
    // Now the destination reads; the rest follows, in order.
    let reader = tokio::spawn(async move {
        let mut all = Vec::new();
        slow.read_to_end(&mut all).await.unwrap();
        (all, slow)
    });
    client.write_all(&total[written..]).await.unwrap();
    client.shutdown().await.unwrap();
    let (all, mut slow) = reader.await.unwrap();
    assert_eq!(all.len(), total.len());
    assert!(all == total, "the held-back tunnel's bytes differ");
    slow.shutdown().await.unwrap();
    let mut back = Vec::new();
    client.read_to_end(&mut back).await.unwrap();
    let (out, _, _) = stuck.await.unwrap();
    assert_eq!((out.up.end, out.down.end), (End::Eof, End::Eof), "{out:?}");
    assert_eq!(out.up.bytes, total.len() as u64);
}

/// A destination with a small send buffer takes the redirect queue one buffer per kernel
/// tick; the FIN waits behind seconds of it and the tunnel ends intact. (In the lab, where
/// the send queue was empty between ticks, that once looked like lost bytes and reset the
/// tunnel; on loopback delayed ACKs keep the queue non-empty, so the unit test of
/// `Seen::look` is what catches that.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockmap_waits_for_a_destination_with_a_small_send_buffer() {
    if !splicer_testkit::require_root("to load the sockmap program") {
        return;
    }
    let r = relay(Engine::Sockmap);
    let (mut client, client_side) = pair().await;
    let (upstream_side, mut upstream) = pair().await;
    set_send_buffer(upstream_side.as_fd(), 4096).unwrap();
    let t =
        tokio::spawn(async move { r.tunnel(&client_side, &upstream_side, b"", b"", None).await });
    let data = pattern(8 << 20, 5);
    // The client writes everything and its FIN at once: the FIN waits behind megabytes in
    // the kernel's redirect queue (up to the gate's bound) and the bytes the gate held,
    // drained through a 4 KB send buffer.
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        upstream.read_to_end(&mut got).await.unwrap();
        (got, upstream)
    });
    client.write_all(&data).await.unwrap();
    client.shutdown().await.unwrap();
    let (got, mut upstream) = reader.await.unwrap();
    assert!(got == data, "the bytes differ");
    // The tunnel ends when the other direction does too.
    upstream.shutdown().await.unwrap();
    let mut back = Vec::new();
    client.read_to_end(&mut back).await.unwrap();
    assert!(back.is_empty());
    let out = t.await.unwrap();
    assert_eq!((out.up.end, out.down.end), (End::Eof, End::Eof), "{out:?}");
    assert_eq!(out.up.bytes, data.len() as u64);
}

/// `Relay::cut` (the end of a shutdown grace) ends a running tunnel in every engine with
/// `End::Cut`, and its outcome still counts what moved (issue 34, item 8: a cut connection
/// was logged with 0 bytes); a splice started after the cut ends at once.
#[tokio::test]
async fn a_cut_tunnel_reports_what_it_moved() {
    for engine in tunnel_engines() {
        let r = relay(engine);
        let (mut client, client_side) = pair().await;
        let (upstream_side, mut upstream) = pair().await;
        let r2 = r.clone();
        let t = tokio::spawn(async move {
            r2.tunnel(&client_side, &upstream_side, b"", b"", None)
                .await
        });
        let (up, down) = (pattern(1 << 20, 5), pattern(3 << 20, 6));
        client.write_all(&up).await.unwrap();
        let mut got = vec![0u8; up.len()];
        upstream.read_exact(&mut got).await.unwrap();
        assert!(got == up, "{engine}");
        upstream.write_all(&down).await.unwrap();
        let mut got = vec![0u8; down.len()];
        client.read_exact(&mut got).await.unwrap();
        assert!(got == down, "{engine}");
        r.cut();
        let out = tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .unwrap_or_else(|_| panic!("{engine}: the cut tunnel goes on"))
            .unwrap();
        assert_eq!((out.up.end, out.down.end), (End::Cut, End::Cut), "{engine}");
        assert_eq!(out.end(), End::Cut);
        assert_eq!(
            (out.up.bytes, out.down.bytes),
            (1 << 20, 3 << 20),
            "{engine}"
        );
        let (a, _a) = pair().await;
        let (_b, b) = pair().await;
        let o = r.splice(&a, &b, b"", SpliceSpec::default()).await;
        assert_eq!((o.end, o.bytes), (End::Cut, 0), "{engine}");
    }
}

/// The server answers and closes first, the client after reading everything (an HTTP/1.0
/// exchange, a banner and a close). Both directions end in an ordinary end of stream, for
/// every engine. The server's FIN comes alone, after the client has read the answer (the
/// e2e test `origins_that_close_first` has the case where a bare FIN once broke `sockmap`).
#[tokio::test]
async fn a_server_that_closes_first_ends_the_tunnel_cleanly() {
    for engine in tunnel_engines() {
        for round in 0..10 {
            let r = relay(engine);
            let (mut client, client_side) = pair().await;
            let (upstream_side, mut upstream) = pair().await;
            let t = tokio::spawn(async move {
                r.tunnel(&client_side, &upstream_side, b"", b"", None).await
            });
            client.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
            let mut got = vec![0u8; 18];
            upstream.read_exact(&mut got).await.unwrap();
            let answer = pattern(64 << 10, round);
            upstream.write_all(&answer).await.unwrap();
            let mut back = vec![0u8; answer.len()];
            client.read_exact(&mut back).await.unwrap();
            assert!(back == answer, "{engine} round {round}");
            // Closed, not only shut: what the client sends after this gets a reset.
            drop(upstream);
            let mut rest = Vec::new();
            client.read_to_end(&mut rest).await.unwrap();
            assert!(rest.is_empty(), "{engine} round {round}");
            drop(client);
            let out = t.await.unwrap();
            assert_eq!(
                (out.up.end, out.down.end),
                (End::Eof, End::Eof),
                "{engine} round {round}: {out:?}"
            );
        }
    }
}
