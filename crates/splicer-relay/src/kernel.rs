//! The kernel engines as the relay sees them: their eBPF programs (`splicer-bpf`), loaded on
//! first use and kept for the process's life, a tunnel run by one, and their figures.
//!
//! The programs need clang and libbpf's headers to build. Without the `bpf` cargo feature
//! (on by default) they are left out: every kernel engine is then unavailable with that
//! reason, and tunnels run in `pipe` as they do when a program cannot load.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::engine::{Declined, Engine};
use crate::outcome::TunnelOutcome;

/// What the sockmap verdict program did since it was loaded (over every tunnel).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SockmapStats {
    /// Skbs that arrived starting before the bytes the socket had consumed (a partly
    /// overlapping retransmission) and had that overlap cut off before the redirect.
    pub trimmed_skbs: u64,
    /// Bytes cut off them.
    pub trimmed_bytes: u64,
    /// Cuts that failed: the skb was kept for the proxy instead, and its tunnel reset.
    pub failed_trims: u64,
    /// FINs without data, not redirected (the relay passes FINs on itself).
    pub bare_fins: u64,
    /// Times a direction's gate closed: its redirect queue reached `sockmap_max_queue` and
    /// the source was held back.
    pub gate_closings: u64,
    /// Bytes in the redirect queues of the tunnels running now (redirected, not yet in
    /// their destination's send queue), as each tunnel's watch last looked (every 20 to
    /// 500 ms).
    pub queued: u64,
}

/// What bounds a `sockmap` direction's redirect queue: `[relay] sockmap_max_queue`, and
/// whether the receive buffers were fixed by the operator (then the gate is fitted to them
/// rather than they raised to fit it).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(
    not(feature = "bpf"),
    expect(
        dead_code,
        reason = "built without the sockmap program, nothing reads it"
    )
)]
pub(crate) struct Gate {
    pub max_queue: u64,
    pub fixed_buffers: bool,
}

/// How a kernel engine's tunnel is paced: the relay's pacer, the front end and class it
/// paces it as, and the shutdown's cut (which ends the wait for capped bytes to leave).
pub(crate) type Pacing<'a, C> = (
    &'a crate::pacer::Pacer,
    (crate::pacer::Front, crate::pacer::Class),
    C,
);

/// Why a kernel engine cannot run here.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unavailable {
    /// Its program could not be loaded (the cause says why: privileges, the kernel, a build
    /// without clang). Shared: it is kept for the process's life and returned each time.
    #[error("{engine} unavailable: {cause}")]
    NotLoaded {
        engine: Engine,
        #[source]
        cause: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// This build has no programs (no `bpf` feature).
    #[error("{0} unavailable: splicer was built without the bpf feature")]
    LeftOut(Engine),
    /// Asked of an engine that is not one of the kernel's.
    #[error("{0} is not a kernel engine")]
    NotKernel(Engine),
}

/// A kernel engine that cannot run: declined before doing anything.
fn unavailable(why: Unavailable) -> Declined {
    Declined {
        reason: why.to_string(),
        prefix_sent: 0,
        moved: (0, 0),
        reply_sent: false,
    }
}

#[cfg(feature = "bpf")]
mod programs {
    use std::sync::OnceLock;

    use super::*;

    /// The loaded programs; the error says why one cannot be loaded (logged once).
    #[derive(Default)]
    pub(crate) struct Kernel {
        sockmap: OnceLock<Result<splicer_bpf::Sockmap, Unavailable>>,
        ipsplice: OnceLock<Result<Arc<splicer_bpf::Ipsplice>, Unavailable>>,
        /// The sum of the running `sockmap` tunnels' redirect queues (`SockmapStats::queued`).
        sockmap_queued: std::sync::atomic::AtomicU64,
    }

    /// A program that did not load, warned about once (it is asked for once).
    fn not_loaded(engine: Engine, e: splicer_bpf::Error) -> Unavailable {
        let why = Unavailable::NotLoaded {
            engine,
            cause: Arc::new(e),
        };
        tracing::warn!(reason = %why, "the {engine} engine falls back to pipe");
        why
    }

