//! Splicer's front ends and everything around them: the configuration model, the rule set
//! and users, reaching upstream (with the HTTP connection pool), the access log, and the
//! server that accepts clients under limits and stops gracefully.
//!
//! # Layout
//! - [`config`]: the TOML configuration model, defaults and validation.
//! - [`policy`]: allow/deny rules (client CIDR, destination CIDR, domain suffix, port,
//!   user) and authentication.
//! - [`front`]: the front ends, what a client talks to: `socks`, `http` (the request loop
//!   of the `http` and `edge` front ends, the forward proxy's requests) and `edge`.
//! - [`exchange`]: one HTTP request between a client and an upstream: asked, answered,
//!   bodies relayed, Splicer's own responses.
//! - [`cache`]: the cache's decisions in the request path (the store is `splicer-cache`).
//! - [`upstream`]: what Splicer talks to: dialing, the idle pool, the edge's groups with
//!   their pipelined lines, HTTP/2 connections, warm pools and health checks.
//! - [`access`]: one access-log line per connection or request.
//! - [`error`]: the error at the proxy boundary (which side, kind, retry safety) behind
//!   `end`.
//! - [`server`]: listeners, the connection limit, graceful shutdown.
//! - [`tuning`]: per-leg TCP tuning (the sockops program told each leg, refusals logged).
//! - [`shared`]: what every connection task shares (config, relay, rules, upstreams, stop).
//! - `wireio`: reading protocol heads into a buffer; `sockbuf`: fixed receive buffers.
#![forbid(unsafe_code)]

pub mod access;
pub mod cache;
pub mod config;
pub mod error;
pub mod exchange;
pub mod front;
pub mod policy;
pub mod server;
pub mod shared;
mod sockbuf;
pub mod tuning;
pub mod upstream;
mod wireio;

pub use config::Config;
pub use server::Server;
