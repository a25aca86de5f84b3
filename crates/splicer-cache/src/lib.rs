//! Splicer's HTTP cache: the policy (RFC 9111 through `http-cache-semantics`, plus RFC 5861),
//! the decisions of seed 000 (by rule from the request, then from the response head), the
//! memory store, and fills (responses stored while they are spliced, read by collapsed
//! requests). No socket I/O: the `http` front end moves the bytes and asks this crate what
//! to do with them.
//!
//! # Layout
//! - [`rules`]: decisions from the request alone (`bypass` or `cache`).
//! - [`key`]: primary keys (the URI) and `Vary` variant keys.
//! - [`policy`]: freshness, storability, revalidation, the merge of a `304`.
//! - [`object`]: a stored response and what it answers (whole, `HEAD`, `304`, ranges).
//! - [`store`]: the memory tier (bounded in bytes, S3-FIFO eviction), and the index of …
//! - [`disk`]: the disk tier (files, kept across restarts, never served torn).
//! - [`fill`]: responses being stored, their readers, the quick-abort decision.
//! - [`pass`]: URIs last answered with what could not be stored (not collapsed a while).
//! - [`status`]: `Cache-Status` and the access-log word.
#![forbid(unsafe_code)]
// A panic is not an error path: product code handles what it can and names why it cannot
// (each exception to these is allowed where it stands, with the invariant it rests on).
#![deny(clippy::unwrap_used, clippy::expect_used)]
// Every dependency is used (checked for the library itself, whose tests have dev-dependencies
// too; CI runs clippy with -D warnings).
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod disk;
pub mod fill;
pub mod key;
pub mod object;
pub mod pass;
pub mod policy;
pub mod rules;
pub mod status;
pub mod store;
#[cfg(test)]
mod testing;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use splicer_wire::http::Headers;

pub use disk::{Disk, DiskSettings};
pub use fill::{Cut, Fill, Head, QuickAbort, Reader, State};
pub use object::{Body, HitHead, HitHeadSlot, Object, Served};
pub use policy::{Ask, Check, Policy};
pub use rules::{Action, BadRule, Rule, Target};
pub use status::Result as CacheResult;
pub use store::{Found, Store};

/// What the cache is configured to do.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Bytes the memory store may hold.
    pub memory: u64,
    /// Largest body stored.
    pub max_object: u64,
    /// Bytes all fills in progress may hold at once. A fill that would go past it is given
    /// up (its client's transfer goes on, untapped), so many slow misses cannot hold
    /// `max_object` each beside the store.
    pub fill_memory: u64,
    /// Fraction of the time since `Last-Modified` a response without explicit freshness
    /// stays fresh.
    pub heuristic: f32,
    /// Whether a fill whose client left is finished.
    pub quick_abort: QuickAbort,
    /// Whether concurrent misses for one URI share one upstream request.
    pub collapse: bool,
    /// How long misses for a URI are not collapsed after its response could not be
    /// stored (zero: always collapsed).
    pub pass_ttl: Duration,
    /// Decisions from the request (first match wins; default `cache`).
    pub rules: Vec<Rule>,
    /// The disk tier, when there is one (none by default).
    pub disk: Option<DiskSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            memory: 256 << 20,
            max_object: 8 << 20,
            fill_memory: 64 << 20,
            heuristic: 0.1,
            quick_abort: QuickAbort::default(),
            collapse: true,
            pass_ttl: Duration::from_secs(120),
            rules: Vec::new(),
            disk: None,
        }
    }
}

/// Counters since start.
#[derive(Debug, Default)]
pub struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub refreshes: AtomicU64,
    pub stored: AtomicU64,
    pub collapsed: AtomicU64,
    /// Misses not collapsed because their URI's last response could not be stored.
    pub passed: AtomicU64,
    /// Fills finished after their client left.
    pub finished_after_abort: AtomicU64,
    /// Fills given up (client left and the rest was too much, too large, origin failed).
    pub fills_failed: AtomicU64,
    /// Of those, fills given up because all fills together reached `fill_memory`.
    pub fills_over_budget: AtomicU64,
    pub invalidated: AtomicU64,
}

