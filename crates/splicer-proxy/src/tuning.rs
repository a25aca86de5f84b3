//! Per-leg TCP tuning (seed 004): at start, the sockops program is loaded and told each
//! configured leg (a front end's listeners for `client_tcp`, an edge group's servers for
//! `tcp`); while the proxy runs, what the kernel refused is logged. The program itself is in
//! `splicer-bpf` (`tune`).

use std::net::SocketAddr;
use std::time::Duration;

use crate::config::Front;
use crate::config::{Config, TcpTuning};

/// How often the program's counts are read for refusals to log.
const REPORT_EVERY: Duration = Duration::from_secs(2);

/// The loaded program, kept for as long as the proxy runs (dropping it detaches it).
#[derive(Debug)]
pub struct Legs {
    #[cfg(feature = "bpf")]
    tuner: splicer_bpf::Tuner,
}

/// The legs a configuration tunes: each listener address of a front end with `client_tcp`
/// (as bound: a port 0 is resolved), each server of an edge group with `tcp`.
fn wanted<'c>(config: &'c Config, bound: &[(Front, SocketAddr)]) -> Vec<(Leg, &'c TcpTuning)> {
    let client = |front: Front| match front {
        Front::Socks => config.socks.as_ref().and_then(|s| s.client_tcp.as_ref()),
        Front::Http => config.http.as_ref().and_then(|h| h.client_tcp.as_ref()),
        Front::Edge => config.edge.as_ref().and_then(|e| e.client_tcp.as_ref()),
    };
    let mut legs: Vec<(Leg, &TcpTuning)> = bound
        .iter()
        .filter_map(|&(front, addr)| client(front).map(|t| (Leg::Accepted(addr), t)))
        .collect();
    for g in config.edge.iter().flat_map(|e| &e.upstream) {
        if let Some(t) = &g.tcp {
            // Only addresses: a group with names cannot have `tcp` (`EdgeConfig::validate`).
            legs.extend(g.servers.iter().filter_map(|s| match s {
                crate::config::ServerName::Addr(a) => Some((Leg::Opened(*a), t)),
                crate::config::ServerName::Name { .. } => None,
            }));
        }
    }
    legs.retain(|(_, t)| !t.is_empty());
    legs
}

/// A leg, as `splicer-bpf` names it (kept here too so the proxy builds without eBPF).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "bpf"), allow(dead_code))]
enum Leg {
    Accepted(SocketAddr),
    Opened(SocketAddr),
}

/// Why per-leg tuning cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TuningError {
    #[error(
        "this splicer was built without eBPF (the `bpf` feature), which per-leg TCP tuning \
         (client_tcp, edge.upstream.tcp) needs"
    )]
    NotBuilt,
    /// The program's loader failed (its error is `splicer-bpf`'s, a crate this build may
    /// leave out, hence the box).
    #[error("cannot load the sockops program (root and cgroup v2 needed): {0}")]
    Load(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("tuning connections of {addr}: {source}")]
    Leg {
        addr: SocketAddr,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Loads the program and configures every leg; `None` when no leg is tuned.
pub fn start(config: &Config, bound: &[(Front, SocketAddr)]) -> Result<Option<Legs>, TuningError> {
    let legs = wanted(config, bound);
    if legs.is_empty() {
        return Ok(None);
    }
    load(&legs).map(Some)
}

#[cfg(not(feature = "bpf"))]
fn load(_: &[(Leg, &TcpTuning)]) -> Result<Legs, TuningError> {
    Err(TuningError::NotBuilt)
}

#[cfg(feature = "bpf")]
fn load(legs: &[(Leg, &TcpTuning)]) -> Result<Legs, TuningError> {
    let tuner = splicer_bpf::Tuner::load().map_err(|e| TuningError::Load(e.into()))?;
    for (leg, t) in legs {
        let tuning = splicer_bpf::Tuning {
            initial_window: t.initial_window,
            congestion: t.congestion.clone(),
            rto_min: t.rto_min,
            delack_max: t.delack_max,
        };
        let (bpf_leg, addr) = match *leg {
            Leg::Accepted(a) => (splicer_bpf::Leg::Accepted(a), a),
            Leg::Opened(a) => (splicer_bpf::Leg::Opened(a), a),
        };
        tuner.set(bpf_leg, &tuning).map_err(|e| TuningError::Leg {
            addr,
            source: e.into(),
        })?;
        tracing::info!(leg = ?leg, tuning = ?t, "TCP tuning per leg");
    }
    Ok(Legs { tuner })
}

impl Legs {
    /// Logs each new refusal by the kernel until the proxy goes (the caller aborts it).
    pub async fn report(self: std::sync::Arc<Self>) {
        #[cfg(feature = "bpf")]
        {
            // Refusals already logged, per setting (in the program's order).
            let mut logged = [0u64; splicer_bpf::tune::Setting::ALL.len()];
            let mut tick = tokio::time::interval(REPORT_EVERY);
            loop {
                tick.tick().await;
                let seen = self.tuner.outcomes();
                for r in &seen.refused {
                    let k = r.setting as usize;
                    if r.times > logged[k] {
                        tracing::warn!(
                            option = r.setting.option(),
                            connections = r.times - logged[k],
                            tuned = seen.tuned,
                            "the kernel refused a TCP setting: {} (the connections go on without it)",
                            r.error()
                        );
                        logged[k] = r.times;
                    }
                }
            }
        }
        #[cfg(not(feature = "bpf"))]
        {
            let _ = REPORT_EVERY;
            std::future::pending::<()>().await
        }
    }
}
