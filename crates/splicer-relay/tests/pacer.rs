//! The pacer's `rate` mode over real loopback sockets, once per engine that can be paced:
//! every byte arrives, in order, and no faster than the cap allows (a lower bound on the
//! time, which a loaded machine only lengthens: how close to the cap a splice runs is the
//! lab's figure, not a test's); a new setting reaches a running splice; a paced splice
//! behind a reader that does not read holds a bounded amount.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use splicer_relay::pacer::{ClassPace, Mode};
use splicer_relay::{
    Class, End, Engine, EngineChoice, Front, PacerConfig, Pacing, Relay, RelayConfig, SpliceSpec,
    Trailing,
};
use splicer_sys::sock::{max_pacing_rate, readable_bytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::{paced_engines as engines, pair, pattern};

fn relay(engine: Engine) -> Relay {
    Relay::new(RelayConfig {
        engine: EngineChoice::Forced(engine),
        pipe_size: 65536,
        ..RelayConfig::default()
    })
}

/// `class` of `front` capped at `rate` bytes a second per splice.
fn capped(front: Front, class: Class, rate: u64) -> Pacing {
    let mut table = PacerConfig::default();
    let pace = ClassPace {
        mode: Mode::Rate,
        per_splice: rate,
        ..ClassPace::default()
    };
    match class {
        Class::Bodies => table.bodies = pace,
        Class::Tunnels => table.tunnels = pace,
        Class::Fills => table.fills = pace,
    }
    let mut p = Pacing::default();
    p.set(front, table);
    p
}

/// The least time `bytes` can take at `rate` after a first burst: the user-space engines'
/// burst is 64 KiB; TCP's pacing lets the first window go at once (10 segments of at most
/// 64 KiB on loopback) and the `sockmap` redirect queue may hold up to 1 MiB: a quarter
/// of the ideal time is left as slack for all of them.
fn least(bytes: usize, rate: u64) -> Duration {
    Duration::from_secs_f64(bytes as f64 / rate as f64 * 0.75)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_tunnel_moves_every_byte_no_faster_than_its_cap() {
    const RATE: u64 = 8 << 20;
    for engine in engines() {
        let r = relay(engine);
        r.set_pacing(capped(Front::Socks, Class::Tunnels, RATE));
        let (mut client, client_side) = pair().await;
        let (upstream_side, mut server) = pair().await;
        let socks = r.front(Front::Socks);
        let tunnel = tokio::spawn(async move {
            socks
                .tunnel(&client_side, &upstream_side, b"", b"", None)
                .await
        });
        let data = pattern(6 << 20, 3);
        let sent = data.clone();
        let start = Instant::now();
        let feed = tokio::spawn(async move {
            client.write_all(&sent).await.unwrap();
            client.shutdown().await.unwrap();
            client
        });
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        let took = start.elapsed();
        assert!(got == data, "{engine}: the tunnel's bytes differ");
        assert!(
            took >= least(data.len(), RATE),
            "{engine}: 6 MiB capped at 8 MiB/s took only {took:?}"
        );
        server.shutdown().await.unwrap();
        drop(feed.await.unwrap());
        let out = tunnel.await.unwrap();
        assert_eq!((out.up.engine, out.up.end), (engine, End::Eof), "{out:?}");
    }
}

/// The HTTP front end's bodies capped, the SOCKS front end's tunnels not: a relay of the
/// same process paces each front end's class apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_body_arrives_whole_and_its_sockets_come_back_uncapped() {
    const RATE: u64 = 4 << 20;
    for engine in engines() {
        let r = relay(engine);
        r.set_pacing(capped(Front::Http, Class::Bodies, RATE));
        let (mut origin, src) = pair().await;
        let (dst, mut client) = pair().await;
        let body = pattern(3 << 20, 7);
        let writer = tokio::spawn({
            let body = body.clone();
            async move {
                origin.write_all(&body).await.unwrap();
                origin
            }
        });
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 3 << 20];
            client.read_exact(&mut got).await.unwrap();
            (client, got)
        });
        let spec = SpliceSpec {
            max: Some(body.len() as u64),
            idle: Some(Duration::from_secs(20)),
            trailing: Trailing::Surplus,
        };
        let start = Instant::now();
        let out = r.front(Front::Http).splice(&src, &dst, b"", spec).await;
        let (_client, got) = reader.await.unwrap();
        let took = start.elapsed();
        assert_eq!((out.engine, out.end), (engine, End::Max), "{out:?}");
        assert!(got == body, "{engine}: the body differs");
        assert!(
            took >= least(body.len(), RATE),
            "{engine}: 3 MiB capped at 4 MiB/s took only {took:?}"
        );
        // The socket goes back to the proxy with no cap left on it.
        assert_eq!(max_pacing_rate(dst.as_fd()).unwrap(), u64::MAX, "{engine}");
        drop(writer.await.unwrap());

        // The SOCKS front end's tunnels are not paced by the HTTP front end's setting.
        let (mut a, a_side) = pair().await;
        let (b_side, mut b) = pair().await;
        let socks = r.front(Front::Socks);
        let tunnel =
            tokio::spawn(async move { socks.tunnel(&a_side, &b_side, b"", b"", None).await });
        let data = pattern(32 << 20, 1);
        let sent = data.clone();
        let start = Instant::now();
        let feed = tokio::spawn(async move {
            a.write_all(&sent).await.unwrap();
            a.shutdown().await.unwrap();
            a
        });
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert!(got == data, "{engine}: the tunnel's bytes differ");
        // 32 MiB at the bodies' cap would take 8 s; unpaced it takes well under that.
        assert!(
            start.elapsed() < least(data.len(), RATE),
            "{engine}: an unpaced tunnel ran at the bodies' cap"
        );
        b.shutdown().await.unwrap();
        drop(feed.await.unwrap());
        tunnel.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_setting_reaches_a_running_splice() {
    for engine in engines() {
        let r = relay(engine);
        // 64 KiB a second: 8 MiB would take two minutes.
        r.set_pacing(capped(Front::Http, Class::Tunnels, 64 << 10));
        let (mut client, client_side) = pair().await;
        let (upstream_side, mut server) = pair().await;
        let http = r.front(Front::Http);
        let tunnel = tokio::spawn(async move {
            http.tunnel(&client_side, &upstream_side, b"", b"", None)
                .await
        });
        let data = pattern(8 << 20, 5);
        let sent = data.clone();
        let feed = tokio::spawn(async move {
            client.write_all(&sent).await.unwrap();
            client.shutdown().await.unwrap();
            client
        });
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            (server, got)
        });
        // Half a second under the cap (no event to wait for: the cap is that nothing ends).
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!reader.is_finished(), "{engine}: the cap did not hold");
        r.set_pacing(Pacing::default());
        let (mut server, got) = tokio::time::timeout(Duration::from_secs(30), reader)
            .await
            .unwrap_or_else(|_| panic!("{engine}: the cap was not lifted"))
            .unwrap();
        assert!(got == data, "{engine}: the tunnel's bytes differ");
        server.shutdown().await.unwrap();
        drop(feed.await.unwrap());
        let out = tunnel.await.unwrap();
        assert_eq!((out.up.engine, out.up.end), (engine, End::Eof), "{out:?}");
    }
}

