//! The lab's load generators through a real `splicer` process, each way a client can use it:
//! forward-proxy GETs, CONNECT with the emulated SSL handshake, SOCKS5 and CONNECT bulk
//! pushes into a checking sink, and one persistent connection at a fixed rate. Every byte
//! is checked by the generators; any error fails the test.

use splicer_lab::load::{self, bulk, persist, sclient, Report, Via};
use splicer_lab::origin;
use splicer_testkit::Proxy;
use tokio::net::TcpListener;

fn no_errors(r: &Report) {
    assert_eq!(r.error_total(), 0, "{} errors: {:?}", r.generator, r.errors);
    assert!(r.completed > 0, "{}: nothing completed", r.generator);
}

fn sclient(origin: std::net::SocketAddr, via: Via, ssl: bool) -> sclient::Params {
    sclient::Params {
        origin,
        via,
        clients: 50,
        size: 20_000,
        cacheable: false,
        ssl,
        abbreviated: 0.6,
        duration_s: 2.5,
        warmup_s: 0.5,
        cooldown_s: 0.5,
        timeout_s: 10.0,
        seed: 11,
        keep_alive: false,
        per_connection: 0,
        pause_s: 0.0,
    }
}

#[test]
fn generators_run_through_every_front_end() {
    let rt = load::runtime().unwrap();
    let (o, sink) = rt.block_on(async {
        let o = origin::start(
            "127.0.0.1:0".parse().unwrap(),
            origin::Config {
                think: origin::Think::None,
                seed: 1,
            },
        )
        .await
        .unwrap();
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sink = l.local_addr().unwrap();
        tokio::spawn(bulk::serve(l));
        (o, sink)
    });
    let proxy = Proxy::start_with(
        "auto",
        "",
        &format!("connect_ports = [{}, {}]", o.port(), sink.port()),
    );
    let http = sclient(o, Via::HttpProxy(proxy.http), false);
    no_errors(&rt.block_on(sclient::run(http)).unwrap());
    let tls = sclient(o, Via::Connect(proxy.http), true);
    no_errors(&rt.block_on(sclient::run(tls)).unwrap());
    for (via, both_ways) in [
        (Via::Socks5(proxy.socks), false),
        (Via::Connect(proxy.http), true),
    ] {
        let r = rt
            .block_on(bulk::run(bulk::Params {
                sink,
                via,
                conns: 8,
                bytes: 16 << 20,
                both_ways,
                seed: 12,
                timeout_s: 60.0,
            }))
            .unwrap();
        no_errors(&r);
        let ways = if both_ways { 2 } else { 1 };
        assert_eq!(r.bytes, ways * 8 * (16 << 20), "{via}");
    }
    let r = rt
        .block_on(persist::run(persist::Params {
            origin: o,
            via: Via::HttpProxy(proxy.http),
            rate: 100.0,
            count: 100,
            size: 50_000,
            rtt_ms: None,
            warmup_secs: 0.0,
            seed: 13,
        }))
        .unwrap();
    no_errors(&r);
    assert_eq!(r.completed, 100);
}
