//! The lab's test bed: hosts as network namespaces joined by veth links, addressed from a
//! private range used only inside them, with static routes so any host reaches any other
//! (through routing hosts such as a proxy host with forwarding on).
//!
//! This is the first piece of the lab (issue 3): the bed, scenario files and clean-up. The
//! link emulator, origin server, load generators and reports build on it.
//!
//! # Layout
//! - [`scenario`]: the scenario file (TOML): hosts and links, validated with key names.
//! - [`bed`]: building and tearing down a scenario's namespaces, links, addresses and routes;
//!   running processes inside hosts; removing leftovers of crashed runs.
#![forbid(unsafe_code)]

pub mod bed;
pub mod scenario;

pub use bed::Bed;
pub use scenario::Scenario;
