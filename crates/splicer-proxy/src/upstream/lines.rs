//! Pipelined upstream connections: the `edge` front end's multiplexing (seed 002). Requests
//! from many clients share a few upstream connections, each carrying up to `depth` requests
//! in flight, answered in order (RFC 9112 §9.3.2). A line (one such connection, run by its
//! own task) reads each response as it comes:
//!
//! - a body of known length up to the cut-off is read at the upstream's pace, its bytes
//!   counted against a global memory budget, and handed to its client as they arrive: a slow
//!   client does not hold the connection, and nothing waits for a body to end;
//! - any other body (longer, chunked, ended by the close) takes the connection out of the
//!   line: it is handed to that request's client, to be spliced, and the requests queued
//!   behind it are sent again elsewhere.
//!
//! Only idempotent requests without a body are pipelined, so a request sent again was never
//! answered to anyone. A line whose queue empties gives its connection back to the pool.
//!
//! An origin's bytes are hostile: bytes beyond a framed answer would be taken as the answer
//! to the next request, which is another client's. A line closes, and sends every request it
//! still holds again elsewhere, on each surplus HTTP/1.1 lets it see: bytes that came before
//! the request they would answer was written (an answer cannot precede its request), bytes
//! after an answer that do not start the next one (past `Content-Length`, a body on `HEAD`,
//! `204` or `304`), bytes while nothing is asked, anything after an answer that said it
//! closes. What it cannot see, an origin answering one request twice after the next request
//! was sent, is why pipelining is for trusted origins only (docs/edge.md).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use splicer_wire::http::{BodyLength, Limits, Method, ResponseHead};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::pool::{quiet, Pool};
use crate::error::{Error, Kind, Side};

mod body;
mod opening;
use body::split;
pub use body::{Body, Chunk};
pub use opening::Opening;

/// Bytes read from a line's connection at a time.
const READ: usize = 64 * 1024;

/// A pipelined request.
pub struct Job {
    /// The request head as it goes upstream (no body: only such requests are pipelined).
    pub request: Vec<u8>,
    /// Its method (a `HEAD` response has no body).
    pub method: Method,
    pub reply: oneshot::Sender<Reply>,
}

/// What became of a pipelined request.
pub enum Reply {
    /// The response head, and its body as it arrives: exactly the bytes its framing says
    /// (none for `None`), or an error when the upstream failed in the middle.
    Buffered {
        resp: ResponseHead,
        framing: BodyLength,
        body: Body,
    },
    /// A body above the cut-off or of unknown length: the connection itself, out of the
    /// line, with the bytes read after the head. Responses to requests pipelined behind it
    /// may follow its body, so it must not be reused.
    Handoff {
        upstream: TcpStream,
        addr: SocketAddr,
        buf: Vec<u8>,
        resp: ResponseHead,
    },
    /// Not answered on this connection: ask again on another. `tried`: it was the first
    /// unanswered request on a new connection that closed having answered nothing, so it
    /// may be what the origin refuses; otherwise it only waited behind others, or the
    /// connection came from the pool and the origin may have closed it while it was idle.
    Reissue { tried: bool },
    /// The upstream's answer to it failed before its head ended (malformed, too large,
    /// timed out, closed after part of it).
    Failed(Error),
}

/// How a group's lines run.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Requests in flight per connection.
    pub depth: usize,
    /// The largest body read into memory; larger ones are spliced.
    pub cutoff: u64,
    /// How long a line waits for response bytes, or to write a request.
    pub timeout: Duration,
    pub limits: Limits,
}

/// The busy lines per origin (`host:port`) and the memory budget of buffered bodies.
#[derive(Debug)]
pub struct Pipelines {
    lines: Arc<Mutex<HashMap<String, Vec<Arc<Line>>>>>,
    budget: Arc<Semaphore>,
    next_id: AtomicU64,
}

#[derive(Debug)]
struct Line {
    id: u64,
    tx: mpsc::UnboundedSender<Job>,
    /// Requests given to it and not yet answered (or handed on), counted when chosen.
    load: AtomicUsize,
}