/// A capped splice whose destination does not read: what the writer gets in is bounded by
/// the sockets' buffers (and for `sockmap` its redirect queue's gate), as unpaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_splice_behind_a_reader_that_does_not_read_holds_a_bounded_amount() {
    for engine in engines() {
        let r = relay(engine);
        r.set_pacing(capped(Front::Socks, Class::Tunnels, 8 << 20));
        common::behind_a_reader_that_does_not_read(&r, &format!("{engine}, capped"), || {
            r.set_pacing(Pacing::default())
        })
        .await;
    }
}

/// A shutdown's cut ends a capped splice at once, bytes still queued behind the cap
/// included: the wait for them to be paced out stops too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_ends_a_capped_splice_at_once() {
    for engine in engines() {
        let r = relay(engine);
        r.set_pacing(capped(Front::Socks, Class::Tunnels, 64 << 10));
        let (mut client, client_side) = pair().await;
        let (upstream_side, server) = pair().await;
        let socks = r.front(Front::Socks);
        let tunnel = tokio::spawn(async move {
            socks
                .tunnel(&client_side, &upstream_side, b"", b"", None)
                .await
        });
        let data = pattern(8 << 20, 4);
        let feed = tokio::spawn(async move {
            let _ = client.write_all(&data).await;
            client
        });
        // Running: the first bytes reached the server, and more wait behind the cap.
        assert!(
            splicer_testkit::eventually(|| readable_bytes(server.as_fd()).unwrap_or(0) > 0).await,
            "{engine}: nothing went through"
        );
        let start = Instant::now();
        r.cut();
        let out = tokio::time::timeout(Duration::from_secs(5), tunnel)
            .await
            .unwrap_or_else(|_| panic!("{engine}: the cut did not end the capped tunnel"))
            .unwrap();
        assert_eq!(out.up.end, End::Cut, "{engine}: {out:?}");
        assert!(start.elapsed() < Duration::from_secs(5), "{engine}");
        drop(server);
        feed.abort();
    }
}
