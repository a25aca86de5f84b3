//! The load generators against the lab's origin and sink on loopback (no root needed): they
//! drive many clients from one process, check every byte, and count what goes wrong by kind.

use std::net::SocketAddr;

use splicer_lab::load::{self, bulk, persist, sclient, surge, Via};
use splicer_lab::origin;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

async fn origin() -> SocketAddr {
    origin::start(
        "127.0.0.1:0".parse().unwrap(),
        origin::Config {
            think: origin::Think::None,
            seed: 1,
        },
    )
    .await
    .unwrap()
}

fn sclient_params(origin: SocketAddr, clients: usize) -> sclient::Params {
    sclient::Params {
        origin,
        via: Via::Direct,
        clients,
        size: 4096,
        cacheable: false,
        ssl: false,
        abbreviated: 0.6,
        duration_s: 3.0,
        warmup_s: 1.0,
        cooldown_s: 0.5,
        timeout_s: 10.0,
        seed: 3,
        keep_alive: false,
        per_connection: 0,
        pause_s: 0.0,
    }
}

#[test]
fn one_process_drives_a_thousand_sclients() {
    let rt = load::runtime().unwrap();
    let r = rt.block_on(async {
        let o = origin().await;
        sclient::run(sclient_params(o, 1000)).await.unwrap()
    });
    assert_eq!(r.error_total(), 0, "{:?}", r.errors);
    // Every client completes several loops in the 1.5 s measured.
    assert!(r.completed >= 1000, "{} completed", r.completed);
    assert_eq!(r.latency.n, r.completed);
    assert_eq!(r.bytes, r.completed * 4096);
    assert!(r.latency.p50_ms <= r.latency.p99_ms && r.latency.cv > 0.0);
    // The warm-up and cool-down are outside the counted figures but in the timeline.
    let all: u64 = r.timeline.iter().map(|s| s.completed).sum();
    assert!(
        all > r.completed,
        "timeline {all} vs counted {}",
        r.completed
    );
    assert!((r.cdf.last().unwrap().1 - 1.0).abs() < 1e-9);
}

/// `--per-connection K`: K requests on each connection, then a new one; without a bound a
/// kept-alive client keeps its one connection.
#[test]
fn sclients_carry_k_requests_per_connection() {
    let rt = load::runtime().unwrap();
    let clients = 10;
    for k in [0, 1, 4] {
        let r = rt.block_on(async {
            let o = origin().await;
            let mut p = sclient_params(o, clients);
            p.keep_alive = true;
            p.per_connection = k;
            sclient::run(p).await.unwrap()
        });
        assert_eq!(r.error_total(), 0, "{:?}", r.errors);
        let all: u64 = r.timeline.iter().map(|s| s.completed).sum();
        let conns = r.extra["connections"].as_u64().unwrap();
        assert!(all > 100, "{all} requests");
        match k {
            0 => assert_eq!(conns, clients as u64),
            // Each connection carried k, but a client's last may have carried fewer.
            k => {
                let k = u64::from(k);
                assert!(
                    conns * k >= all && conns * k <= all + k * clients as u64,
                    "k {k}: {conns} connections for {all} requests"
                );
            }
        }
    }
}

#[test]
fn ssl_emulation_runs_before_each_get() {
    let rt = load::runtime().unwrap();
    let r = rt.block_on(async {
        let o = origin().await;
        let mut p = sclient_params(o, 20);
        p.ssl = true;
        sclient::run(p).await.unwrap()
    });
    assert_eq!(r.error_total(), 0, "{:?}", r.errors);
    assert!(r.completed > 20);
}

/// An origin that flips one byte of every body: the generators must call it corrupt.
async fn corrupting_origin() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut b = vec![0u8; 4096];
                let _ = s.read(&mut b).await;
                let mut body = splicer_lab::content::Pattern::new(3).bytes(4096);
                body[1000] ^= 0x55;
                let head = "HTTP/1.0 200 OK\r\nContent-Length: 4096\r\n\r\n";
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&body).await;
            });
        }
    });
    addr
}

#[test]
fn corrupt_bodies_are_counted_not_accepted() {
    let rt = load::runtime().unwrap();
    let r = rt.block_on(async {
        let o = corrupting_origin().await;
        sclient::run(sclient_params(o, 5)).await.unwrap()
    });
    assert_eq!(r.completed, 0);
    assert!(
        r.errors.get("corrupt").copied().unwrap_or(0) > 0,
        "{:?}",
        r.errors
    );
}

#[test]
fn refused_connections_are_counted() {
    let rt = load::runtime().unwrap();
    let r = rt.block_on(async {
        // A port nobody listens on: bind, learn it, close.
        let port = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let mut p = sclient_params(port, 3);
        p.duration_s = 1.5;
        p.warmup_s = 0.5;
        p.cooldown_s = 0.5;
        sclient::run(p).await.unwrap()
    });
    assert_eq!(r.completed, 0);
    assert!(
        r.errors.get("connect").copied().unwrap_or(0) > 0,
        "{:?}",
        r.errors
    );
}

