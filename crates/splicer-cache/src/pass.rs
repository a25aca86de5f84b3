//! URIs whose last response could not be stored, remembered for a while so that misses for
//! them are not collapsed (Varnish's "hit-for-miss").
//!
//! Without it, collapsing serialises every URI that is never stored: concurrent requests
//! wait for the first one's response head, learn it cannot be stored, and only then go
//! upstream themselves, each a round trip late (nginx's `proxy_cache_lock` has this
//! cost). A mark only turns collapsing off: a response that has become storable is still
//! stored, and storing one clears the mark.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most URIs remembered; past it, new marks are not taken (those URIs collapse as before).
const MOST: usize = 65_536;

#[derive(Debug)]
pub struct Passes {
    /// URI → when the mark expires.
    marks: Mutex<HashMap<String, Instant>>,
    ttl: Duration,
}

impl Passes {
    /// Marks last `ttl`; zero: nothing is remembered.
    pub fn new(ttl: Duration) -> Passes {
        Passes {
            marks: Mutex::new(HashMap::new()),
            ttl,
        }
    }

    /// Whether misses for `primary` go upstream each on its own.
    pub fn marked(&self, primary: &str) -> bool {
        if self.ttl.is_zero() {
            return false;
        }
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        match marks.get(primary) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                marks.remove(primary);
                false
            }
            None => false,
        }
    }

    /// The response to a miss for `primary` could not be stored.
    pub fn mark(&self, primary: &str) {
        if self.ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        if marks.len() >= MOST && !marks.contains_key(primary) {
            marks.retain(|_, until| *until > now);
            if marks.len() >= MOST {
                return;
            }
        }
        marks.insert(primary.to_string(), now + self.ttl);
    }

    /// A response for `primary` was stored.
    pub fn clear(&self, primary: &str) {
        if self.ttl.is_zero() {
            return;
        }
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        marks.remove(primary);
    }

    /// URIs marked (expired ones included until they are next asked about).
    pub fn len(&self) -> usize {
        self.marks.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_lasts_its_time_and_a_store_clears_it() {
        let p = Passes::new(Duration::from_millis(50));
        assert!(!p.marked("a"));
        p.mark("a");
        assert!(p.marked("a"));
        assert!(!p.marked("b"));
        p.clear("a");
        assert!(!p.marked("a"));
        p.mark("a");
        std::thread::sleep(Duration::from_millis(80));
        assert!(!p.marked("a"), "expired");
        assert!(p.is_empty(), "an expired mark is dropped when asked about");
    }

    #[test]
    fn zero_remembers_nothing() {
        let p = Passes::new(Duration::ZERO);
        p.mark("a");
        assert!(!p.marked("a"));
        assert!(p.is_empty());
    }

    #[test]
    fn marks_are_bounded() {
        let p = Passes::new(Duration::from_secs(60));
        for i in 0..MOST + 10 {
            p.mark(&i.to_string());
        }
        assert_eq!(p.len(), MOST);
        assert!(
            !p.marked(&(MOST + 5).to_string()),
            "past the bound, not taken"
        );
        assert!(p.marked("0"));
    }
}