    impl Kernel {
        fn sockmap(&self) -> Result<&splicer_bpf::Sockmap, Unavailable> {
            self.sockmap
                .get_or_init(|| {
                    splicer_bpf::Sockmap::load().map_err(|e| not_loaded(Engine::Sockmap, e))
                })
                .as_ref()
                .map_err(Clone::clone)
        }

        fn ipsplice(&self) -> Result<Arc<splicer_bpf::Ipsplice>, Unavailable> {
            self.ipsplice
                .get_or_init(|| {
                    splicer_bpf::Ipsplice::load()
                        .map(Arc::new)
                        .map_err(|e| not_loaded(Engine::Ipsplice, e))
                })
                .clone()
        }

        pub(crate) fn load_sockmap(&self) -> Result<(), Unavailable> {
            self.sockmap().map(|_| ())
        }

        pub(crate) fn load_ipsplice(&self) -> Result<(), Unavailable> {
            self.ipsplice().map(|_| ())
        }

        pub(crate) fn ipsplice_loaded(&self) -> bool {
            self.ipsplice.get().is_some_and(|r| r.is_ok())
        }

        pub(crate) fn ipsplice_entries(&self) -> Option<usize> {
            match self.ipsplice.get() {
                Some(Ok(ip)) => Some(ip.entries()),
                _ => None,
            }
        }

        pub(crate) fn sockmap_stats(&self) -> Option<SockmapStats> {
            match self.sockmap.get() {
                Some(Ok(m)) => {
                    let s = m.stats();
                    Some(SockmapStats {
                        trimmed_skbs: s.trimmed_skbs,
                        trimmed_bytes: s.trimmed_bytes,
                        failed_trims: s.failed_trims,
                        bare_fins: s.bare_fins,
                        gate_closings: s.gate_closings,
                        queued: self
                            .sockmap_queued
                            .load(std::sync::atomic::Ordering::Relaxed),
                    })
                }
                _ => None,
            }
        }

