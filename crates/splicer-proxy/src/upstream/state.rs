//! What Splicer keeps of its upstreams while it runs, in one place.

/// What Splicer keeps of its upstreams while it runs: shared by every connection task
/// (through `crate::shared::Shared`) and by the tasks that keep the edge's servers ready,
/// which hold it weakly and end when it goes.
#[derive(Debug)]
pub struct Upstreams {
    /// Idle HTTP connections per origin.
    pub pool: std::sync::Arc<super::pool::Pool>,
    /// The `edge` front end's pipelined upstream connections.
    pub lines: super::lines::Pipelines,
    /// The `edge` front end's HTTP/2 connections (its `h2c` groups' servers).
    pub h2: super::h2c::Conns,
    /// The `edge` front end's routes and upstream groups, when it runs.
    pub edge: Option<super::groups::Edge>,
    /// How the tasks that keep servers ready open connections (`[limits]`).
    pub dial: super::dial::Dial,
    /// `limits.max_header_size`, for heads read on those connections.
    pub max_head: usize,
}
