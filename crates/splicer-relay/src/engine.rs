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

/// Why a kernel engine left a tunnel to another engine, and what it had done by then: the
/// caller runs the next engine (and logs the reason) for the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Declined {
    /// The engine's name first (`sockmap: …`, `ipsplice: …`), for the access log.
    pub reason: String,
    /// How much of the client prefix was already written upstream.
    pub prefix_sent: usize,
    /// Bytes already moved each way (up, down), the prefix included.
    pub moved: (u64, u64),
    /// Whether the reply owed to the client was written.
    pub reply_sent: bool,
}

impl Declined {
    /// Declined before doing anything (by the kernel engines only).
    #[cfg_attr(
        not(feature = "bpf"),
        expect(dead_code, reason = "no kernel engine built")
    )]
    pub(crate) fn at_once(engine: Engine, reason: impl std::fmt::Display) -> Declined {
        Declined {
            reason: format!("{engine}: {reason}"),
            prefix_sent: 0,
            moved: (0, 0),
            reply_sent: false,
        }
    }
}

/// The configured engine: one forced engine, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineChoice {
    #[default]
    Auto,
    Forced(Engine),
}

/// An engine name that is none of the engines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown engine {0:?} (expected auto, copy, pipe, sockmap or ipsplice)")]
pub struct UnknownEngine(pub String);

impl FromStr for EngineChoice {
    type Err = UnknownEngine;
    fn from_str(s: &str) -> Result<Self, UnknownEngine> {
        match s {
            "auto" => Ok(EngineChoice::Auto),
            "copy" => Ok(EngineChoice::Forced(Engine::Copy)),
            "pipe" => Ok(EngineChoice::Forced(Engine::Pipe)),
            "sockmap" => Ok(EngineChoice::Forced(Engine::Sockmap)),
            "ipsplice" => Ok(EngineChoice::Forced(Engine::Ipsplice)),
            o => Err(UnknownEngine(o.to_string())),
        }
    }
}

/// Reads an engine choice from its name in a configuration (`"auto"`, `"pipe"`, ...).
pub(crate) fn from_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<EngineChoice, D::Error> {
    let name = <String as serde::Deserialize>::deserialize(d)?;
    name.parse().map_err(serde::de::Error::custom)
}

impl fmt::Display for EngineChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineChoice::Auto => f.write_str("auto"),
            EngineChoice::Forced(e) => e.fmt(f),
        }
    }
}

/// What an engine can do beyond moving a whole tunnel (HAProxy's capability flags are the
/// model): a set of the `Caps::*` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Caps(u8);

impl Caps {
    /// Stop after exactly `max` bytes and leave the rest in the source socket.
    pub const BOUND: Caps = Caps(1);
    /// Move one direction alone (a message body), not only both at once.
    pub const ONE_WAY: Caps = Caps(2);
    /// Hand a copy of the bytes to someone else while they flow (the cache's fill).
    pub const TAP: Caps = Caps(4);
    /// Leave whatever follows a bound unread in the source (the next request, the next
    /// answer of a pipelined line). `sockmap` cannot: past the bound, the kernel has taken
    /// the bytes off the socket's queue, and drops them when the socket leaves its map.
    pub const KEEP_TRAILING: Caps = Caps(8);

    pub const fn none() -> Caps {
        Caps(0)
    }
    pub const fn with(self, other: Caps) -> Caps {
        Caps(self.0 | other.0)
    }
    pub fn contains(self, other: Caps) -> bool {
        self.0 & other.0 == other.0
    }
    /// The flags of `wanted` this set lacks.
    pub fn missing(self, wanted: Caps) -> Caps {
        Caps(wanted.0 & !self.0)
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl Engine {
    /// What the engine can do. The user-space engines can do everything; `sockmap` takes
    /// one-way splices too, bounded only where nothing is expected after the bound (an
    /// answer's body: docs/engines.md); `ipsplice` takes whole tunnels only. (Pacing and
    /// end-to-end TCP come with the pacer, which is what will ask for them.)
    pub fn caps(self) -> Caps {
        match self {
            Engine::Copy | Engine::Pipe => Caps::BOUND
                .with(Caps::ONE_WAY)
                .with(Caps::TAP)
                .with(Caps::KEEP_TRAILING),
            Engine::Sockmap => Caps::BOUND.with(Caps::ONE_WAY),
            Engine::Ipsplice => Caps::none(),
        }
    }
}

/// An engine that runs in the proxy's own threads: what a one-way splice runs with, and a
/// tunnel no kernel engine took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UserSpace {
    Copy,
    Pipe,
}

impl UserSpace {
    pub(crate) fn engine(self) -> Engine {
        match self {
            UserSpace::Copy => Engine::Copy,
            UserSpace::Pipe => Engine::Pipe,
        }
    }

