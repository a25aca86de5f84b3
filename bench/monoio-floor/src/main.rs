//! `monoio-floor --listen ADDR --upstream ADDR --io rent|compat|compat-defer`: the TCP relay
//! of `splicer-bench relay-floor` (each client connection paired with a new connection to
//! the upstream, bytes moved both ways, no HTTP work), one monoio runtime on io_uring per
//! CPU. `rent`: monoio's owned-buffer reads and writes. `compat`: the same sockets behind
//! tokio's `AsyncRead`/`AsyncWrite` (monoio-compat's `StreamWrapper`), the traits
//! Splicer's HTTP code is written against. `compat-defer`: as `compat`, the ring set up
//! with `SINGLE_ISSUER` and `DEFER_TASKRUN`.

#![forbid(unsafe_code)]

use std::net::SocketAddr;

use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, Splitable};
use monoio::net::{ListenerOpts, TcpListener, TcpStream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let listen: SocketAddr = arg(&args, "--listen")
        .expect("--listen ADDR")
        .parse()
        .expect("--listen");
    let upstream: SocketAddr = arg(&args, "--upstream")
        .expect("--upstream ADDR")
        .parse()
        .expect("--upstream");
    let io = arg(&args, "--io").unwrap_or_else(|| "rent".into());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("monoio-floor: {listen} → {upstream}, {threads} threads, {io}");
    let joins: Vec<_> = (0..threads)
        .map(|_| {
            let io = io.clone();
            std::thread::spawn(move || {
                let mut urb = io_uring::IoUring::builder();
                if io == "compat-defer" {
                    urb.setup_single_issuer().setup_defer_taskrun();
                }
                let mut rt = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
                    .with_entries(4096)
                    .uring_builder(urb)
                    .build()
                    .expect("an io_uring runtime");
                rt.block_on(serve(listen, upstream, io));
            })
        })
        .collect();
    for j in joins {
        let _ = j.join();
    }
}

async fn serve(listen: SocketAddr, upstream: SocketAddr, io: String) {
    let listener = TcpListener::bind_with_config(listen, &ListenerOpts::default().reuse_port(true))
        .expect("bind");
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let compat = io != "rent";
        monoio::spawn(async move {
            let Ok(server) = TcpStream::connect_addr(upstream).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            if compat {
                use monoio_compat::StreamWrapper;
                let _ = monoio::join!(
                    pump_compat(StreamWrapper::new(cr), StreamWrapper::new(sw)),
                    pump_compat(StreamWrapper::new(sr), StreamWrapper::new(cw))
                );
            } else {
                let _ = monoio::join!(pump_rent(cr, sw), pump_rent(sr, cw));
            }
        });
    }
}

async fn pump_rent(
    mut from: impl AsyncReadRent,
    mut to: impl AsyncWriteRent,
) -> std::io::Result<()> {
    // A read fills the vector's capacity and sets its length to what came.
    let mut buf = Vec::with_capacity(16 * 1024);
    loop {
        let (r, b) = from.read(buf).await;
        if r? == 0 {
            return to.shutdown().await;
        }
        let (w, mut b) = to.write_all(b).await;
        w?;
        b.clear();
        buf = b;
    }
}

async fn pump_compat(
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        to.write_all(&buf[..n]).await?;
        to.flush().await?;
    }
}
