//! The *tap* (seed 000's TCP Tap): a copy of the bytes a splice moves, handed to someone
//! else (the cache's fill) as they flow. Apart from the splice and its engines, which all
//! take one.

/// Whoever wants a copy of the bytes a splice moves (the cache's fill): a *tap*.
pub trait Tap: Send {
    /// Bytes the splice read from its source, in order, before they are written on.
    /// Returns `false` to stop tapping: the rest is spliced untapped.
    fn tap(&mut self, bytes: &[u8]) -> bool;
}
