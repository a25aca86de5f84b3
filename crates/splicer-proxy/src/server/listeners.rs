//! Listening and accepting: the listeners of the front ends, the connection limit, the
//! refusal of a client past it, and the placing of the others (on the connection threads,
//! when there are any).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::config::Front;
use crate::front::{http, socks};
use crate::shared::Shared;
use crate::threads::Threads;

/// A listener on `addr`. An IPv6 one is IPv6-only, so that `0.0.0.0:P` and `[::]:P` (as
/// nginx users write them) both bind; with the kernel's default (`bindv6only = 0`) the
/// second bind failed.
pub(super) async fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    if addr.is_ipv4() {
        return TcpListener::bind(addr).await;
    }
    let s = tokio::net::TcpSocket::new_v6()?;
    splicer_sys::sock::set_only_v6(std::os::fd::AsFd::as_fd(&s))?;
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    // The kernel caps it at net.core.somaxconn, as for the IPv4 listeners.
    s.listen(4096)
}

/// Accepts `front`'s clients until aborted (at stop, or a reload that removes the listener:
/// the connections it accepted go on), and places each on a connection thread
/// (`crate::threads`) when there are any, or serves it on this runtime. Each connection is
/// served by the configuration that is current when it is accepted, to its end.
pub(super) async fn accept_loop(
    front: Front,
    listener: TcpListener,
    current: watch::Receiver<Arc<Shared>>,
    slots: Arc<Semaphore>,
    threads: Arc<Threads>,
) {
    loop {
        let (stream, client_addr) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Typically EMFILE: back off instead of spinning; the backlog waits.
                tracing::warn!(front = front.name(), "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse(front, stream, client_addr));
            continue;
        };
        let open = crate::metrics::events().accepted(front.name());
        let shared = current.borrow().clone();
        crate::sockbuf::apply(&stream, shared.config.limits.receive_buffer);
        // The forward proxy's and the edge's connections start on a ring when there are
        // rings and it may serve their requests (`crate::ring::serves`).
        let ring = crate::ring::serves(front, &shared)
            .then(|| threads.rings())
            .flatten();
        let for_ring = ring.map(|_| shared.clone());
        // `resume`: where a ring left the connection (at its first request otherwise).
        let serve = move |stream: TcpStream, resume: crate::ring::Resume| async move {
            let mut cut = shared.cut.clone();
            let serve = async {
                match front {
                    Front::Socks => socks::serve(&shared, stream, client_addr).await,
                    Front::Http => http::serve(&shared, stream, client_addr, resume).await,
                    Front::Edge => http::serve_edge(&shared, stream, client_addr, resume).await,
                }
            };
            // Cut at the end of the shutdown grace: the connection's future is dropped
            // here, while the runtime and the log still run. The cut is looked at only
            // when it woke the task (`OnWake`), not at every wake-up of the connection,
            // and the branches in a fixed order (no random number per poll).
            tokio::select! {
                biased;
                () = serve => {}
                _ = super::OnWake::new(cut.wait_for(|c| *c)) => {}
            }
            drop(open);
            drop(slot);
        };
        if threads.is_empty() {
            // No connection threads (`limits.threads = "shared"`): this runtime serves it.
            tokio::spawn(serve(stream, crate::ring::Resume::Head(Vec::new())));
            continue;
        }
        // Taken out of this runtime's reactor for the ring or the connection thread that
        // serves it (registered there, its events are woken there).
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(front = front.name(), "cannot hand a client over: {e}");
                continue;
            }
        };
        match (ring, for_ring) {
            (Some(ring), Some(shared)) => {
                // What the ring does not serve goes to the connection threads, with the
                // slot and the count it holds.
                let placer = threads.placer();
                let handoff: crate::ring::Handoff = Box::new(move |stream, resume| {
                    placer.place(stream, move |stream| serve(stream, resume));
                });
                ring.place(crate::ring::Placed {
                    stream,
                    addr: client_addr,
                    front,
                    shared,
                    handoff,
                });
            }
            _ => threads.place(stream, move |stream| {
                serve(stream, crate::ring::Resume::Head(Vec::new()))
            }),
        }
    }
}

/// Over the connection limit: HTTP clients get a 503, SOCKS clients a closed connection
/// (RFC 1928 has no reply before the greeting).
async fn refuse(front: Front, mut stream: TcpStream, client_addr: SocketAddr) {
    let mut rec = crate::access::Record::new(front, client_addr);
    rec.fail(&crate::error::Error::new(
        crate::error::Side::Internal,
        crate::error::Kind::Refused("connection-limit"),
    ));
    if front != Front::Socks {
        rec.status = 503;
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            stream.write_all(crate::exchange::overload_response()),
        )
        .await;
        let _ = stream.shutdown().await;
    }
    rec.emit();
}

#[cfg(test)]
mod tests {
    /// Issue 34, item 15: `0.0.0.0:P` and `[::]:P` both bind, in either order (the `[::]`
    /// listener is IPv6-only); with the kernel's default dual-stack `[::]`, the second bind
    /// failed with "address in use" after `check` had said OK.
    #[tokio::test]
    async fn both_families_bind_one_port() {
        if std::net::TcpListener::bind("[::1]:0").is_err() {
            eprintln!("SKIPPED: this host has no IPv6 loopback");
            return;
        }
        let free = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        let v6 = super::listen(([0u16; 8], port).into()).await.unwrap();
        let v4 = super::listen(([0, 0, 0, 0], port).into()).await.unwrap();
        assert_eq!(
            v4.local_addr().unwrap().port(),
            v6.local_addr().unwrap().port()
        );
        // Each takes its own family's clients.
        let c4 = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let (a4, _) = v4.accept().await.unwrap();
        let c6 = tokio::net::TcpStream::connect(("::1", port)).await.unwrap();
        let (a6, _) = v6.accept().await.unwrap();
        assert_eq!(a4.peer_addr().unwrap(), c4.local_addr().unwrap());
        assert_eq!(a6.peer_addr().unwrap(), c6.local_addr().unwrap());
    }
}
