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
    /// eBPF TC program: each packet of one TCP connection is rewritten into the other and
    /// forwarded like a router would; the endpoints keep end-to-end TCP. Whole tunnels only.
    Ipsplice,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Copy => "copy",
            Engine::Pipe => "pipe",
            Engine::Sockmap => "sockmap",
            Engine::Ipsplice => "ipsplice",
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
            "ipsplice" => Ok(EngineChoice::Forced(Engine::Ipsplice)),
            o => Err(format!(
                "unknown engine {o:?} (expected auto, copy, pipe, sockmap or ipsplice)"
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
    /// Both directions of a tunnel at once (what `sockmap` and `ipsplice` can take over).
    pub tunnel: bool,
    /// The `ipsplice` program is loaded (root, at start-up): `auto` may pick it.
    pub ipsplice: bool,
}

/// Picks the engine for one splice.
/// - A forced `copy` is always `copy`; tiny bounded payloads go through `copy` whatever the
///   choice, because a pipe costs two extra system calls per chunk for no gain there.
/// - `sockmap` and `ipsplice` take whole tunnels only; anything bounded or one-way goes
///   through `pipe` (a bounded redirect cannot hand the rest of the stream back intact).
/// - `auto` picks `ipsplice` for a tunnel when its program is loaded (the relay then checks
///   the tunnel's own eligibility and may still fall back to `pipe`), else `pipe`. It never
///   picks `sockmap`: on this kernel it stalls under loss and costs more machine CPU per
///   GiB than `pipe` (docs/engines.md).
pub fn choose(choice: EngineChoice, needs: Needs, small_threshold: u64) -> Engine {
    let small = needs.remaining.is_some_and(|r| r < small_threshold);
    let whole_tunnel = needs.tunnel && needs.remaining.is_none();
    match choice {
        EngineChoice::Forced(Engine::Copy) => Engine::Copy,
        _ if small => Engine::Copy,
        EngineChoice::Forced(e @ (Engine::Sockmap | Engine::Ipsplice)) if whole_tunnel => e,
        EngineChoice::Auto if whole_tunnel && needs.ipsplice => Engine::Ipsplice,
        EngineChoice::Forced(Engine::Pipe | Engine::Sockmap | Engine::Ipsplice)
        | EngineChoice::Auto => Engine::Pipe,
    }
}

/// Why a forced engine was not the one chosen, for the outcome and the access log.
pub fn fallback_reason(choice: EngineChoice, chosen: Engine) -> Option<String> {
    match (choice, chosen) {
        (EngineChoice::Forced(e @ (Engine::Sockmap | Engine::Ipsplice)), Engine::Pipe) => {
            Some(format!("{e} moves whole tunnels only"))
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
            ..Needs::default()
        };
        let tiny = Needs {
            remaining: Some(100),
            ..Needs::default()
        };
        let open = Needs::default();
        let tunnel = Needs {
            tunnel: true,
            ..Needs::default()
        };
        let kernel_tunnel = Needs {
            ipsplice: true,
            ..tunnel
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
        let ipsplice = EngineChoice::Forced(Engine::Ipsplice);
        assert_eq!("ipsplice".parse(), Ok(ipsplice));
        assert_eq!(choose(ipsplice, tunnel, 4096), Engine::Ipsplice);
        assert_eq!(choose(ipsplice, big, 4096), Engine::Pipe);
        assert_eq!(choose(ipsplice, tiny, 4096), Engine::Copy);
        assert!(fallback_reason(ipsplice, Engine::Pipe).is_some());
        // auto: ipsplice for whole tunnels when loaded, never sockmap.
        assert_eq!(
            choose(EngineChoice::Auto, kernel_tunnel, 4096),
            Engine::Ipsplice
        );
        let bounded_kernel = Needs {
            remaining: Some(1 << 20),
            ..kernel_tunnel
        };
        assert_eq!(
            choose(EngineChoice::Auto, bounded_kernel, 4096),
            Engine::Pipe
        );
        assert!("fast".parse::<EngineChoice>().is_err());
    }
}
