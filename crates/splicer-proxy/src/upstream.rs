//! Upstream: what Splicer talks to. Reaching an origin (resolve, the rules on each address,
//! connect under a deadline), the connections kept for reuse, and the `edge` front end's
//! upstream groups with what keeps them ready. Nothing here knows a client connection: the
//! exchange (`crate::exchange`) and the front ends use these.
//!
//! # Layout
//! - `dial`: name resolution, the rule check, connecting with the relay's socket options.
//! - `pool`: idle HTTP connections per origin, and how one is looked at before reuse.
//! - `groups`: the edge's routes and upstream groups (which group, which server first).
//! - `lines`: pipelined connections shared by many clients' requests (seed 002).
//! - `h2c`: HTTP/2 connections to the servers of `h2c` groups.
//! - `warm`: the warm pool (`min_idle`) of each group's servers.
//! - `health`: active health checks of each group's servers.
//! - `resolve`: servers given by DNS name, resolved again on a schedule.
//! - `state`: [`Upstreams`], all of the above that Splicer keeps while it runs.

mod dial;
pub mod groups;
pub mod h2c;
pub mod health;
pub mod lines;
mod pool;
pub mod resolve;
mod state;
pub mod warm;

pub use dial::{connect, connect_addr, Asker, ConnectError, Destination, Dial};
pub use pool::{Check, Idle, Pool};
pub use state::Upstreams;
