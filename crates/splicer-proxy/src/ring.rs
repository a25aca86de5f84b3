//! The rings (`limits.io = "ring"`): the `edge` front end's and the forward proxy's plain
//! kept-alive requests served by a completion-driven loop on `io_uring`, one thread per
//! connection thread, with no futures runtime under it.
//!
//! Why: on the per-request path an `epoll` proxy makes a system call per read, per write
//! and per wait; a loop that hands the kernel all its operations and takes all their
//! completions in one `io_uring_enter`, and lets the kernel do their work when the thread
//! waits (`DEFER_TASKRUN`), spent about 0.7 of the proxy CPU per request of the same relay
//! on tokio, where a ring under tokio's loop, or a futures runtime on a ring (monoio),
//! gave nothing (docs/benchmarks.md, "The floor under the per-request path").
//!
//! What a ring serves itself: a request head that parses, without a body, `GET` or
//! `HEAD`, with no `Expect` or `Upgrade`, routed to an HTTP/1.1 group without pipelining
//! (the edge) or to a destination the rules allow (the forward proxy, with no users and
//! no cache);
//! its answer relayed in user space, unless its body is long or ends with the close: that
//! answer goes to the runtimes with its head unwritten ([`Resume::Answer`]), whose engines
//! splice it. A server that cannot be reached (nothing sent yet) is passed over to the
//! group's next server or the name's next address, and when none is left the ring answers
//! as the runtimes do (502, 504, 403). Every other connection, at the request it cannot
//! serve, is handed with the bytes read so far to the connection threads' runtimes
//! ([`Resume::Head`]), which serve it from there as any other: errors, bodies, CONNECT,
//! h2c, pipelined groups.
//! The head's parse, the route, both rewrites, the framing and the chunked reframing are
//! the runtimes' own functions (`splicer_wire`, `crate::front::edge::aim`,
//! `crate::exchange::shape`): a ring means the same to every parser after it.
//!
//! # Layout
//! - this file: the threads, the placing of connections, the loop.
//! - `conn`: one client connection's state machine.
//! - `pool`: a ring's idle upstream connections.
//! - `shelf`: a ring's spare buffers for the exchanges in progress.
//! - `names`: the threads that resolve the forward proxy's names for the rings.

mod conn;
mod names;
mod pool;
mod shelf;

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use splicer_sys::ring::{Completion, EventFd, Ring};

use crate::shared::Shared;
use conn::{Conn, Op};
use names::{Job, Names, Resolved};
use pool::Pool;
use shelf::Shelf;

/// Gives a connection the ring will not serve to the connection threads, with where they
/// take it up.
pub type Handoff = Box<dyn FnOnce(std::net::TcpStream, Resume) + Send>;

/// Where the runtimes take up a connection a ring hands them.
pub enum Resume {
    /// At its next request: the bytes read from it and not used (the request's start).
    Head(Vec<u8>),
    /// With an answer the ring asked for and whose body it leaves to the runtimes' splice
    /// (a long one), the head not yet written to the client.
    Answer(Box<Asked>),
}

/// A request a ring sent upstream, and the head of its answer.
pub struct Asked {
    pub upstream: std::net::TcpStream,
    pub server: SocketAddr,
    /// How requests name the server (its key in the pool).
    pub name: Arc<crate::upstream::Destination>,
    pub resp: splicer_wire::http::ResponseHead,
    /// Body bytes read with the head.
    pub body: Vec<u8>,
    pub method: splicer_wire::http::Method,
    pub version: u8,
    /// The client asked to keep its connection.
    pub keep: bool,
    pub rec: crate::access::Record,
    /// Bytes the client sent after its request (the start of the next).
    pub rest: Vec<u8>,
}

/// A connection placed on a ring.
pub struct Placed {
    pub stream: std::net::TcpStream,
    pub addr: SocketAddr,
    /// The front end that accepted it: `edge` or `http`.
    pub front: crate::config::Front,
    /// The configuration it is served by, to its end.
    pub shared: Arc<Shared>,
    /// Where it goes when the ring gives it up; dropped with it when the ring closes it
    /// (with what it holds: the connection's slot and its count in the metrics).
    pub handoff: Handoff,
}

