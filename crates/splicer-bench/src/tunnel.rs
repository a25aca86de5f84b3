//! Tunnel benchmarks through the SOCKS5 front end on loopback: bulk throughput and CPU per
//! engine against a direct connection, and the memory of idle tunnels.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::measure::{self, Guard};

/// Sent data: the lab's deterministic block (its length divides no buffer size), repeated;
/// the sink compares.
use splicer_lab::content::{Pattern, BLOCK};

/// The block twice over, so any window of up to one block starting inside the first copy
/// is a plain slice.
fn block() -> Vec<u8> {
    let mut b = Pattern::new(0x5EED).block(BLOCK).to_vec();
    b.extend_from_within(..);
    b
}

/// Starts splicer with only the SOCKS front end on a free port.
pub fn start_splicer(bin: &Path, engine: &str, extra: &str) -> anyhow::Result<(Guard, SocketAddr)> {
    start_front(bin, engine, "socks", extra)
}

/// Starts splicer with one front end (`socks` or `http`) on a free port.
pub fn start_front(
    bin: &Path,
    engine: &str,
    front: &str,
    extra: &str,
) -> anyhow::Result<(Guard, SocketAddr)> {
    let port = measure::free_port();
    let dir = std::env::temp_dir().join(format!("splicer-bench-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cfg = dir.join("splicer.toml");
    std::fs::write(
        &cfg,
        format!(
            "[log]\nlevel = \"warn\"\n[relay]\nengine = \"{engine}\"\n[{front}]\n\
             listen = [\"127.0.0.1:{port}\"]\n{extra}\n"
        ),
    )?;
    let child = Command::new(bin)
        .arg("run")
        .arg("--config")
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let guard = Guard(child);
    measure::wait_port(addr)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok((guard, addr))
}

/// SOCKS5 CONNECT (no auth) over a blocking socket.
pub fn socks_connect(proxy: SocketAddr, target: SocketAddr) -> anyhow::Result<TcpStream> {
    let mut s = TcpStream::connect(proxy)?;
    let SocketAddr::V4(t) = target else {
        anyhow::bail!("IPv4 target expected")
    };
    let mut req = vec![5, 1, 0, 5, 1, 0, 1];
    req.extend_from_slice(&t.ip().octets());
    req.extend_from_slice(&t.port().to_be_bytes());
    s.write_all(&req)?;
    let mut reply = [0u8; 12];
    s.read_exact(&mut reply)?;
    anyhow::ensure!(
        reply[0..2] == [5, 0] && reply[3] == 0,
        "SOCKS reply {:?}",
        &reply[2..4]
    );
    Ok(s)
}

/// A sink that reads each connection to EOF, checks every byte, and reports the count.
fn sink() -> anyhow::Result<(SocketAddr, mpsc::Receiver<anyhow::Result<u64>>)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let pattern = block();
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = vec![0u8; 1 << 20];
            let mut n: u64 = 0;
            let result = loop {
                match s.read(&mut buf) {
                    Ok(0) => break Ok(n),
                    Ok(k) => {
                        let off = (n % BLOCK as u64) as usize;
                        if buf[..k] != pattern[off..off + k] {
                            break Err(anyhow::anyhow!("corrupted at byte {n}"));
                        }
                        n += k as u64;
                    }
                    Err(e) => break Err(e.into()),
                }
            };
            if tx.send(result).is_err() {
                return;
            }
        }
    });
    Ok((addr, rx))
}

struct Sample {
    gbit: f64,
    proxy_cpu_per_gib: f64,
    machine_cpu_per_gib: f64,
}

