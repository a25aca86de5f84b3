//! A ring's idle upstream connections, by server: its own, used by its thread only (no
//! lock, no move between reactors), at most `per_server` to each and `max_idle` in all
//! (the forward proxy's clients name any number of origins), each closed after the pool's
//! idle timeout. The server's shared pool belongs to the runtimes; a ring opens its own
//! as its requests need them, or takes one from the shared pool when it has none (an
//! edge's warm connection, `min_idle`, or one a long answer handed to the runtimes left
//! there: `Pool::take_for_ring`).
//!
//! An idle connection the server closed is not seen until it is used: the request then
//! goes again once on a new connection (`conn`, as the runtimes' path does for a reused
//! connection that dies before any response byte).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::upstream::Destination;

/// A server's key in the pool: how requests name it (`host:port`, the runtimes' pool key
/// too), shared with the requests (no string made per request). The forward proxy's
/// connections to a name are found by the name, without resolving it again.
#[derive(Clone)]
struct Key(Arc<Destination>);

impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        // As `str` hashes: lookups borrow the key as one.
        self.0.key.as_str().hash(h);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for Key {}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

pub(super) struct Pool {
    idle: HashMap<Key, Vec<(TcpStream, SocketAddr, Instant)>>,
    per_server: usize,
    max_idle: usize,
    /// Connections held, over all servers.
    held: usize,
    timeout: Duration,
}

impl Pool {
    pub(super) fn new((per_server, max_idle): (usize, usize), timeout: Duration) -> Pool {
        Pool {
            idle: HashMap::new(),
            per_server: per_server.max(1),
            max_idle: max_idle.max(1),
            held: 0,
            timeout,
        }
    }

    /// The most recently given back connection to the server `key` names, with its
    /// address, if one is still within its idle time.
    pub(super) fn take(&mut self, key: &str) -> Option<(TcpStream, SocketAddr)> {
        let list = self.idle.get_mut(key)?;
        while let Some((stream, addr, since)) = list.pop() {
            self.held -= 1;
            if since.elapsed() < self.timeout {
                return Some((stream, addr));
            }
        }
        None
    }

    /// Keeps `stream` (to `addr`) for the next request to `name`: the name's oldest goes
    /// when it has too many; `stream` is closed when the pool is full.
    pub(super) fn put(&mut self, name: &Arc<Destination>, addr: SocketAddr, stream: TcpStream) {
        if self.held >= self.max_idle
            && self
                .idle
                .get(name.key.as_str())
                .is_none_or(|l| l.len() < self.per_server)
        {
            return;
        }
        let list = self.idle.entry(Key(name.clone())).or_default();
        if list.len() >= self.per_server {
            list.remove(0);
        } else {
            self.held += 1;
        }
        list.push((stream, addr, Instant::now()));
    }

    /// Whether it holds no connection (nothing for the sweep to close).
    pub(super) fn is_empty(&self) -> bool {
        self.held == 0
    }

    /// Closes the connections idle past the timeout.
    pub(super) fn sweep(&mut self) {
        let timeout = self.timeout;
        let mut held = 0;
        for list in self.idle.values_mut() {
            list.retain(|(_, _, since)| since.elapsed() < timeout);
            held += list.len();
        }
        self.held = held;
        self.idle.retain(|_, l| !l.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(listener: &std::net::TcpListener) -> TcpStream {
        TcpStream::connect(listener.local_addr().unwrap()).unwrap()
    }

    /// The destination `addr` names, as a request to it names it.
    fn named(addr: SocketAddr) -> Arc<Destination> {
        let a = splicer_wire::http::Authority::parse(&addr.to_string(), None).unwrap();
        Arc::new(Destination::new(a))
    }

    /// Newest first, at most `per_server` kept, none past the timeout.
    #[test]
    fn keeps_the_newest_within_bounds() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = l.local_addr().unwrap();
        let mut pool = Pool::new((2, 8), Duration::from_secs(60));
        let (a, b, c) = (pair(&l), pair(&l), pair(&l));
        let ports: Vec<u16> = [&a, &b, &c]
            .iter()
            .map(|s| s.local_addr().unwrap().port())
            .collect();
        pool.put(&named(server), server, a);
        pool.put(&named(server), server, b);
        pool.put(&named(server), server, c);
        let port = |(s, _): (TcpStream, SocketAddr)| s.local_addr().unwrap().port();
        assert_eq!(pool.take(&server.to_string()).map(port), Some(ports[2]));
        assert_eq!(pool.take(&server.to_string()).map(port), Some(ports[1]));
        assert!(
            pool.take(&server.to_string()).is_none(),
            "the oldest was closed"
        );

        let mut quick = Pool::new((2, 8), Duration::from_millis(1));
        quick.put(&named(server), server, pair(&l));
        std::thread::sleep(Duration::from_millis(5));
        quick.sweep();
        assert!(quick.take(&server.to_string()).is_none());
    }

    /// At most `max_idle` over all servers: a connection past it is closed, and a place
    /// a taken one left is open again.
    #[test]
    fn holds_at_most_max_idle_in_all() {
        let (l1, l2) = (
            std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
        );
        let (s1, s2) = (l1.local_addr().unwrap(), l2.local_addr().unwrap());
        let mut pool = Pool::new((2, 3), Duration::from_secs(60));
        pool.put(&named(s1), s1, pair(&l1));
        pool.put(&named(s1), s1, pair(&l1));
        pool.put(&named(s2), s2, pair(&l2));
        pool.put(&named(s2), s2, pair(&l2));
        assert!(pool.take(&s2.to_string()).is_some());
        assert!(
            pool.take(&s2.to_string()).is_none(),
            "the fourth was closed"
        );
        pool.put(&named(s2), s2, pair(&l2));
        assert!(
            pool.take(&s2.to_string()).is_some(),
            "a place was open again"
        );
        assert!(pool.take(&s1.to_string()).is_some() && pool.take(&s1.to_string()).is_some());
        assert!(pool.take(&s1.to_string()).is_none());
    }
}
