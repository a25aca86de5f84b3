//! `relay-floor`: a TCP relay with no HTTP work, one thread per CPU, on `io_uring`
//! (`splicer_sys::uring`) or on tokio's `epoll` reactor (one single-threaded runtime per
//! thread, as Splicer's connection threads). Run as a proxy in a lab scenario beside
//! HAProxy and Splicer, it shows the least a user-space proxy costs per request on a bed
//! (everything but the HTTP work) and what `io_uring`'s batching would change of it.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Context;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Relays every connection to `listen` to a new one to `upstream` until the process is
/// stopped, on `threads` threads (0: one per CPU), with `io` (`uring` or `epoll`).
pub fn run(
    listen: SocketAddr,
    upstream: SocketAddr,
    threads: usize,
    io: &str,
) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    let threads = if threads == 0 {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    } else {
        threads
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut joins = Vec::new();
    for _ in 0..threads {
        let l = listener.try_clone()?;
        let stop = stop.clone();
        let join = match io {
            "uring" => std::thread::spawn(move || {
                splicer_sys::uring::relay(&l, upstream, &stop).context("io_uring relay")
            }),
            "epoll" => std::thread::spawn(move || epoll(l, upstream)),
            other => anyhow::bail!("--io {other}: uring or epoll"),
        };
        joins.push(join);
    }
    println!("relay-floor: {listen} → {upstream}, {threads} threads, {io}");
    for j in joins {
        j.join()
            .map_err(|_| anyhow::anyhow!("a relay thread panicked"))??;
    }
    Ok(())
}

/// One thread's relay on a single-threaded tokio runtime.
fn epoll(listener: TcpListener, upstream: SocketAddr) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    rt.block_on(async move {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        loop {
            let (mut client, _) = listener.accept().await?;
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (cr, cw) = client.split();
                let (sr, sw) = server.split();
                // One task per pair, as Splicer's connection task: both directions are
                // polled on its wake-ups.
                let _ = tokio::join!(pump(cr, sw), pump(sr, cw));
            });
        }
    })
}

/// Moves what `from` reads to `to` until `from` ends, then ends `to`'s writing.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        to.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    /// An upstream that answers each read with its bytes reversed, until its client closes.
    fn reversing_upstream() -> SocketAddr {
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = upstream.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in upstream.incoming() {
                let mut c = conn.unwrap();
                std::thread::spawn(move || {
                    let mut b = [0u8; 4096];
                    while let Ok(n @ 1..) = c.read(&mut b) {
                        b[..n].reverse();
                        if c.write_all(&b[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    /// Two clients at once through the relay at `addr`, 20 exchanges each on one
    /// connection: each answer is its own request reversed, in order.
    fn exchange_through(addr: SocketAddr) {
        let mut clients: Vec<TcpStream> =
            (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
        for c in &clients {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        for round in 0..20u8 {
            for (i, c) in clients.iter_mut().enumerate() {
                c.write_all(&[round, i as u8, 3]).unwrap();
                let mut got = [0u8; 3];
                c.read_exact(&mut got).unwrap();
                assert_eq!(got, [3, i as u8, round]);
            }
        }
    }

    #[test]
    fn the_epoll_relay_moves_bytes_both_ways() {
        let up = reversing_upstream();
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = front.local_addr().unwrap();
        // The relay runs until the test process ends.
        std::thread::spawn(move || epoll(front, up));
        exchange_through(addr);
    }

    /// The ring relay as well, and it ends when told to, with its pairs closed.
    #[test]
    fn the_io_uring_relay_moves_bytes_both_ways_and_stops() {
        let up = reversing_upstream();
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = front.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let relay = std::thread::spawn(move || splicer_sys::uring::relay(&front, up, &s));
        exchange_through(addr);
        let mut idle = TcpStream::connect(addr).unwrap();
        idle.write_all(&[1]).unwrap();
        let mut b = [0u8; 1];
        idle.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        idle.read_exact(&mut b).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        relay.join().unwrap().unwrap();
        // The relay's end closed the pair it still held.
        assert_eq!(idle.read(&mut b).unwrap_or(0), 0);
    }
}