pub fn bulk(bin: &Path, gib: f64, rounds: usize) -> anyhow::Result<()> {
    let bytes = (gib * (1u64 << 30) as f64) as u64;
    let (sink_addr, results) = sink()?;
    let pattern = block();
    // sockmap loads an eBPF program: root only.
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|st| {
            st.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false);
    let mut candidates = vec!["direct", "copy", "pipe"];
    if root {
        candidates.push("sockmap");
    } else {
        println!("(sockmap left out: it needs root)");
    }
    let mut samples: Vec<Vec<Sample>> = candidates.iter().map(|_| Vec::new()).collect();
    println!(
        "bulk: {gib} GiB one way through a SOCKS5 tunnel on loopback, {rounds} interleaved rounds"
    );
    for round in 1..=rounds {
        for (i, c) in candidates.iter().enumerate() {
            let proxy = if *c == "direct" {
                None
            } else {
                Some(start_splicer(bin, c, "")?)
            };
            let mut s = match &proxy {
                None => TcpStream::connect(sink_addr)?,
                Some((_, addr)) => socks_connect(*addr, sink_addr)?,
            };
            let pid = proxy.as_ref().map(|(g, _)| g.0.id());
            let (m0, p0, t0) = (
                measure::machine_cpu(),
                pid.map_or(0.0, measure::process_cpu),
                Instant::now(),
            );
            let mut left = bytes;
            let mut off = 0usize;
            while left > 0 {
                let k = left.min(1 << 20) as usize;
                s.write_all(&pattern[off..off + k])?;
                off = (off + k) % BLOCK;
                left -= k as u64;
            }
            s.shutdown(std::net::Shutdown::Write)?;
            let got = results.recv_timeout(Duration::from_secs(600))??;
            let secs = t0.elapsed().as_secs_f64();
            let (m1, p1) = (
                measure::machine_cpu(),
                pid.map_or(0.0, measure::process_cpu),
            );
            anyhow::ensure!(got == bytes, "{c}: sink got {got} of {bytes} bytes");
            let g = bytes as f64 / (1u64 << 30) as f64;
            let sample = Sample {
                gbit: bytes as f64 * 8.0 / secs / 1e9,
                proxy_cpu_per_gib: (p1 - p0) / g,
                machine_cpu_per_gib: (m1 - m0) / g,
            };
            println!(
                "  round {round} {c:>6}: {:6.2} Gbit/s  proxy {:5.2} CPU s/GiB  machine {:5.2} CPU s/GiB  (verified)",
                sample.gbit, sample.proxy_cpu_per_gib, sample.machine_cpu_per_gib
            );
            samples[i].push(sample);
            drop(s);
            drop(proxy);
        }
    }
    let direct = measure::median(&samples[0].iter().map(|s| s.gbit).collect::<Vec<_>>());
    println!("\n| path | throughput Gbit/s median (min–max) | × direct | proxy CPU s/GiB | machine CPU s/GiB |");
    println!("|---|---|---|---|---|");
    for (i, c) in candidates.iter().enumerate() {
        let g: Vec<f64> = samples[i].iter().map(|s| s.gbit).collect();
        let (lo, hi) = measure::min_max(&g);
        let p = measure::median(
            &samples[i]
                .iter()
                .map(|s| s.proxy_cpu_per_gib)
                .collect::<Vec<_>>(),
        );
        let m = measure::median(
            &samples[i]
                .iter()
                .map(|s| s.machine_cpu_per_gib)
                .collect::<Vec<_>>(),
        );
        let proxy = if *c == "direct" {
            "–".to_string()
        } else {
            format!("{p:.2}")
        };
        println!(
            "| {c} | {:.2} ({lo:.2}–{hi:.2}) | {:.2} | {proxy} | {m:.2} |",
            measure::median(&g),
            measure::median(&g) / direct
        );
    }
    Ok(())
}

/// Opens `n` tunnels, moves 1 KiB through each (so each took and returned a buffer or
/// pipe), leaves them idle and reports the proxy's resident memory per tunnel.
pub fn idle_memory(bin: &Path, n: usize) -> anyhow::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let target = listener.local_addr()?;
    let acceptor = std::thread::spawn(move || -> anyhow::Result<Vec<TcpStream>> {
        let mut held = Vec::with_capacity(n);
        while held.len() < n {
            held.push(listener.accept()?.0);
        }
        Ok(held)
    });
    let (proxy, addr) = start_splicer(
        bin,
        "auto",
        &format!("[limits]\nmax_connections = {}\n", n + 10),
    )?;
    let pid = proxy.0.id();
    // Warm up the runtime and pools with one tunnel, so the baseline is the steady state.
    let warm_target = TcpListener::bind("127.0.0.1:0")?;
    let mut warm = socks_connect(addr, warm_target.local_addr()?)?;
    warm.write_all(&[1u8; 1024])?;
    let (mut w2, _) = warm_target.accept()?;
    w2.read_exact(&mut [0u8; 1024])?;
    drop((warm, w2));
    std::thread::sleep(Duration::from_millis(300));
    let before = measure::rss_kib(pid);
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = socks_connect(addr, target)?;
        c.write_all(&[7u8; 1024])?;
        clients.push(c);
    }
    let mut upstream = acceptor
        .join()
        .map_err(|_| anyhow::anyhow!("acceptor panicked"))??;
    for u in &mut upstream {
        let mut b = [0u8; 1024];
        u.read_exact(&mut b)?;
    }
    std::thread::sleep(Duration::from_millis(500));
    let after = measure::rss_kib(pid);
    let per = (after.saturating_sub(before)) as f64 / n as f64;
    println!("idle tunnels: {n} open, each moved 1 KiB then idle");
    println!("  splicer RSS before {before} KiB, with tunnels {after} KiB");
    println!(
        "  user-space memory per idle tunnel: {per:.2} KiB ({:.0} bytes)",
        per * 1024.0
    );
    Ok(())
}