/// What a lookup found.
#[derive(Debug)]
pub enum Lookup {
    /// A stored response that answers the request as it is.
    Fresh(Found),
    /// A stored response that must be revalidated first.
    Stale(Found),
    /// Nothing stored answers it.
    Miss,
}

/// The cache: settings, the memory store, the fills in progress. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: Settings,
    memory: Store,
    disk: Option<Disk>,
    fills: Mutex<HashMap<String, Arc<Fill>>>,
    passes: pass::Passes,
    /// Bytes the fills in progress hold (reserved), against `settings.fill_memory`.
    fill_bytes: AtomicU64,
    /// URIs being revalidated in the background (`stale-while-revalidate`).
    refreshing: Mutex<HashSet<String>>,
    counters: Counters,
}

impl Cache {
    /// A cache with these settings; opening the disk tier (loading its index) may fail.
    pub fn new(settings: Settings) -> std::io::Result<Cache> {
        let memory = Store::new(settings.memory, settings.max_object);
        let passes = pass::Passes::new(settings.pass_ttl);
        let disk = match &settings.disk {
            Some(d) => Some(Disk::open(d, settings.max_object, settings.heuristic)?),
            None => None,
        };
        Ok(Cache {
            inner: Arc::new(Inner {
                settings,
                memory,
                disk,
                fills: Mutex::new(HashMap::new()),
                passes,
                fill_bytes: AtomicU64::new(0),
                refreshing: Mutex::new(HashSet::new()),
                counters: Counters::default(),
            }),
        })
    }

    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    pub fn memory(&self) -> &Store {
        &self.inner.memory
    }

    pub fn disk(&self) -> Option<&Disk> {
        self.inner.disk.as_ref()
    }

    pub fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    /// The rules' decision for a request.
    pub fn decide(&self, target: Target<'_>) -> Action {
        rules::decide(&self.inner.settings.rules, target)
    }

    /// Looks `ask` up under `primary`: in memory, then on disk (a disk object comes with
    /// its file open).
    pub fn lookup(&self, primary: &str, ask: Ask<'_>, now: SystemTime) -> Lookup {
        let found = (self.inner.memory.get(primary, ask.headers))
            .or_else(|| self.inner.disk.as_ref()?.get(primary, ask.headers));
        let Some(found) = found else {
            return Lookup::Miss;
        };
        match found.object.policy.check(ask, now) {
            Check::Fresh => Lookup::Fresh(found),
            Check::Stale => Lookup::Stale(found),
            Check::Mismatch => Lookup::Miss,
        }
    }

    /// After a `304` to the revalidation of `found`: the stored object with the merged
    /// fields, put back in its tier (a disk object's file is rewritten with the new head
    /// in the background), or taken out of the cache when the 304 made it one a shared
    /// cache may not store; with the 304's fields that go to the revalidating client alone
    /// ([`policy::Refreshed::own`]). `None` when the 304 is not about it.
    pub fn refresh(
        &self,
        primary: &str,
        found: &Found,
        ask: Ask<'_>,
        fields: &Headers,
        now: SystemTime,
    ) -> Option<(Arc<Object>, Headers)> {
        let old = &found.object;
        let refreshed = old.policy.refreshed(ask, fields, &old.headers, now)?;
        let object = Arc::new(Object {
            status: old.status,
            reason: old.reason.clone(),
            headers: refreshed.merged,
            body: old.body.clone(),
            policy: refreshed.policy,
            hit_head: Default::default(),
        });
        if !refreshed.storable {
            self.invalidate(primary);
            return Some((object, refreshed.own));
        }
        if let Body::Memory(_) = object.body {
            self.inner.memory.replace(&found.key, object.clone());
        }
        if let Some(disk) = &self.inner.disk {
            disk.put(primary, object.clone());
        }
        self.inner
            .counters
            .refreshes
            .fetch_add(1, Ordering::Relaxed);
        Some((object, refreshed.own))
    }

    /// Forgets what is stored under `primary` (an unsafe method succeeded on it, or a
    /// `PURGE`). Returns whether something was stored.
    pub fn invalidate(&self, primary: &str) -> bool {
        let mut had = self.inner.memory.remove(primary);
        if let Some(disk) = &self.inner.disk {
            had |= disk.remove(primary);
        }
        if had {
            self.inner
                .counters
                .invalidated
                .fetch_add(1, Ordering::Relaxed);
        }
        had
    }

