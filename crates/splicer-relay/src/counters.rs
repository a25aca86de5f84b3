//! Per-engine counters: how many tunnels and one-way splices each engine ran, the bytes it
//! moved, and how often a kernel engine declined a tunnel (the reasons are in the access
//! log). The proxy logs them when it stops.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Engine;

const ENGINES: [Engine; 4] = [
    Engine::Copy,
    Engine::Pipe,
    Engine::Sockmap,
    Engine::Ipsplice,
];

#[derive(Debug, Default)]
struct PerEngine {
    tunnels: AtomicU64,
    splices: AtomicU64,
    bytes: AtomicU64,
    declined: AtomicU64,
}

/// The relay's counters; cheap to update from any task.
#[derive(Debug, Default)]
pub struct Counters {
    engines: [PerEngine; 4],
    /// `ipsplice` tunnels spliced before the reply to the client was written: nothing of
    /// them went through user space (the others relayed their start, or were frozen).
    early: AtomicU64,
}

/// Where an engine's counters are: its place in [`ENGINES`].
fn slot(e: Engine) -> usize {
    match e {
        Engine::Copy => 0,
        Engine::Pipe => 1,
        Engine::Sockmap => 2,
        Engine::Ipsplice => 3,
    }
}

impl Counters {
    pub(crate) fn tunnel(&self, e: Engine, bytes: u64) {
        let c = &self.engines[slot(e)];
        c.tunnels.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    pub(crate) fn splice(&self, e: Engine, bytes: u64) {
        let c = &self.engines[slot(e)];
        c.splices.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    pub(crate) fn declined(&self, e: Engine) {
        self.engines[slot(e)]
            .declined
            .fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn early(&self) {
        self.early.fetch_add(1, Ordering::Relaxed);
    }
    /// `ipsplice` tunnels spliced before the reply.
    pub fn get_early(&self) -> u64 {
        self.early.load(Ordering::Relaxed)
    }
    /// (tunnels, one-way splices, bytes, declined) for `e`.
    pub fn get(&self, e: Engine) -> (u64, u64, u64, u64) {
        let c = &self.engines[slot(e)];
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (l(&c.tunnels), l(&c.splices), l(&c.bytes), l(&c.declined))
    }
}

/// `copy: 2 tunnels, 5 splices, 1234 B, 0 declined; pipe: …`.
impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in ENGINES.iter().enumerate() {
            let (t, s, b, d) = self.get(*e);
            let sep = if i == 0 { "" } else { "; " };
            write!(f, "{sep}{e}: {t} tunnels, {s} splices, {b} B, {d} declined")?;
        }
        write!(f, " ({} before the reply)", self.get_early())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_engine() {
        let c = Counters::default();
        c.tunnel(Engine::Ipsplice, 100);
        c.splice(Engine::Pipe, 7);
        c.splice(Engine::Pipe, 3);
        c.declined(Engine::Ipsplice);
        c.early();
        assert_eq!(c.get(Engine::Ipsplice), (1, 0, 100, 1));
        assert_eq!(c.get_early(), 1);
        assert_eq!(c.get(Engine::Pipe), (0, 2, 10, 0));
        assert_eq!(c.get(Engine::Copy), (0, 0, 0, 0));
        let s = c.to_string();
        assert!(
            s.contains("ipsplice: 1 tunnels, 0 splices, 100 B, 1 declined (1 before the reply)"),
            "{s}"
        );
    }
}
