//! What every connection task shares: the configuration, the relay, the rules and users,
//! the upstreams (pool, lines, HTTP/2 connections, the edge's groups), the cache, and the
//! signals of a stop.

use splicer_relay::Relay;
use tokio::sync::watch;

use crate::config::Config;
use crate::policy::Policy;
use crate::upstream::Upstreams;

/// What every connection task shares.
#[derive(Debug)]
pub struct Shared {
    pub config: Config,
    pub relay: Relay,
    pub policy: Policy,
    /// What Splicer keeps of its upstreams.
    pub upstreams: std::sync::Arc<Upstreams>,
    /// The HTTP front end's cache, when it is on.
    pub cache: Option<splicer_cache::Cache>,
    /// Becomes `true` when the proxy is stopping.
    pub shutdown: watch::Receiver<bool>,
    /// Becomes `true` when the shutdown grace is over: connections still open are cut.
    pub(crate) cut: watch::Receiver<bool>,
}
