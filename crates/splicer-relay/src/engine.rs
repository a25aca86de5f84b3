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
    /// eBPF SOCKHASH + `sk_skb` verdict redirect: the kernel moves every arriving byte to
    /// the other socket without waking the proxy. Whole tunnels only (no bound).
    Sockmap,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Copy => "copy",
            Engine::Pipe => "pipe",
            Engine::Sockmap => "sockmap",
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
            "sockmap" => Ok(EngineChoice::Forced(Engine::Sockmap)),
            "ipsplice" => Err(format!("engine {s:?} is not available in this build yet")),
            o => Err(format!(
                "unknown engine {o:?} (expected auto, copy, pipe or sockmap)"
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
    /// Both directions of a tunnel at once (what `sockmap` can take over).
    pub tunnel: bool,
}

/// Picks the engine for one splice. A forced `pipe` still hands tiny bounded payloads to
/// `copy`, because a pipe costs two extra system calls per chunk for no gain there. A forced
/// `sockmap` takes whole tunnels; anything bounded or one-way goes through `pipe` (a bounded
/// redirect cannot hand the rest of the stream back intact: kernel-notes). `auto` does not
/// pick `sockmap` yet: on this machine it costs more machine CPU per GiB than `pipe`
/// (kernel-notes); the lab's relay benchmark will decide.
pub fn choose(choice: EngineChoice, needs: Needs, small_threshold: u64) -> Engine {
    let small = needs.remaining.is_some_and(|r| r < small_threshold);
    match choice {
        EngineChoice::Forced(Engine::Copy) => Engine::Copy,
        _ if small => Engine::Copy,
        EngineChoice::Forced(Engine::Sockmap) if needs.tunnel && needs.remaining.is_none() => {
            Engine::Sockmap
        }
        EngineChoice::Forced(Engine::Pipe | Engine::Sockmap) | EngineChoice::Auto => Engine::Pipe,
    }
}

/// Why a forced engine was not the one chosen, for the outcome and the access log.
pub fn fallback_reason(choice: EngineChoice, chosen: Engine) -> Option<String> {
    match (choice, chosen) {
        (EngineChoice::Forced(Engine::Sockmap), Engine::Pipe) => {
            Some("sockmap moves whole tunnels only".into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection() {
        let big = Needs {
            remaining: Some(1 << 20),
            tunnel: false,
        };
        let tiny = Needs {
            remaining: Some(100),
            tunnel: false,
        };
        let open = Needs::default();
        let tunnel = Needs {
            remaining: None,
            tunnel: true,
        };
        let sockmap = EngineChoice::Forced(Engine::Sockmap);
        assert_eq!(choose(sockmap, tunnel, 4096), Engine::Sockmap);
        assert_eq!(choose(sockmap, open, 4096), Engine::Pipe);
        assert_eq!(choose(sockmap, big, 4096), Engine::Pipe);
        assert!(fallback_reason(sockmap, Engine::Pipe).is_some());
        assert_eq!(choose(EngineChoice::Auto, tunnel, 4096), Engine::Pipe);
        assert_eq!("sockmap".parse(), Ok(sockmap));
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