    /// The one that runs in place of `e`: itself, or `pipe` for a kernel engine (what the
    /// kernel engines cannot do, or declined, `pipe` does).
    pub(crate) fn standing_for(e: Engine) -> UserSpace {
        match e {
            Engine::Copy => UserSpace::Copy,
            Engine::Pipe | Engine::Sockmap | Engine::Ipsplice => UserSpace::Pipe,
        }
    }
}

/// A user-space engine chosen for a splice, once, and why it is not the configured engine
/// when it is not (for the outcome and the access log).
#[derive(Debug, Clone)]
pub(crate) struct Chosen {
    pub engine: UserSpace,
    pub fallback: Option<String>,
}

/// What one splice needs from its engine; [`choose`] matches it against [`Engine::caps`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// Bytes left to move when the splice is bounded.
    pub remaining: Option<u64>,
    /// Both directions of a tunnel at once (what `sockmap` and `ipsplice` can take over).
    pub tunnel: bool,
    /// A tap on the bytes (a cache fill).
    pub tap: bool,
    /// What follows the bound must stay unread in the source (`Trailing::Kept`).
    pub keep_trailing: bool,
}

impl Needs {
    /// A whole tunnel, unbounded, nothing more.
    pub const TUNNEL: Needs = Needs {
        remaining: None,
        tunnel: true,
        tap: false,
        keep_trailing: false,
    };

    /// The capabilities an engine must have for these needs.
    pub fn caps(&self) -> Caps {
        let mut c = Caps::none();
        if self.remaining.is_some() {
            c = c.with(Caps::BOUND);
        }
        if !self.tunnel {
            c = c.with(Caps::ONE_WAY);
        }
        if self.tap {
            c = c.with(Caps::TAP);
        }
        if self.keep_trailing {
            c = c.with(Caps::KEEP_TRAILING);
        }
        c
    }
}

/// Picks the engine for one splice: the first engine, in order of preference, whose
/// capabilities cover the needs.
/// - A forced `copy` is always `copy`; tiny bounded payloads go through `copy` whatever the
///   choice, because a pipe costs two extra system calls per chunk for no gain there.
/// - A forced engine runs when it can; otherwise `pipe` (then `copy`) takes over, and
///   [`fallback_reason`] says why.
/// - `auto` prefers `ipsplice` when its program is loaded (`ipsplice_loaded`: the relay
///   then checks the tunnel's own eligibility and may still fall back to `pipe`), then
///   `pipe`, then `copy`. It never picks `sockmap`: on this kernel it stalls under loss
///   and costs more machine CPU per GiB than `pipe` (docs/engines.md).
pub fn choose(
    choice: EngineChoice,
    needs: Needs,
    ipsplice_loaded: bool,
    small_threshold: u64,
) -> Engine {
    let wanted = needs.caps();
    let small = needs.remaining.is_some_and(|r| r < small_threshold);
    let can = |e: Engine| e.caps().contains(wanted);
    // What no engine here can do gets the best of the proxy's own: `pipe`.
    let preferred = |order: &[Engine]| {
        order
            .iter()
            .copied()
            .find(|&e| can(e))
            .unwrap_or(Engine::Pipe)
    };
    match choice {
        EngineChoice::Forced(Engine::Copy) => Engine::Copy,
        _ if small => Engine::Copy,
        EngineChoice::Forced(e) if can(e) => e,
        EngineChoice::Forced(_) => Engine::Pipe,
        EngineChoice::Auto if ipsplice_loaded => preferred(&[Engine::Ipsplice, Engine::Pipe]),
        EngineChoice::Auto => preferred(&[Engine::Pipe]),
    }
}

