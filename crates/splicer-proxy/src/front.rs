//! The front ends: what a client talks to. Each takes a client connection from its
//! listener (`crate::server`) and serves it to the end.
//!
//! # Layout
//! - `socks`: SOCKS5 (RFC 1928/1929), CONNECT only, then a tunnel.
//! - `http`: the HTTP/1.x request loop of the `http` and `edge` front ends, and the
//!   forward proxy's requests (CONNECT tunnels, the cache or the origin).
//! - `edge`: the edge's requests (a reverse proxy): its route, the group's servers in turn,
//!   on pooled, pipelined or HTTP/2 upstream connections.

pub mod edge;
pub mod http;
pub mod socks;
