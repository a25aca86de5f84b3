//! One-way splice: specification, outcome and dispatch to an engine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpStream;

use crate::engine::{self, Chosen, Engine, Needs, UserSpace};
use crate::io::{Activity, Job};
use crate::outcome::{End, Outcome};
use crate::pacer::Class;
use crate::tap::Tap;
use crate::{copy, pipe, Relay};

/// What a splice should do: BSD's `struct splice { fd, max, idle }` without the fd.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpliceSpec {
    /// Stop after exactly this many bytes (prefix included); with [`Trailing::Kept`] not
    /// one byte more is read from the source, so both sockets stay usable by the caller.
    pub max: Option<u64>,
    /// Stop when no byte moved for this long.
    pub idle: Option<Duration>,
    /// What the source may send after `max`.
    pub trailing: Trailing,
}

/// What follows a bounded splice's last byte on its source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Trailing {
    /// The caller's (the next request on a client connection, the next answer of a
    /// pipelined line): it stays unread in the source.
    #[default]
    Kept,
    /// Nothing, until the caller speaks again (an answer on an upstream connection of its
    /// own): bytes that come anyway are surplus. An engine may then take them off the
    /// source, and shuts the source if it did, so that no pool reuses it. What lets
    /// `sockmap` move a bounded body.
    Surplus,
}

impl Relay {
    /// Splices from `from` to `to`: first `prefix` (bytes the caller already read from
    /// `from`), then the socket's own bytes, until EOF, `max`, idle or an error.
    pub async fn splice(
        &self,
        from: &TcpStream,
        to: &TcpStream,
        prefix: &[u8],
        spec: SpliceSpec,
    ) -> Outcome {
        let activity = Activity::new();
        let moved = AtomicU64::new(0);
        let (engine, mut chosen) = self.one_way(spec, false);
        let (mut prefix, mut spec) = (within(prefix, spec.max), spec);
        if engine == Engine::Sockmap {
            let body = self.kernel().body(
                (from, to),
                prefix,
                (spec.max, spec.idle),
                self.sockmap_gate(),
                self.cut_called(),
            );
            match self.kernel_paced(Class::Bodies, &[to], body).await {
                Ok(o) => {
                    self.counters().splice(o.engine, o.bytes);
                    return o;
                }
                Err(d) => {
                    // `pipe` goes on from where the kernel engine left off.
                    tracing::debug!(reason = %d.reason, "splice falls back to pipe");
                    self.counters().declined(engine);
                    chosen.fallback = Some(d.reason);
                    prefix = &prefix[d.prefix_sent..];
                    spec.max = spec.max.map(|m| m - d.prefix_sent as u64);
                    moved.store(d.prefix_sent as u64, Ordering::Relaxed);
                }
            }
        }
        let o = self
            .run_splice(
                (from, to),
                prefix,
                spec,
                (&activity, &moved),
                (chosen, Class::Bodies),
                None,
            )
            .await;
        self.counters().splice(o.engine, o.bytes);
        o
    }

    /// [`Relay::splice`] with a tap on the bytes read from `from` (not on `prefix`, which
    /// the caller already holds). The engine is one that can tap: `pipe` duplicates the
    /// bytes with `tee(2)`, `copy` hands over its buffer; a forced kernel engine falls back,
    /// and the outcome says why.
    pub async fn splice_tapped(
        &self,
        from: &TcpStream,
        to: &TcpStream,
        prefix: &[u8],
        spec: SpliceSpec,
        tap: &mut dyn Tap,
    ) -> Outcome {
        let activity = Activity::new();
        let moved = AtomicU64::new(0);
        let (_, chosen) = self.one_way(spec, true);
        let o = self
            .run_splice(
                (from, to),
                prefix,
                spec,
                (&activity, &moved),
                (chosen, Class::Fills),
                Some(tap),
            )
            .await;
        self.counters().splice(o.engine, o.bytes);
        o
    }

    /// The engine of a one-way splice, chosen once for it, and the user-space engine that
    /// runs it or stands in for it: `ipsplice` takes whole tunnels only, and `sockmap`
    /// takes a bounded one only when what follows the bound is surplus, so otherwise a
    /// forced one runs `pipe` here, and the outcome says why.
    fn one_way(&self, spec: SpliceSpec, tap: bool) -> (Engine, Chosen) {
        let needs = Needs {
            remaining: spec.max,
            tap,
            keep_trailing: spec.max.is_some() && spec.trailing == Trailing::Kept,
            ..Needs::default()
        };
        let choice = self.inner.config.engine;
        let e = engine::choose(
            choice,
            needs,
            self.ipsplice_loaded(),
            self.inner.config.small_threshold,
        );
        let chosen = Chosen {
            engine: UserSpace::standing_for(e),
            fallback: engine::fallback_reason(choice, needs, e),
        };
        (e, chosen)
    }

