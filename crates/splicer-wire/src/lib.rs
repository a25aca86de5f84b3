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

pub mod chunked;
pub mod forward;
pub mod http;
pub mod socks5;

/// Result of a parser: `None` while incomplete, else the value and the bytes it used.
pub type Parsed<T> = Option<(T, usize)>;
