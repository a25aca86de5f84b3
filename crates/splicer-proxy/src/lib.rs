//! Splicer's front ends and everything around them: the configuration model, the rule set
//! and users, reaching upstream (with the HTTP connection pool), the access log, and the
//! server that accepts clients under limits and stops gracefully.
//!
//! # Layout
//! - [`config`]: the TOML configuration model, defaults and validation.
//! - [`policy`]: allow/deny rules (client CIDR, destination CIDR, domain suffix, port,
//!   user) and logins, with their failure limits; [`credentials`]: the users' passwords
//!   (Argon2 hashes or clear text) and how a login is checked against them.
//! - [`front`]: the front ends, what a client talks to: `socks`, `http` (the request loop
//!   of the `http` and `edge` front ends, the forward proxy's requests) and `edge`.
//! - [`exchange`]: one HTTP request between a client and an upstream: asked, answered,
//!   bodies relayed, Splicer's own responses.
//! - [`cache`]: the cache's decisions in the request path (the store is `splicer-cache`).
//! - [`upstream`]: what Splicer talks to: dialing, the idle pool, the edge's groups with
//!   their pipelined lines, HTTP/2 connections, warm pools and health checks.
//! - [`access`]: one access-log line per connection or request.
//! - [`metrics`]: the Prometheus/OpenMetrics figures and the admin listener serving them.
//! - [`error`]: the error at the proxy boundary (which side, kind, retry safety) behind
//!   `end`.
//! - [`server`]: listeners, the connection limit, graceful shutdown; [`threads`]: the
//!   connection threads, each serving its connections to their end on a runtime of its own.
//! - [`tuning`]: per-leg TCP tuning (the sockops program told each leg, refusals logged).
//! - [`shared`]: what every connection task shares (config, relay, rules, upstreams, stop).
//! - `wireio`: reading protocol heads into a buffer; `sockbuf`: fixed receive buffers.
#![forbid(unsafe_code)]
// A panic is not an error path: product code handles what it can and names why it cannot
// (each exception to these is allowed where it stands, with the invariant it rests on).
#![deny(clippy::unwrap_used, clippy::expect_used)]
// Every dependency is used (checked for the library itself, whose tests have dev-dependencies
// too; CI runs clippy with -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod access;
pub mod cache;
pub mod config;
pub mod credentials;
pub mod error;
pub mod exchange;
pub mod front;
pub mod metrics;
pub mod policy;
pub mod ring;
pub mod server;
pub mod shared;
mod sockbuf;
pub mod threads;
pub mod tuning;
pub mod upstream;
mod wireio;

pub use config::Config;
pub use server::Server;
