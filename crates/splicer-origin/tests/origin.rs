//! The origin server against real clients: curl for digests, caching headers and think time;
//! the SSL emulation's exact message sizes from both sides.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use splicer_origin::content::{hex, Pattern};
use splicer_origin::ssl;
use splicer_origin::{self as origin, Think};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start(think: Think) -> SocketAddr {
    origin::start(
        "127.0.0.1:0".parse().unwrap(),
        origin::Config { think, seed: 7 },
    )
    .await
    .unwrap()
}

/// curl -D- : (headers, body).
async fn curl(args: Vec<String>) -> (String, Vec<u8>) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "30", "-D", "/dev/stderr"])
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "curl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.stdout,
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_verify_by_size_and_seed_over_one_connection() {
    let o = start(Think::None).await;
    let urls: Vec<String> = [(0u64, 1u64), (1, 2), (100_000, 3), (3_000_000, 4)]
        .iter()
        .map(|(n, s)| format!("http://{o}/bytes/{n}?seed={s}"))
        .collect();
    // One curl, four URLs: curl reuses the connection (persistent connections).
    let mut args = vec!["-w".to_string(), "%{num_connects}\\n".to_string()];
    args.extend(
        urls.iter()
            .flat_map(|u| ["-o".to_string(), "/dev/null".to_string(), u.clone()]),
    );
    let (_, connects) = curl(args).await;
    assert_eq!(
        String::from_utf8_lossy(&connects)
            .lines()
            .collect::<Vec<_>>(),
        ["1", "0", "0", "0"]
    );
    for (n, s) in [(100_000usize, 3u64), (3_000_000, 4)] {
        let (h, body) = curl(vec![format!("http://{o}/bytes/{n}?seed={s}")]).await;
        assert!(h.contains("Cache-Control: no-store"), "{h}");
        assert_eq!(
            hex(&Sha256::digest(&body)),
            hex(&Sha256::digest(Pattern::new(s).bytes(n)))
        );
    }
    // The application-specific headers choose the same.
    let (_, body) = curl(vec![
        "-H".into(),
        "X-Size: 5000".into(),
        "-H".into(),
        "X-Seed: 3".into(),
        format!("http://{o}/any"),
    ])
    .await;
    assert_eq!(body, Pattern::new(3).bytes(5000));
    // HTTP/1.0 works too.
    let (h, body) = curl(vec!["-0".into(), format!("http://{o}/bytes/10")]).await;
    assert!(h.starts_with("HTTP/1.0 200"), "{h}");
    assert_eq!(body.len(), 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn cacheable_responses_carry_validators_and_answer_304() {
    let o = start(Think::None).await;
    let (h, _) = curl(vec![format!("http://{o}/bytes/100?cache=1&seed=2")]).await;
    for want in [
        "Cache-Control: public, max-age=3600",
        "Expires: ",
        "ETag: \"100-2\"",
        "Last-Modified: ",
    ] {
        assert!(h.contains(want), "{want} missing:\n{h}");
    }
    let (h, body) = curl(vec![
        "-H".into(),
        "If-None-Match: \"100-2\"".into(),
        format!("http://{o}/bytes/100?cache=1&seed=2"),
    ])
    .await;
    assert!(h.starts_with("HTTP/1.1 304"), "{h}");
    assert!(body.is_empty());
    let (h, _) = curl(vec![
        "-H".into(),
        "If-None-Match: \"100-2\"".into(),
        format!("http://{o}/bytes/100?seed=2"),
    ])
    .await;
    assert!(
        h.starts_with("HTTP/1.1 200"),
        "non-cacheable ignores validators:\n{h}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn think_time_fixed_uniform_and_per_request() {
    let o = start(Think::Fixed(Duration::from_millis(150))).await;
    let t = Instant::now();
    curl(vec![format!("http://{o}/bytes/1")]).await;
    assert!(t.elapsed() >= Duration::from_millis(150));
    let t = Instant::now();
    curl(vec![
        "-H".into(),
        "X-Think-Ms: 0".into(),
        format!("http://{o}/bytes/1"),
    ])
    .await;
    let quick = t.elapsed();
    let t = Instant::now();
    curl(vec![
        "-H".into(),
        "X-Think-Ms: 200-300".into(),
        format!("http://{o}/bytes/1"),
    ])
    .await;
    let ranged = t.elapsed();
    assert!(ranged >= Duration::from_millis(200), "{ranged:?}");
    assert!(quick < ranged);
    assert_eq!("50-400".parse::<Think>(), Ok(Think::Uniform(50, 400)));
    assert!("400-50".parse::<Think>().is_err());
    assert!("soon".parse::<Think>().is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn ssl_emulation_exchanges_exact_sizes_then_http() {
    let o = start(Think::None).await;
    for full in [true, false] {
        let mut s = TcpStream::connect(o).await.unwrap();
        let got = ssl::exchange(&mut s, ssl::Side::Client, full, &[])
            .await
            .unwrap();
        // What the client received, in order: the server's messages of the table.
        let want: Vec<usize> = (if full { ssl::FULL } else { ssl::ABBREVIATED })
            .iter()
            .filter(|(side, _)| *side == ssl::Side::Server)
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(got, want, "full={full}");
        assert_eq!(
            want,
            if full {
                vec![2239, 6, 61]
            } else {
                vec![79, 6, 61]
            }
        );
        // Not one byte more was sent by the server before the request.
        s.write_all(b"GET /bytes/3 HTTP/1.0\r\n\r\n").await.unwrap();
        let mut resp = Vec::new();
        s.read_to_end(&mut resp).await.unwrap();
        assert!(
            resp.starts_with(b"HTTP/1.0 200 OK\r\n"),
            "{}",
            String::from_utf8_lossy(&resp)
        );
        assert!(resp.ends_with(&Pattern::new(1).bytes(3)));
    }
}

/// A small answer's head and body come in one segment, as from real servers (two writes on
/// the origin's `TCP_NODELAY` socket made two, which every proxy in front paid for), and
/// its body is the seed's content.
#[tokio::test(flavor = "multi_thread")]
async fn a_small_answer_is_one_segment() {
    let o = start(Think::None).await;
    let mut c = TcpStream::connect(o).await.unwrap();
    c.write_all(b"GET /bytes/1024?seed=3 HTTP/1.1\r\nHost: o\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let body = loop {
        let mut chunk = [0u8; 4096];
        let n = c.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed after {got:?}");
        got.extend_from_slice(&chunk[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            if got.len() >= i + 4 + 1024 {
                break got[i + 4..].to_vec();
            }
        }
    };
    assert_eq!(body, Pattern::new(3).bytes(1024));
    let info = splicer_sys::sock::tcp_info(std::os::fd::AsFd::as_fd(&c)).unwrap();
    assert_eq!(
        info.data_segs_in, 1,
        "a 1 KiB answer in {} segments",
        info.data_segs_in
    );
}
