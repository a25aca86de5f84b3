//! Latency histograms (HDR, microsecond resolution, 3 significant digits) and the summary
//! every generator reports: mean, p50, p95, p99, max and coefficient of variation.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// A latency histogram in microseconds; grows to any value.
#[derive(Clone)]
pub struct Latency(Histogram<u64>);

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

impl Latency {
    pub fn new() -> Latency {
        let mut h = Histogram::new(3).expect("3 significant digits is valid");
        h.auto(true);
        Latency(h)
    }

    pub fn record(&mut self, d: Duration) {
        // Saturating: a value past u64 microseconds cannot happen in a run.
        let _ = self.0.record((d.as_micros() as u64).max(1));
    }

    /// Records a value that may be 0 µs (a lateness, not a latency).
    pub fn record_us(&mut self, d: Duration) {
        let _ = self.0.record(d.as_micros() as u64);
    }

    pub fn summary(&self) -> Summary {
        let h = &self.0;
        let ms = |us: f64| us / 1000.0;
        let mean = h.mean();
        Summary {
            n: h.len(),
            mean_ms: ms(mean),
            p50_ms: ms(h.value_at_quantile(0.50) as f64),
            p95_ms: ms(h.value_at_quantile(0.95) as f64),
            p99_ms: ms(h.value_at_quantile(0.99) as f64),
            max_ms: ms(h.max() as f64),
            cv: if mean > 0.0 { h.stdev() / mean } else { 0.0 },
        }
    }

    /// The distribution function as (milliseconds, fraction at or below) points, one per
    /// distinct recorded value bucket, for plotting a CDF.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let n = self.0.len().max(1) as f64;
        let mut acc = 0u64;
        self.0
            .iter_recorded()
            .map(|v| {
                acc += v.count_at_value();
                (v.value_iterated_to() as f64 / 1000.0, acc as f64 / n)
            })
            .collect()
    }
}

/// What every generator reports about a latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub cv: f64,
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Summary {
        let mut h = Latency::new();
        for d in samples {
            h.record(*d);
        }
        h.summary()
    }

    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("plain numbers")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_cv() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = Summary::of(&d);
        // 3 significant digits: within 0.1%.
        for (got, want) in [(s.p50_ms, 50.0), (s.p95_ms, 95.0), (s.p99_ms, 99.0)] {
            assert!((got - want).abs() / want < 0.002, "{got} vs {want}");
        }
        assert!((s.mean_ms - 50.5).abs() < 0.1, "{s:?}");
        // Uniform 1..100: sd = sqrt((100²-1)/12) ≈ 28.87, cv ≈ 0.572.
        assert!((s.cv - 0.5716).abs() < 0.01, "{s:?}");
        let cdf = Latency::new().cdf();
        assert!(cdf.is_empty());
    }

    #[test]
    fn cdf_ends_at_one() {
        let mut h = Latency::new();
        for ms in [1, 1, 2, 10] {
            h.record(Duration::from_millis(ms));
        }
        let cdf = h.cdf();
        assert_eq!(cdf.len(), 3);
        assert!((cdf[0].1 - 0.5).abs() < 1e-9 && (cdf[2].1 - 1.0).abs() < 1e-9);
        assert!(cdf.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
