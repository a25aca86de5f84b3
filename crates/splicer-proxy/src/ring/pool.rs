//! A ring's idle upstream connections, by server: its own, used by its thread only (no
//! lock, no move between reactors), at most `per_server` to each, each closed after the
//! pool's idle timeout. The server's shared pool (and its warm connections) belongs to the
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
    timeout: Duration,
}

impl Pool {
    pub(super) fn new(per_server: usize, timeout: Duration) -> Pool {
        Pool {
            idle: HashMap::new(),
            per_server: per_server.max(1),
            timeout,
        }
    }

    /// The most recently given back connection to `server`, if one is still within its
    /// idle time.
    pub(super) fn take(&mut self, server: SocketAddr) -> Option<TcpStream> {
        let list = self.idle.get_mut(&server)?;
        while let Some((stream, since)) = list.pop() {
            if since.elapsed() < self.timeout {
                return Some(stream);
            }
        }
        None
    }

    /// Keeps `stream` for `server`'s next request; the oldest goes when there are too many.
    pub(super) fn put(&mut self, server: SocketAddr, stream: TcpStream) {
        let list = self.idle.entry(server).or_default();
        if list.len() >= self.per_server {
            list.remove(0);
        }
        list.push((stream, Instant::now()));
    }

    /// Closes the connections idle past the timeout.
    pub(super) fn sweep(&mut self) {
        let timeout = self.timeout;
        for list in self.idle.values_mut() {
            list.retain(|(_, since)| since.elapsed() < timeout);
        }
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
        let mut pool = Pool::new(2, Duration::from_secs(60));
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

        let mut quick = Pool::new(2, Duration::from_millis(1));
        quick.put(server, pair(&l));
        std::thread::sleep(Duration::from_millis(5));
        quick.sweep();
        assert!(quick.take(server).is_none());
    }
}
