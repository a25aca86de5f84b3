//! The pool of idle upstream HTTP connections, per origin (`host:port`), and how one is
//! looked at before it is reused.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

/// An idle upstream connection with the address it is connected to (kept so the rules can
/// be checked again on reuse without a `getpeername` per request).
#[derive(Debug)]
pub struct Idle {
    pub stream: TcpStream,
    pub addr: SocketAddr,
    since: Instant,
}

/// Idle upstream connections kept per origin (`host:port`) for reuse by later requests: at
/// most `per_origin` to one origin and `max_idle` in all (a forward proxy meets many
/// origins; each idle connection is a descriptor), the oldest closed first.
#[derive(Debug)]
pub struct Pool {
    inner: Mutex<PoolInner>,
    per_origin: usize,
    max_idle: usize,
    timeout: Duration,
}

#[derive(Debug)]
struct PoolInner {
    /// Per origin, oldest first.
    idle: HashMap<String, Vec<Idle>>,
    /// Per warm origin (an `edge` server with `min_idle`), how many idle connections are
    /// kept past the idle timeout: they are closed only when the origin closes them.
    floors: HashMap<String, usize>,
    /// Idle connections over all origins.
    total: usize,
}

impl Pool {
    pub fn new(per_origin: usize, timeout: Duration) -> Pool {
        let inner = PoolInner {
            idle: HashMap::new(),
            floors: HashMap::new(),
            total: 0,
        };
        Pool {
            inner: Mutex::new(inner),
            per_origin,
            max_idle: usize::MAX,
            timeout,
        }
    }

    /// At most `max_idle` idle connections over all origins.
    pub fn with_max_idle(mut self, max_idle: usize) -> Pool {
        self.max_idle = max_idle;
        self
    }

