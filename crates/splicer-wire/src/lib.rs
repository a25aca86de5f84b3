//! Wire formats spoken by Splicer's front ends: SOCKS5 (RFC 1928, RFC 1929) and HTTP/1 heads
//! and chunked framing (RFC 9112). No I/O happens here.
//!
//! Every parser follows the smoltcp contract: it takes a byte slice, returns
//! `Ok(None)` when more bytes are needed, `Ok(Some((value, consumed)))` when a whole message
//! was read, or an error; it never panics on any input, and each message type round-trips
//! through its encoder. Fuzz targets live in `fuzz/` at the top of the repository.
//!
//! # Layout
//! - [`socks5`]: greeting, method selection, username/password sub-negotiation, request, reply.
//! - [`http`]: request and response heads (on top of `httparse`), header helpers, body framing.
//! - [`chunked`]: chunk-size lines and trailers, read strictly and written anew ([`chunked::Reframer`]).
//! - [`forward`]: the request and response heads a forward proxy sends on (hop-by-hop fields,
//!   `Host`, `Via`, the framing guards).
#![forbid(unsafe_code)]
// A panic is not an error path: product code handles what it can and names why it cannot
// (each exception to these is allowed where it stands, with the invariant it rests on).
#![deny(clippy::unwrap_used, clippy::expect_used)]
// Every dependency is used (checked for the library itself, whose tests have dev-dependencies
// too; CI runs clippy with -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod chunked;
pub mod forward;
pub mod http;
pub mod socks5;

/// Result of a parser: `None` while incomplete, else the value and the bytes it used.
pub type Parsed<T> = Option<(T, usize)>;
