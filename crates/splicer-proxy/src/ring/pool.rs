//! A ring's idle upstream connections, by server: its own, used by its thread only (no
//! lock, no move between reactors), at most `per_server` to each and `max_idle` in all
//! (the forward proxy's clients name any number of origins), each closed after the pool's
//! idle timeout. The server's shared pool (and its warm connections) belongs to the
//! runtimes; a ring opens its own as its requests need them.
//!
//! An idle connection the server closed is not seen until it is used: the request then
//! goes again once on a new connection (`conn`, as the runtimes' path does for a reused
//! connection that dies before any response byte).

use std::collections::HashMap;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

pub(super) struct Pool {
    idle: HashMap<SocketAddr, Vec<(TcpStream, Instant)>>,
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

    /// The most recently given back connection to `server`, if one is still within its
    /// idle time.
    pub(super) fn take(&mut self, server: SocketAddr) -> Option<TcpStream> {
        let list = self.idle.get_mut(&server)?;
        while let Some((stream, since)) = list.pop() {
            self.held -= 1;
            if since.elapsed() < self.timeout {
                return Some(stream);
            }
        }
        None
    }

    /// Keeps `stream` for `server`'s next request: the server's oldest goes when it has
    /// too many; `stream` is closed when the pool is full.
    pub(super) fn put(&mut self, server: SocketAddr, stream: TcpStream) {
        let list = self.idle.entry(server).or_default();
        if list.len() >= self.per_server {
            list.remove(0);
        } else if self.held >= self.max_idle {
            if list.is_empty() {
                self.idle.remove(&server);
            }
            return;
        } else {
            self.held += 1;
        }
        list.push((stream, Instant::now()));
    }

    /// Closes the connections idle past the timeout.
    pub(super) fn sweep(&mut self) {
        let timeout = self.timeout;
        let mut held = 0;
        for list in self.idle.values_mut() {
            list.retain(|(_, since)| since.elapsed() < timeout);
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
        pool.put(server, a);
        pool.put(server, b);
        pool.put(server, c);
        let port = |s: TcpStream| s.local_addr().unwrap().port();
        assert_eq!(pool.take(server).map(port), Some(ports[2]));
        assert_eq!(pool.take(server).map(port), Some(ports[1]));
        assert!(pool.take(server).is_none(), "the oldest was closed");

        let mut quick = Pool::new((2, 8), Duration::from_millis(1));
        quick.put(server, pair(&l));
        std::thread::sleep(Duration::from_millis(5));
        quick.sweep();
        assert!(quick.take(server).is_none());
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
        pool.put(s1, pair(&l1));
        pool.put(s1, pair(&l1));
        pool.put(s2, pair(&l2));
        pool.put(s2, pair(&l2));
        assert!(pool.take(s2).is_some());
        assert!(pool.take(s2).is_none(), "the fourth was closed");
        pool.put(s2, pair(&l2));
        assert!(pool.take(s2).is_some(), "a place was open again");
        assert!(pool.take(s1).is_some() && pool.take(s1).is_some());
        assert!(pool.take(s1).is_none());
    }
}
