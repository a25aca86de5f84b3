//! Splicer's front ends and everything around them: the configuration model, the rule set
//! and users, reaching upstream (with the HTTP connection pool), the access log, and the
//! server that accepts clients under limits and stops gracefully.
//!
//! # Layout
//! - [`config`]: the TOML configuration model, defaults and validation.
//! - [`policy`]: allow/deny rules (client CIDR, destination CIDR, domain suffix, port,
//!   user) and authentication.
//! - [`upstream`]: resolve, check, connect under a deadline; idle connection pool.
//! - [`socks`], [`http`]: the front ends (`http` serves the `edge` front end's requests
//!   too); [`edge`]: the edge's routes and upstream groups; [`health`]: the active checks
//!   of its servers; [`warm`]: the warm pool (`min_idle`) of its servers; [`h2c`]: the
//!   HTTP/2 connections to the servers of its `h2c` groups.
//! - [`front`]: the front ends by name.
//! - [`access`]: one access-log line per connection or request.
//! - [`error`]: the error at the proxy boundary (which side, kind, retry safety) behind
//!   `end`.
//! - [`server`]: listeners, the connection limit, graceful shutdown.
//! - [`tuning`]: per-leg TCP tuning (the sockops program told each leg, refusals logged).
//! - [`shared`]: what every connection task shares (config, relay, rules, pool, stop).
//! - `wireio`: reading protocol heads into a buffer.
#![forbid(unsafe_code)]

pub mod access;
pub mod config;
pub mod edge;
pub mod error;
pub mod front;
pub mod h2c;
pub mod health;
pub mod http;
pub mod pipeline;
pub mod policy;
pub mod server;
pub mod shared;
mod sockbuf;
pub mod socks;
pub mod tuning;
pub mod upstream;
pub mod warm;
mod wireio;

pub use config::Config;
pub use server::Server;
