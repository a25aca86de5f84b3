//! The error at the proxy boundary (Pingora's model): which side failed, what kind of
//! failure it was, whether the request may be sent again, and the cause. Every failure the
//! front ends log is one; the access log's `end` field is derived from it (`side:kind`).

use std::sync::Arc;

use splicer_relay::End;

/// Which side a failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Upstream,
    Internal,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Upstream => "upstream",
            Side::Internal => "internal",
        }
    }
}

/// A failure of one exchange. Displayed as the access log's `end`; what caused it (a
/// parser's error, an I/O error), when something did, is its `source()`.
#[derive(Debug, Clone)]
pub struct Error {
    pub side: Side,
    pub kind: Kind,
    /// Whether sending the request again (on another connection) is safe: nothing of it was
    /// consumed from the client or acted upon by the upstream.
    pub retry_safe: bool,
    /// The cause, shared: an error is cloned into the access record and the response.
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

/// Two errors are the same failure when side, kind and retry safety agree; the cause is
/// not compared (it is an explanation, not a different failure).
impl PartialEq for Error {
    fn eq(&self, other: &Error) -> bool {
        (self.side, &self.kind, self.retry_safe) == (other.side, &other.kind, other.retry_safe)
    }
}

impl Eq for Error {}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.end())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A message that cannot be framed or parsed; the cause says how.
    Malformed(String),
    /// A head or handshake beyond the limit (`header`, `handshake`).
    TooLarge(&'static str),
    /// A phase that took longer than its limit (`header`, `handshake`, `response`).
    Timeout(&'static str),
    /// The side closed before a phase ended (`head`, `handshake`; empty: at some point).
    Closed(&'static str),
    /// Refused by a rule or a limit (`connect-port-denied`, `auth-failed`, …).
    Refused(&'static str),
    /// The upstream could not be reached (`refused`, `connect-timeout`, …).
    Connect(&'static str),
    /// The upstream closed or reset before sending any byte of a response.
    NoResponse,
    /// The connection was cut by the proxy itself (`shutdown-grace`, `dropped`).
    Cut(&'static str),
    /// The sender closed before the message ended.
    Truncated,
    /// Nothing moved for the idle timeout.
    Idle,
    /// Reading from this side failed.
    Read(std::io::ErrorKind),
    /// Writing to this side failed.
    Write(std::io::ErrorKind),
    /// The other direction failed, so this one was stopped.
    Aborted,
}

impl Error {
    pub fn new(side: Side, kind: Kind) -> Error {
        Error {
            side,
            kind,
            retry_safe: false,
            source: None,
        }
    }

    pub fn client(kind: Kind) -> Error {
        Error::new(Side::Client, kind)
    }

    pub fn upstream(kind: Kind) -> Error {
        Error::new(Side::Upstream, kind)
    }

    /// Marks the request as safe to send again (nothing of it was consumed or acted upon).
    pub fn retry_safe(mut self) -> Error {
        self.retry_safe = true;
        self
    }

    /// A message from `side` that cannot be framed, for a reason Splicer names itself.
    pub fn malformed(side: Side, cause: impl std::fmt::Display) -> Error {
        Error::new(side, Kind::Malformed(cause.to_string()))
    }

    /// A message from `side` that a parser refused: malformed, with the parser's error as
    /// the cause.
    pub fn unparsable(side: Side, e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::malformed(side, &e).because(e)
    }

    /// Keeps `cause` as this error's source.
    pub fn because(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Error {
        self.source = Some(Arc::new(cause));
        self
    }

    /// How a transfer from `src` to `dst` ended short of its goal, as an error.
    pub fn from_end(end: End, src: Side, dst: Side) -> Error {
        match end {
            End::Destination(k) => Error::new(dst, Kind::Write(k)),
            End::Source(k) => Error::new(src, Kind::Read(k)),
            End::Eof | End::Max => Error::new(src, Kind::Truncated),
            End::Idle => Error::new(src, Kind::Idle),
            End::Aborted => Error::new(src, Kind::Aborted),
            End::Cut => Error::new(Side::Internal, Kind::Cut("shutdown-grace")),
        }
    }

    /// The access log's `end` value.
    pub fn end(&self) -> String {
        let kind = match &self.kind {
            Kind::Malformed(cause) => cause.clone(),
            Kind::TooLarge(what) => format!("{what}-too-large"),
            Kind::Timeout(what) => format!("{what}-timeout"),
            Kind::Closed("") => "closed".into(),
            Kind::Closed(during) => format!("closed-in-{during}"),
            Kind::Refused(what) | Kind::Connect(what) | Kind::Cut(what) => (*what).into(),
            Kind::NoResponse => "no-response".into(),
            Kind::Truncated => "truncated-body".into(),
            Kind::Idle => "idle".into(),
            Kind::Read(k) => format!("source-error:{k}"),
            Kind::Write(k) => format!("destination-error:{k}"),
            Kind::Aborted => "aborted".into(),
        };
        format!("{}:{kind}", self.side.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parsers_error_is_kept_as_the_cause() {
        use std::error::Error as _;
        let cause = splicer_wire::http::Error::Version;
        let e = Error::unparsable(Side::Client, cause.clone());
        assert_eq!(e.end(), format!("client:{cause}"));
        let source = e.source().expect("the parser's error");
        assert_eq!(
            source.downcast_ref::<splicer_wire::http::Error>(),
            Some(&cause)
        );
        assert!(Error::malformed(Side::Client, "bad-host")
            .source()
            .is_none());
        // The cause explains; it does not make another failure.
        assert_eq!(e, Error::malformed(Side::Client, &cause));
    }

    #[test]
    fn ends_name_the_side_at_fault() {
        let (c, u) = (Side::Client, Side::Upstream);
        assert_eq!(
            Error::from_end(End::Eof, u, c).end(),
            "upstream:truncated-body"
        );
        assert_eq!(Error::from_end(End::Idle, u, c).end(), "upstream:idle");
        assert_eq!(
            Error::from_end(End::Destination(std::io::ErrorKind::BrokenPipe), u, c).end(),
            "client:destination-error:broken pipe"
        );
        assert_eq!(
            Error::malformed(c, "bad-chunk: bad chunk size line").to_string(),
            "client:bad-chunk: bad chunk size line"
        );
        assert!(!Error::new(u, Kind::Truncated).retry_safe);
        assert!(Error::upstream(Kind::NoResponse).retry_safe().retry_safe);
        // The names the access log has always used.
        assert_eq!(
            Error::client(Kind::Timeout("header")).end(),
            "client:header-timeout"
        );
        assert_eq!(
            Error::client(Kind::TooLarge("handshake")).end(),
            "client:handshake-too-large"
        );
        assert_eq!(
            Error::client(Kind::Closed("head")).end(),
            "client:closed-in-head"
        );
        assert_eq!(Error::client(Kind::Closed("")).end(), "client:closed");
        assert_eq!(
            Error::upstream(Kind::NoResponse).end(),
            "upstream:no-response"
        );
        assert_eq!(
            Error::upstream(Kind::Connect("connect-timeout")).end(),
            "upstream:connect-timeout"
        );
        assert_eq!(
            Error::new(Side::Internal, Kind::Cut("shutdown-grace")).end(),
            "internal:shutdown-grace"
        );
    }
}
