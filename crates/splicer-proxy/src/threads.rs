//! Connection threads: every client connection is served, to its end, by one of
//! `limits.threads` threads, each running a single-threaded runtime of its own (`0`, the
//! default: one per CPU the process may use, as HAProxy's `nbthread`). With `threads =
//! "shared"` the binary's work-stealing runtime serves them instead. Connection threads
//! became the default once they carried HAProxy's rate on the per-request path where the
//! shared runtime carried about 0.8 of it, with a tail no longer than HAProxy's, and a
//! mixed load (1 MiB bodies beside small requests) took no harm from them
//! (docs/benchmarks.md, "Connection threads").
//!
//! Why not tokio's work-stealing runtime for connections: on the per-request path it hands
//! work between its workers (a task woken on one is run by another, a parked worker is
//! woken with a futex and an IPI), and a buffer allocated on one worker is freed on the
//! other, under glibc's arena lock (docs/benchmarks.md, "Where the time goes"). A
//! connection that stays on one thread pays none of that. The price is that threads do not
//! share load once a connection is placed: the accept loop places each new connection on
//! the first thread within one of the fewest.
//!
//! The server's own work (accepting, reloads, health checks, warm pools, the admin
//! listener) stays on the binary's runtime. A socket belongs to the runtime whose reactor
//! it is registered with: one that moves between threads (an idle upstream connection
//! taken by another thread's request, `crate::upstream::Pool`) is registered again where
//! it goes, so its events are never delivered to a thread that does not serve it.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

thread_local! {
    /// The connection thread this is, if it is one.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The connection thread this code runs on (`None` on any other thread: the server's
/// runtime, a test's).
pub fn current() -> Option<usize> {
    CURRENT.with(Cell::get)
}

/// How long a stopping thread waits for the blocking work its runtime started (a password
/// check, a name lookup) before it lets it go.
const BLOCKING_GRACE: Duration = Duration::from_secs(1);

/// The connection threads, started with the server and stopped when it is dropped.
#[derive(Debug)]
pub struct Threads {
    threads: Vec<Thread>,
    placer: Arc<Placer>,
    /// The rings beside them (`limits.io = "ring"`, `crate::ring`), which hand them the
    /// connections they do not serve.
    rings: Option<crate::ring::Rings>,
}

#[derive(Debug)]
struct Thread {
    handle: Handle,
    /// Connections being served here.
    open: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
    join: Option<std::thread::JoinHandle<()>>,
}

/// A `limits.threads` of threads: 0 is one per CPU the process may use.
pub fn count(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

impl Threads {
    /// No connection threads: connections are served where they are accepted.
    pub fn none() -> Threads {
        Threads {
            threads: Vec::new(),
            placer: Arc::new(Placer {
                threads: Vec::new(),
            }),
            rings: None,
        }
    }

    /// Starts `n` connection threads (at least one).
    pub fn start(n: usize) -> std::io::Result<Threads> {
        let mut threads = Vec::with_capacity(n.max(1));
        for i in 0..n.max(1) {
            threads.push(Thread::start(i)?);
        }
        let placer = Arc::new(Placer {
            threads: threads
                .iter()
                .map(|t| (t.handle.clone(), t.open.clone()))
                .collect(),
        });
        Ok(Threads {
            threads,
            placer,
            rings: None,
        })
    }

    /// With `rings` beside them.
    pub fn with_rings(mut self, rings: crate::ring::Rings) -> Threads {
        self.rings = Some(rings);
        self
    }

    /// The rings, when they run.
    pub fn rings(&self) -> Option<&crate::ring::Rings> {
        self.rings.as_ref()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }

    /// Connections being served, per thread (for tests).
    pub fn open(&self) -> Vec<usize> {
        self.threads
            .iter()
            .map(|t| t.open.load(Ordering::Relaxed))
            .collect()
    }

    /// Serves `stream` on a connection thread ([`Placer::place`]).
    pub fn place<F, Fut>(&self, stream: std::net::TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        self.placer.place(stream, serve);
    }

    /// What places connections on the threads, for whoever hands them connections later
    /// (a ring): it does not keep the threads running.
    pub fn placer(&self) -> Arc<Placer> {
        self.placer.clone()
    }
}

/// The connection threads' runtimes and counts of open connections, to place connections
/// on them.
#[derive(Debug)]
pub struct Placer {
    threads: Vec<(Handle, Arc<AtomicUsize>)>,
}

impl Placer {
    /// Serves `stream` (accepted elsewhere, not registered with any reactor) on the first
    /// thread with at most one open connection more than the fewest: `serve` is given it
    /// registered with that thread's reactor, and runs there to its end.
    pub fn place<F, Fut>(&self, stream: std::net::TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        // Within one of the fewest: a client that just left may not have been counted
        // out yet when the next one comes, and clients that come one after the other
        // should share a thread (and its idle upstream connections).
        let fewest = self
            .threads
            .iter()
            .map(|(_, open)| open.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0);
        let Some(thread) = self
            .threads
            .iter()
            .find(|(_, open)| open.load(Ordering::Relaxed) <= fewest + 1)
        else {
            return;
        };
        let open = Counted::new(thread.1.clone());
        thread.0.spawn(async move {
            let _open = open;
            match TcpStream::from_std(stream) {
                Ok(stream) => serve(stream).await,
                // Only when the reactor cannot take another descriptor: the client's
                // connection closes (counted as accepted, with no access line).
                Err(e) => tracing::warn!("cannot serve an accepted connection: {e}"),
            }
        });
    }
}

#[cfg(test)]
impl Threads {
    /// Runs `work` on thread `i` and gives back what it returns (tests of what depends on
    /// the thread, such as the pool's).
    pub(crate) fn run_on<T: Send + 'static>(
        &self,
        i: usize,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        self.threads[i].handle.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("thread {i} did not finish its work"))
    }
}