    /// Keeps `floor` idle connections to `origin` past the idle timeout (the warm pool of
    /// an `edge` server; who opens them is `warm`).
    pub fn keep_warm(&self, origin: String, floor: usize) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.floors.insert(origin, floor);
    }

    /// A live idle connection to `origin`, most recently used first, looked at as `check`
    /// says.
    pub fn take(&self, origin: &str, check: Check) -> Option<Idle> {
        loop {
            // The kernel is asked outside the lock: other workers give back and take
            // connections meanwhile (holding it across the system call made them wait).
            let (idle, warm) = {
                let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                let warm = inner.floors.contains_key(origin);
                let idle = inner.idle.get_mut(origin)?.pop()?;
                inner.total -= 1;
                (idle, warm)
            };
            let live = match check {
                Check::Reactor => quiet_as_seen(&idle.stream),
                Check::Kernel => quiet(&idle.stream),
            };
            if (warm || idle.since.elapsed() < self.timeout) && live {
                return Some(idle);
            }
        }
    }

    /// Idle connections held for `origin`.
    pub fn idle_for(&self, origin: &str) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.idle.get(origin).map_or(0, Vec::len)
    }

    /// Gives a connection back after a complete exchange.
    pub fn put(&self, origin: String, stream: TcpStream, addr: SocketAddr) {
        if self.per_origin == 0 || self.max_idle == 0 {
            // No pool (`pool_per_origin = 0`): every request connects; this one closes.
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let full = inner
            .idle
            .get(&origin)
            .is_some_and(|l| l.len() >= self.per_origin);
        if (full || inner.total >= self.max_idle)
            && !inner.close_oldest(full.then_some(origin.as_str()))
        {
            // Nothing may go but warm connections: this one closes instead.
            return;
        }
        inner.idle.entry(origin).or_default().push(Idle {
            stream,
            addr,
            since: Instant::now(),
        });
        inner.total += 1;
    }

    /// Closes the connections that expired or that the origin closed or sent bytes on while
    /// idle (run by [`Pool::sweep_every`], so none outlives `pool_idle_timeout` by more than
    /// a period or sits in CLOSE-WAIT). A warm origin's newest `floor` connections do not
    /// expire.
    pub fn sweep(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let timeout = self.timeout;
        let PoolInner {
            idle,
            floors,
            total,
        } = &mut *inner;
        idle.retain(|origin, list| {
            list.retain(|i| quiet(&i.stream));
            // Oldest first, so the expired ones lead.
            let expired = list
                .iter()
                .take_while(|i| i.since.elapsed() >= timeout)
                .count();
            let floor = floors.get(origin).copied().unwrap_or(0);
            list.drain(..expired.min(list.len().saturating_sub(floor)));
            !list.is_empty()
        });
        *total = idle.values().map(Vec::len).sum();
    }

    /// How often [`Pool::sweep`] should run: a tenth of the idle timeout, between 100 ms and
    /// 1 s.
    pub fn sweep_every(&self) -> Duration {
        (self.timeout / 10).clamp(Duration::from_millis(100), Duration::from_secs(1))
    }

    /// Idle connections held (for tests and metrics).
    pub fn len(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.total
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PoolInner {
    /// Closes the oldest idle connection of `origin`, or of all origins (a scan of the
    /// origins, made only when the pool is full) less the warm pools' floors, which the
    /// warm task would only open again; `false` when there was none to close.
    fn close_oldest(&mut self, origin: Option<&str>) -> bool {
        let key = match origin {
            Some(o) => o.to_string(),
            None => {
                let floors = &self.floors;
                let oldest = self
                    .idle
                    .iter()
                    .filter(|(k, l)| l.len() > floors.get(*k).copied().unwrap_or(0))
                    .filter_map(|(k, l)| l.first().map(|i| (i.since, k)))
                    .min();
                match oldest {
                    Some((_, k)) => k.clone(),
                    None => return false,
                }
            }
        };
        let Some(list) = self.idle.get_mut(&key) else {
            return false;
        };
        let closed = !list.is_empty();
        if closed {
            list.remove(0);
            self.total -= 1;
        }
        if list.is_empty() {
            self.idle.remove(&key);
        }
        closed
    }
}

/// How a pooled connection is looked at before it is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// What the reactor saw ([`quiet_as_seen`]): no system call when nothing came. For a
    /// request that is sent again on a fresh connection when the reused one turns out dead
    /// (idempotent, no body: `crate::exchange::ask`).
    Reactor,
    /// What the kernel says now ([`quiet`]): for a request that cannot be sent again.
    Kernel,
}

/// Whether an idle connection has neither bytes nor a FIN nor an error waiting: asked of
/// the kernel (`poll`), not of the reactor, whose view may lag behind an arrival.
pub(crate) fn quiet(s: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    matches!(
        splicer_sys::sock::poll_readable(s.as_raw_fd(), Duration::ZERO),
        Ok(false)
    )
}

/// [`quiet`], asked of the reactor first, as nginx looks at its idle upstream connections
/// (any read event on one closes it): when no read event came since a read drained the
/// socket (a short read clears the readiness: `splicer_relay::read_once_into`), nothing came
/// and no system call is made. When the reactor holds a readiness (an event, a FIN, or one
/// left by a read that filled its buffer or a splice), the kernel is asked; a quiet answer
/// clears the stale readiness, so the next look is free again (a readiness that comes in the
/// meantime is kept: tokio clears only the one it reported).
///
/// What arrived after the reactor's last turn is not seen. That window (at most one turn of
/// a busy worker) is of the same kind as the one the kernel check leaves between its answer
/// and the request's write, only wider; hence [`Check`]: it is used only for requests that
/// are sent again on a fresh connection when the reused one proves dead.
pub(crate) fn quiet_as_seen(s: &TcpStream) -> bool {
    use tokio::io::Interest;
    // `try_io` runs the closure only when the reactor holds a read readiness.
    if s.try_io(Interest::READABLE, || Ok(())).is_err() {
        return true;
    }
    if !quiet(s) {
        return false;
    }
    // Quiet after all: clear the readiness the reactor reported (closed states are never
    // cleared by tokio, but a closed socket is not quiet and does not reach this line).
    let _ = s.try_io(Interest::READABLE, || {
        Err::<(), _>(io::ErrorKind::WouldBlock.into())
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A connected pair: ours (as the pool holds it) and the origin's end.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ours = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (theirs, _) = l.accept().await.unwrap();
        (ours, theirs)
    }

    /// Lets the reactor take in what the kernel has for it.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    #[tokio::test]
    async fn the_reactor_check_sees_bytes_and_closes_and_clears_stale_readiness() {
        let (mut ours, mut theirs) = pair().await;
        settle().await;
        assert!(quiet_as_seen(&ours), "nothing came");
        // A stray byte while idle.
        theirs.write_all(b"x").await.unwrap();
        settle().await;
        assert!(!quiet_as_seen(&ours), "a byte came");
        assert!(!quiet(&ours));
        // Read to the last byte with a read that fills its buffer: tokio keeps the
        // readiness, which no longer means anything. The kernel is asked and clears it.
        let mut one = [0u8; 1];
        ours.read_exact(&mut one).await.unwrap();
        assert!(quiet_as_seen(&ours), "stale readiness, nothing waiting");
        assert!(quiet_as_seen(&ours), "and again, from the reactor alone");
        // Clearing did not blind it to what comes next.
        theirs.write_all(b"y").await.unwrap();
        settle().await;
        assert!(!quiet_as_seen(&ours), "a second byte came");
        ours.read_exact(&mut one).await.unwrap();
        assert!(quiet_as_seen(&ours));
        // The origin closes its end while the connection is idle.
        drop(theirs);
        settle().await;
        assert!(!quiet_as_seen(&ours), "a FIN came");
        assert!(!quiet_as_seen(&ours), "and stays seen");
    }

    /// Reads from the origin's end until the pool's end closes, or gives up.
    async fn closed(theirs: &mut TcpStream, wait_ms: u64) -> bool {
        let mut b = [0u8; 1];
        let wait = Duration::from_millis(wait_ms);
        let read = tokio::time::timeout(wait, theirs.read(&mut b)).await;
        matches!(read, Ok(Ok(0)))
    }

    #[tokio::test]
    async fn a_full_pool_closes_the_oldest_of_the_origin_or_of_all() {
        let pool = Pool::new(2, Duration::from_secs(60)).with_max_idle(3);
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut ends = Vec::new();
        for origin in ["a", "a", "b"] {
            let (ours, theirs) = pair().await;
            pool.put(origin.into(), ours, addr);
            ends.push(theirs);
        }
        assert_eq!(pool.len(), 3);
        // A third for `a`: past its 2, so `a`'s oldest (the first) closes.
        let (ours, theirs) = pair().await;
        pool.put("a".into(), ours, addr);
        ends.push(theirs);
        assert!(closed(&mut ends[0], 1000).await, "a's oldest");
        assert_eq!(pool.len(), 3);
        // One for `c`: past the 3 in all, so the oldest of all (`a`'s second) closes.
        let (ours, theirs) = pair().await;
        pool.put("c".into(), ours, addr);
        ends.push(theirs);
        assert!(closed(&mut ends[1], 1000).await, "the oldest of all");
        assert_eq!(pool.len(), 3);
        for (i, end) in ends.iter_mut().enumerate().skip(2) {
            assert!(!closed(end, 100).await, "connection {i} kept");
        }
        assert_eq!(pool.idle_for("a"), 1);
        assert_eq!(pool.idle_for("b"), 1);
        assert_eq!(pool.idle_for("c"), 1);
        // A warm origin's floor is not closed for another's: with `c` kept warm at 1 and
        // every origin at one, a connection for `d` closes the oldest of `a` and `b`.
        pool.keep_warm("c".into(), 1);
        let (ours, theirs) = pair().await;
        pool.put("d".into(), ours, addr);
        ends.push(theirs);
        assert!(closed(&mut ends[2], 1000).await, "b's, the oldest not warm");
        assert_eq!(pool.idle_for("c"), 1, "the warm one kept");
        // Taken and swept: the count follows.
        assert_eq!(pool.idle_for("b"), 0);
        assert!(pool.take("a", Check::Kernel).is_some());
        assert_eq!(pool.len(), 2);
        pool.sweep();
        assert_eq!(pool.len(), 2);
    }

    #[tokio::test]
    async fn a_pool_take_passes_over_a_connection_the_origin_closed() {
        let pool = Pool::new(4, Duration::from_secs(60));
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let (closed, theirs) = pair().await;
        let (live, _theirs_live) = pair().await;
        pool.put("o".into(), live, addr);
        pool.put("o".into(), closed, addr);
        drop(theirs);
        settle().await;
        for check in [Check::Reactor, Check::Kernel] {
            let got = pool.take("o", check).expect("the live one");
            assert!(quiet(&got.stream), "{check:?}");
            pool.put("o".into(), got.stream, addr);
        }
        assert_eq!(pool.len(), 1, "the closed one is gone");
    }
}
