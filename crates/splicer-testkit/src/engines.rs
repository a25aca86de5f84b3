//! Which engine moves a case's bytes when the proxy runs with a given engine, in the tests'
//! setting: client, proxy and origin on this host's loopback. An engine that cannot take a
//! case declines it, and the relay moves it with `pipe` and says why in the access log's
//! `fallback`; the tests assert that instead of skipping the case.

/// What the relay moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// A whole tunnel (SOCKS, CONNECT): both directions until both ends close.
    Tunnel,
    /// A bounded HTTP body after a head the proxy read.
    Body,
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
/// - `sockmap` and `ipsplice` move whole tunnels only: a body goes through `pipe`.
/// - `ipsplice` forwards packets between interfaces, and declines peers on its own host:
///   tunnels on loopback go through `pipe` too (a test that wants it to move them runs in
///   a [`crate::Net`] pair and asks [`crate::Net::moved_by`]).
/// - `auto` otherwise picks `pipe`.
pub fn moved_by(engine: &str, what: Moved) -> MovedBy {
    let by = |engine, because| MovedBy { engine, because };
    match (engine, what) {
        ("copy", _) => by("copy", None),
        ("pipe", _) | ("auto", _) => by("pipe", None),
        ("sockmap", Moved::Tunnel | Moved::ToTheEnd) => by("sockmap", None),
        ("sockmap", Moved::Body) => by("pipe", Some("sockmap moves whole tunnels only")),
        ("ipsplice", Moved::Tunnel | Moved::ToTheEnd) => by("pipe", Some("is on this host")),
        ("ipsplice", Moved::Body) => by("pipe", Some("ipsplice moves whole tunnels only")),
        (other, _) => panic!("no engine {other:?}"),
    }
}
