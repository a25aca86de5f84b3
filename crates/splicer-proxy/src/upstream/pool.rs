//! The pool of idle upstream HTTP connections, per origin (`host:port`) and per connection
//! thread, and how one is looked at before it is reused.
//!
//! A connection is kept with the thread it was last used on (`crate::threads`): its
//! socket is registered with that thread's reactor, and that thread's requests take it
//! again first. Only a thread that has none for the origin takes another thread's (the
//! oldest, the one its owner would take last), registering it with its own reactor: two
//! `epoll_ctl` calls, a wake-up of the thread it leaves, and a `poll` to look at it, still
//! far cheaper than connecting. Kept in one list per origin, with a look at only the
//! newest few for the thread's own, connections went to and fro between the threads at
//! every fifth request (0.4 `epoll_ctl` per request, docs/benchmarks.md); by thread, each
//! settles on its own. Those opened on the server's runtime (an edge's warm pool) belong
//! to no thread: any thread takes them before another thread's.

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
    idle: HashMap<String, Origin>,
    /// Per warm origin (an `edge` server with `min_idle`), how many idle connections are
    /// kept past the idle timeout: they are closed only when the origin closes them.
    floors: HashMap<String, usize>,
    /// Idle connections over all origins.
    total: usize,
}

/// One origin's idle connections, by the thread they belong to: slot 0 for none (the
/// server's runtime, or a runtime that is not a connection thread), slot `i + 1` for
/// connection thread `i`; each oldest first.
#[derive(Debug, Default)]
struct Origin {
    by_home: Vec<Vec<Idle>>,
    len: usize,
}

/// The slot of the thread `home` (from `crate::threads::current`).
fn slot(home: Option<usize>) -> usize {
    home.map_or(0, |i| i + 1)
}

impl Origin {
    fn push(&mut self, home: Option<usize>, idle: Idle) {
        let at = slot(home);
        if self.by_home.len() <= at {
            self.by_home.resize_with(at + 1, Vec::new);
        }
        self.by_home[at].push(idle);
        self.len += 1;
    }

    /// The most recently used connection of `home`'s, else one of no thread's, else the
    /// oldest of another thread's, the one its own thread would take last (with whether
    /// it must be registered with `home`'s reactor).
    fn pop(&mut self, home: Option<usize>) -> Option<(Idle, bool)> {
        let own = slot(home);
        let taken = match self.by_home.get_mut(own).and_then(Vec::pop) {
            Some(i) => Some((i, false)),
            None => self
                .by_home
                .get_mut(0)
                .and_then(Vec::pop)
                .or_else(|| {
                    let (_, list) = self
                        .by_home
                        .iter_mut()
                        .enumerate()
                        .find(|(at, l)| *at != own && !l.is_empty())?;
                    Some(list.remove(0))
                })
                .map(|i| (i, true)),
        };
        if taken.is_some() {
            self.len -= 1;
        }
        taken
    }

    /// When the oldest connection, of any thread, was given back.
    fn oldest(&self) -> Option<Instant> {
        self.by_home
            .iter()
            .filter_map(|l| l.first())
            .map(|i| i.since)
            .min()
    }

    /// Closes the oldest connection; `false` when there was none.
    fn close_oldest(&mut self) -> bool {
        let list = self
            .by_home
            .iter_mut()
            .filter(|l| !l.is_empty())
            .min_by_key(|l| l.first().map(|i| i.since));
        match list {
            Some(l) => {
                l.remove(0);
                self.len -= 1;
                true
            }
            None => false,
        }
    }

    /// Closes what the origin closed or sent bytes on (`noisy`: their descriptors), then
    /// the expired, oldest first, keeping the newest `floor`.
    fn sweep(
        &mut self,
        noisy: &std::collections::HashSet<std::os::fd::RawFd>,
        timeout: Duration,
        floor: usize,
    ) {
        use std::os::fd::AsRawFd;
        for list in &mut self.by_home {
            list.retain(|i| !noisy.contains(&i.stream.as_raw_fd()));
        }
        self.len = self.by_home.iter().map(Vec::len).sum();
        while self.len > floor && self.oldest().is_some_and(|t| t.elapsed() >= timeout) {
            self.close_oldest();
        }
    }
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

    /// A live idle connection to `origin`, this thread's first (most recently used first),
    /// then one of no thread's, then another thread's ([`Origin::pop`]), looked at as
    /// `check` says, registered with this thread's reactor.
    pub fn take(&self, origin: &str, check: Check) -> Option<Idle> {
        let here = crate::threads::current();
        loop {
            let (idle, moves) = self.pop_fresh(origin, here)?;
            // One from elsewhere has its readiness in another reactor: this thread's has
            // seen nothing of it yet, so only the kernel can say it is quiet.
            let stream = match moves {
                false => idle.stream,
                true => match crate::threads::rehome(idle.stream) {
                    Ok(s) => s,
                    Err(_) => continue,
                },
            };
            let live = match check {
                Check::Reactor if !moves => quiet_as_seen(&stream),
                _ => quiet(&stream),
            };
            if live {
                return Some(Idle { stream, ..idle });
            }
        }
    }