/// Whether a ring may serve requests of `front` under `shared`: the edge's and the
/// forward proxy's, but not the forward proxy's when it has users to authenticate or the
/// cache on (a ring would hand every connection over at its first request: a cost for
/// nothing), nor SOCKS tunnels.
pub fn serves(front: crate::config::Front, shared: &Shared) -> bool {
    match front {
        crate::config::Front::Edge => true,
        crate::config::Front::Http => !shared.policy.auth_required() && shared.cache.is_none(),
        crate::config::Front::Socks => false,
    }
}

/// Queue places per ring.
const ENTRIES: u32 = 4096;
/// How long a ring waits at most before it looks at its deadlines, the stop and the cut.
const TICK: Duration = Duration::from_millis(50);
/// How long a ring with nothing to look after (no connection, no idle upstream
/// connection) waits: its mailbox wakes it for a connection, a name or the stop, so an idle
/// proxy's rings do not wake twenty times a second for nothing.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// The rings, started with the server (beside the connection threads) and stopped when
/// dropped.
pub struct Rings {
    threads: Vec<RingThread>,
}

struct RingThread {
    mailbox: Arc<Mailbox>,
    join: Option<std::thread::JoinHandle<()>>,
}

/// What other threads give a ring: connections to serve, names resolved, and the stop.
struct Mailbox {
    placed: Mutex<Vec<Placed>>,
    resolved: Mutex<Vec<Resolved>>,
    wake: EventFd,
    stop: AtomicBool,
    /// Connections being served.
    open: AtomicUsize,
}

impl std::fmt::Debug for Rings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rings({})", self.threads.len())
    }
}

