//! The request method as a type (RFC 9110 §9). Method names are case-sensitive (§9.1): `get`
//! is not `GET` but some other method, kept as it was written.

use std::fmt;

/// A request method: the ones RFC 9110 defines, `PATCH` (RFC 5789), `PURGE` (the caches'
/// invalidation, as Squid and Varnish take it), and any other token as it was written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Connect,
    Options,
    Trace,
    Patch,
    Purge,
    /// Any other spelling, `get` included.
    Other(String),
}

impl Method {
    /// The method named `s`, exactly as written.
    pub fn parse(s: &str) -> Method {
        match s {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "CONNECT" => Method::Connect,
            "OPTIONS" => Method::Options,
            "TRACE" => Method::Trace,
            "PATCH" => Method::Patch,
            "PURGE" => Method::Purge,
            other => Method::Other(other.to_string()),
        }
    }

    /// The name as it goes on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Connect => "CONNECT",
            Method::Options => "OPTIONS",
            Method::Trace => "TRACE",
            Method::Patch => "PATCH",
            Method::Purge => "PURGE",
            Method::Other(s) => s,
        }
    }

    /// A safe method (RFC 9110 §9.2.1): read-only by definition.
    pub fn is_safe(&self) -> bool {
        matches!(
            self,
            Method::Get | Method::Head | Method::Options | Method::Trace
        )
    }

    /// An idempotent method (RFC 9110 §9.2.2): sending it twice means what sending it once
    /// does, so a proxy may send it again after a connection failed.
    pub fn is_idempotent(&self) -> bool {
        self.is_safe() || matches!(self, Method::Put | Method::Delete)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for Method {
    fn from(s: &str) -> Method {
        Method::parse(s)
    }
}