/// A line chosen for one request, its load already counted.
pub struct Chosen(Arc<Line>);

impl Chosen {
    /// Queues the job. If the line has ended meanwhile, the job is dropped with its reply
    /// channel, which its sender takes as `Reissue`.
    pub fn send(self, job: Job) {
        let _ = self.0.tx.send(job);
    }
}

impl Pipelines {
    /// `budget`: bytes of buffered bodies held at once, in all lines (at least one read).
    pub fn new(budget: usize) -> Pipelines {
        let budget = budget.max(READ);
        Pipelines {
            lines: Arc::default(),
            budget: Arc::new(Semaphore::new(budget)),
            next_id: AtomicU64::new(0),
        }
    }

    /// The line to `origin` with the fewest requests in flight, if one has room for another.
    pub fn choose(&self, origin: &str, depth: usize) -> Option<Chosen> {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        let line = lines
            .get(origin)?
            .iter()
            .min_by_key(|l| l.load.load(Ordering::Relaxed))
            .filter(|l| l.load.load(Ordering::Relaxed) < depth)?;
        line.load.fetch_add(1, Ordering::Relaxed);
        Some(Chosen(line.clone()))
    }

    /// Starts a line on a connection to `origin` (`reused`: taken from the pool), chosen
    /// for one request.
    pub fn start(
        &self,
        origin: String,
        conn: (TcpStream, SocketAddr, bool),
        settings: Settings,
        pool: Arc<Pool>,
    ) -> Chosen {
        self.open(origin, settings).run(conn, pool)
    }

    /// A line to `origin`, chosen for one request, registered before its connection is
    /// open: requests that come while it connects queue on it (up to `depth`) instead of
    /// each opening a connection of its own, as a burst of first requests did (one
    /// connection per request: 60 for 60 in the tests). If the connection cannot be had,
    /// dropping the opening takes the line out again; what queued on it is asked again.
    pub fn open(&self, origin: String, settings: Settings) -> Opening {
        let (tx, rx) = mpsc::unbounded_channel();
        let line = Arc::new(Line {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            tx,
            load: AtomicUsize::new(1),
        });
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(origin.clone())
            .or_default()
            .push(line.clone());
        Opening {
            lines: self.lines.clone(),
            budget: self.budget.clone(),
            origin,
            line,
            settings,
            rx: Some(rx),
        }
    }

    /// Lines running, for tests and metrics.
    pub fn lines(&self) -> usize {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.values().map(Vec::len).sum()
    }
}

/// One line's task.
struct Run {
    lines: Arc<Mutex<HashMap<String, Vec<Arc<Line>>>>>,
    budget: Arc<Semaphore>,
    origin: String,
    line: Arc<Line>,
    settings: Settings,
    /// The connection came from the pool: one that closes before answering anything may
    /// have been closed by the origin while idle, not because of the request it was given.
    reused: bool,
}

/// A request written on the line and not yet answered.
struct Queued {
    job: Job,
    /// Where in the stream of the upstream's bytes its answer may start at the earliest:
    /// every byte received (or waiting in the socket) when it was written was sent before
    /// the origin could have read it, so it is no part of its answer.
    earliest: u64,
}

/// The response whose body is being read.
struct Current {
    left: u64,
    body: mpsc::UnboundedSender<Result<Chunk, Error>>,
}

