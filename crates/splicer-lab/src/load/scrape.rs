//! `splicer-lab scrape`: `GET /metrics` on Splicer's admin listener every interval, as a
//! Prometheus server scrapes, so a benchmark can run a load with and without it and give
//! what scraping costs. Each scrape is a new connection (Prometheus keeps one open; a new
//! one costs the proxy more, so the figure is an upper bound).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Scrapes until `seconds` pass (or the process is killed, as the bed does at the end of a
/// variant); prints each scrape's size and time, and fails on a scrape that fails.
pub fn run(admin: SocketAddr, every_ms: u64, seconds: u64) -> anyhow::Result<()> {
    let every = Duration::from_millis(every_ms.max(1));
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut n = 0u64;
    while Instant::now() < end {
        let t = Instant::now();
        let bytes = scrape(admin)?;
        n += 1;
        println!(
            "scrape {n}: {bytes} bytes in {:.3} ms",
            t.elapsed().as_secs_f64() * 1e3
        );
        std::thread::sleep(every.saturating_sub(t.elapsed()));
    }
    Ok(())
}

/// One scrape: the bytes of the body.
fn scrape(admin: SocketAddr) -> anyhow::Result<usize> {
    let mut c = TcpStream::connect_timeout(&admin, Duration::from_secs(5))?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    c.write_all(
        b"GET /metrics HTTP/1.1\r\nHost: splicer\r\nAccept: application/openmetrics-text\r\n\r\n",
    )?;
    let mut all = Vec::new();
    c.read_to_end(&mut all)?;
    let text = String::from_utf8_lossy(&all);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        anyhow::bail!("{admin}: no whole response");
    };
    if !head.starts_with("HTTP/1.1 200 ") || !body.ends_with("# EOF\n") {
        anyhow::bail!("{admin}: not a whole exposition: {head}");
    }
    Ok(body.len())
}