impl Rings {
    /// Starts `n` rings (at least one), each with a pool of idle upstream connections of
    /// at most `bounds.0` per server and its share of `bounds.1` in all (the server's
    /// bounds over its rings), each kept for `idle`. Fails when the kernel refuses a ring
    /// (no `io_uring`, or one without `DEFER_TASKRUN`, older than Linux 6.1).
    pub fn start(n: usize, bounds: (usize, usize), idle: Duration) -> std::io::Result<Rings> {
        let n = n.max(1);
        let pool = ((bounds.0, bounds.1.div_ceil(n)), idle);
        let names = Names::start()?;
        let mut threads = Vec::new();
        for i in 0..n {
            let mailbox = Arc::new(Mailbox {
                placed: Mutex::new(Vec::new()),
                resolved: Mutex::new(Vec::new()),
                wake: EventFd::new()?,
                stop: AtomicBool::new(false),
                open: AtomicUsize::new(0),
            });
            let (ready_tx, ready) = std::sync::mpsc::channel();
            let m = mailbox.clone();
            let names = names.clone();
            let join = std::thread::Builder::new()
                .name(format!("splicer-ring-{i}"))
                .spawn(move || {
                    // The ring is made on its thread: only that thread may use it.
                    match Ring::waited_in(ENTRIES) {
                        Ok(ring) => {
                            let _ = ready_tx.send(Ok(()));
                            run(ring, &m, pool, names);
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                })?;
            let started = ready
                .recv()
                .unwrap_or_else(|_| Err(std::io::Error::other("a ring thread ended at start")));
            threads.push(RingThread {
                mailbox,
                join: Some(join),
            });
            started?;
        }
        Ok(Rings { threads })
    }

    /// Connections being served, per ring (for tests).
    pub fn open(&self) -> Vec<usize> {
        self.threads
            .iter()
            .map(|t| t.mailbox.open.load(Ordering::Relaxed))
            .collect()
    }

    /// Serves `placed` on the ring with the fewest connections.
    pub fn place(&self, placed: Placed) {
        let Some(t) = self
            .threads
            .iter()
            .min_by_key(|t| t.mailbox.open.load(Ordering::Relaxed))
        else {
            return;
        };
        t.mailbox.open.fetch_add(1, Ordering::Relaxed);
        t.mailbox
            .placed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(placed);
        t.mailbox.wake.signal();
    }
}

impl Drop for Rings {
    fn drop(&mut self) {
        for t in &self.threads {
            t.mailbox.stop.store(true, Ordering::SeqCst);
            t.mailbox.wake.signal();
        }
        for t in &mut self.threads {
            if let Some(j) = t.join.take() {
                let _ = j.join();
            }
        }
    }
}

/// One ring's loop: wait in the ring, hand each completion to its connection, issue what
/// the connection asks next; each tick, the deadlines, the stop signal and the cut.
fn run(
    mut ring: Ring,
    mailbox: &Arc<Mailbox>,
    (bounds, timeout): ((usize, usize), Duration),
    names: Names,
) {
    let mut lp = Loop {
        conns: Vec::new(),
        names,
        lookups: 0,
        free: Vec::new(),
        owners: Owners::default(),
        ready: Vec::new(),
        mailbox_op: None,
        kit: Kit {
            pool: Pool::new(bounds, timeout),
            shelf: Shelf::default(),
            heads: Heads::default(),
            now: Instant::now(),
        },
    };
    let mut done: Vec<Completion> = Vec::with_capacity(256);
    let mut next_tick = Instant::now() + TICK;
    let stopping = || mailbox.stop.load(Ordering::SeqCst);
    while !stopping() {
        if lp.mailbox_op.is_none() {
            match ring.read(mailbox.wake.as_fd(), Vec::with_capacity(8)) {
                Ok(op) => lp.mailbox_op = Some(op),
                Err(e) => {
                    tracing::error!("ring: cannot wait for new connections: {e}");
                    break;
                }
            }
        }
        // `open` counts a connection before its placement signals the mailbox: one placed
        // after this look still wakes the ring.
        let idle = mailbox.open.load(Ordering::Relaxed) == 0 && lp.kit.pool.is_empty();
        if let Err(e) = ring.wait(if idle { IDLE_WAIT } else { TICK }) {
            tracing::error!("ring: waiting failed: {e}");
            break;
        }
        ring.complete(&mut done);
        // One reading of the clock per turn, for every deadline and time the turn sets.
        lp.kit.now = Instant::now();
        // Each completion's connection is looked up before any is handled: handling one
        // queues new operations, which take the slots the batch's completions freed (a
        // later completion of the batch would find its slot taken).
        let mut ready = std::mem::take(&mut lp.ready);
        for c in done.drain(..) {
            if Some(c.op) == lp.mailbox_op {
                lp.mailbox_op = None;
                ready.push((None, c));
            } else if let Some(at) = lp.owners.take(c.op) {
                ready.push((Some(at), c));
            }
        }
        for (at, c) in ready.drain(..) {
            let Some(at) = at else {
                let placed =
                    std::mem::take(&mut *mailbox.placed.lock().unwrap_or_else(|e| e.into_inner()));
                for p in placed {
                    lp.start(&mut ring, p, mailbox);
                }
                let resolved = std::mem::take(
                    &mut *mailbox.resolved.lock().unwrap_or_else(|e| e.into_inner()),
                );
                for r in resolved {
                    lp.resolved(&mut ring, r, mailbox);
                }
                continue;
            };
            let Loop { conns, kit, .. } = &mut lp;
            let op = conns[at].as_mut().map(|conn| conn.complete(c, kit));
            if let Some(op) = op {
                lp.issue(&mut ring, at, op, mailbox);
            }
        }
        lp.ready = ready;
        let now = lp.kit.now;
        if now >= next_tick {
            next_tick = now + TICK;
            lp.tick(&mut ring, now, mailbox);
        }
    }
    // Stopped (the server is dropped, after its grace): what is left is cut. The ring
    // goes first (it leaks the buffers it still lends the kernel), then the connections,
    // whose records say they were cut.
    drop(ring);
    lp.conns.clear();
}

/// What a ring lends its connections while they serve a request.
pub(crate) struct Kit {
    /// Idle upstream connections (the pool's bounds at start: a reload keeps them).
    pool: Pool,
    /// Buffers for the exchanges in progress.
    shelf: Shelf,
    /// The last heads' targets and field tables, which the next heads are parsed into:
    /// a head is parsed, rewritten and written in one step, so one set serves a ring.
    heads: Heads,
    /// When the loop last woke.
    now: Instant,
}

#[derive(Default)]
struct Heads {
    target: String,
    fields: splicer_wire::http::Headers,
    answer: splicer_wire::http::Headers,
}

/// A ring's connections, and which connection each operation in flight is for.
struct Loop {
    conns: Vec<Option<Conn>>,
    /// Where names are resolved, and the number of the last lookup asked.
    names: Names,
    lookups: u64,
    free: Vec<usize>,
    owners: Owners,
    /// A turn's completions with their connections (`None`: the mailbox's), kept for the
    /// next turn's.
    ready: Vec<(Option<usize>, Completion)>,
    /// The read of the mailbox's `eventfd`, while one is in flight.
    mailbox_op: Option<u64>,
    kit: Kit,
}

impl Loop {
    fn start(&mut self, ring: &mut Ring, placed: Placed, mailbox: &Arc<Mailbox>) {
        let conn = Conn::new(placed);
        let at = match self.free.pop() {
            Some(at) => {
                self.conns[at] = Some(conn);
                at
            }
            None => {
                self.conns.push(Some(conn));
                self.conns.len() - 1
            }
        };
        let op = self.conns[at].as_mut().map_or(Op::Free, Conn::begin);
        self.issue(ring, at, op, mailbox);
    }

    /// Issues what connection `at` asks next, until it asks for an operation in flight.
    fn issue(&mut self, ring: &mut Ring, at: usize, mut op: Op, mailbox: &Arc<Mailbox>) {
        loop {
            let Some(conn) = self.conns[at].as_mut() else {
                return;
            };
            match op {
                Op::Wait => return,
                Op::Free => {
                    self.conns[at] = None;
                    self.free.push(at);
                    mailbox.open.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
                Op::Resolve => {
                    self.lookups += 1;
                    let Some(job) = conn.lookup(at, self.lookups, mailbox.clone()) else {
                        op = Op::Free;
                        continue;
                    };
                    if !self.names.ask(job) {
                        op = conn.on_resolved(Err(std::io::Error::other("no resolver")));
                        continue;
                    }
                    return;
                }
                Op::Handoff => {
                    if let Some(conn) = self.conns[at].take() {
                        conn.hand_off();
                    }
                    self.free.push(at);
                    mailbox.open.fetch_sub(1, Ordering::Relaxed);
                    return;
                }
                Op::Ring(start) => match conn.submit(ring, start) {
                    Ok((id, linked)) => {
                        self.owners.put(id, at);
                        if let Some(send) = linked {
                            self.owners.put(send, at);
                        }
                        return;
                    }
                    Err(e) => op = conn.failed_to_submit(&e),
                },
            }
        }
    }

    /// A name resolved: to its connection, if it still waits for that lookup.
    fn resolved(&mut self, ring: &mut Ring, r: Resolved, mailbox: &Arc<Mailbox>) {
        let Some(Some(conn)) = self.conns.get_mut(r.at) else {
            return;
        };
        if conn.resolving != Some(r.token) {
            return;
        }
        conn.resolving = None;
        let op = conn.on_resolved(r.addrs);
        self.issue(ring, r.at, op, mailbox);
    }

    /// Expired deadlines, the stop between requests, the cut.
    fn tick(&mut self, ring: &mut Ring, now: Instant, mailbox: &Arc<Mailbox>) {
        self.kit.pool.sweep();
        for at in 0..self.conns.len() {
            let Some(conn) = self.conns[at].as_mut() else {
                continue;
            };
            if let Some(op) = conn.look(now) {
                self.issue(ring, at, op, mailbox);
            }
        }
    }
}

/// Which connection each operation in flight is for, by the operation's slot in the ring
/// (`splicer_sys::ring::slot`), with its whole number to tell it from an earlier
/// operation of that slot. No hashing per completion.
#[derive(Default)]
struct Owners(Vec<Option<(u64, usize)>>);

impl Owners {
    fn put(&mut self, op: u64, at: usize) {
        let slot = splicer_sys::ring::slot(op);
        if self.0.len() <= slot {
            self.0.resize(slot + 1, None);
        }
        self.0[slot] = Some((op, at));
    }

    fn take(&mut self, op: u64) -> Option<usize> {
        let slot = splicer_sys::ring::slot(op);
        match self.0.get(slot).copied().flatten() {
            Some((o, at)) if o == op => {
                self.0[slot] = None;
                Some(at)
            }
            _ => None,
        }
    }
}