impl Thread {
    fn start(index: usize) -> std::io::Result<Thread> {
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let join = std::thread::Builder::new()
            .name(format!("splicer-conn-{index}"))
            .spawn(move || {
                CURRENT.with(|c| c.set(Some(index)));
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(runtime.handle().clone()));
                runtime.block_on(async {
                    let _ = stopped.await;
                });
                // The connections still open here are dropped with the runtime (the
                // server stops its threads after its shutdown grace).
                runtime.shutdown_timeout(BLOCKING_GRACE);
            })?;
        let handle = ready
            .recv()
            .map_err(|_| std::io::Error::other("a connection thread ended at its start"))??;
        Ok(Thread {
            handle,
            open: Arc::new(AtomicUsize::new(0)),
            stop: Some(stop),
            join: Some(join),
        })
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        // The rings first: they hand connections to the threads.
        drop(self.rings.take());
        for t in &mut self.threads {
            if let Some(stop) = t.stop.take() {
                let _ = stop.send(());
            }
        }
        for t in &mut self.threads {
            if let Some(join) = t.join.take() {
                let _ = join.join();
            }
        }
    }
}

/// One open connection counted on its thread, until dropped (also when its task is
/// dropped unfinished, at the end of a shutdown).
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(open: Arc<AtomicUsize>) -> Counted {
        open.fetch_add(1, Ordering::Relaxed);
        Counted(open)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `stream`, registered with another runtime's reactor, registered with this thread's
/// instead. Readiness the old reactor had seen is not carried over: whoever looks at the
/// socket next must ask the kernel.
pub fn rehome(stream: TcpStream) -> std::io::Result<TcpStream> {
    TcpStream::from_std(stream.into_std()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.set_nonblocking(true).unwrap();
        (a, b)
    }

    /// Connections go to the first thread within one of the fewest, run there (its index
    /// is `current` inside), and are counted until they end.
    #[test]
    fn connections_are_placed_near_the_least_busy_thread_and_counted() {
        let threads = Threads::start(2).unwrap();
        assert_eq!(threads.len(), 2);
        let (seen_tx, seen) = std::sync::mpsc::channel();
        // Each connection's task ends when its thread's index is sent here.
        let (release, released) = tokio::sync::watch::channel(None::<usize>);
        let mut ends = Vec::new();
        let mut place = |n: usize| {
            for _ in 0..n {
                let (ours, theirs) = pair();
                ends.push(theirs);
                let seen_tx = seen_tx.clone();
                let mut released = released.clone();
                threads.place(ours, move |stream| async move {
                    let here = current();
                    seen_tx.send(here).unwrap();
                    let _ = released.wait_for(|r| *r == here).await;
                    drop(stream);
                });
            }
            let mut on: Vec<Option<usize>> = (0..n)
                .map(|_| seen.recv_timeout(Duration::from_secs(5)).unwrap())
                .collect();
            on.sort();
            on
        };
        // [0, 0] → 0 → [1, 0] → 0 (within one) → [2, 0] → 1 → [2, 1] → 0 → [3, 1].
        assert_eq!(place(4), [Some(0), Some(0), Some(0), Some(1)]);
        assert_eq!(threads.open(), [3, 1]);
        // Thread 0's end: the next two go to it, the first within one of thread 1's.
        release.send(Some(0)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while threads.open() != [0, 1] && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(threads.open(), [0, 1]);
        release.send(None).unwrap();
        assert_eq!(place(2), [Some(0), Some(0)]);
        assert_eq!(threads.open(), [2, 1]);
        drop(threads);
        // Every connection the threads held is closed with them.
        for mut end in ends {
            end.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 1];
            assert_eq!(end.read(&mut b).unwrap(), 0);
        }
    }

    /// A socket used on one runtime works on a connection thread once rehomed there, while
    /// the first runtime no longer runs (nothing drives its reactor: the events of a socket
    /// left registered with it would reach nobody, and the read below would not end).
    #[test]
    fn a_rehomed_socket_gets_its_events_where_it_went() {
        let (ours, mut theirs) = pair();
        let first = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let stream = first.block_on(async {
            let s = TcpStream::from_std(ours).unwrap();
            s.writable().await.unwrap();
            s
        });
        let threads = Threads::start(1).unwrap();
        let (done_tx, done) = std::sync::mpsc::channel();
        let (carry_tx, carry) = oneshot::channel::<TcpStream>();
        threads.place(pair().0, move |_unused| async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let stream = carry.await.unwrap();
            let mut s = rehome(stream).unwrap();
            let mut b = [0u8; 5];
            s.read_exact(&mut b).await.unwrap();
            s.write_all(b"world").await.unwrap();
            done_tx.send(b).unwrap();
        });
        carry_tx.send(stream).unwrap();
        theirs.write_all(b"hello").unwrap();
        let got = done.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(&got, b"hello");
        let mut b = [0u8; 5];
        theirs.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"world");
        drop(first);
    }
}