    /// Joins the fill of `primary` in progress, or starts one, registered for others to
    /// join when collapsing is on and `share` (the request is a plain `GET` whose response
    /// others may read) and the URI's last response was not one that could not be stored.
    /// `request`: the fields of the request that fills it.
    pub fn fill(&self, primary: &str, request: &Headers, share: bool) -> Joined {
        let fill = Fill::new();
        let mut registered = share && self.inner.settings.collapse;
        if registered && self.inner.passes.marked(primary) {
            registered = false;
            self.inner.counters.passed.fetch_add(1, Ordering::Relaxed);
        }
        if registered {
            let mut fills = self.inner.fills.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(f) = fills.get(primary) {
                self.inner
                    .counters
                    .collapsed
                    .fetch_add(1, Ordering::Relaxed);
                return Joined::Reader(f.reader());
            }
            fills.insert(primary.to_string(), fill.clone());
        }
        Joined::Writer(Writer {
            cache: self.clone(),
            primary: primary.to_string(),
            request: request.clone(),
            fill,
            registered,
            share,
            length: None,
            received: 0,
            charged: 0,
            ended: false,
        })
    }

    /// The right to revalidate `primary` in the background: `None` while another request
    /// holds it (one revalidation per URI at a time, however many stale hits).
    pub fn refreshing(&self, primary: &str) -> Option<Refreshing> {
        let mut set = self
            .inner
            .refreshing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        set.insert(primary.to_string()).then(|| Refreshing {
            cache: self.clone(),
            primary: primary.to_string(),
        })
    }

    fn unregister(&self, primary: &str, fill: &Arc<Fill>) {
        let mut fills = self.inner.fills.lock().unwrap_or_else(|e| e.into_inner());
        if fills.get(primary).is_some_and(|f| Arc::ptr_eq(f, fill)) {
            fills.remove(primary);
        }
    }
}

/// A background revalidation in progress; dropped, it is over.
#[derive(Debug)]
pub struct Refreshing {
    cache: Cache,
    primary: String,
}

impl Drop for Refreshing {
    fn drop(&mut self) {
        let inner = &self.cache.inner;
        let mut set = inner.refreshing.lock().unwrap_or_else(|e| e.into_inner());
        set.remove(&self.primary);
    }
}

/// A fill joined or started.
#[derive(Debug)]
pub enum Joined {
    /// Another client's request is filling it: read from there.
    Reader(Reader),
    /// Ours to fill.
    Writer(Writer),
}

/// The client that fills an object: starts it with the head, taps the body into it,
/// finishes or gives it up. Dropped without an end, the fill fails (its readers are cut).
#[derive(Debug)]
pub struct Writer {
    cache: Cache,
    primary: String,
    request: Headers,
    fill: Arc<Fill>,
    registered: bool,
    /// The request was one whose response others could have read (see [`Cache::fill`]).
    share: bool,
    length: Option<u64>,
    received: u64,
    /// Bytes of `fill_memory` this fill holds: the capacity reserved for its body.
    charged: u64,
    ended: bool,
}

impl Writer {
    /// The response may be stored: its head goes to the readers, the body follows.
    pub fn start(&mut self, head: Head) {
        self.length = head.length;
        // A body of known length is reserved at once (up to 1 MiB), if the budget allows.
        let first = head
            .length
            .unwrap_or(0)
            .min(1 << 20)
            .min(self.cache.inner.settings.max_object);
        let reserve = if self.charge(first) { first } else { 0 };
        self.fill.set_head(head, reserve as usize);
    }

    /// Reserves `fill_memory` until this fill holds `total` bytes of it; `false` (nothing
    /// reserved) when all fills together would go past the budget.
    fn charge(&mut self, total: u64) -> bool {
        if total <= self.charged {
            return true;
        }
        let add = total - self.charged;
        let inner = &self.cache.inner;
        let before = inner.fill_bytes.fetch_add(add, Ordering::Relaxed);
        if before + add > inner.settings.fill_memory {
            inner.fill_bytes.fetch_sub(add, Ordering::Relaxed);
            return false;
        }
        self.charged = total;
        true
    }

