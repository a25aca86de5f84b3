//! The pacer's cap on an `ipsplice` tunnel, with a real `splicer` in a client — proxy — r2
//! — server bed whose r2 delays each way by 10 ms: the program forwards the tunnel's
//! packets and clamps the windows it rewrites, so a capped download moves every byte, as
//! `ipsplice` (no fallback to `pipe`), and no faster than its cap allows. The round trip
//! matters: a window clamp cannot hold a sender below two segments a round trip, which on
//! a bare veth (tens of µs) is tens of MB/s (docs/pacer.md); over 20 ms it is 145 kB/s.
//! How close to the cap it runs is a benchmark's figure (printed), not a test's.
//! Needs root; CI runs as root.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{ensure_splicer, lab, root};
use splicer_lab::content::Pattern;
use splicer_lab::load::dial::dial;
use splicer_lab::load::Via;
use splicer_lab::{Bed, Scenario};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const SIZE: usize = 8 << 20;
const RATE: u64 = 2 << 20;
const PORT: u16 = 7300;
/// Each way between proxy and server.
const DELAY_MS: u32 = 10;

fn bed() -> String {
    let mut s = String::new();
    for (h, forward) in [
        ("client", false),
        ("proxy", false),
        ("r2", true),
        ("server", false),
    ] {
        s += &format!("[[host]]\nname = \"{h}\"\nforward = {forward}\n");
    }
    for (a, b) in [("client", "proxy"), ("proxy", "r2"), ("r2", "server")] {
        s += &format!("[[link]]\na = \"{a}\"\nb = \"{b}\"\n");
    }
    for (from, to) in [("proxy", "server"), ("server", "proxy")] {
        s += &format!(
            "[[emulate]]\nrouter = \"r2\"\nfrom = \"{from}\"\nto = \"{to}\"\ndelay_ms = {DELAY_MS}\n"
        );
    }
    s
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `f` on a new thread inside namespace `ns`, on a runtime of its own.
fn in_ns<T: Send + 'static>(
    ns: String,
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::spawn(move || {
        splicer_sys::net::enter_netns(&ns).expect("enter the namespace");
        runtime().block_on(f)
    })
}

/// The server: after a connection's first byte, [`SIZE`] bytes of pattern 4, then close.
async fn serve(l: TcpListener) {
    let body = Pattern::new(4).bytes(SIZE);
    loop {
        let Ok((mut s, _)) = l.accept().await else {
            return;
        };
        let body = body.clone();
        tokio::spawn(async move {
            if s.read_u8().await.is_ok() {
                let _ = s.write_all(&body).await;
                let _ = s.shutdown().await;
            }
        });
    }
}

/// Starts `splicer` in the proxy namespace with the SOCKS front end's tunnels capped.
fn start(bed: &mut Bed, dir: &Path, proxy: SocketAddr) -> std::path::PathBuf {
    let cfg = dir.join("splicer.toml");
    std::fs::write(
        &cfg,
        format!(
            "[log]\nformat = \"json\"\nlevel = \"debug\"\n[relay]\nengine = \"ipsplice\"\n\
             [pacer.tunnels]\nmode = \"rate\"\nper_splice = {RATE}\n\
             [socks]\nlisten = [\"{proxy}\"]\n[acl]\ndefault = \"deny\"\n[[acl.rule]]\n\
             action = \"allow\"\nclients = [\"10.231.0.0/16\"]\n"
        ),
    )
    .unwrap();
    let log = dir.join("splicer.log");
    let out = std::fs::File::create(&log).unwrap();
    let bin = lab().with_file_name("splicer");
    bed.spawn(
        bed.command("proxy", bin.to_str().unwrap())
            .args(["run", "--config", cfg.to_str().unwrap()])
            .stdout(out.try_clone().unwrap())
            .stderr(out),
    )
    .unwrap();
    log
}

#[test]
fn an_ipsplice_tunnel_is_held_to_its_cap_by_its_windows() {
    if !root() {
        return;
    }
    ensure_splicer();
    let scenario = Scenario::from_toml(&bed()).unwrap();
    let mut bed = Bed::build_with_emulators(scenario, lab()).unwrap();
    let dir = std::env::temp_dir().join(format!("splicer-paced-{}", bed.netns("x")));
    std::fs::create_dir_all(&dir).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut bed, &dir)));
    bed.teardown();
    if let Err(p) = r {
        eprintln!("log kept in {}", dir.display());
        std::panic::resume_unwind(p);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn run(bed: &mut Bed, dir: &Path) {
    let proxy = SocketAddr::new(bed.addr("proxy").unwrap().into(), 1080);
    let server = SocketAddr::new(bed.addr("server").unwrap().into(), PORT);
    // The server thread lives until the bed's namespaces go; it is never joined.
    let _server = in_ns(bed.netns("server"), async move {
        serve(TcpListener::bind(server).await.unwrap()).await
    });
    let log = start(bed, dir, proxy);
    let (took, got) = in_ns(bed.netns("client"), async move {
        // Listening once a SOCKS CONNECT goes through, within 10 s.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut s = loop {
            match dial(Via::Socks5(proxy), server).await {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => panic!("SOCKS5 CONNECT: {e:?}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let start = Instant::now();
        s.write_all(b"D").await.unwrap();
        let mut got = Vec::with_capacity(SIZE);
        s.read_to_end(&mut got).await.unwrap();
        (start.elapsed(), got)
    })
    .join()
    .unwrap();
    let text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        got == Pattern::new(4).bytes(SIZE),
        "{} bytes, not the pattern's {SIZE}",
        got.len()
    );
    // The tunnel's access line, once the proxy wrote it (within 5 s of the end).
    let deadline = Instant::now() + Duration::from_secs(5);
    let line = loop {
        let t = text();
        let found = t
            .lines()
            .find(|l| l.contains("\"method\":\"CONNECT\"") && l.contains(&format!(":{PORT}\"")))
            .map(String::from);
        match found {
            Some(l) => break l,
            None if Instant::now() > deadline => panic!("no access line:\n{t}"),
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    assert!(
        line.contains("\"engine\":\"ipsplice\"") && line.contains("\"fallback\":\"-\""),
        "{line}"
    );
    let rate = SIZE as f64 / took.as_secs_f64();
    eprintln!(
        "ipsplice capped at {RATE} B/s over a {} ms round trip: {SIZE} B in {took:?}, \
         {rate:.0} B/s ({:.3} of the cap)",
        2 * DELAY_MS,
        rate / RATE as f64
    );
    // A lower bound only: three quarters of the time the cap allows (the first round
    // trips run on the clamp's estimate before it is steered).
    let least = Duration::from_secs_f64(SIZE as f64 / RATE as f64 * 0.75);
    assert!(
        took >= least,
        "8 MiB capped at 2 MiB/s took only {took:?}\n{line}"
    );
}
