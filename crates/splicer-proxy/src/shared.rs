//! What every connection task shares: the configuration, the relay, the rules and users,
//! the upstream pool, and the signals of a stop.

use splicer_relay::Relay;
use tokio::sync::watch;

use crate::config::Config;
use crate::policy::Policy;
use crate::upstream::Pool;

/// What every connection task shares.
#[derive(Debug)]
pub struct Shared {
    pub config: Config,
    pub relay: Relay,
    pub policy: Policy,
    pub pool: std::sync::Arc<Pool>,
    /// The `edge` front end's pipelined upstream connections.
    pub pipelines: crate::pipeline::Pipelines,
    /// The `edge` front end's HTTP/2 connections (its `h2c` groups' servers).
    pub h2: crate::h2c::Conns,
    /// The HTTP front end's cache, when it is on.
    pub cache: Option<splicer_cache::Cache>,
    /// The `edge` front end's routes and upstream groups, when it runs.
    pub edge: Option<crate::edge::Edge>,
    /// Becomes `true` when the proxy is stopping.
    pub shutdown: watch::Receiver<bool>,
    /// Becomes `true` when the shutdown grace is over: connections still open are cut.
    pub(crate) cut: watch::Receiver<bool>,
}
