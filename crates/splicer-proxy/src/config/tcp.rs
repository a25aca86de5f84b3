//! Per-leg TCP tuning settings (`client_tcp` of a front end, `tcp` of an edge upstream
//! group): what the sockops program sets on each connection of the leg as it is
//! established. Documented in docs/edge.md and docs/configuration.md.

use std::time::Duration;

use serde::Deserialize;

/// What to set on each connection of one leg; an absent key leaves the kernel's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpTuning {
    /// Initial congestion window, in segments (the kernel's default is 10).
    pub initial_window: Option<u32>,
    /// Congestion control algorithm (`cubic`, `reno`, `bbr`, …).
    pub congestion: Option<String>,
    /// Minimum retransmission timeout (the kernel's default is 200 ms, its highest).
    #[serde(default, deserialize_with = "optional_duration")]
    pub rto_min: Option<Duration>,
    /// Longest an acknowledgement is delayed (the kernel's default bound is 200 ms).
    #[serde(default, deserialize_with = "optional_duration")]
    pub delack_max: Option<Duration>,
}

/// The most the kernel takes for `rto_min` and `delack_max` (`TCP_RTO_MIN`,
/// `TCP_DELACK_MAX`).
const KERNEL_MAX: Duration = Duration::from_millis(200);

/// Longest congestion-control name the kernel takes (`TCP_CA_NAME_MAX`, with its NUL).
const CONGESTION_NAME_MAX: usize = 16;

/// A larger initial window than this is no longer a window but a burst that overruns queues.
const MAX_INITIAL_WINDOW: u32 = 1000;

fn optional_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    super::duration(d).map(Some)
}

impl TcpTuning {
    /// Whether anything is set.
    pub fn is_empty(&self) -> bool {
        *self == TcpTuning::default()
    }

    /// The checks `(key suffix, message)`: values the kernel would refuse on every
    /// connection are refused at start instead.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if let Some(w) = self.initial_window {
            if w == 0 || w > MAX_INITIAL_WINDOW {
                return Err((
                    "initial_window",
                    format!("{w} segments: must be 1 to {MAX_INITIAL_WINDOW}"),
                ));
            }
        }
        if let Some(name) = &self.congestion {
            let valid = !name.is_empty()
                && name.len() < CONGESTION_NAME_MAX
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid {
                return Err(("congestion", format!("{name:?} is not an algorithm's name")));
            }
            // The kernel says which it has (loading a module for it if it may): what `run`
            // would be refused, `check` refuses too.
            let probe = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| {
                splicer_sys::sock::set_congestion(std::os::fd::AsFd::as_fd(&l), name)
            });
            if let Err(e) = probe {
                let have =
                    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                        .unwrap_or_default();
                return Err((
                    "congestion",
                    format!(
                        "{name:?}: this kernel does not take it ({e}); it has: {}",
                        have.trim()
                    ),
                ));
            }
        }
        for (key, d) in [("rto_min", self.rto_min), ("delack_max", self.delack_max)] {
            if let Some(d) = d {
                if d.is_zero() || d > KERNEL_MAX {
                    return Err((key, format!("{d:?}: the kernel takes above 0 to 200 ms")));
                }
            }
        }
        Ok(())
    }
}

impl super::Config {
    /// Every tuning configured, with its section's key.
    pub fn tcp_tunings(&self) -> Vec<(String, &TcpTuning)> {
        let mut all = Vec::new();
        all.extend(
            self.socks
                .iter()
                .filter_map(|s| s.client_tcp.as_ref())
                .map(|t| ("socks.client_tcp".to_string(), t)),
        );
        all.extend(
            self.http
                .iter()
                .filter_map(|h| h.client_tcp.as_ref())
                .map(|t| ("http.client_tcp".to_string(), t)),
        );
        if let Some(e) = &self.edge {
            all.extend(
                e.client_tcp
                    .iter()
                    .map(|t| ("edge.client_tcp".to_string(), t)),
            );
            all.extend(
                (e.upstream.iter().enumerate()).filter_map(|(i, g)| {
                    Some((format!("edge.upstream[{i}].tcp"), g.tcp.as_ref()?))
                }),
            );
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_the_kernel_would_refuse_are_refused_at_start() {
        let ok = TcpTuning {
            initial_window: Some(40),
            congestion: Some("cubic".into()),
            rto_min: Some(Duration::from_millis(50)),
            delack_max: Some(Duration::from_millis(5)),
        };
        assert_eq!(ok.validate(), Ok(()));
        assert!(TcpTuning::default().is_empty());
        assert!(!ok.is_empty());
        let bad = |t: TcpTuning| t.validate().unwrap_err().0;
        let w = |n| TcpTuning {
            initial_window: Some(n),
            ..TcpTuning::default()
        };
        assert_eq!(bad(w(0)), "initial_window");
        assert_eq!(bad(w(1001)), "initial_window");
        let cc = |s: &str| TcpTuning {
            congestion: Some(s.into()),
            ..TcpTuning::default()
        };
        assert_eq!(bad(cc("")), "congestion");
        assert_eq!(bad(cc("a name")), "congestion");
        assert_eq!(bad(cc("sixteen-letters!")), "congestion");
        let rto = |ms| TcpTuning {
            rto_min: Some(Duration::from_millis(ms)),
            ..TcpTuning::default()
        };
        assert_eq!(bad(rto(0)), "rto_min");
        assert_eq!(bad(rto(201)), "rto_min");
        assert_eq!(rto(200).validate(), Ok(()));
        let delack = TcpTuning {
            delack_max: Some(Duration::from_secs(1)),
            ..TcpTuning::default()
        };
        assert_eq!(bad(delack), "delack_max");
    }
}