    /// A live idle connection to `origin`, taken out of its reactor for a ring
    /// (`crate::ring`) that has none of its own to the origin: one the warm task opened
    /// (`min_idle`, no thread's) first, else another thread's oldest. Without it, the rings
    /// would connect anew while the warm connections, and those whose long answers a ring
    /// handed to the runtimes, sat idle here (a client per request, each starting on a
    /// ring, connected every time).
    pub fn take_for_ring(&self, origin: &str) -> Option<(std::net::TcpStream, SocketAddr)> {
        loop {
            let (idle, _) = self.pop_fresh(origin, None)?;
            if !quiet(&idle.stream) {
                continue;
            }
            // Out of its runtime's reactor: the ring asks the kernel itself.
            if let Ok(stream) = idle.stream.into_std() {
                return Some((stream, idle.addr));
            }
        }
    }

    /// The next idle connection to `origin` for `home` ([`Origin::pop`]) that has not
    /// outlived the idle timeout (a warm origin's never do: its floor keeps them). Those
    /// that have are closed after the lock is let go, and whether the one taken is still
    /// quiet is the caller's to ask the kernel, outside it too: other workers give back and
    /// take connections meanwhile (holding it across system calls made them wait).
    fn pop_fresh(&self, origin: &str, home: Option<usize>) -> Option<(Idle, bool)> {
        let mut stale = Vec::new();
        let taken = {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let warm = inner.floors.contains_key(origin);
            loop {
                let Some(taken) = inner.idle.get_mut(origin).and_then(|o| o.pop(home)) else {
                    break None;
                };
                inner.total -= 1;
                if warm || taken.0.since.elapsed() < self.timeout {
                    break Some(taken);
                }
                stale.push(taken);
            }
        };
        drop(stale);
        taken
    }

    /// Idle connections held for `origin`, over every thread.
    pub fn idle_for(&self, origin: &str) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.idle.get(origin).map_or(0, |o| o.len)
    }

    /// Gives a connection back after a complete exchange, kept for this thread (the origin's
    /// name is copied only when first kept: once per request was an allocation each).
    pub fn put(&self, origin: &str, stream: TcpStream, addr: SocketAddr) {
        if self.per_origin == 0 || self.max_idle == 0 {
            // No pool (`pool_per_origin = 0`): every request connects; this one closes.
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let full = inner
            .idle
            .get(origin)
            .is_some_and(|o| o.len >= self.per_origin);
        if (full || inner.total >= self.max_idle) && !inner.close_oldest(full.then_some(origin)) {
            // Nothing may go but warm connections: this one closes instead.
            return;
        }
        let idle = Idle {
            stream,
            addr,
            since: Instant::now(),
        };
        let home = crate::threads::current();
        match inner.idle.get_mut(origin) {
            Some(kept) => kept.push(home, idle),
            None => {
                let mut kept = Origin::default();
                kept.push(home, idle);
                inner.idle.insert(origin.to_string(), kept);
            }
        }
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
        // Every idle connection looked at in one system call: the lock is held across it,
        // and with a pool as large as the load (800 idle connections at 1,000 clients) one
        // call per connection held every request's take and put for as many calls.
        use std::os::fd::AsRawFd;
        let fds: Vec<_> = idle
            .values()
            .flat_map(|o| o.by_home.iter().flatten())
            .map(|i| i.stream.as_raw_fd())
            .collect();
        // When the kernel cannot be asked, none is closed for it; expiry still applies.
        let quiet = splicer_sys::sock::poll_quiet(&fds).unwrap_or_else(|_| vec![true; fds.len()]);
        // Descriptors are unique among open sockets: the few that are not quiet, by number.
        let noisy: std::collections::HashSet<_> = fds
            .iter()
            .zip(quiet)
            .filter_map(|(fd, q)| (!q).then_some(*fd))
            .collect();
        idle.retain(|origin, o| {
            o.sweep(&noisy, timeout, floors.get(origin).copied().unwrap_or(0));
            o.len > 0
        });
        *total = idle.values().map(|o| o.len).sum();
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
                    .filter(|(k, o)| o.len > floors.get(*k).copied().unwrap_or(0))
                    .filter_map(|(k, o)| o.oldest().map(|t| (t, k)))
                    .min();
                match oldest {
                    Some((_, k)) => k.clone(),
                    None => return false,
                }
            }
        };
        let Some(o) = self.idle.get_mut(&key) else {
            return false;
        };
        let closed = o.close_oldest();
        if closed {
            self.total -= 1;
        }
        if o.len == 0 {
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
mod tests;