    /// The splice itself, with the engine its caller chose and the class it is paced in;
    /// `(from, to)`: its source and destination; `(activity, moved)`: when bytes last moved
    /// (a tunnel's two directions share it) and how many have.
    pub(crate) async fn run_splice(
        &self,
        (from, to): (&TcpStream, &TcpStream),
        prefix: &[u8],
        spec: SpliceSpec,
        (activity, moved): (&Activity, &AtomicU64),
        (chosen, class): (Chosen, Class),
        tap: Option<&mut dyn Tap>,
    ) -> Outcome {
        activity.touch();
        let prefix = within(prefix, spec.max);
        let mut job = Job {
            from,
            to,
            // The prefix write below counts against the bound like any other byte.
            remaining: spec.max,
            idle: spec.idle,
            activity,
            moved,
            pace: self.pacer().paced(self.front_end(), class),
        };
        let mut engine = chosen.engine;
        let mut fallback = chosen.fallback;
        let run = async {
            match job.write_all(prefix).await {
                Err(end) => end,
                Ok(()) if job.remaining == Some(0) => End::Max,
                Ok(()) => match engine {
                    UserSpace::Copy => copy::run(&self.inner.buffers, &mut job, tap).await,
                    UserSpace::Pipe => {
                        match pipe::run(&self.inner.pipes, &self.inner.buffers, &mut job, tap).await
                        {
                            Ok(end) => end,
                            Err((e, tap)) => {
                                // No pipe to be had (descriptor limit): carry on with copy; the
                                // job's state is consistent because pipes are drained before reuse.
                                let reason = format!("pipe unavailable: {e}");
                                tracing::warn!(%reason, "falling back to copy engine");
                                fallback = Some(reason);
                                engine = UserSpace::Copy;
                                copy::run(&self.inner.buffers, &mut job, tap).await
                            }
                        }
                    }
                },
            }
        };
        let end = tokio::select! {
            // The splice first: one that ends at its first poll (a body already in hand)
            // never waits on the cut signal, whose wait takes a lock every splice shares.
            biased;
            end = run => end,
            () = self.cut_called() => End::Cut,
        };
        Outcome {
            engine: engine.engine(),
            fallback,
            bytes: moved.load(Ordering::Relaxed),
            end,
        }
    }
}

impl Relay {
    /// Runs a `sockmap` splice of `class`, its bytes leaving by `senders`, paced as this
    /// front end's class is (`SO_MAX_PACING_RATE`, set again as the setting changes).
    #[cfg(feature = "bpf")]
    pub(crate) async fn kernel_paced<F: std::future::Future>(
        &self,
        class: Class,
        senders: &[&TcpStream],
        splice: F,
    ) -> F::Output {
        self.pacer()
            .kernel(
                (self.front_end(), class),
                &crate::pacer::Sockets(senders),
                splice,
                self.cut_called(),
            )
            .await
    }

    /// Without the kernel engines there is nothing to pace in the kernel.
    #[cfg(not(feature = "bpf"))]
    pub(crate) async fn kernel_paced<F: std::future::Future>(
        &self,
        _class: Class,
        _senders: &[&TcpStream],
        splice: F,
    ) -> F::Output {
        splice.await
    }
}

/// The part of `prefix` a splice of at most `max` bytes moves.
fn within(prefix: &[u8], max: Option<u64>) -> &[u8] {
    match max {
        Some(m) if (prefix.len() as u64) > m => &prefix[..m as usize],
        _ => prefix,
    }
}

impl Relay {
    /// Writes `bytes` to `to` under the idle timeout: what front ends use for heads and
    /// replies. Not a splice (the source is never read): not counted as one.
    pub async fn send(
        &self,
        to: &TcpStream,
        bytes: &[u8],
        idle: Option<Duration>,
    ) -> Result<(), End> {
        // Not a splice: no engine is chosen and none is counted for it.
        let activity = Activity::new();
        let moved = AtomicU64::new(0);
        let mut job = Job {
            from: to,
            to,
            remaining: Some(bytes.len() as u64),
            idle,
            activity: &activity,
            moved: &moved,
            // Never asked: a head or reply is written whole, not read from a source.
            pace: self.pacer().uncounted(self.front_end()),
        };
        job.write_all(bytes).await
    }
}
