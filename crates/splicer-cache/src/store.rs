//! A store of objects bounded in bytes, evicted by S3-FIFO (the `quick_cache` crate): the
//! memory tier, and the index of the disk tier (whose objects are files, weighed by their
//! size and unlinked when they are evicted). S3-FIFO rather than LRU because a proxy's traffic is full of objects requested
//! once: they enter a small probationary queue and leave it without pushing out the
//! objects that are asked for again, where LRU lets every one-hit wonder evict a popular
//! object (a scan). It needs no lock on a hit beyond the shard's read lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, OptionsBuilder, Weighter};
use splicer_wire::http::Headers;

use crate::key;
use crate::object::{Body, Object};

/// What a key holds.
#[derive(Debug, Clone)]
enum Slot {
    Object(Arc<Object>),
    /// The response under this URI varies on these (lower-cased) request fields: its
    /// variants are under [`key::variant`] keys of this marker's generation, so that
    /// variants left over from a removed marker are never found again.
    Vary(Arc<Marker>),
}

#[derive(Debug)]
struct Marker {
    names: Vec<String>,
    generation: u64,
}

impl Marker {
    fn key(&self, primary: &str, request: &Headers) -> String {
        key::variant(
            &format!("{primary}#{}", self.generation),
            &self.names,
            request,
        )
    }
}

/// Generations of Vary markers.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// An entry's weight. In the memory tier, what it holds in memory. In the disk tier's index
/// two things are bounded with one weight: its file's bytes (against the tier's size) and
/// what its head holds in memory (against `index_memory`). An entry weighs the larger of
/// its file and its memory times `ratio` (size / index_memory, rounded up), so the weights
/// fitting in `size` means both fit: Σ file ≤ size and Σ memory ≤ size / ratio.
#[derive(Debug, Clone)]
struct Weigh {
    /// 0: the memory tier.
    ratio: u64,
}

impl Weighter<String, Slot> for Weigh {
    fn weight(&self, key: &String, slot: &Slot) -> u64 {
        let key = key.len() as u64;
        let (held, in_memory) = match slot {
            Slot::Object(o) => (o.weight(), o.head_weight()),
            Slot::Vary(m) => {
                let v = 64 + m.names.iter().map(|n| n.len() as u64 + 24).sum::<u64>();
                (v, v)
            }
        };
        (key + held).max((key + in_memory).saturating_mul(self.ratio))
    }
}

/// The largest head memory (key, fields, policy) the index's shards are sized for; the
/// disk tier takes no object with a heavier head.
pub(crate) const INDEX_HEAD: u64 = 64 << 10;

/// What eviction does beyond forgetting: a disk-tier object's file goes with it (a hit
/// that has it open still reads it whole).
#[derive(Debug, Clone, Default)]
struct Evict;

impl Lifecycle<String, Slot> for Evict {
    type RequestState = ();

    fn on_evict(&self, _: &mut (), _: String, slot: Slot) {
        if let Slot::Object(o) = slot {
            unlink(&o);
        }
    }
}

/// Removes a disk-tier object's file (nothing for a memory object, or a file gone already).
pub(crate) fn unlink(object: &Object) {
    if let Body::File(f) = &object.body {
        if let Err(e) = std::fs::remove_file(&f.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %f.path.display(), error = %e, "cache: cannot remove an evicted file");
            }
        }
    }
}

/// A tier: the memory store, or the disk tier's index.
pub struct Store {
    cache: Cache<String, Slot, Weigh, DefaultHashBuilder, Evict>,
    capacity: u64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("capacity", &self.capacity)
            .field("bytes", &self.cache.weight())
            .finish()
    }
}

/// A stored object and the key it is under.
#[derive(Debug, Clone)]
pub struct Found {
    pub object: Arc<Object>,
    pub key: String,
    /// A disk-tier object's file, open (it stays readable if it is evicted meanwhile).
    pub file: Option<Arc<std::fs::File>>,
}

impl Store {
    /// A store of at most `capacity` bytes that takes objects of up to `max_object` bytes.
    /// The store is split into shards that each hold a share of the capacity; there are
    /// as few as it takes for the largest object to fit in one.
    pub fn new(capacity: u64, max_object: u64) -> Store {
        Store::weighed(capacity, max_object, Weigh { ratio: 0 })
    }

    /// The disk tier's index: files of at most `capacity` bytes together, whose heads hold
    /// at most `memory` bytes together (estimated, as the memory tier weighs them).
    pub fn index(capacity: u64, max_object: u64, memory: u64) -> Store {
        let ratio = capacity.div_ceil(memory.max(1)).max(1);
        let largest = max_object.max(INDEX_HEAD.saturating_mul(ratio));
        Store::weighed(capacity, largest, Weigh { ratio })
    }

    fn weighed(capacity: u64, max_object: u64, weigh: Weigh) -> Store {
        let per_object = max_object.max(1).saturating_mul(4);
        let shards = (capacity / per_object).clamp(1, 64).next_power_of_two() as usize;
        let shards = if shards as u64 * per_object > capacity {
            (shards / 2).max(1)
        } else {
            shards
        };
        // Built from values clamped above (a capacity, shards ≥ 1): quick_cache accepts them.
        #[allow(clippy::expect_used)]
        let options = OptionsBuilder::new()
            .weight_capacity(capacity)
            .estimated_items_capacity((capacity / 16_384).clamp(16, 1 << 22) as usize)
            .shards(shards)
            .build()
            .expect("valid store options");
        Store {
            cache: Cache::with_options(options, weigh, Default::default(), Evict),
            capacity,
        }
    }