        /// Runs a tunnel with kernel engine `engine`, set up for `start` (who may be sending
        /// meanwhile), paced as its class is (`pacing`: the pacer, the front end and class,
        /// and its own `cut`); with whether it was spliced before the reply (`ipsplice`'s
        /// early take-over).
        pub(crate) async fn tunnel<C: std::future::Future<Output = ()>>(
            &self,
            (engine, start): (Engine, crate::tunnel::Start),
            (client, upstream): (&TcpStream, &TcpStream),
            (reply, client_prefix): (&[u8], &[u8]),
            idle: Option<Duration>,
            gate: Gate,
            (cut, pacing): (C, Pacing<'_, C>),
        ) -> Result<(TunnelOutcome, bool), Declined> {
            let (pacer, class, pacer_cut) = pacing;
            match engine {
                Engine::Sockmap => {
                    let map = self.sockmap().map_err(unavailable)?;
                    let limits = crate::sockmap::Limits {
                        idle,
                        max_queue: gate.max_queue,
                        fixed_buffers: gate.fixed_buffers,
                        queued: &self.sockmap_queued,
                    };
                    let run = crate::sockmap::tunnel(
                        map,
                        start,
                        client,
                        upstream,
                        (reply, client_prefix),
                        limits,
                        cut,
                    );
                    // Both sockets send: the client's the answer, the upstream's what the
                    // client sends.
                    let senders = [client, upstream];
                    let out = crate::pacer::Sockets(&senders);
                    pacer
                        .kernel(class, &out, run, pacer_cut)
                        .await
                        .map(|o| (o, false))
                }
                Engine::Ipsplice => {
                    let ip = self.ipsplice().map_err(unavailable)?;
                    // An answer's head (and the body bytes read with it) goes out before
                    // the take-over's checks and set-up, which took about 110 µs of the
                    // first packet's way to the client (seed 000's Table IV, 2026-11-27:
                    // 173 µs against `copy`'s 61): the early take-over it would otherwise
                    // try needs an upstream that sends nothing, and an answer's upstream is
                    // sending its body, so the late take-over takes it either way.
                    let lead_first = start == crate::tunnel::Start::Answer && !reply.is_empty();
                    if lead_first {
                        if let Err(e) = crate::io::write_all(client, reply).await {
                            let o = crate::tunnel::reply_failed(Engine::Ipsplice, e);
                            return Ok((o, false));
                        }
                    }
                    let reply = if lead_first { &[][..] } else { reply };
                    let pace = crate::ipsplice::Pace::default();
                    let run = crate::ipsplice::tunnel(
                        &ip,
                        &pace,
                        client,
                        upstream,
                        (reply, client_prefix),
                        idle,
                        cut,
                    );
                    pacer
                        .kernel(class, &pace, run, pacer_cut)
                        .await
                        .map_err(|d| Declined {
                            reply_sent: d.reply_sent || lead_first,
                            ..d
                        })
                }
                Engine::Copy | Engine::Pipe => Err(unavailable(Unavailable::NotKernel(engine))),
            }
        }

        /// Runs a one-way splice (an answer's body) with `sockmap`: `prefix` first, then
        /// the source's bytes, `max` in all (`None`: to the end of stream).
        pub(crate) async fn body(
            &self,
            sockets: (&TcpStream, &TcpStream),
            prefix: &[u8],
            (max, idle): (Option<u64>, Option<Duration>),
            gate: Gate,
            cut: impl std::future::Future<Output = ()>,
        ) -> Result<crate::outcome::Outcome, Declined> {
            let map = self.sockmap().map_err(unavailable)?;
            let limits = crate::sockmap::Limits {
                idle,
                max_queue: gate.max_queue,
                fixed_buffers: gate.fixed_buffers,
                queued: &self.sockmap_queued,
            };
            crate::sockmap::body(map, sockets, prefix, max, limits, cut).await
        }
    }
}

#[cfg(not(feature = "bpf"))]
mod programs {
    use super::*;

    /// No programs: built without the `bpf` feature.
    #[derive(Default)]
    pub(crate) struct Kernel {}

    impl Kernel {
        pub(crate) fn load_sockmap(&self) -> Result<(), Unavailable> {
            let why = Unavailable::LeftOut(Engine::Sockmap);
            tracing::warn!(reason = %why, "the sockmap engine falls back to pipe");
            Err(why)
        }

        pub(crate) fn load_ipsplice(&self) -> Result<(), Unavailable> {
            let why = Unavailable::LeftOut(Engine::Ipsplice);
            tracing::warn!(reason = %why, "the ipsplice engine falls back to pipe");
            Err(why)
        }

        pub(crate) fn ipsplice_loaded(&self) -> bool {
            false
        }

        pub(crate) fn ipsplice_entries(&self) -> Option<usize> {
            None
        }

        pub(crate) fn sockmap_stats(&self) -> Option<SockmapStats> {
            None
        }

        pub(crate) async fn tunnel<C: std::future::Future<Output = ()>>(
            &self,
            (engine, _start): (Engine, crate::tunnel::Start),
            _sockets: (&TcpStream, &TcpStream),
            _reply_and_prefix: (&[u8], &[u8]),
            _idle: Option<Duration>,
            _gate: Gate,
            _cuts: (C, Pacing<'_, C>),
        ) -> Result<(TunnelOutcome, bool), Declined> {
            Err(unavailable(Unavailable::LeftOut(engine)))
        }

        pub(crate) async fn body(
            &self,
            _sockets: (&TcpStream, &TcpStream),
            _prefix: &[u8],
            _bounds: (Option<u64>, Option<Duration>),
            _gate: Gate,
            _cut: impl std::future::Future<Output = ()>,
        ) -> Result<crate::outcome::Outcome, Declined> {
            Err(unavailable(Unavailable::LeftOut(Engine::Sockmap)))
        }
    }
}

pub(crate) use programs::Kernel;
