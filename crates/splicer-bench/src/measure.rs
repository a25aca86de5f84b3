//! Medians, ports and child processes for the benchmarks; CPU and memory come from the lab.

use std::time::Duration;

// CPU and memory readings are the lab's (one implementation for benches and experiments).
pub use splicer_lab::measure::{machine_cpu, process_cpu, rss_kib};

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

pub fn min_max(v: &[f64]) -> (f64, f64) {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

pub fn wait_port(addr: std::net::SocketAddr) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "nothing listens on {addr}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// A child process stopped (by PID) on drop: SIGTERM first, so that servers such as nginx
/// take their worker processes with them, then SIGKILL after two seconds.
pub struct Guard(pub std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let pid = self.0.id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