#[test]
fn surge_users_fetch_pages_open_loop() {
    let rt = load::runtime().unwrap();
    let r = rt.block_on(async {
        let o = origin().await;
        surge::run(surge::Params {
            origin: o,
            via: Via::Direct,
            users: 200,
            files: 500,
            max_size: 2 << 20,
            time_scale: 0.02,
            duration_s: 3.0,
            warmup_s: 0.5,
            cooldown_s: 0.5,
            timeout_s: 10.0,
            seed: 4,
        })
        .await
        .unwrap()
    });
    assert_eq!(r.error_total(), 0, "{:?}", r.errors);
    let pages = r.extra["pages"].as_u64().unwrap();
    assert!(pages > 100, "{pages} pages");
    // Pages hold one or more objects.
    assert!(
        r.completed >= pages,
        "{} objects, {pages} pages",
        r.completed
    );
}

#[test]
fn bulk_pushes_into_a_checking_sink() {
    let rt = load::runtime().unwrap();
    for both_ways in [false, true] {
        let r = rt.block_on(async {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let sink = l.local_addr().unwrap();
            tokio::spawn(bulk::serve(l));
            bulk::run(bulk::Params {
                sink,
                via: Via::Direct,
                conns: 4,
                bytes: 64 << 20,
                both_ways,
                seed: 5,
                timeout_s: 60.0,
            })
            .await
            .unwrap()
        });
        assert_eq!(r.error_total(), 0, "{:?}", r.errors);
        let each = if both_ways { 2 * (64 << 20) } else { 64 << 20 };
        assert_eq!(
            (r.completed, r.bytes),
            (4, 4 * each),
            "both_ways={both_ways}"
        );
        assert!(r.extra["gbit_per_second"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn persistent_connection_at_a_fixed_rate() {
    let rt = load::runtime().unwrap();
    let r = rt.block_on(async {
        let o = origin().await;
        persist::run(persist::Params {
            origin: o,
            via: Via::Direct,
            rate: 200.0,
            count: 200,
            size: 50_000,
            // A generous "round trip": on loopback a 50 KB response takes well under 50 ms.
            rtt_ms: Some(25.0),
            warmup_secs: 0.0,
            seed: 6,
        })
        .await
        .unwrap()
    });
    assert_eq!(r.error_total(), 0, "{:?}", r.errors);
    assert_eq!(r.completed, 200);
    // 200 requests at 200/s take about a second: the rate was kept, not run flat out.
    assert!(r.measured_s >= 0.95, "{} s", r.measured_s);
    assert!(
        r.extra["share_at_least_2rtt"].as_f64().unwrap() < 0.05,
        "{}",
        r.extra
    );
}

/// The warm-up is counted apart: with a "round trip" no response can beat, every request is
/// slow, and those due in the first 0.25 s of 200 per second are the first 50.
#[test]
fn persistent_connection_counts_its_warmup_apart() {
    let rt = load::runtime().unwrap();
    let r = rt.block_on(async {
        let o = origin().await;
        persist::run(persist::Params {
            origin: o,
            via: Via::Direct,
            rate: 200.0,
            count: 120,
            size: 10_000,
            rtt_ms: Some(0.000_001),
            warmup_secs: 0.25,
            seed: 7,
        })
        .await
        .unwrap()
    });
    assert_eq!(r.error_total(), 0, "{:?}", r.errors);
    let e = &r.extra;
    assert_eq!(e["warmup_requests"], 50, "{e}");
    assert_eq!(e["completed_after_warmup"], 70, "{e}");
    assert_eq!(e["at_least_2rtt"], 120, "{e}");
    assert_eq!(e["at_least_2rtt_after_warmup"], 70, "{e}");
}

/// Kept-alive s-clients send every request of a client on one connection: counted by a
/// forwarder in front of the origin.
#[test]
fn keep_alive_clients_reuse_their_connection() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let rt = load::runtime().unwrap();
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let r = rt.block_on(async {
        let o = origin().await;
        let front = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = front.local_addr().unwrap();
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = front.accept().await {
                count.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let mut u = tokio::net::TcpStream::connect(o).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
                });
            }
        });
        let mut p = sclient_params(addr, 5);
        p.keep_alive = true;
        sclient::run(p).await.unwrap()
    });
    assert_eq!(r.error_total(), 0, "{:?}", r.errors);
    assert!(r.completed > 50, "{} completed", r.completed);
    assert_eq!(
        accepted.load(Ordering::Relaxed),
        5,
        "one connection per client"
    );
}

