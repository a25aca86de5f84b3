//! The access log: one line per SOCKS connection or HTTP request, under the `tracing`
//! target `access`, so it can be routed or filtered apart from diagnostics.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use splicer_relay::{End, Front, Outcome, TunnelOutcome};

use crate::error::{Error, Kind, Side};

/// Set once the shutdown grace is over and the connections still open are being cut, so a
/// record dropped unwritten says why.
static CUTTING: AtomicBool = AtomicBool::new(false);

/// Marks the connections still open as cut by the end of the shutdown grace: their records,
/// dropped with their tasks, are written with `end = "internal:shutdown-grace"`.
pub fn cutting_at_shutdown() {
    CUTTING.store(true, Ordering::SeqCst);
}

/// Whether access lines are written (the `access` target enabled at INFO): fields that only
/// the line shows (the URL, `User-Agent`, `Referer`, `Content-Type`) are copied out of the
/// heads only then, not on every request of a proxy that writes no access log.
pub fn written() -> bool {
    tracing::enabled!(target: "access", tracing::Level::INFO)
}

/// Longest `User-Agent` written to the access log: a client chooses it, and one line
/// should not grow by a header's worth (32 KiB) for it.
pub const USER_AGENT_MAX: usize = 256;

/// A header's value as the access log writes it: lossy UTF-8, cut at `max` bytes (at a
/// character's boundary).
pub fn field_value(v: &[u8], max: usize) -> String {
    let s = String::from_utf8_lossy(v);
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// One access-log record, filled in as the exchange goes. Every record is written exactly
/// once: by [`Record::emit`], or when it is dropped unwritten (its task was cut short), with
/// how it ended.
#[derive(Debug)]
pub struct Record {
    pub front: Front,
    pub client: SocketAddr,
    pub user: Option<String>,
    pub method: String,
    pub destination: String,
    /// An HTTP request's target as the client sent it (absolute-form to the forward proxy,
    /// origin-form to the edge).
    pub url: Option<String>,
    /// An HTTP request's `User-Agent`, cut to [`USER_AGENT_MAX`] bytes.
    pub user_agent: Option<String>,
    /// An HTTP request's version (`HTTP/1.0`, `HTTP/1.1`).
    pub version: Option<&'static str>,
    /// An HTTP request's `Referer`, cut to [`USER_AGENT_MAX`] bytes.
    pub referer: Option<String>,
    /// The `Content-Type` of the response the client got.
    pub content_type: Option<String>,
    /// SOCKS reply code or HTTP status.
    pub status: u16,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub engine: Option<&'static str>,
    /// Why the configured engine was not used, when it was not (the first reason seen).
    pub fallback: Option<String>,
    /// What the cache did (`hit`, `miss`, `refresh`, `bypass`, …; docs/cache.md).
    pub cache: Option<&'static str>,
    /// The `edge` front end's upstream connection: whether it came from the pool, and this
    /// side's congestion window on it (`TCP_INFO`) as the request was sent.
    pub upstream_conn: Option<(bool, u32)>,
    /// How it ended: `ok`, `eof`, `idle`, … or the failure and its side (an [`Error`]).
    /// Most ends are fixed words: no allocation per exchange for them.
    end: Cow<'static, str>,
    /// The side that failed, and the rule or limit when it was a refusal (for the metrics;
    /// `end` says the same in words).
    failure: Option<(&'static str, Option<&'static str>)>,
    pub start: Instant,
    /// From `start` to the request head read (HTTP).
    pub head_read: Option<Duration>,
    /// From `start` to the upstream's response head (requests that went upstream).
    pub first_byte: Option<Duration>,
    emitted: AtomicBool,
}

impl Record {
    pub fn new(front: Front, client: SocketAddr) -> Record {
        Record::starting(front, client, Instant::now())
    }

    /// A record whose duration counts from `start` (when the request's first byte came).
    pub fn starting(front: Front, client: SocketAddr, start: Instant) -> Record {
        Record {
            front,
            client,
            user: None,
            method: String::new(),
            destination: String::new(),
            url: None,
            user_agent: None,
            version: None,
            referer: None,
            content_type: None,
            status: 0,
            bytes_up: 0,
            bytes_down: 0,
            engine: None,
            fallback: None,
            cache: None,
            upstream_conn: None,
            end: Cow::Borrowed(""),
            failure: None,
            start,
            head_read: None,
            first_byte: None,
            emitted: AtomicBool::new(false),
        }
    }

    /// The response's `Content-Type` field, as the client got it.
    pub fn set_content_type(&mut self, value: Option<&[u8]>) {
        if !written() {
            return;
        }
        self.content_type = value.map(|v| field_value(v, USER_AGENT_MAX));
    }

    /// Records a failure: `end` becomes `side:kind`.
    pub fn fail(&mut self, e: &Error) {
        self.end = Cow::Owned(e.end());
        let refused = match e.kind {
            Kind::Refused(why) => Some(why),
            _ => None,
        };
        self.failure = Some((e.side.name(), refused));
    }

    /// The side that failed and, for a refusal, its reason; `None` when nothing failed.
    pub fn failure(&self) -> Option<(&'static str, Option<&'static str>)> {
        self.failure
    }

    /// Records how an exchange that did not fail ended (`ok`, a tunnel's `eof`, `idle`, …).
    pub fn finish(&mut self, end: impl Into<Cow<'static, str>>) {
        self.end = end.into();
        self.failure = None;
    }

    /// Whether an end was recorded.
    pub fn has_end(&self) -> bool {
        !self.end.is_empty()
    }

    /// Adds a splice's figures; the engine of the largest splice is the one reported.
    pub fn add_splice(&mut self, up: bool, o: &Outcome) {
        if up {
            self.bytes_up += o.bytes;
        } else {
            self.bytes_down += o.bytes;
        }
        if self.engine.is_none() || o.bytes > 0 {
            self.engine = Some(o.engine.name());
        }
        if self.fallback.is_none() {
            self.fallback.clone_from(&o.fallback);
        }
    }

    /// Adds a tunnel's figures and how it ended (a tunnel cut by the relay at the end of
    /// the shutdown grace is `internal:shutdown-grace`, with what it moved).
    pub fn add_tunnel(&mut self, out: &TunnelOutcome) {
        self.add_splice(true, &out.up);
        self.add_splice(false, &out.down);
        match out.end() {
            End::Cut => self.fail(&Error::from_end(End::Cut, Side::Internal, Side::Internal)),
            end => self.finish(end.name()),
        }
    }

    /// Bytes written by the front end itself (framing written anew), not by a splice.
    pub fn add_bytes(&mut self, up: bool, n: u64) {
        if up {
            self.bytes_up += n;
        } else {
            self.bytes_down += n;
        }
    }

    /// Writes the access line (once; later calls do nothing).
    /// Drops the record unwritten: its request is served elsewhere, which writes its own
    /// (a ring hands a connection to the runtimes, `crate::ring`).
    pub fn forget(self) {
        self.emitted.store(true, Ordering::SeqCst);
    }

    pub fn emit(&self) {
        if self.emitted.swap(true, Ordering::SeqCst) {
            return;
        }
        let took = self.start.elapsed();
        crate::metrics::events().record(self, took);
        tracing::info!(
            target: "access",
            front = self.front.name(),
            client = %self.client,
            user = self.user.as_deref().unwrap_or("-"),
            method = %self.method,
            destination = %self.destination,
            url = self.url.as_deref().unwrap_or("-"),
            user_agent = self.user_agent.as_deref().unwrap_or("-"),
            version = self.version.unwrap_or("-"),
            referer = self.referer.as_deref().unwrap_or("-"),
            status = self.status,
            bytes_up = self.bytes_up,
            bytes_down = self.bytes_down,
            duration_ms = took.as_millis() as u64,
            engine = self.engine.unwrap_or("-"),
            fallback = self.fallback.as_deref().unwrap_or("-"),
            cache = self.cache.unwrap_or("-"),
            content_type = self.content_type.as_deref().unwrap_or("-"),
            up_reused = self.upstream_conn.map_or("-", |(r, _)| if r { "yes" } else { "no" }),
            up_cwnd = %self.upstream_conn.map_or("-".into(), |(_, w)| w.to_string()),
            end = %self.end,
        );
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if self.emitted.load(Ordering::SeqCst) {
            return;
        }
        if CUTTING.load(Ordering::SeqCst) {
            self.fail(&Error::new(Side::Internal, Kind::Cut("shutdown-grace")));
        } else if self.end.is_empty() {
            self.fail(&Error::new(Side::Internal, Kind::Cut("dropped")));
        }
        self.emit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_cut_at_a_character() {
        assert_eq!(field_value(b"curl/8.5", USER_AGENT_MAX), "curl/8.5");
        let long = "\u{e9}".repeat(200); // 400 bytes, 2 a character
        let cut = field_value(long.as_bytes(), 255);
        assert_eq!(cut.len(), 254);
        assert!(cut.chars().all(|c| c == '\u{e9}'));
        assert_eq!(field_value(b"a\xffb", 10), "a\u{fffd}b");
    }
}
