//! Deterministic content: any client can check a digest of what it received knowing only
//! the size and the seed.

/// Length of the repeated block: a prime-ish size that divides no buffer or pipe size, so a
/// misplaced chunk changes the digest.
pub const BLOCK: usize = (1 << 20) + 7;

/// A seeded block, repeated to any length.
pub struct Pattern {
    block: Vec<u8>,
}

impl Pattern {
    pub fn new(seed: u64) -> Pattern {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let block = (0..BLOCK)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Pattern { block }
    }

    /// Calls `f` with consecutive pieces totalling `len` bytes.
    pub fn feed(&self, mut len: u64, mut f: impl FnMut(&[u8])) {
        while len > 0 {
            let k = len.min(BLOCK as u64) as usize;
            f(&self.block[..k]);
            len -= k as u64;
        }
    }

    pub fn bytes(&self, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len);
        self.feed(len as u64, |c| v.extend_from_slice(c));
        v
    }

    /// The first `len` bytes of the block (`len` ≤ [`BLOCK`]).
    pub fn block(&self, len: usize) -> &[u8] {
        &self.block[..len.min(BLOCK)]
    }
}

/// Patterns by seed, each built once: building one (a 1 MiB block) costs milliseconds, far
/// more than serving a small object.
#[derive(Default)]
pub struct Patterns(std::sync::Mutex<std::collections::HashMap<u64, std::sync::Arc<Pattern>>>);

impl Patterns {
    pub fn get(&self, seed: u64) -> std::sync::Arc<Pattern> {
        let mut m = self.0.lock().expect("patterns");
        // A bound on memory when clients ask for many seeds.
        if m.len() >= 64 && !m.contains_key(&seed) {
            m.clear();
        }
        m.entry(seed)
            .or_insert_with(|| std::sync::Arc::new(Pattern::new(seed)))
            .clone()
    }
}

/// A small seeded generator (xorshift64*) for think times; the load generators will use
/// `rand_distr` for their distributions.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// Lowercase hex of `bytes` (digests in responses and test reports).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
