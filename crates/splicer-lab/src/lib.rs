//! The lab's test bed: hosts as network namespaces joined by veth links, addressed from a
//! private range used only inside them, with static routes so any host reaches any other
//! (through routing hosts such as a proxy host with forwarding on).
//!
//! On the bed run the link emulator, the origin server and the load generators;
//! [`experiment`] runs a scenario's variants side by side and reports them.
//!
//! # Layout
//! - [`bed`]: the test bed: the [`scenario`](bed::scenario) file, building and tearing down
//!   its namespaces, links, addresses and routes, running processes inside hosts; the link
//!   [`emulator`](bed::emulator) and the [`cpulimit`](bed::cpulimit) of a process.
//! - [`origin`]: the origin server (sizes, seeds, cacheability, think time per request),
//!   the `splicer-origin` crate with its [`ssl`] and [`content`].
//! - [`load`]: the load generators (s-client, SURGE, bulk, persistent-connection stress,
//!   queries, ping-pong).
//! - [`measure`]: process and machine CPU, RSS, per-namespace TCP counters; HDR histograms.
//! - [`experiment`]: `splicer-lab run`: variants, rounds, measurements around the loads,
//!   what each run measured, the summary and plots of a run.
//! - [`bench`](mod@bench): the benchmarks' generated scenarios (relays; HTTP caches and proxies;
//!   reverse proxies).
//! - [`reproduce`]: `splicer-lab reproduce`: the seeds' experiments, each point's runs and
//!   the report beside the paper's figures (docs/experiments), and seed 000's mixed load.
#![forbid(unsafe_code)]

pub mod bed;
pub mod bench;
pub mod experiment;
pub mod load;
pub mod measure;
pub mod reproduce;

// The origin is its own crate (the product's tests use it too); the lab names it as before.
pub use splicer_origin::{self as origin, content, ssl};

pub use bed::scenario::Scenario;
pub use bed::Bed;
