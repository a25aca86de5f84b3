//! Which engine moves a case's bytes when the proxy runs with a given engine, in the tests'
//! setting: client, proxy and origin on this host's loopback. An engine that cannot take a
//! case declines it, and the relay moves it with `pipe` and says why in the access log's
//! `fallback`; the tests assert that instead of skipping the case.

/// What the relay moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// A whole tunnel (SOCKS, CONNECT): both directions until both ends close.
    Tunnel,
    /// A bounded HTTP answer body after a head the proxy read, on an upstream connection
    /// of its own (nothing follows it there).
    Body,
    /// A bounded body after which the source carries more that is not this exchange's: a
    /// request body (the client's next request may follow), or an answer on a pipelined
    /// line.
    LineBody,
    /// An HTTP answer after which neither connection carries anything (an HTTP/1.0 client,
    /// a close-delimited body): a forced kernel engine takes it whole, as a tunnel.
    ToTheEnd,
}

/// The engine an access log line names for a case, and a piece of the reason it gives when
/// the engine asked for declined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MovedBy {
    pub engine: &'static str,
    pub because: Option<&'static str>,
}

impl MovedBy {
    /// Panics unless the access log `line` says so.
    pub fn assert(&self, line: &str) {
        let named = format!("\"engine\":\"{}\"", self.engine);
        assert!(line.contains(&named), "expected {named}: {line}");
        if let Some(why) = self.because {
            assert!(line.contains(why), "expected the fallback {why:?}: {line}");
        }
    }
}

/// What moves `what` when the proxy was started with `engine` (as [`crate::per_engine!`]
/// names it), everything on loopback.
/// - `sockmap` moves tunnels and answer bodies; a body followed by bytes that must stay
///   unread goes through `pipe`. `ipsplice` moves whole tunnels only: a body goes through
///   `pipe`.
/// - `ipsplice` forwards packets between interfaces, and declines peers on its own host:
///   tunnels on loopback go through `pipe` too (a test that wants it to move them runs in
///   a [`crate::Net`] pair and asks [`crate::Net::moved_by`]).
/// - `auto` otherwise picks `pipe`.
pub fn moved_by(engine: &str, what: Moved) -> MovedBy {
    let by = |engine, because| MovedBy { engine, because };
    match (engine, what) {
        ("copy", _) => by("copy", None),
        ("pipe", _) | ("auto", _) => by("pipe", None),
        ("sockmap", Moved::Tunnel | Moved::ToTheEnd | Moved::Body) => by("sockmap", None),
        ("sockmap", Moved::LineBody) => by(
            "pipe",
            Some("sockmap cannot leave what follows a bounded body unread"),
        ),
        ("ipsplice", Moved::Tunnel | Moved::ToTheEnd) => by("pipe", Some("is on this host")),
        ("ipsplice", Moved::Body | Moved::LineBody) => {
            by("pipe", Some("ipsplice moves whole tunnels only"))
        }
        (other, _) => panic!("no engine {other:?}"),
    }
}
