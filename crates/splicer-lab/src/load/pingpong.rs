//! Request/response ping-pong: one byte each way over one TCP connection, one exchange at a
//! time, to measure round trips (through the emulator, or per-packet forwarding latency
//! through a proxy).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Echoes every byte back, per connection, until the listener fails. Blocking; run it in a
/// thread or a process of its own.
pub fn serve(listener: TcpListener) {
    for s in listener.incoming() {
        let Ok(mut s) = s else { continue };
        std::thread::spawn(move || {
            let _ = s.set_nodelay(true);
            let mut b = [0u8; 1];
            while matches!(s.read(&mut b), Ok(1)) {
                if s.write_all(&b).is_err() {
                    break;
                }
            }
        });
    }
}

/// Opens the connection to `target` as `via` says (through a SOCKS5 or CONNECT proxy too),
/// as a blocking socket.
fn connect(target: SocketAddr, via: crate::load::Via) -> std::io::Result<TcpStream> {
    if via == crate::load::Via::Direct {
        return TcpStream::connect(target);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let s = rt
        .block_on(crate::load::dial::dial(via, target))
        .map_err(|f| f.error)?;
    let s = s.into_std()?;
    s.set_nonblocking(false)?;
    Ok(s)
}

/// `count` round trips of one byte on one connection; returns each round trip's time.
/// With a `pause`, one uncounted exchange and a pause come first, so that a relay that takes
/// a connection over once it is quiet (Splicer's kernel engines) has done so.
pub fn run(
    target: SocketAddr,
    via: crate::load::Via,
    count: usize,
    pause: Duration,
) -> std::io::Result<Vec<Duration>> {
    let mut s = connect(target, via)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    if !pause.is_zero() {
        s.write_all(&[0])?;
        s.read_exact(&mut [0u8; 1])?;
        std::thread::sleep(pause);
    }
    let mut out = Vec::with_capacity(count);
    let mut b = [0u8; 1];
    for i in 0..count {
        let t = Instant::now();
        s.write_all(&[i as u8])?;
        s.read_exact(&mut b)?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// The summary of round trips: [`crate::measure::hist::Summary`], from an HDR histogram.
pub use crate::measure::hist::Summary;

/// `count` round trips as a generator [`Report`](crate::load::Report): the latency of each
/// exchange in the HDR histogram, exchanges per second, and the error that ended the run
/// early, if one did.
pub fn report(
    target: SocketAddr,
    via: crate::load::Via,
    count: usize,
    pause: Duration,
) -> crate::load::Report {
    let mut stats = crate::load::Stats::default();
    let start = Instant::now();
    match run(target, via, count, pause) {
        Ok(rtts) => {
            for d in rtts {
                stats.latency.record(d);
                stats.completed += 1;
                stats.bytes += 2;
            }
        }
        Err(e) => {
            let kind = if e.kind() == std::io::ErrorKind::ConnectionRefused {
                "connect"
            } else {
                "recv"
            };
            stats.failed(&crate::load::dial::Failed::new(kind, e));
        }
    }
    let params = serde_json::json!({ "target": target.to_string(), "via": via.to_string(), "count": count,
                            "pause_ms": pause.as_millis() as u64 });
    // The pause is not part of the measured interval.
    let secs = start.elapsed().saturating_sub(pause).as_secs_f64();
    crate::load::Report::new("pingpong", params, &stats, secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_on_loopback() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || serve(l));
        let rtts = run(addr, crate::load::Via::Direct, 50, Duration::from_millis(5)).unwrap();
        assert_eq!(rtts.len(), 50);
        let s = Summary::of(&rtts);
        assert!(
            s.mean_ms > 0.0 && s.p50_ms <= s.p95_ms && s.p95_ms <= s.p99_ms,
            "{s:?}"
        );
        assert!(s.json().starts_with("{\"n\":50,"), "{}", s.json());
    }

    #[test]
    fn report_counts_exchanges_and_errors() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || serve(l));
        let r = report(addr, crate::load::Via::Direct, 20, Duration::ZERO);
        assert_eq!((r.completed, r.latency.n, r.error_total()), (20, 20, 0));
        assert!(r.per_second > 0.0 && r.json().contains("\"mean_ms\""));
        // Nobody listens on a port just released.
        let gone = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let r = report(gone, crate::load::Via::Direct, 5, Duration::ZERO);
        assert_eq!(
            (r.completed, r.errors.get("connect").copied()),
            (0, Some(1))
        );
    }
}
