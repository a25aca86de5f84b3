//! Engines and the rule that picks one per splice.

use std::fmt;
use std::str::FromStr;

/// How a splice moves bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Engine {
    /// `read`/`write` through a pooled user-space buffer.
    Copy,
    /// `splice(2)` socket → pipe → socket; the bytes never enter user space.
    Pipe,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Copy => "copy",
            Engine::Pipe => "pipe",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The configured engine: one forced engine, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineChoice {
    #[default]
    Auto,
    Forced(Engine),
}

impl FromStr for EngineChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(EngineChoice::Auto),
            "copy" => Ok(EngineChoice::Forced(Engine::Copy)),
            "pipe" => Ok(EngineChoice::Forced(Engine::Pipe)),
            "sockmap" | "ipsplice" => {
                Err(format!("engine {s:?} is not available in this build yet"))
            }
            o => Err(format!(
                "unknown engine {o:?} (expected auto, copy or pipe)"
            )),
        }
    }
}

impl fmt::Display for EngineChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineChoice::Auto => f.write_str("auto"),
            EngineChoice::Forced(e) => e.fmt(f),
        }
    }
}

/// What a splice needs from its engine. Later needs (a tap, pacing, end-to-end semantics)
/// become fields here and rules in [`choose`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Needs {
    /// Bytes left to move when the splice is bounded.
    pub remaining: Option<u64>,
}

/// Picks the engine for one splice. A forced `pipe` still hands tiny bounded payloads to
/// `copy`, because a pipe costs two extra system calls per chunk for no gain there.
pub fn choose(choice: EngineChoice, needs: Needs, small_threshold: u64) -> Engine {
    let small = needs.remaining.is_some_and(|r| r < small_threshold);
    match choice {
        EngineChoice::Forced(Engine::Copy) => Engine::Copy,
        _ if small => Engine::Copy,
        EngineChoice::Forced(Engine::Pipe) | EngineChoice::Auto => Engine::Pipe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection() {
        let big = Needs {
            remaining: Some(1 << 20),
        };
        let tiny = Needs {
            remaining: Some(100),
        };
        let open = Needs::default();
        assert_eq!(choose(EngineChoice::Auto, big, 4096), Engine::Pipe);
        assert_eq!(choose(EngineChoice::Auto, tiny, 4096), Engine::Copy);
        assert_eq!(choose(EngineChoice::Auto, open, 4096), Engine::Pipe);
        assert_eq!(
            choose(EngineChoice::Forced(Engine::Copy), big, 4096),
            Engine::Copy
        );
        assert_eq!(
            choose(EngineChoice::Forced(Engine::Pipe), tiny, 4096),
            Engine::Copy
        );
        assert_eq!("pipe".parse(), Ok(EngineChoice::Forced(Engine::Pipe)));
        assert!("ipsplice"
            .parse::<EngineChoice>()
            .unwrap_err()
            .contains("not available"));
        assert!("fast".parse::<EngineChoice>().is_err());
    }
}