/// Why a forced engine was not the one chosen, for the outcome and the access log (`None`
/// when it was, or when only the size of the splice made it `copy`).
pub fn fallback_reason(choice: EngineChoice, needs: Needs, chosen: Engine) -> Option<String> {
    let EngineChoice::Forced(e) = choice else {
        return None;
    };
    let missing = e.caps().missing(needs.caps());
    if e == chosen || missing.is_empty() {
        return None;
    }
    Some(
        if missing.contains(Caps::BOUND) || missing.contains(Caps::ONE_WAY) {
            format!("{e} moves whole tunnels only")
        } else if missing.contains(Caps::TAP) {
            format!("{e} cannot tap the bytes it moves")
        } else {
            format!("{e} cannot leave what follows a bounded body unread")
        },
    )
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
        let kernel_tunnel = tunnel;
        let sockmap = EngineChoice::Forced(Engine::Sockmap);
        assert_eq!(choose(sockmap, tunnel, false, 4096), Engine::Sockmap);
        // sockmap takes a one-way splice, and a bounded one only when what follows the
        // bound is not the caller's.
        assert_eq!(choose(sockmap, open, false, 4096), Engine::Sockmap);
        assert_eq!(choose(sockmap, big, false, 4096), Engine::Sockmap);
        let kept = Needs {
            keep_trailing: true,
            ..big
        };
        assert_eq!(choose(sockmap, kept, false, 4096), Engine::Pipe);
        assert_eq!(
            fallback_reason(sockmap, kept, Engine::Pipe).as_deref(),
            Some("sockmap cannot leave what follows a bounded body unread")
        );
        assert_eq!(choose(EngineChoice::Auto, big, false, 4096), Engine::Pipe);
        assert_eq!(
            choose(EngineChoice::Auto, tunnel, false, 4096),
            Engine::Pipe
        );
        assert_eq!("sockmap".parse(), Ok(sockmap));
        assert_eq!(choose(EngineChoice::Auto, big, false, 4096), Engine::Pipe);
        assert_eq!(choose(EngineChoice::Auto, tiny, false, 4096), Engine::Copy);
        assert_eq!(choose(EngineChoice::Auto, open, false, 4096), Engine::Pipe);
        assert_eq!(
            choose(EngineChoice::Forced(Engine::Copy), big, false, 4096),
            Engine::Copy
        );
        assert_eq!(
            choose(EngineChoice::Forced(Engine::Pipe), tiny, false, 4096),
            Engine::Copy
        );
        assert_eq!("pipe".parse(), Ok(EngineChoice::Forced(Engine::Pipe)));
        let ipsplice = EngineChoice::Forced(Engine::Ipsplice);
        assert_eq!("ipsplice".parse(), Ok(ipsplice));
        assert_eq!(choose(ipsplice, tunnel, false, 4096), Engine::Ipsplice);
        assert_eq!(choose(ipsplice, big, false, 4096), Engine::Pipe);
        assert_eq!(choose(ipsplice, tiny, false, 4096), Engine::Copy);
        assert!(fallback_reason(ipsplice, big, Engine::Pipe).is_some());
        // auto: ipsplice for whole tunnels when loaded, never sockmap.
        assert_eq!(
            choose(EngineChoice::Auto, kernel_tunnel, true, 4096),
            Engine::Ipsplice
        );
        let bounded_kernel = Needs {
            remaining: Some(1 << 20),
            ..kernel_tunnel
        };
        assert_eq!(
            choose(EngineChoice::Auto, bounded_kernel, true, 4096),
            Engine::Pipe
        );
        assert!("fast".parse::<EngineChoice>().is_err());
    }

    #[test]
    fn capabilities_decide() {
        let tap = Needs {
            tap: true,
            ..Needs::default()
        };
        let ipsplice = EngineChoice::Forced(Engine::Ipsplice);
        let sockmap = EngineChoice::Forced(Engine::Sockmap);
        // A tapped splice cannot go to the kernel: the proxy must see the bytes.
        assert_eq!(choose(ipsplice, tap, true, 4096), Engine::Pipe);
        assert_eq!(choose(EngineChoice::Auto, tap, true, 4096), Engine::Pipe);
        assert_eq!(
            fallback_reason(ipsplice, tap, Engine::Pipe).as_deref(),
            Some("ipsplice moves whole tunnels only")
        );
        let tapped_tunnel = Needs {
            tap: true,
            ..Needs::TUNNEL
        };
        assert_eq!(
            fallback_reason(sockmap, tapped_tunnel, Engine::Pipe).as_deref(),
            Some("sockmap cannot tap the bytes it moves")
        );
        // No reason when the forced engine ran, or only the size made it copy.
        assert_eq!(
            fallback_reason(sockmap, Needs::TUNNEL, Engine::Sockmap),
            None
        );
        assert_eq!(fallback_reason(EngineChoice::Auto, tap, Engine::Pipe), None);
        // The sets themselves.
        assert!(Engine::Pipe.caps().contains(Caps::TAP.with(Caps::BOUND)));
        assert!(Engine::Sockmap.caps().contains(Caps::ONE_WAY));
        assert!(!Engine::Ipsplice.caps().contains(Caps::ONE_WAY));
        assert_eq!(
            Engine::Ipsplice.caps().missing(tapped_tunnel.caps()),
            Caps::TAP
        );
        assert!(Needs::TUNNEL.caps().is_empty());
        // What runs in place of each engine in the proxy's threads.
        assert_eq!(UserSpace::standing_for(Engine::Copy), UserSpace::Copy);
        assert_eq!(UserSpace::standing_for(Engine::Sockmap), UserSpace::Pipe);
    }
}
