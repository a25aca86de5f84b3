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

/// `count` round trips of one byte on one connection; returns each round trip's time.
pub fn run(target: SocketAddr, count: usize) -> std::io::Result<Vec<Duration>> {
    let mut s = TcpStream::connect(target)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
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

/// Mean, percentiles and coefficient of variation of samples, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub cv: f64,
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Summary {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        ms.sort_by(|a, b| a.total_cmp(b));
        let n = ms.len();
        let mean = ms.iter().sum::<f64>() / n.max(1) as f64;
        let var = ms.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n.max(1) as f64;
        let pct = |p: f64| {
            ms.get(
                ((p * n as f64).ceil() as usize)
                    .saturating_sub(1)
                    .min(n.saturating_sub(1)),
            )
            .copied()
            .unwrap_or(f64::NAN)
        };
        Summary {
            n,
            mean,
            p50: pct(0.50),
            p95: pct(0.95),
            p99: pct(0.99),
            cv: if mean > 0.0 { var.sqrt() / mean } else { 0.0 },
        }
    }

    pub fn json(&self) -> String {
        format!(
            "{{\"n\":{},\"mean_ms\":{:.3},\"p50_ms\":{:.3},\"p95_ms\":{:.3},\"p99_ms\":{:.3},\"cv\":{:.4}}}",
            self.n, self.mean, self.p50, self.p95, self.p99, self.cv
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_on_loopback() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || serve(l));
        let rtts = run(addr, 50).unwrap();
        assert_eq!(rtts.len(), 50);
        let s = Summary::of(&rtts);
        assert!(s.mean > 0.0 && s.p50 <= s.p95 && s.p95 <= s.p99, "{s:?}");
        assert!(s.json().starts_with("{\"n\":50,"));
    }

    #[test]
    fn summary_percentiles() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = Summary::of(&d);
        assert_eq!((s.p50, s.p95, s.p99), (50.0, 95.0, 99.0));
        assert!((s.mean - 50.5).abs() < 1e-9);
    }
}