/// Why a line stops reading.
enum Stop {
    /// The queue is empty and no request is on its way: the connection goes back to the pool.
    Idle,
    /// The upstream said it closes after a response, or closed (or sent bytes) while
    /// nothing was asked: the requests it has are asked again elsewhere.
    Close,
    /// The front request's body is not buffered: the connection goes to its client.
    Handoff(Job, ResponseHead),
    /// The upstream closed or failed.
    Failed(Error),
    /// The upstream sent bytes that answer no request (why): nothing more of it reaches a
    /// client, and every request it holds is asked again elsewhere.
    Surplus(&'static str),
}

impl Run {
    async fn go(
        self,
        mut upstream: TcpStream,
        addr: SocketAddr,
        mut rx: mpsc::UnboundedReceiver<Job>,
        pool: Arc<Pool>,
    ) {
        let mut queue: VecDeque<Queued> = VecDeque::new();
        let mut current: Option<Current> = None;
        let mut buf: Vec<u8> = Vec::new();
        // Requests written together.
        let mut out: Vec<u8> = Vec::new();
        let mut keep = true;
        // Answers whose heads came on this connection.
        let mut answered = 0usize;
        // Bytes read from the upstream so far (the stream offset past `buf`'s end).
        let mut received = 0u64;
        let stop = loop {
            let state = (&mut buf, &mut queue, &mut current);
            let at = received - state.0.len() as u64;
            if let Err(stop) = self.consume(state, at, &mut keep, &mut answered).await {
                break stop;
            }
            if queue.is_empty() && current.is_none() {
                if !keep {
                    break Stop::Close;
                }
                if self.retire() {
                    break Stop::Idle;
                }
            }
            let in_flight = queue.len() + usize::from(current.is_some());
            let waiting = in_flight > 0;
            enum Ev {
                Job(Option<Job>),
                Readable(std::io::Result<()>),
                Timeout,
            }
            let ev = tokio::select! {
                j = rx.recv(), if keep && in_flight < self.settings.depth => Ev::Job(j),
                r = upstream.readable(), if waiting => Ev::Readable(r),
                _ = tokio::time::sleep(self.settings.timeout), if waiting => Ev::Timeout,
            };
            match ev {
                // Every sender is gone: the registry dropped the line (never while it runs).
                Ev::Job(None) => break Stop::Close,
                Ev::Job(Some(job)) => {
                    // Bytes or a close that came while nothing was asked (an origin's `408`
                    // before it closes an idle connection) would pass for this answer.
                    if in_flight == 0 && !quiet(&upstream) {
                        queue.push_back(Queued { job, earliest: 0 });
                        break Stop::Close;
                    }
                    // Requests that came together go in one write: one system call, and
                    // fewer segments for the origin to take. Yielding once first lets the
                    // clients woken with this one (by the same readiness events) queue theirs:
                    // at 1 KiB it halved the segments the origin received and gained 9% in
                    // req/s (docs/edge.md, "Pipelining").
                    tokio::task::yield_now().await;
                    // Bytes already here or on their way in the socket were sent before these
                    // requests could be read: no answer to them starts before their end.
                    let waiting = splicer_sys::sock::readable_bytes(upstream.as_fd()).unwrap_or(0);
                    let earliest = received + waiting as u64;
                    out.clear();
                    out.extend_from_slice(&job.request);
                    queue.push_back(Queued { job, earliest });
                    while queue.len() + usize::from(current.is_some()) < self.settings.depth {
                        let Ok(job) = rx.try_recv() else { break };
                        out.extend_from_slice(&job.request);
                        queue.push_back(Queued { job, earliest });
                    }
                    let write = upstream.write_all(&out);
                    if !matches!(
                        tokio::time::timeout(self.settings.timeout, write).await,
                        Ok(Ok(()))
                    ) {
                        break Stop::Failed(Error::upstream(Kind::Closed("")));
                    }
                }
                Ev::Readable(Err(e)) => break Stop::Failed(Error::upstream(Kind::Read(e.kind()))),
                Ev::Readable(Ok(())) => {
                    buf.reserve(READ);
                    match upstream.try_read_buf(&mut buf) {
                        Ok(0) => break Stop::Failed(Error::upstream(Kind::Truncated)),
                        Ok(n) => received += n as u64,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => break Stop::Failed(Error::upstream(Kind::Read(e.kind()))),
                    }
                }
                Ev::Timeout => break Stop::Failed(Error::upstream(Kind::Timeout("response"))),
            }
        };
        self.deregister();
        // Requests never answered here are asked again elsewhere: those queued behind, and
        // those chosen for this line that it never took.
        let mut reissue: Vec<Job> = Vec::new();
        rx.close();
        while let Ok(job) = rx.try_recv() {
            reissue.push(job);
        }
        match stop {
            Stop::Idle => {
                if buf.is_empty() {
                    pool.put(&self.origin, upstream, addr);
                }
            }
            Stop::Close => {}
            Stop::Surplus(why) => {
                tracing::warn!(
                    origin = %self.origin,
                    %addr,
                    why,
                    requests = queue.len(),
                    "pipelined line closed: the origin sent bytes that answer no request; its \
                     requests are asked again elsewhere"
                );
            }
            Stop::Handoff(job, resp) => {
                let _ = job.reply.send(Reply::Handoff {
                    upstream,
                    addr,
                    buf,
                    resp,
                });
            }
            Stop::Failed(e) => {
                if let Some(c) = current.take() {
                    let _ = c.body.send(Err(e.clone()));
                } else if let Some(Queued { job: front, .. }) = queue.pop_front() {
                    // Part of its answer came: it was acted upon, and is not asked again.
                    // A timeout is not asked again either (the next server would wait too).
                    let acted = !buf.is_empty() || matches!(e.kind, Kind::Timeout(_));
                    let _ = front.reply.send(if acted {
                        Reply::Failed(e)
                    } else {
                        Reply::Reissue {
                            tried: answered == 0 && !self.reused,
                        }
                    });
                }
            }
        }
        for job in queue.into_iter().map(|q| q.job).chain(reissue) {
            let _ = job.reply.send(Reply::Reissue { tried: false });
        }
    }

