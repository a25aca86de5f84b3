//! Objects for the unit tests.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use splicer_wire::http::Headers;

use crate::object::{Body, Object};
use crate::policy::{Ask, Policy};

/// A `200` to a `GET` with `request`'s fields, with `fields` and `body`, received now.
pub fn object(fields: &[(&str, &str)], request: &Headers, body: &[u8]) -> Arc<Object> {
    let mut headers = Headers::default();
    for (n, v) in fields {
        headers.push(n, *v);
    }
    let ask = Ask {
        method: "GET",
        headers: request,
        host: "h:80",
    };
    Arc::new(Object {
        status: 200,
        reason: "OK".into(),
        policy: Policy::new(ask, 200, &headers, SystemTime::now(), 0.1),
        headers,
        body: Body::Memory(Bytes::copy_from_slice(body)),
        hit_head: Default::default(),
    })
}