/// Seed 004's sessions: every query on its own connection, the first of each session not
/// counted, and each counted query's think time (sent to the origin, which waits it out)
/// taken off again in `less_think`.
#[test]
fn query_sessions_count_and_split_their_queries() {
    use splicer_lab::load::queries;
    let rt = load::runtime().unwrap();
    let r = rt.block_on(async {
        let o = origin().await;
        queries::run(queries::Params {
            target: o,
            clients: 3,
            sessions: 2,
            queries: 4,
            drop: 1,
            size: 20_000,
            think_ms: (40, 60),
            timeout_s: 10.0,
            seed: 9,
        })
        .await
        .unwrap()
    });
    assert_eq!(r.error_total(), 0, "{:?}", r.errors);
    // 3 clients × 2 sessions × (4 − 1) counted queries.
    assert_eq!(r.completed, 18);
    assert_eq!(r.extra["less_think"]["n"], 18, "{}", r.extra);
    // The origin waited 40–60 ms per query; taken off, loopback leaves a few ms at most.
    assert!(r.latency.p50_ms >= 40.0, "{:?}", r.latency);
    let less = r.extra["less_think"]["p50_ms"].as_f64().unwrap();
    assert!(less < 20.0, "think time not taken off: {}", r.extra);
    let bad = queries::Params {
        target: o_never(),
        clients: 1,
        sessions: 1,
        queries: 2,
        drop: 2,
        size: 1,
        think_ms: (0, 0),
        timeout_s: 1.0,
        seed: 1,
    };
    assert!(bad.check().unwrap_err().0.contains("--drop"));
}

fn o_never() -> SocketAddr {
    "127.0.0.1:9".parse().unwrap()
}

/// nginx started on a configuration of `nginx-origin`'s, stopped (by its PID) on drop.
struct Nginx(std::process::Child, std::path::PathBuf);

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: nginx's master stops its workers and exits.
        let _ = std::process::Command::new("kill")
            .arg(self.0.id().to_string())
            .status();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn nginx_origin(sizes: Vec<u64>) -> (Nginx, SocketAddr) {
    use splicer_lab::bench::nginx_origin;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let dir = std::env::temp_dir().join(format!("nginx-origin-test-{port}"));
    let p = nginx_origin::Params {
        listen,
        sizes,
        seed: 3,
    };
    let conf = nginx_origin::prepare(&p, &dir).unwrap();
    let child = std::process::Command::new("nginx")
        .arg("-c")
        .arg(&conf)
        .args(["-e", "stderr"])
        .spawn()
        .unwrap();
    let nginx = Nginx(child, dir);
    assert!(
        splicer_testkit::eventually_blocking(|| std::net::TcpStream::connect(listen).is_ok()),
        "nginx did not listen on {listen}"
    );
    (nginx, listen)
}

#[test]
fn sclients_check_every_byte_of_the_nginx_origin_s_files() {
    if !splicer_testkit::require(splicer_testkit::have_command("nginx"), "nginx") {
        return;
    }
    let (_nginx, o) = nginx_origin(vec![4096, 300_000]);
    let rt = load::runtime().unwrap();
    for (size, cacheable) in [(4096, true), (300_000, false)] {
        let p = sclient::Params {
            size,
            cacheable,
            keep_alive: true,
            ..sclient_params(o, 10)
        };
        let r = rt.block_on(sclient::run(p)).unwrap();
        assert_eq!(r.error_total(), 0, "{:?} {:?}", r.errors, r.first_errors);
        assert!(r.completed > 10, "{} completed", r.completed);
        assert_eq!(r.bytes, r.completed * size);
    }
    // Cacheable as the lab's origin says it: `cache=1` or not.
    let head = |q: &str| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(o).unwrap();
        write!(s, "GET /bytes/4096?seed=3{q} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        let mut buf = vec![0; 65536];
        let n = s.read(&mut buf).unwrap();
        text.push_str(&String::from_utf8_lossy(&buf[..n.min(400)]));
        text
    };
    assert!(head("&cache=1").contains("Cache-Control: public, max-age=3600"));
    assert!(head("").contains("Cache-Control: no-store"));
}

#[test]
fn wrk_reports_the_requests_it_made_and_the_errors_it_counted() {
    use splicer_lab::load::wrk;
    let found = ["nginx", "wrk"]
        .iter()
        .all(|c| splicer_testkit::have_command(c));
    if !splicer_testkit::require(found, "nginx and wrk") {
        return;
    }
    let (_nginx, o) = nginx_origin(vec![1024]);
    let p = wrk::Params {
        origin: o,
        via: Via::Direct,
        clients: 4,
        threads: 1,
        size: 1024,
        cacheable: false,
        seed: 3,
        duration_s: 2.0,
        warmup_s: 1.0,
        timeout_s: 5.0,
        keep_alive: true,
    };
    let r = wrk::run(p.clone()).unwrap();
    assert_eq!(r.error_total(), 0, "{:?}", r.errors);
    assert!(r.completed > 100, "{} requests", r.completed);
    // Bytes include heads: more than the bodies.
    assert!(r.bytes > r.completed * 1024);
    assert_eq!(r.timeline.len(), 2, "warm-up and measured runs");
    assert!(r.latency.p50_ms > 0.0 && r.latency.p50_ms <= r.latency.p99_ms);
    // A path that is not there: wrk counts the 404s as status errors.
    let wrong = wrk::Params {
        size: 999,
        warmup_s: 0.0,
        duration_s: 1.0,
        ..p
    };
    let r = wrk::run(wrong).unwrap();
    assert!(
        r.errors.get("status").copied().unwrap_or(0) > 0,
        "{:?}",
        r.errors
    );
}
