//! The splice primitive and the tunnel, modelled on BSD `SO_SPLICE` (`struct splice { fd,
//! max, idle }`): a *splice* moves bytes one way from one socket to another until end of
//! file, a byte bound (`max`), an idle timeout or an error, and returns an [`Outcome`]; a
//! *tunnel* runs two splices, one each way, propagating half-closes and resets.
//!
//! How bytes move is the *engine* ([`Engine`]): `copy` and `pipe` in the proxy's threads,
//! `sockmap` and `ipsplice` in the kernel (whole tunnels only, for now). All engines sit
//! behind [`Relay::splice`] and [`Relay::tunnel`], so the front ends never know which one
//! ran; the engine is chosen once per splice or tunnel ([`engine::choose`]) and the choice,
//! with the reason for a fallback, is in every outcome.
//!
//! Memory: buffers and pipes are taken from bounded pools only while bytes flow (after the
//! source became readable) and are given back as soon as the source is drained, so an idle
//! tunnel holds no buffer and no pipe.
//!
//! # Layout
//! - [`engine`]: the engines, the configured choice, and the selection rule (once per
//!   splice or tunnel: `choose`, `Chosen`).
//! - [`counters`]: tunnels, splices, bytes and declines per engine.
//! - [`pool`]: bounded pools of user-space buffers and of pipes.
//! - `copy`, `pipe`: the two engines' transfer loops.
//! - `kernel`: the kernel engines' eBPF programs (`splicer-bpf`), loaded on first use, and
//!   why one is [`Unavailable`]; with the `bpf` feature (default) only.
//! - `sockmap`: a whole tunnel handed to the kernel's socket layer (eBPF, `splicer-bpf`).
//! - `ipsplice`: a whole tunnel handed to the kernel's packet path (eBPF TC program), and
//!   `route`: which interface leads to an address.
//! - `tcp`: the `TCP_INFO` constants the engines share.
//! - `io`: waiting for readiness under the idle timeout, writing a prefix.
//! - [`outcome`]: how a splice or a tunnel ended (`End`, `Outcome`, `TunnelOutcome`).
//! - [`pacer`]: how fast splices may run, per front end and class of traffic.
//! - [`splice`]: one-way splice and its specification; [`tap`]: a copy of its bytes as
//!   they flow.
//! - [`tunnel`]: both directions, half-close and reset propagation.
#![forbid(unsafe_code)]
// A panic is not an error path: product code handles what it can and names why it cannot
// (each exception to these is allowed where it stands, with the invariant it rests on).
#![deny(clippy::unwrap_used, clippy::expect_used)]
// Every dependency is used (checked for the library itself, whose tests have dev-dependencies
// too; CI runs clippy with -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod copy;
pub mod counters;
pub mod engine;
mod io;
#[cfg(feature = "bpf")]
mod ipsplice;
mod kernel;
pub mod outcome;
pub mod pacer;
mod pipe;
pub mod pool;
#[cfg(feature = "bpf")]
mod route;
#[cfg(feature = "bpf")]
mod sockmap;
pub mod splice;
pub mod tap;
mod tcp;
pub mod tunnel;

pub use engine::{Engine, EngineChoice, UnknownEngine};
pub use io::{read_once, read_once_into};
pub use kernel::{SockmapStats, Unavailable};
pub use outcome::{End, Outcome, TunnelOutcome};
pub use pacer::{Class, Foreground, Front, PacerConfig, PacerStats, Pacing};
pub use splice::{SpliceSpec, Trailing};
pub use tap::Tap;

use std::sync::Arc;

/// Relay configuration: which engine, and the pools' sizes. It is the `[relay]` section of
/// `splicer.toml` as it stands (docs/configuration.md); a key it does not know is an error.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelayConfig {
    #[serde(deserialize_with = "engine::from_name")]
    pub engine: EngineChoice,
    /// Size of each user-space buffer of the `copy` engine.
    pub buffer_size: usize,
    /// Capacity asked for each pipe of the `pipe` engine.
    pub pipe_size: usize,
    /// Bounded splices with fewer bytes than this go through `copy`: setting up a pipe
    /// costs more than copying a few KiB (HAProxy's rule of thumb is ~4 KB).
    pub small_threshold: u64,
    /// Most idle buffers and pipes kept for reuse; beyond it they are freed.
    pub pool_idle: usize,
    /// Most bytes a `sockmap` tunnel may hold in the kernel's redirect queue of one
    /// direction (taken from the source, not yet in the destination's TCP). Past it the
    /// program's gate holds the source back (its window closes) and the proxy relays what
    /// was held, in order: the kernel has no back-pressure there of its own
    /// (docs/engines.md).
    pub sockmap_max_queue: u64,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            engine: EngineChoice::Auto,
            buffer_size: 64 * 1024,
            pipe_size: 1024 * 1024,
            small_threshold: 4096,
            pool_idle: 64,
            sockmap_max_queue: 1 << 20,
        }
    }
}

