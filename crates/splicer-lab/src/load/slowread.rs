//! One slow reader: a GET whose body the client reads at a fixed rate (a download to a
//! phone), for at most a given time, checking every byte it reads against the origin's
//! content; then it closes the connection, done or not. What it is for is the proxy's side:
//! how much the proxy's kernel holds between an origin that sends at full speed and a
//! client that drains at 1 Mbit/s (issue "Seed 000's splice", item 3), per relay engine.
//!
//! The report counts one operation (the read, whole or cut by `--seconds`) with the bytes
//! read; `extra` says whether the body ended and the rate the client actually read at.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde::Serialize;
use splicer_wire::http::{BodyLength, Limits, ResponseHead};
use tokio::io::AsyncReadExt;

use super::dial::{dial, Failed};
use super::http::{Get, Verifier};
use super::{Report, Stats, Via};
use crate::content::Pattern;

#[derive(Debug, Clone, Serialize)]
pub struct Params {
    pub origin: SocketAddr,
    pub via: Via,
    pub size: u64,
    pub seed: u64,
    /// HTTP/1.1 (the connection stays open after the body) instead of HTTP/1.0.
    pub keep_alive: bool,
    /// Bytes per second the client reads (125,000: 1 Mbit/s).
    pub rate: u64,
    /// Longest the client reads before it closes the connection.
    pub seconds: f64,
}

impl Params {
    pub fn check(&self) -> Result<(), super::BadParams> {
        if self.rate == 0 {
            return Err(super::BadParams("--rate: at least 1 byte per second"));
        }
        if !(self.seconds > 0.0 && self.seconds <= 3600.0) {
            return Err(super::BadParams("--seconds: more than 0, at most 3600"));
        }
        Ok(())
    }
}

/// How much one read may take: a tenth of a second's worth, so the pace is smooth (at
/// 1 Mbit/s, 12.5 KB ten times a second) and the socket's receive queue does the rest.
fn read_size(rate: u64) -> usize {
    (rate / 10).clamp(1, 65536) as usize
}

/// What one read ended with.
struct Read {
    body: u64,
    complete: bool,
}

async fn read_slowly(p: &Params, deadline: Instant) -> Result<Read, Failed> {
    let mut s = dial(p.via, p.origin).await?;
    let get = Get {
        origin: p.origin,
        size: p.size,
        seed: p.seed,
        cacheable: false,
        absolute: matches!(p.via, Via::HttpProxy(_)),
        keep_alive: p.keep_alive,
    };
    get.send(&mut s).await?;
    let pattern = Pattern::new(p.seed);
    let mut v = Verifier::new(&pattern);
    let mut chunk = vec![0u8; read_size(p.rate)];
    let mut buf = Vec::new();
    let began = Instant::now();
    let mut taken = 0u64;
    let mut body = 0u64;
    let mut length = None;
    loop {
        // Pace: no more than `rate` bytes a second since the request.
        let due = began + Duration::from_secs_f64(taken as f64 / p.rate as f64);
        if due >= deadline {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        let n = match tokio::time::timeout_at(deadline.into(), s.read(&mut chunk)).await {
            Err(_) => break,
            Ok(r) => r.map_err(|e| Failed::new("recv", e))?,
        };
        taken += n as u64;
        if n == 0 {
            return match length {
                Some(BodyLength::Close) => Ok(Read {
                    body,
                    complete: true,
                }),
                _ => Err(Failed::msg("short", format!("closed after {body} bytes"))),
            };
        }
        buf.extend_from_slice(&chunk[..n]);
        if length.is_none() {
            match ResponseHead::parse(&buf, &Limits::default()) {
                Ok(Some((h, k))) => {
                    if h.status != 200 {
                        return Err(Failed::msg("status", format!("status {}", h.status)));
                    }
                    let framing = h
                        .body(&splicer_wire::http::Method::Get)
                        .map_err(|e| Failed::msg("bad-response", e.to_string()))?;
                    buf.drain(..k);
                    length = Some(framing);
                }
                Ok(None) => continue,
                Err(e) => return Err(Failed::msg("bad-response", e.to_string())),
            }
        }
        let k = match length {
            Some(BodyLength::Length(n)) => (buf.len() as u64).min(n.saturating_sub(body)) as usize,
            _ => buf.len(),
        };
        if !v.check(&buf[..k]) {
            return Err(Failed::msg("corrupt", format!("body differs near {body}")));
        }
        buf.drain(..k);
        body += k as u64;
        if let Some(BodyLength::Length(n)) = length {
            if body == n {
                if n != p.size {
                    return Err(Failed::msg(
                        "short",
                        format!("{n} bytes, wanted {}", p.size),
                    ));
                }
                return Ok(Read {
                    body,
                    complete: true,
                });
            }
        }
    }
    Ok(Read {
        body,
        complete: false,
    })
}

/// Reads one body slowly and reports.
pub async fn run(p: Params) -> anyhow::Result<Report> {
    p.check()?;
    let mut stats = Stats::default();
    let began = Instant::now();
    let deadline = began + Duration::from_secs_f64(p.seconds);
    let mut complete = false;
    match read_slowly(&p, deadline).await {
        Ok(r) => {
            complete = r.complete;
            stats.done(began, began, r.body, true);
        }
        Err(f) => stats.failed(&f),
    }
    let took = began.elapsed().as_secs_f64();
    let mut report = Report::new("slowread", serde_json::to_value(&p)?, &stats, took);
    report.extra = serde_json::json!({
        "complete": complete,
        "read_bytes_per_second": stats.bytes as f64 / took.max(1e-9),
    });
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_a_tenth_of_a_second_of_the_rate() {
        assert_eq!(read_size(125_000), 12_500);
        assert_eq!(read_size(1 << 30), 65536);
        assert_eq!(read_size(3), 1);
    }

    #[test]
    fn a_rate_and_a_time_are_needed() {
        let p = Params {
            origin: "127.0.0.1:1".parse().unwrap(),
            via: Via::Direct,
            size: 1,
            seed: 1,
            keep_alive: false,
            rate: 0,
            seconds: 1.0,
        };
        assert!(p.check().is_err());
        assert!(Params {
            rate: 1,
            ..p.clone()
        }
        .check()
        .is_ok());
        assert!(Params {
            rate: 1,
            seconds: 0.0,
            ..p
        }
        .check()
        .is_err());
    }
}
