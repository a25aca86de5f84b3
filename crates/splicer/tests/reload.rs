//! Configuration reload (SIGHUP): ten reloads under sustained load of SOCKS tunnels, HTTP
//! requests, cache hits and edge requests lose nothing, per engine (the kernel engines'
//! flows included); a reload adds and removes listeners, serves new connections with the
//! new configuration while open ones finish under theirs, keeps the cache, names what
//! needs a restart, and a file that fails a check or a listener that cannot be bound
//! changes nothing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use splicer_testkit::recorder::read_head;
use splicer_testkit::{curl, eventually, expected_digest, free_port, origin, s, Moved, Net, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

splicer_testkit::per_engine!(
    reloads_under_load_lose_nothing,
    a_reload_lifts_a_cap_from_a_running_tunnel
);

/// A SOCKS tunnel capped at 64 KiB/s (16 MiB would take four minutes) is running when a
/// reload turns the pacer off: the same tunnel then finishes at once, every byte intact,
/// and the log says the pacer is off. Meanwhile `/metrics` shows the pacer at work: the
/// user-space engines' waits, or the kernel engine's splice.
async fn a_reload_lifts_a_cap_from_a_running_tunnel(engine: &str) {
    const SIZE: u64 = 16 << 20;
    let o = origin::start().await;
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let pacer = "[pacer.tunnels]\nmode = \"rate\"\nper_splice = 65536\n";
    let p = Proxy::start(engine, &format!("[admin]\nlisten = [\"{admin}\"]\n{pacer}"));
    p.wait_listening(admin);
    let capped = std::fs::read_to_string(p.dir.0.join("splicer.toml")).unwrap();
    let url = format!("http://127.0.0.1:{}/bytes/{SIZE}?seed=6", o.port());
    let fetch = tokio::spawn(curl(s(&["--socks5", &p.socks.to_string(), &url])));
    // A second under the cap (no event to wait for: the cap is that nothing ends), long
    // enough for the waits to pass the 0.5 s checked below.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!fetch.is_finished(), "{engine}: the cap did not hold");
    let labels = "{front=\"socks\",class=\"tunnels\"}";
    let metrics = scrape(admin).await;
    let sample = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}{labels} ")))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name}{labels} in:\n{metrics}"))
    };
    if engine == "sockmap" {
        assert_eq!(sample("splicer_pacer_kernel_splices"), 1.0, "{metrics}");
    } else {
        // A second capped at 64 KiB/s: most of it spent waiting for the cap.
        let waited = sample("splicer_pacer_wait_seconds_total");
        assert!(waited > 0.5, "{engine}: waited {waited} s");
    }
    reload(&p, &capped.replace(pacer, "")).await;
    let (code, n, digest, err) = tokio::time::timeout(Duration::from_secs(60), fetch)
        .await
        .unwrap_or_else(|_| panic!("{engine}: the reload did not lift the cap"))
        .unwrap();
    assert_eq!(code, 0, "{err}");
    assert_eq!((n, digest), (SIZE, expected_digest(SIZE, 6)));
    assert!(
        p.log().contains("pacer: off for every front end"),
        "{}",
        p.log()
    );
}

/// The admin listener's `/metrics` text.
async fn scrape(admin: SocketAddr) -> String {
    let mut c = TcpStream::connect(admin).await.unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let mut all = Vec::new();
    c.read_to_end(&mut all).await.unwrap();
    String::from_utf8(all).unwrap()
}

/// How many `configuration reloaded` lines the log has.
fn reloads_done(p: &Proxy) -> usize {
    p.log().matches("configuration reloaded").count()
}

/// Writes `config` as the proxy's file, sends SIGHUP, and waits for the reload's line.
async fn reload(p: &Proxy, config: &str) {
    let before = reloads_done(p);
    std::fs::write(p.dir.0.join("splicer.toml"), config).unwrap();
    p.signal("HUP");
    assert!(
        eventually(|| reloads_done(p) > before).await,
        "no reload:\n{}",
        p.log()
    );
}

/// Runs `one` again and again until `stop`, counting successes and failures (with the
/// first failure's words).
fn keep_going<F, Fut>(stop: &Arc<AtomicBool>, one: F) -> tokio::task::JoinHandle<(u64, Vec<String>)>
where
    F: Fn(u64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let stop = stop.clone();
    tokio::spawn(async move {
        let (mut ok, mut failed) = (0, Vec::new());
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) && i < 100_000 {
            match one(i).await {
                Ok(()) => ok += 1,
                Err(e) => failed.push(e),
            }
            i += 1;
        }
        (ok, failed)
    })
}