    /// Hands out what `buf` holds: body bytes to the current response's client, heads of
    /// the next. `at`: the stream offset of `buf`'s first byte. `Err`: the line stops.
    async fn consume(
        &self,
        (buf, queue, current): (&mut Vec<u8>, &mut VecDeque<Queued>, &mut Option<Current>),
        mut at: u64,
        keep: &mut bool,
        answered: &mut usize,
    ) -> Result<(), Stop> {
        loop {
            if let Some(c) = current {
                if buf.is_empty() {
                    return Ok(());
                }
                let n = (buf.len().min(READ) as u64).min(c.left) as usize;
                let part = self.take(buf, n).await;
                at += n as u64;
                // A client that went away drops its receiver; the body is still read.
                let _ = c.body.send(Ok(part));
                c.left -= n as u64;
                if c.left == 0 {
                    *current = None;
                    self.done();
                }
                continue;
            }
            if buf.is_empty() {
                return Ok(());
            }
            let Some(Queued { job, earliest }) = queue.front() else {
                // Bytes that answer nothing: the upstream cannot be trusted to frame.
                return Err(Stop::Surplus("bytes while nothing was asked"));
            };
            if !*keep {
                // The last answer said the connection closes: nothing after it is an answer.
                return Err(Stop::Surplus(
                    "bytes after an answer that closes the connection",
                ));
            }
            if at < *earliest {
                return Err(Stop::Surplus(
                    "an answer that came before its request was written",
                ));
            }
            let head = match ResponseHead::parse(buf, &self.settings.limits) {
                Ok(Some((head, n))) => {
                    buf.drain(..n);
                    at += n as u64;
                    head
                }
                // After an answer, what does not start the next one is the rest of the one
                // before (a body past its framing): its request was never answered.
                Ok(None) | Err(_) if *answered > 0 && !starts_a_status_line(buf) => {
                    return Err(Stop::Surplus(
                        "bytes after an answer that do not start the next one",
                    ))
                }
                Ok(None) if buf.len() >= self.settings.limits.max_head => {
                    return Err(self.fail_front(queue, Error::upstream(Kind::TooLarge("header"))))
                }
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.fail_front(queue, Error::unparsable(Side::Upstream, e))),
            };
            if head.status == 101 {
                let e = Error::malformed(Side::Upstream, "unrequested-upgrade");
                return Err(self.fail_front(queue, e));
            }
            // Interim responses are not passed on: nothing a pipelined request sends waits
            // for `100 Continue`, and early hints are only hints.
            if (100..200).contains(&head.status) {
                continue;
            }
            let framing = match head.body(&job.method) {
                Ok(f) => f,
                Err(e) => return Err(self.fail_front(queue, Error::unparsable(Side::Upstream, e))),
            };
            // An answer with no request before it: the origin's own (an answer is read
            // only while a request waits, so this is a surplus the checks missed).
            let Some(Queued { job, .. }) = queue.pop_front() else {
                return Err(Stop::Failed(Error::malformed(
                    Side::Upstream,
                    "unrequested-response",
                )));
            };
            *answered += 1;
            if !head.keep_alive() {
                // Nothing after this response will be answered: stop taking requests.
                *keep = false;
                self.deregister();
            }
            let left = match framing {
                BodyLength::None => 0,
                BodyLength::Length(n) if n <= self.settings.cutoff => n,
                _ => return Err(Stop::Handoff(job, head)),
            };
            // The whole body at hand (or none), and room for it in the budget now: it goes
            // with the head. Otherwise the head goes alone, and the body as it comes.
            let whole = match left {
                0 => Some(None),
                n if n <= buf.len().min(READ) as u64 => self.try_take(buf, n as usize).map(Some),
                _ => None,
            };
            if let Some(Some(_)) = &whole {
                at += left;
            }
            let body = match whole {
                Some(whole) => Body { whole, rest: None },
                None => {
                    let (tx, rest) = mpsc::unbounded_channel();
                    *current = Some(Current { left, body: tx });
                    Body {
                        whole: None,
                        rest: Some(rest),
                    }
                }
            };
            let _ = job.reply.send(Reply::Buffered {
                resp: head,
                framing,
                body,
            });
            if current.is_none() {
                self.done();
            }
        }
    }