    /// The object stored for `primary` that `request`'s fields select (its variant).
    pub fn get(&self, primary: &str, request: &Headers) -> Option<Found> {
        match self.cache.get(primary)? {
            Slot::Object(object) => Some(Found {
                object,
                key: primary.to_string(),
                file: None,
            }),
            Slot::Vary(marker) => {
                let key = marker.key(primary, request);
                match self.cache.get(&key)? {
                    Slot::Object(object) => Some(Found {
                        object,
                        key,
                        file: None,
                    }),
                    Slot::Vary(_) => None,
                }
            }
        }
    }

    /// Stores `object`, the response to a request with `request`'s fields, under `primary`
    /// (and its variant key when it has `Vary`). `false` when it was not kept (`Vary: *`).
    pub fn insert(&self, primary: &str, request: &Headers, object: Arc<Object>) -> bool {
        self.put(primary, request, object).is_some()
    }

    /// [`Store::insert`], returning the objects it displaced (the disk tier removes their
    /// files); `None` when it was not kept.
    pub fn put(
        &self,
        primary: &str,
        request: &Headers,
        object: Arc<Object>,
    ) -> Option<Vec<Arc<Object>>> {
        let names = key::vary_names(&object.headers);
        if names.iter().any(|n| n == "*") {
            return None;
        }
        let mut displaced = Vec::new();
        let mut put = |key: String, slot: Slot| {
            if let Some(Slot::Object(old)) = self.cache.peek(&key) {
                displaced.push(old);
            }
            self.cache.insert(key, slot);
        };
        if names.is_empty() {
            put(primary.to_string(), Slot::Object(object));
            return Some(displaced);
        }
        let marker = match self.cache.peek(primary) {
            Some(Slot::Vary(m)) if m.names == names => m,
            _ => {
                let m = Arc::new(Marker {
                    names,
                    generation: GENERATION.fetch_add(1, Ordering::Relaxed),
                });
                put(primary.to_string(), Slot::Vary(m.clone()));
                m
            }
        };
        put(marker.key(primary, request), Slot::Object(object));
        Some(displaced)
    }

    /// Puts `object` back under the key it was found at (after a revalidation).
    pub fn replace(&self, key: &str, object: Arc<Object>) {
        self.cache.insert(key.to_string(), Slot::Object(object));
    }

    /// Forgets `primary` and, for a response with `Vary`, the marker that leads to its
    /// variants (unreachable then; S3-FIFO evicts them first, as nothing asks for them).
    /// Returns whether anything was stored.
    pub fn remove(&self, primary: &str) -> bool {
        self.cache.remove(primary).is_some()
    }

    /// Forgets `key` if it still holds `object` (a disk-tier file that is gone).
    pub fn forget(&self, key: &str, object: &Arc<Object>) {
        self.cache.remove_if(
            key,
            |slot| matches!(slot, Slot::Object(o) if Arc::ptr_eq(o, object)),
        );
    }

    /// Objects and markers held.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Bytes held (as weighed).
    pub fn bytes(&self) -> u64 {
        self.cache.weight()
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn object(fields: &[(&str, &str)], body: usize) -> Arc<Object> {
        crate::testing::object(fields, &Headers::default(), &vec![7u8; body])
    }

    fn req(ae: &str) -> Headers {
        let mut h = Headers::default();
        h.push("Accept-Encoding", ae);
        h
    }

    #[test]
    fn several_variants_per_uri() {
        let m = Store::new(1 << 20, 1 << 16);
        let vary = [("Vary", "Accept-Encoding")];
        assert!(m.insert("u", &req("gzip"), object(&vary, 10)));
        assert!(m.insert("u", &req("br"), object(&vary, 20)));
        assert_eq!(m.get("u", &req("gzip")).unwrap().object.body.len(), 10);
        assert_eq!(m.get("u", &req("br")).unwrap().object.body.len(), 20);
        assert!(m.get("u", &req("zstd")).is_none());
        assert!(!m.insert("s", &req("br"), object(&[("Vary", "*")], 1)));
    }

    #[test]
    fn removed_variants_do_not_come_back() {
        let m = Store::new(1 << 20, 1 << 16);
        let vary = [("Vary", "Accept-Encoding")];
        m.insert("u", &req("gzip"), object(&vary, 10));
        m.insert("u", &req("br"), object(&vary, 20));
        assert!(m.remove("u"));
        assert!(m.get("u", &req("gzip")).is_none());
        // A new response for another variant: the old gzip variant stays gone.
        m.insert("u", &req("br"), object(&vary, 30));
        assert!(m.get("u", &req("gzip")).is_none());
        assert_eq!(m.get("u", &req("br")).unwrap().object.body.len(), 30);
    }

    #[test]
    fn bounded_in_bytes() {
        let cap = 1 << 20;
        let m = Store::new(cap, 64 << 10);
        for i in 0..200 {
            m.insert(&format!("k{i}"), &Headers::default(), object(&[], 32 << 10));
            assert!(m.bytes() <= cap, "{} > {cap} after {i}", m.bytes());
        }
        assert!(m.len() < 200 && m.len() > 10, "{} held", m.len());
    }

    /// S3-FIFO: an object asked for again survives a scan of objects asked for once,
    /// where LRU would have evicted it.
    #[test]
    fn a_scan_does_not_evict_a_popular_object() {
        let m = Store::new(1 << 20, 64 << 10);
        m.insert("popular", &Headers::default(), object(&[], 16 << 10));
        for i in 0..400 {
            assert!(
                m.get("popular", &Headers::default()).is_some(),
                "evicted after {i}"
            );
            m.insert(
                &format!("once{i}"),
                &Headers::default(),
                object(&[], 16 << 10),
            );
        }
    }
}
