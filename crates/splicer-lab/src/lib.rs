//! The lab's test bed: hosts as network namespaces joined by veth links, addressed from a
//! private range used only inside them, with static routes so any host reaches any other
//! (through routing hosts such as a proxy host with forwarding on).
//!
//! On the bed run the link emulator, the origin server and the load generators;
//! [`experiment`] runs a scenario's variants side by side and [`summary`] reports them.
//!
//! # Layout
//! - [`scenario`]: the scenario file (TOML): hosts and links, validated with key names.
//! - [`bed`]: building and tearing down a scenario's namespaces, links, addresses and routes;
//!   running processes inside hosts; removing leftovers of crashed runs.
//! - [`origin`]: the origin server (sizes, seeds, cacheability, think time per request),
//!   the `splicer-origin` crate with its [`ssl`] and [`content`].
//! - [`pingpong`]: one-byte request/response round trips and their summary.
//! - [`emulator`]: one direction of a link over NFQUEUE: delay, rate, queue, two-state loss.
//! - [`measure`]: process and machine CPU, RSS, per-namespace TCP counters.
//! - [`cpulimit`]: a CPU budget for a process of a run (a cgroup quota).
//! - [`hist`]: HDR latency histograms and the summary every generator reports.
//! - [`load`]: the load generators (s-client, SURGE, bulk, persistent-connection stress).
//! - [`experiment`]: `splicer-lab run`: variants, rounds, measurements around the loads;
//!   [`run`]: what one variant's run measured (`runs.json`).
//! - [`summary`]: `summary.md`, `timeline.csv` and the plots of a run; [`plot`] draws SVGs.
//! - [`relaybench`], [`cachebench`], [`edgebench`]: the benchmarks' scenarios (relays; HTTP
//!   caches and proxies; reverse proxies), built with [`benchgen`].
//! - [`rosumixed`]: seed 000's mixed-load experiment (hits beside spliced requests).
//! - [`reproduce`]: `splicer-lab reproduce`: the seeds' experiments, each point's runs and
//!   the report beside the paper's figures (docs/experiments).
#![forbid(unsafe_code)]

pub mod bed;
pub mod benchgen;
pub mod cachebench;
pub mod cpulimit;
pub mod edgebench;
pub mod emulator;
pub mod experiment;
pub mod hist;
pub mod load;
pub mod measure;
pub mod pingpong;
pub mod plot;
pub mod relaybench;
pub mod reproduce;
pub mod rosumixed;
pub mod run;
pub mod scenario;
pub mod summary;

// The origin is its own crate (the product's tests use it too); the lab names it as before.
pub use splicer_origin::{self as origin, content, ssl};

pub use bed::Bed;
pub use scenario::Scenario;
