//! `relay-floor`: a TCP relay with no HTTP work, one thread per CPU, on `io_uring`
//! (`splicer_sys::uring`), on tokio's `epoll` reactor (one single-threaded runtime per
//! thread, as Splicer's connection threads), or on tokio with every receive and send
//! queued on a ring of the thread's (`tokio-ring`, `splicer_sys::ring`: handed to the
//! kernel together before the thread waits, completions waking the loop through the
//! ring's `eventfd`). Run as a proxy in a lab scenario beside
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
            "tokio-ring" => std::thread::spawn(move || ringed::serve(l, upstream)),
            other => anyhow::bail!("--io {other}: uring, epoll or tokio-ring"),
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

/// The relay on tokio with its receives and sends on the thread's ring.
mod ringed {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::future::poll_fn;
    use std::io;
    use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
    use std::os::fd::AsFd;
    use std::task::{Poll, Waker};

    use splicer_sys::ring::{Completion, Ring};
    use tokio::io::unix::AsyncFd;

    enum Waiting {
        Pending(Option<Waker>),
        Done(i32, Vec<u8>),
    }

    thread_local! {
        static RING: RefCell<Option<Ring>> = const { RefCell::new(None) };
        static WAITING: RefCell<HashMap<u64, Waiting>> = RefCell::new(HashMap::new());
        static DONE: RefCell<Vec<Completion>> = const { RefCell::new(Vec::new()) };
    }

    fn with_ring<T>(f: impl FnOnce(&mut Ring) -> io::Result<T>) -> io::Result<T> {
        RING.with(|r| match r.borrow_mut().as_mut() {
            Some(ring) => f(ring),
            None => Err(io::Error::other("no ring on this thread")),
        })
    }

    /// Hands the queued operations to the kernel and wakes the tasks of those completed.
    fn turn() {
        DONE.with(|d| {
            let mut done = d.borrow_mut();
            let _ = with_ring(|r| {
                r.submit()?;
                r.complete(&mut done);
                Ok(())
            });
            WAITING.with(|w| {
                let mut w = w.borrow_mut();
                for c in done.drain(..) {
                    if let Some(Waiting::Pending(Some(waker))) =
                        w.insert(c.op, Waiting::Done(c.result, c.buf))
                    {
                        waker.wake();
                    }
                }
            });
        });
    }

    /// Queues an operation and waits for its completion: its result and buffer.
    async fn op(start: impl FnOnce(&mut Ring) -> io::Result<u64>) -> io::Result<(i32, Vec<u8>)> {
        let op = with_ring(start)?;
        WAITING.with(|w| w.borrow_mut().insert(op, Waiting::Pending(None)));
        poll_fn(|cx| {
            WAITING.with(|w| {
                let mut w = w.borrow_mut();
                match w.remove(&op) {
                    Some(Waiting::Done(r, b)) => Poll::Ready(Ok((r, b))),
                    _ => {
                        w.insert(op, Waiting::Pending(Some(cx.waker().clone())));
                        Poll::Pending
                    }
                }
            })
        })
        .await
    }

    pub fn serve(listener: TcpListener, upstream: SocketAddr) -> anyhow::Result<()> {
        let ring = Ring::new(4096)?;
        let eventfd = ring
            .eventfd()
            .ok_or_else(|| io::Error::other("a ring without its eventfd"))?
            .try_clone_to_owned()?;
        RING.with(|r| *r.borrow_mut() = Some(ring));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .on_thread_park(turn)
            .build()?;
        rt.block_on(async move {
            // Completions that come while the thread waits in `epoll` wake it here.
            tokio::spawn(async move {
                // `new` is deprecated for a `T` that could close its descriptor while it is
                // registered; an `OwnedFd` held by the `AsyncFd` cannot.
                #[allow(deprecated)]
                let Ok(fd) = AsyncFd::new(eventfd) else {
                    return;
                };
                loop {
                    let Ok(mut ready) = fd.readable().await else {
                        return;
                    };
                    RING.with(|r| {
                        if let Some(r) = r.borrow().as_ref() {
                            r.clear_eventfd();
                        }
                    });
                    ready.clear_ready();
                    turn();
                }
            });
            listener.set_nonblocking(true)?;
            let listener = tokio::net::TcpListener::from_std(listener)?;
            loop {
                let (client, _) = listener.accept().await?;
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    // Out of tokio's reactor: the ring tells when they are ready.
                    let (Ok(client), Ok(server)) = (client.into_std(), server.into_std()) else {
                        return;
                    };
                    let _ = tokio::join!(pump(&client, &server), pump(&server, &client));
                });
            }
        })
    }

    /// Moves what `from` receives to `to` until `from` ends, then ends `to`'s writing.
    async fn pump(from: &TcpStream, to: &TcpStream) -> io::Result<()> {
        let mut buf = Vec::with_capacity(16 * 1024);
        loop {
            buf.clear();
            let (n, b) = op(|r| r.recv(from.as_fd(), buf)).await?;
            buf = b;
            if n < 0 {
                return Err(io::Error::from_raw_os_error(-n));
            }
            if n == 0 {
                return to.shutdown(Shutdown::Write);
            }
            let n = n as usize;
            let mut sent = 0;
            while sent < n {
                let (m, b) = op(|r| r.send(to.as_fd(), buf, sent, n)).await?;
                buf = b;
                if m < 0 {
                    return Err(io::Error::from_raw_os_error(-m));
                }
                if m == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                sent += m as usize;
            }
        }
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

    /// A relay started by `start` on a free port in front of a reversing upstream; its
    /// address. The relay runs until the test process ends.
    fn relay_with(start: fn(TcpListener, SocketAddr) -> anyhow::Result<()>) -> SocketAddr {
        let up = reversing_upstream();
        let front = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = front.local_addr().unwrap();
        std::thread::spawn(move || start(front, up));
        addr
    }

    #[test]
    fn the_epoll_relay_moves_bytes_both_ways() {
        exchange_through(relay_with(epoll));
    }

    #[test]
    fn the_tokio_ring_relay_moves_bytes_both_ways() {
        exchange_through(relay_with(ringed::serve));
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