    /// The first `n` bytes of `buf` (`n` ≤ [`READ`]), holding their share of the budget,
    /// which bounds what all lines hold for slow clients: past it, lines wait (and their
    /// upstream connections with them).
    async fn take(&self, buf: &mut Vec<u8>, n: usize) -> Chunk {
        // The semaphore is the lines' own and never closed; `n` ≤ READ fits a u32.
        #[allow(clippy::expect_used)]
        let held = self
            .budget
            .clone()
            .acquire_many_owned(n as u32)
            .await
            .expect("the budget is never closed");
        split(buf, n, held)
    }

    /// [`Run::take`], if the budget has room now.
    fn try_take(&self, buf: &mut Vec<u8>, n: usize) -> Option<Chunk> {
        let held = self.budget.clone().try_acquire_many_owned(n as u32).ok()?;
        Some(split(buf, n, held))
    }

    /// The front request's answer failed: it gets the error, the line stops.
    fn fail_front(&self, queue: &mut VecDeque<Queued>, e: Error) -> Stop {
        if let Some(Queued { job, .. }) = queue.pop_front() {
            let _ = job.reply.send(Reply::Failed(e.clone()));
        }
        Stop::Failed(e)
    }

    /// A request of this line is answered.
    fn done(&self) {
        self.line.load.fetch_sub(1, Ordering::Relaxed);
    }

    /// Leaves the registry if no request is on its way to the line (checked under the
    /// registry's lock, which choosing a line takes too).
    fn retire(&self) -> bool {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if self.line.load.load(Ordering::Relaxed) > 0 {
            return false;
        }
        remove(&mut lines, &self.origin, self.line.id);
        true
    }

    fn deregister(&self) {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        remove(&mut lines, &self.origin, self.line.id);
    }
}

fn remove(lines: &mut HashMap<String, Vec<Arc<Line>>>, origin: &str, id: u64) {
    if let Some(list) = lines.get_mut(origin) {
        list.retain(|l| l.id != id);
        if list.is_empty() {
            lines.remove(origin);
        }
    }
}

/// Whether `buf` may be the start of a status line (`HTTP/` as far as it goes): what follows
/// an answer and is not, is the rest of that answer.
fn starts_a_status_line(buf: &[u8]) -> bool {
    let n = buf.len().min(5);
    buf[..n] == b"HTTP/"[..n]
}

#[cfg(test)]
mod tests;
