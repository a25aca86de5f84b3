//! Seed 004 (Pathak et al., PAM 2010): split TCP near clients, for cloud search.
//!
//! - [`Latency`] (`pathak-latency`, Figs 5–6): queries of 55 KB each on a new connection,
//!   straight to the data centre and through the edge's warm connections; the p95 and the
//!   model of each query's round trips, with this kernel's initial window and the paper's.
//! - [`Loss`] (`pathak-loss`, Fig 7): the same queries with last-mile loss; how the
//!   queries that saw a loss are spread, on the paper's normalised scale.
//! - [`Windows`] (`pathak-windows`, Table 1): a sender's window round trip by round trip,
//!   from the paper's first window and from this kernel's.
//! - [`Stress`] (`pathak-stress`, Fig 9): one persistent connection at 1 to 1000 requests a
//!   second; the share that needs 2 round trips or more, with the bound its count carries.

mod latency;
mod loss;
mod stress;
mod stress_runs;
mod windows;

pub use latency::Latency;
pub use loss::Loss;
pub use stress::Stress;
pub use windows::Windows;