/// Socket options the relay wants on an upstream socket before it connects
/// ([`Relay::tunnel_upstream`]); the default asks for nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpstreamSocket {
    mss: Option<u32>,
}

impl UpstreamSocket {
    /// Applies the options to a socket not yet connected. Not fatal when one cannot be
    /// set: the engine that wanted it then declines the tunnel, with the reason logged.
    pub fn apply(&self, socket: std::os::fd::BorrowedFd<'_>) {
        if let Some(m) = self.mss {
            let _ = splicer_sys::sock::set_maxseg(socket, m);
        }
    }
}

/// The relay: configuration plus the shared pools. Cheap to clone. A clone made by
/// [`Relay::front`] paces its splices as that front end's (the HTTP front end's otherwise).
#[derive(Debug, Clone)]
pub struct Relay {
    inner: Arc<Inner>,
    front: Front,
}

struct Inner {
    config: RelayConfig,
    buffers: pool::BufferPool,
    pipes: pool::PipePool,
    /// The kernel engines' eBPF programs, loaded on first use.
    kernel: kernel::Kernel,
    counters: counters::Counters,
    /// Set once every splice and tunnel must end ([`Relay::cut`]).
    cut: tokio::sync::watch::Sender<bool>,
    /// The front ends fix every socket's receive buffer ([`Relay::set_fixed_buffers`]).
    fixed_buffers: std::sync::atomic::AtomicBool,
    pacer: pacer::Pacer,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Relay {
    pub fn new(config: RelayConfig) -> Relay {
        let buffers = pool::BufferPool::new(config.buffer_size, config.pool_idle);
        let pipes = pool::PipePool::new(config.pipe_size, config.pool_idle);
        Relay {
            inner: Arc::new(Inner {
                config,
                buffers,
                pipes,
                kernel: kernel::Kernel::default(),
                counters: counters::Counters::default(),
                cut: tokio::sync::watch::Sender::new(false),
                fixed_buffers: std::sync::atomic::AtomicBool::new(false),
                pacer: pacer::Pacer::default(),
            }),
            front: Front::default(),
        }
    }

    /// The same relay, its splices paced as front end `front`'s.
    pub fn front(&self, front: Front) -> Relay {
        Relay {
            inner: self.inner.clone(),
            front,
        }
    }

    /// Sets how every front end's splices are paced (docs/pacer.md); running splices
    /// follow the new setting.
    pub fn set_pacing(&self, pacing: Pacing) {
        self.inner.pacer.set(pacing);
    }

    /// How the front ends' splices are paced now.
    pub fn pacing(&self) -> Pacing {
        self.inner.pacer.settings()
    }

    /// What the pacer did for `class` of `front` (waits, kernel splices running).
    pub fn pacer_stats(&self, front: Front, class: Class) -> PacerStats {
        self.inner.pacer.stats(front, class)
    }

    /// Opens a span of the front end's own work (a request head read and decided, a cache
    /// hit written): splices of `conservative` classes are held and `proportional` ones
    /// slowed while one is open (docs/pacer.md). Costs a relaxed load when no class is in
    /// those modes. Close it (or drop it) when the work waits on the network.
    pub fn foreground(&self) -> pacer::Foreground {
        pacer::Foreground::open(self)
    }

    pub(crate) fn pacer(&self) -> &pacer::Pacer {
        &self.inner.pacer
    }

    /// The front end this clone paces as.
    pub(crate) fn front_end(&self) -> Front {
        self.front
    }
    pub fn config(&self) -> &RelayConfig {
        &self.inner.config
    }

    /// Tells the relay that the front ends fix every socket's receive buffer (their
    /// `limits.receive_buffer`), so that `sockmap` keeps those buffers and fits its gate to
    /// them instead of raising them to fit the gate (docs/engines.md, "A window no update
    /// reopens"). Takes effect on the next splice; a reload may change it.
    pub fn set_fixed_buffers(&self, fixed: bool) {
        self.inner
            .fixed_buffers
            .store(fixed, std::sync::atomic::Ordering::Relaxed);
    }

    /// What bounds a `sockmap` direction's redirect queue now.
    pub(crate) fn sockmap_gate(&self) -> kernel::Gate {
        kernel::Gate {
            max_queue: self.inner.config.sockmap_max_queue,
            fixed_buffers: self
                .inner
                .fixed_buffers
                .load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Ends every splice and tunnel in progress, and any started later, with [`End::Cut`]:
    /// each still returns its outcome with the bytes it moved, so that a proxy cutting its
    /// connections at the end of a shutdown grace logs what went through them (dropping
    /// their tasks lost those figures).
    pub fn cut(&self) {
        self.inner.cut.send_replace(true);
    }

    /// Resolves once [`Relay::cut`] was called.
    pub(crate) async fn cut_called(&self) {
        let mut cut = self.inner.cut.subscribe();
        let _ = cut.wait_for(|c| *c).await;
    }
    /// Loads what the configured engine needs now rather than at the first tunnel, so a
    /// missing capability shows at start-up (one warning; tunnels then fall back to `pipe`).
    /// Returns the reason when the configured engine cannot run. For `auto`, loads the
    /// `ipsplice` program when the process may (root, or the capabilities of
    /// `splicer_sys::process::KERNEL_ENGINE_CAPS`); without it `auto` never picks `ipsplice`.
    pub fn prepare(&self) -> Result<(), Unavailable> {
        match self.inner.config.engine {
            EngineChoice::Forced(Engine::Sockmap) => self.inner.kernel.load_sockmap(),
            EngineChoice::Forced(Engine::Ipsplice) => self.inner.kernel.load_ipsplice(),
            EngineChoice::Auto if splicer_sys::process::kernel_engine_capable() => {
                if let Err(reason) = self.inner.kernel.load_ipsplice() {
                    tracing::info!(%reason, "auto will not use ipsplice");
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// What a tunnel's upstream socket needs before it connects, for whichever engine the
    /// relay may pick for the tunnel: front ends apply it to the socket they dial with and
    /// need not know why. Today: when `ipsplice` may take the tunnel over, the SYN
    /// advertises the client's MSS, so that the server's segments fit the client's path
    /// once the proxy forwards them unchanged (the MSS cannot change in flight; seed 003
    /// §3.4).
    pub fn tunnel_upstream(&self, client: &tokio::net::TcpStream) -> UpstreamSocket {
        let in_play = match self.inner.config.engine {
            EngineChoice::Forced(Engine::Ipsplice) => true,
            EngineChoice::Auto => self.ipsplice_loaded(),
            EngineChoice::Forced(_) => false,
        };
        UpstreamSocket {
            mss: in_play.then(|| self.client_mss(client)).flatten(),
        }
    }

    /// The MSS to advertise upstream so that the client's segments fit (see
    /// [`Relay::tunnel_upstream`]).
    fn client_mss(&self, client: &tokio::net::TcpStream) -> Option<u32> {
        let i = splicer_sys::sock::tcp_info(std::os::fd::AsFd::as_fd(client)).ok()?;
        // `snd_mss` has the timestamps option taken off; the SYN's MSS has not.
        let ts = if i.options & tcp::OPT_TIMESTAMPS != 0 {
            tcp::TS_OPTION
        } else {
            0
        };
        (i.snd_mss > 0).then_some(i.snd_mss + ts)
    }

    /// Whether the configuration forces a kernel engine (`sockmap` or `ipsplice`). The HTTP
    /// front end then hands an answer whose two connections both end with it to that
    /// engine whole, as a tunnel: seed 000's splice to the end of the connection. `auto`
    /// does not yet: a kernel engine's set-up costs more than `pipe` for small answers, and
    /// `auto` does not know yet where it pays.
    pub fn kernel_forced(&self) -> bool {
        matches!(
            self.inner.config.engine,
            EngineChoice::Forced(Engine::Sockmap | Engine::Ipsplice)
        )
    }

    /// Whether the forced kernel engine moves answers only to the end of both connections
    /// (`ipsplice`: it takes no bound, docs/engines.md). The forward proxy then asks the
    /// origin to close when the client's connection ends with the exchange, so that the
    /// answer can go to it whole; `sockmap` bounds the body instead and the upstream
    /// connection goes back to the pool.
    pub fn kernel_forced_to_the_end_only(&self) -> bool {
        matches!(
            self.inner.config.engine,
            EngineChoice::Forced(Engine::Ipsplice)
        )
    }

    /// Whether the ipsplice program was loaded (by [`Relay::prepare`] or a forced tunnel).
    pub(crate) fn ipsplice_loaded(&self) -> bool {
        self.inner.kernel.ipsplice_loaded()
    }

    /// The kernel engines' programs.
    pub(crate) fn kernel(&self) -> &kernel::Kernel {
        &self.inner.kernel
    }

    /// Entries in the ipsplice flow map (two per spliced tunnel, lingering ones included),
    /// or `None` when the program is not loaded.
    pub fn ipsplice_entries(&self) -> Option<usize> {
        self.inner.kernel.ipsplice_entries()
    }

    /// What the sockmap verdict program did (overlapping retransmissions trimmed), or
    /// `None` when it is not loaded.
    pub fn sockmap_stats(&self) -> Option<SockmapStats> {
        self.inner.kernel.sockmap_stats()
    }

    /// Per-engine counters since start.
    pub fn counters(&self) -> &counters::Counters {
        &self.inner.counters
    }

    pub fn pool_stats(&self) -> pool::Stats {
        pool::Stats {
            idle_buffers: self.inner.buffers.idle(),
            idle_pipes: self.inner.pipes.idle(),
        }
    }
}
