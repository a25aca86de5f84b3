//! A ring's spare buffers: an exchange takes its two (the bytes from upstream, the bytes
//! going out) when it starts and gives them back when it ends, so that a kept-alive
//! connection waiting for its next request holds only the small buffer its pending read
//! needs, and no exchange allocates its buffers (a 16 KiB block per request was a
//! `malloc` and a `free` in the runtimes' path, docs/benchmarks.md).

/// Bytes a shelved buffer holds at least: one receive's worth.
pub(super) const STEP: usize = 16 * 1024;
/// Most buffers kept (16 MiB of them): those over it are freed.
const MOST: usize = 1024;

#[derive(Default)]
pub(super) struct Shelf {
    spare: Vec<Vec<u8>>,
}

impl Shelf {
    /// An empty buffer with room for one receive.
    pub(super) fn take(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_else(|| Vec::with_capacity(STEP))
    }

    /// Keeps `buf` (emptied) for the next exchange; a buffer grown past a few receives is
    /// freed instead, as one over the shelf's bound.
    pub(super) fn give(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() < STEP || buf.capacity() > 4 * STEP || self.spare.len() >= MOST {
            return;
        }
        buf.clear();
        self.spare.push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is given back is taken again, emptied; odd sizes are not kept.
    #[test]
    fn buffers_go_round() {
        let mut shelf = Shelf::default();
        let mut a = shelf.take();
        assert!(a.capacity() >= STEP);
        a.extend_from_slice(b"left over");
        let at = a.as_ptr();
        shelf.give(a);
        let b = shelf.take();
        assert_eq!((b.as_ptr(), b.len()), (at, 0));
        shelf.give(Vec::with_capacity(16));
        shelf.give(Vec::with_capacity(8 * STEP));
        assert!(shelf.spare.is_empty());
    }
}
