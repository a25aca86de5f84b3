//! The exchange of one HTTP request between a client and an upstream, as every HTTP path
//! (the forward proxy, the cache, the edge) uses it: the request asked upstream, the answer
//! relayed back, bodies relayed with their framing, and the responses Splicer writes
//! itself. Heads are parsed and rewritten in user space (the rewrite itself is pure and
//! lives in `splicer_wire::forward`); bodies are spliced.
//!
//! # Layout
//! - `request`: [`Exchange`], one request and what was decided about it (method, body
//!   framing, destination, access record), made once and passed through every step.
//! - `client`: the client connection and the bytes read from it but not yet used.
//! - `ask`: the request to a pooled or new upstream connection (one retry on a reused
//!   connection that died), the final response head.
//! - `answer`: the response relayed to the client, the connection back to the pool.
//! - `body`: relaying one message body, chunked framing written anew.
//! - `fill`: the tap into a cache fill, and a fill finished with no client.
//! - `reply`: responses Splicer writes itself (errors, 407, 429), lingering close.

mod answer;
mod ask;
pub(crate) mod body;
mod client;
mod fill;
pub(crate) mod reply;
mod request;

pub(crate) use crate::upstream::Destination;
pub(crate) use answer::{relay_answer, shape, Extra, Shaped};
pub(crate) use ask::{
    ask, get_upstream, note_upstream, outgoing, outgoing_to, read_response, release, send, Answer,
    AskError, Rules,
};
pub(crate) use client::{head_limits, write_all, Client, SPARE_KEPT};
pub(crate) use fill::read_rest;
pub use reply::overload_response;
pub(crate) use request::Exchange;
