//! How a splice or a tunnel ended: what every engine reports and the front ends log. Kept
//! apart from the engines so that they and the splice and tunnel code depend on it, not on
//! one another.

use std::io;

use crate::Engine;

/// Why a splice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The source sent FIN.
    Eof,
    /// `max` bytes were moved.
    Max,
    /// Nothing moved for the idle timeout.
    Idle,
    /// Reading the source failed (e.g. it was reset).
    Source(io::ErrorKind),
    /// Writing the destination failed.
    Destination(io::ErrorKind),
    /// The other direction of the tunnel failed, so this one was stopped.
    Aborted,
    /// The relay was told to stop every transfer ([`crate::Relay::cut`]: the end of a
    /// shutdown grace); the outcome still says what moved.
    Cut,
}

impl End {
    /// Short name for logs (borrowed for the ends without an error, which every exchange
    /// has).
    pub fn name(&self) -> std::borrow::Cow<'static, str> {
        match self {
            End::Eof => "eof".into(),
            End::Max => "max".into(),
            End::Idle => "idle".into(),
            End::Source(k) => format!("source-error:{k}").into(),
            End::Destination(k) => format!("destination-error:{k}").into(),
            End::Aborted => "aborted".into(),
            End::Cut => "cut".into(),
        }
    }
    /// Whether the splice ended on an error on either side.
    pub fn is_error(&self) -> bool {
        matches!(self, End::Source(_) | End::Destination(_))
    }
}

/// The result of a splice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub engine: Engine,
    /// Why a better engine was not used, when the relay had to fall back.
    pub fallback: Option<String>,
    pub bytes: u64,
    pub end: End,
}

/// Both directions' outcomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelOutcome {
    /// Client → upstream.
    pub up: Outcome,
    /// Upstream → client.
    pub down: Outcome,
}

impl TunnelOutcome {
    /// How the tunnel ended, for the access log: cut, else the first error, else idle, else
    /// eof.
    pub fn end(&self) -> End {
        let ends = [self.up.end, self.down.end];
        if ends.contains(&End::Cut) {
            return End::Cut;
        }
        ends.into_iter()
            .find(End::is_error)
            .or_else(|| {
                [self.up.end, self.down.end]
                    .into_iter()
                    .find(|e| *e == End::Idle)
            })
            .unwrap_or(End::Eof)
    }
}