    /// Gives back this fill's share of `fill_memory` (its body is stored or dropped).
    fn release(&mut self) {
        let c = std::mem::take(&mut self.charged);
        self.cache.inner.fill_bytes.fetch_sub(c, Ordering::Relaxed);
    }

    /// The response may not be stored: readers ask the origin themselves.
    pub fn abandon(mut self) {
        // A mark only changes whether misses collapse: none is kept when they never do.
        if self.share && self.cache.inner.settings.collapse {
            self.cache.inner.passes.mark(&self.primary);
        }
        self.end(|_| State::Abandoned);
    }

    /// Adds body bytes. `false` when the object grew past the largest stored or past the
    /// fills' memory budget: the fill failed (its readers are cut) and the rest need not
    /// be tapped.
    pub fn tap(&mut self, bytes: &[u8]) -> bool {
        if self.ended {
            return false;
        }
        let max = self.cache.inner.settings.max_object;
        let need = self.received + bytes.len() as u64;
        let past_length = self.length.is_some_and(|l| need > l);
        if need > max || past_length {
            self.fail();
            return false;
        }
        if need > self.charged {
            // Grow by doubling (within the length or the largest object), as a vector
            // would, but charged first; at the budget's edge, just what is needed.
            let cap = self.length.unwrap_or(max);
            let doubled = need.max(self.charged.saturating_mul(2)).min(cap);
            if !self.charge(doubled) && !self.charge(need) {
                self.cache
                    .inner
                    .counters
                    .fills_over_budget
                    .fetch_add(1, Ordering::Relaxed);
                self.fail();
                return false;
            }
        }
        self.received = self.fill.append(bytes, self.charged as usize) as u64;
        true
    }

    /// Body bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The announced length, if any.
    pub fn length(&self) -> Option<u64> {
        self.length
    }

    /// Other clients reading this fill.
    pub fn readers(&self) -> usize {
        self.fill.readers()
    }

    /// Whether a fill whose client left should go on ([`QuickAbort`]).
    pub fn finish_without_client(&self) -> bool {
        self.cache
            .inner
            .settings
            .quick_abort
            .finish(self.received, self.length, self.readers())
    }

    /// While a fill is finished without a client: whether to read on, `alone` bytes
    /// read since the client left ([`QuickAbort::go_on`]).
    pub fn go_on_alone(&self, alone: u64) -> bool {
        self.cache
            .inner
            .settings
            .quick_abort
            .go_on(alone, self.length, self.readers())
    }

    /// The body is complete: stores the object. `false` when it was not stored (it was
    /// shorter than announced, or had failed already).
    pub fn finish(mut self) -> bool {
        if self.ended {
            return false;
        }
        if self.length.is_some_and(|l| l != self.received) {
            self.fail();
            return false;
        }
        // Stored before the fill leaves the map, so a request arriving in between finds
        // one or the other.
        self.ended = true;
        let done = self.fill.end(|p| match Fill::object(p) {
            Some(o) => State::Done(Arc::new(o)),
            None => State::Failed,
        });
        // The body now belongs to the stores (and their bounds), or is gone.
        self.release();
        let kept = done.is_some_and(|o| {
            let inner = &self.cache.inner;
            let kept = inner.memory.insert(&self.primary, &self.request, o.clone());
            if let (true, Some(disk)) = (kept, &inner.disk) {
                disk.put(&self.primary, o);
            }
            if kept {
                inner.counters.stored.fetch_add(1, Ordering::Relaxed);
                inner.passes.clear(&self.primary);
            }
            kept
        });
        if self.registered {
            self.cache.unregister(&self.primary, &self.fill);
        }
        kept
    }

    /// Gives the fill up after its head: readers are cut.
    pub fn fail(&mut self) {
        if !self.ended {
            self.cache
                .inner
                .counters
                .fills_failed
                .fetch_add(1, Ordering::Relaxed);
            self.end(|p| {
                if p.head.is_some() {
                    State::Failed
                } else {
                    State::Abandoned
                }
            });
        }
    }

    fn end(&mut self, state: impl FnOnce(&mut fill::Progress) -> State) -> Option<Arc<Object>> {
        self.ended = true;
        if self.registered {
            self.cache.unregister(&self.primary, &self.fill);
        }
        let out = self.fill.end(state);
        self.release();
        out
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.fail();
    }
}

#[cfg(test)]
mod tests;