/// A curl that must get `len` bytes of seed `seed`.
async fn fetch(args: Vec<String>, len: u64, seed: u64) -> Result<(), String> {
    let (code, n, digest, err) = curl(args).await;
    match code == 0 && n == len && digest == expected_digest(len, seed) {
        true => Ok(()),
        false => Err(format!("curl {code}, {n} bytes: {err}")),
    }
}

async fn reloads_under_load_lose_nothing(engine: &str) {
    let net = Net::for_engine(engine);
    let o = origin::start_on(net.host()).await;
    let edge = SocketAddr::new(net.proxy(), free_port());
    let extra = format!(
        "[edge]\nlisten = [\"{edge}\"]\n[[edge.upstream]]\nname = \"a\"\nservers = [\"{o}\"]\n\
         [[edge.route]]\nupstream = \"a\"\n"
    );
    let p = Proxy::start_in(&net, engine, &extra, "");
    p.wait_listening(edge);
    let first = std::fs::read_to_string(p.dir.0.join("splicer.toml")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (socks, http) = (p.socks.to_string(), format!("http://{}", p.http));
    let host = net.host();
    // Tunnels that outlive several reloads: 40 MB read at 10 MB/s (beyond what the
    // sockets' buffers hold, so the tunnel itself lasts seconds).
    let long = keep_going(&stop, {
        let socks = socks.clone();
        move |i| {
            let url = format!(
                "http://{host}:{}/bytes/40000000?seed={}",
                o.port(),
                10 + i % 5
            );
            fetch(
                s(&["--socks5", &socks, "--limit-rate", "10M", &url]),
                40_000_000,
                10 + i % 5,
            )
        }
    });
    let long2 = keep_going(&stop, {
        let socks = socks.clone();
        move |_| {
            let url = format!("http://{host}:{}/bytes/20000000?seed=4", o.port());
            fetch(
                s(&["--socks5", &socks, "--limit-rate", "8M", &url]),
                20_000_000,
                4,
            )
        }
    });
    let requests = keep_going(&stop, {
        let http = http.clone();
        move |_| {
            let url = format!("http://{host}:{}/bytes/100000?seed=5", o.port());
            fetch(s(&["-x", &http, &url]), 100_000, 5)
        }
    });
    let hits = keep_going(&stop, {
        let http = http.clone();
        move |_| {
            let url = format!("http://{host}:{}/bytes/5000?cache=1&seed=6", o.port());
            fetch(s(&["-x", &http, &url]), 5000, 6)
        }
    });
    let edges = keep_going(&stop, move |_| {
        let url = format!("http://{edge}/bytes/20000?seed=7");
        fetch(s(&["-H", "Host: e.test", &url]), 20000, 7)
    });

    // Ten reloads, 400 ms apart, alternating the file with one that adds an HTTP listener
    // and changes what the proxy calls itself.
    let extra_listener = SocketAddr::new(net.proxy(), free_port());
    let other = first.replacen(
        "[http]\nlisten = [",
        &format!("[http]\nvia = \"reloaded\"\nlisten = [\"{extra_listener}\", "),
        1,
    );
    assert_ne!(other, first, "{first}");
    // The loads are under way (the short ones have each finished one) before the first
    // reload.
    let under_way = |p: &Proxy| {
        let lines = p.access_lines();
        ["bytes/100000", "cache=1&seed=6", "/bytes/20000?"]
            .iter()
            .all(|u| lines.iter().any(|l| l.contains(u)))
    };
    assert!(eventually(|| under_way(&p)).await, "{}", p.log());
    for k in 0..10 {
        reload(&p, if k % 2 == 0 { &other } else { &first }).await;
        if k % 2 == 0 {
            let url = format!("http://{host}:{}/bytes/1000?seed=8", o.port());
            let via = format!("http://{extra_listener}");
            fetch(s(&["-x", &via, &url]), 1000, 8).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for (name, task) in [
        ("long tunnels", long),
        ("tunnels", long2),
        ("requests", requests),
        ("cache hits", hits),
        ("edge requests", edges),
    ] {
        let (ok, failed) = task.await.unwrap();
        assert!(
            failed.is_empty(),
            "{name}: {} of {} failed, first: {}\n{}",
            failed.len(),
            ok + failed.len() as u64,
            failed[0],
            p.log()
        );
        assert!(ok > 0, "{name}: none done");
        println!("{engine}: {name}: {ok} done across 10 reloads");
        total += ok;
    }
    assert!(total > 20, "{total}");
    // The tunnels that spanned reloads were moved by the engine asked for.
    let lines = p.access_lines();
    let long_lines: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("\"front\":\"socks\"") && l.contains("\"bytes_down\":400"))
        .collect();
    assert!(!long_lines.is_empty(), "{}", p.log());
    // Each lasted long enough to see reloads (they came every half second or so).
    let lasted = |l: &str| -> u64 {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        v["duration_ms"].as_u64().unwrap_or(0)
    };
    println!(
        "{engine}: long tunnels lasted {:?} ms",
        long_lines.iter().map(|l| lasted(l)).collect::<Vec<_>>()
    );
    assert!(
        long_lines.iter().any(|l| lasted(l) > 1500),
        "{long_lines:?}"
    );
    for line in long_lines {
        net.moved_by(engine, Moved::Tunnel).assert(line);
        assert!(line.contains("\"end\":\"eof\""), "{line}");
    }
    // The cache outlived the reloads: one miss, hits after.
    let cached: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("cache=1&seed=6"))
        .collect();
    let misses = cached
        .iter()
        .filter(|l| l.contains("\"cache\":\"miss\""))
        .count();
    assert_eq!(misses, 1, "the cache was not kept:\n{cached:?}");
    assert_eq!(p.log().matches("configuration reload refused").count(), 0);
}

/// One GET through a kept-alive connection to the forward proxy: the `Via` it carries.
async fn via_of(c: &mut TcpStream, o: SocketAddr) -> String {
    let req = format!("GET http://{o}/bytes/10 HTTP/1.1\r\nHost: {o}\r\n\r\n");
    c.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let head = read_head(c, &mut buf).await.expect("a response");
    let head = String::from_utf8(head).unwrap();
    let mut body = buf;
    while body.len() < 10 {
        let mut more = [0u8; 64];
        let n = c.read(&mut more).await.unwrap();
        assert!(n > 0, "closed mid-body");
        body.extend_from_slice(&more[..n]);
    }
    head.lines()
        .find_map(|l| l.strip_prefix("Via: "))
        .unwrap_or("-")
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_swaps_listeners_and_keeps_open_connections_on_their_configuration() {
    let o = origin::start().await;
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let p = Proxy::start("pipe", &format!("[admin]\nlisten = [\"{admin}\"]\n"));
    let first = std::fs::read_to_string(p.dir.0.join("splicer.toml")).unwrap();
    let port = free_port();
    let added: SocketAddr = ([127, 0, 0, 1], port).into();
    let with = |via: &str, listen: &str| {
        first.replacen(
            "[http]\nlisten = [",
            &format!("[http]\nvia = \"{via}\"\nlisten = [{listen}"),
            1,
        )
    };

    // Added: a listener, and a new name in `Via`.
    reload(&p, &with("second", &format!("\"{added}\", "))).await;
    let mut on_added = TcpStream::connect(added).await.unwrap();
    assert_eq!(via_of(&mut on_added, o).await, "1.1 second");

    // A file that fails a check, and one whose new listener cannot be bound: refused,
    // nothing changes.
    let refused = || p.log().matches("configuration reload refused").count();
    std::fs::write(p.dir.0.join("splicer.toml"), "[http]\nbogus = 1\n").unwrap();
    p.signal("HUP");
    assert!(eventually(|| refused() == 1).await, "{}", p.log());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap();
    std::fs::write(
        p.dir.0.join("splicer.toml"),
        with("third", &format!("\"{busy}\", \"{added}\", ")),
    )
    .unwrap();
    p.signal("HUP");
    assert!(eventually(|| refused() == 2).await, "{}", p.log());
    assert!(
        p.log().contains(&format!("cannot listen on {busy}")),
        "{}",
        p.log()
    );
    let mut fresh = TcpStream::connect(p.http).await.unwrap();
    assert_eq!(
        via_of(&mut fresh, o).await,
        "1.1 second",
        "still the second"
    );

    // Removed: the listener closes; the connection it accepted finishes under the
    // configuration it started with, while new ones get the new one. A section that needs
    // a restart is named and kept.
    let restart = with("third", "").replace("engine = \"pipe\"", "engine = \"copy\"");
    reload(&p, &restart).await;
    assert!(
        TcpStream::connect(added).await.is_err(),
        "{added} still accepts"
    );
    assert_eq!(via_of(&mut on_added, o).await, "1.1 second");
    assert_eq!(via_of(&mut fresh, o).await, "1.1 second");
    let mut newest = TcpStream::connect(p.http).await.unwrap();
    assert_eq!(via_of(&mut newest, o).await, "1.1 third");
    assert!(
        p.log().contains("take effect at the next restart")
            && p.log().contains("\"sections\":\"relay\""),
        "{}",
        p.log()
    );
    drop(taken);
    // Counted for monitoring: two taken, two refused.
    let text = splicer_testkit::scrape_metrics(admin).await;
    for (result, n) in [("taken", 2), ("refused", 2)] {
        let line = format!("splicer_config_reloads_total{{result=\"{result}\"}} {n}");
        assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
    }
}
