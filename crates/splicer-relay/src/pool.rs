//! Bounded pools of buffers and pipes. Items are taken when bytes start flowing and given
//! back when the source is drained; at most `max_idle` are kept, the rest are freed, so an
//! idle proxy's memory shrinks back.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

use splicer_sys::pipe::Pipe;

/// Idle items held by the pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub idle_buffers: usize,
    pub idle_pipes: usize,
}

#[derive(Debug)]
struct Pool<T> {
    idle: Mutex<Vec<T>>,
    max_idle: usize,
}

impl<T> Pool<T> {
    fn new(max_idle: usize) -> Self {
        Pool {
            idle: Mutex::new(Vec::new()),
            max_idle,
        }
    }
    fn take(&self) -> Option<T> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }
    fn give(&self, item: T) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.max_idle {
            idle.push(item);
        }
    }
    fn len(&self) -> usize {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Pool of fixed-size user-space buffers for the `copy` engine.
#[derive(Debug)]
pub struct BufferPool {
    pool: Pool<Box<[u8]>>,
    size: usize,
}

impl BufferPool {
    pub fn new(size: usize, max_idle: usize) -> Self {
        BufferPool {
            pool: Pool::new(max_idle),
            size,
        }
    }
    pub fn take(&self) -> Lease<'_, Box<[u8]>> {
        let buf = self
            .pool
            .take()
            .unwrap_or_else(|| vec![0u8; self.size].into_boxed_slice());
        Lease {
            item: Some(buf),
            pool: &self.pool,
            reusable: true,
        }
    }
    pub fn idle(&self) -> usize {
        self.pool.len()
    }
}

/// Pool of pipes for the `pipe` engine.
#[derive(Debug)]
pub struct PipePool {
    pool: Pool<Pipe>,
    size: usize,
}

impl PipePool {
    pub fn new(size: usize, max_idle: usize) -> Self {
        PipePool {
            pool: Pool::new(max_idle),
            size,
        }
    }
    pub fn take(&self) -> std::io::Result<Lease<'_, Pipe>> {
        let pipe = match self.pool.take() {
            Some(p) => p,
            None => Pipe::new(self.size)?,
        };
        Ok(Lease {
            item: Some(pipe),
            pool: &self.pool,
            reusable: true,
        })
    }
    pub fn idle(&self) -> usize {
        self.pool.len()
    }
}

/// An item on loan from a pool; given back on drop unless marked not reusable (a pipe that
/// still holds bytes must be closed, never handed to another splice).
pub struct Lease<'a, T> {
    item: Option<T>,
    pool: &'a Pool<T>,
    reusable: bool,
}

impl<T> Lease<'_, T> {
    pub fn set_reusable(&mut self, reusable: bool) {
        self.reusable = reusable;
    }
}

impl<T> Deref for Lease<'_, T> {
    type Target = T;
    // The item is taken out only by `drop`, after which nothing can deref the lease.
    #[allow(clippy::expect_used)]
    fn deref(&self) -> &T {
        self.item
            .as_ref()
            .expect("lease holds its item until dropped")
    }
}

impl<T> DerefMut for Lease<'_, T> {
    // As `deref`.
    #[allow(clippy::expect_used)]
    fn deref_mut(&mut self) -> &mut T {
        self.item
            .as_mut()
            .expect("lease holds its item until dropped")
    }
}

impl<T> Drop for Lease<'_, T> {
    fn drop(&mut self) {
        if let (Some(item), true) = (self.item.take(), self.reusable) {
            self.pool.give(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_reuse_and_bound() {
        let p = BufferPool::new(16, 1);
        let a = p.take();
        let b = p.take();
        drop(a);
        drop(b);
        assert_eq!(p.idle(), 1, "only max_idle kept");
        let pipes = PipePool::new(65536, 4);
        let mut dirty = pipes.take().unwrap();
        dirty.set_reusable(false);
        drop(dirty);
        assert_eq!(pipes.idle(), 0, "a dirty pipe is never pooled");
        drop(pipes.take().unwrap());
        assert_eq!(pipes.idle(), 1);
    }
}
