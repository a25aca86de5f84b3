//! HTTP/2 connections to the servers of the `edge` front end's `h2c` groups (RFC 9113 over
//! TCP, with prior knowledge: §3.3). Requests to a server go as streams of a few shared
//! connections, at most [`STREAMS_PER_CONNECTION`] on each: that many streams' windows fill
//! the connection's window exactly, so clients that do not read (whose streams hold their
//! window, `crate::front::edge`) never stall another client's stream. A connection is opened when
//! every open one is full, up to [`MAX_CONNECTIONS`] per server (past it, streams share the
//! least busy one, and the server's `SETTINGS_MAX_CONCURRENT_STREAMS` queues them); the
//! first at start with `min_idle = 1` (`crate::upstream::warm`). A connection is dropped once it has
//! ended: the server closed it, sent `GOAWAY`, or a protocol error ended it. The protocol
//! itself is the `h2` crate's; the exchanges are `front::edge::h2_stream`'s.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;

use super::dial::{connect_addr, ConnectError, Dial};

/// Bytes of one response the server may send before the proxy has passed them to the client
/// (the stream's flow-control window). The proxy releases a DATA frame's bytes once they are
/// written to the client, so a slow client holds at most this much in memory, and only its
/// own stream waits. 1 MiB carries about 100 Mbit/s per response over an 80 ms leg.
pub const STREAM_WINDOW: u32 = 1 << 20;

/// Bytes of all responses on one connection not yet passed on (the connection's window).
pub const CONNECTION_WINDOW: u32 = 16 << 20;

/// Streams a connection carries at once: as many as fill its window.
pub const STREAMS_PER_CONNECTION: usize = (CONNECTION_WINDOW / STREAM_WINDOW) as usize;

/// Connections opened to one server at most (256 streams at full windows).
pub const MAX_CONNECTIONS: usize = 16;

/// How often a server's failing new connections are logged at most.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The servers' connections.
#[derive(Default)]
pub struct Conns {
    /// Per server, its connections; the async lock keeps two requests from opening two
    /// where one would do.
    servers: Mutex<HashMap<SocketAddr, Arc<tokio::sync::Mutex<Vec<Conn>>>>>,
    /// When each server's last `warn_first_failure` line was written.
    warned: Mutex<HashMap<SocketAddr, Instant>>,
}

impl std::fmt::Debug for Conns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.servers.lock().map_or(0, |m| m.len());
        f.debug_struct("Conns").field("servers", &n).finish()
    }
}

#[derive(Clone)]
struct Conn {
    send: SendRequest<Bytes>,
    /// Cleared when the connection's task ends, or a request saw it fail.
    alive: Arc<AtomicBool>,
    /// Streams taken by requests (their [`Handle`]s).
    streams: Arc<AtomicUsize>,
}

impl Conn {
    fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// A stream on this connection, counted until the handle goes.
    fn take(&self, reused: bool) -> Handle {
        self.streams.fetch_add(1, Ordering::AcqRel);
        Handle {
            send: self.send.clone(),
            reused,
            alive: self.alive.clone(),
            streams: self.streams.clone(),
        }
    }
}

/// A request's stream on a connection to its server; kept for the whole exchange (its
/// answer's body included), it holds the stream's place on the connection.
pub struct Handle {
    pub send: SendRequest<Bytes>,
    /// Whether the connection was already open.
    pub reused: bool,
    alive: Arc<AtomicBool>,
    streams: Arc<AtomicUsize>,
}

impl Handle {
    /// Marks the connection as failed, so that requests open another.
    pub fn forget(&self) {
        self.alive.store(false, Ordering::Release);
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Conns {
    /// A stream to the server: on an open connection with room, else on a new one.
    /// `max_head`: the largest response head accepted (`SETTINGS_MAX_HEADER_LIST_SIZE`).
    pub async fn get(
        &self,
        server: SocketAddr,
        dial: Dial,
        max_head: usize,
    ) -> Result<Handle, ConnectError> {
        let slot = self.slot(server);
        let mut conns = slot.lock().await;
        conns.retain(Conn::alive);
        let busy = |c: &Conn| c.streams.load(Ordering::Acquire);
        if let Some(c) = conns.iter().find(|c| busy(c) < STREAMS_PER_CONNECTION) {
            return Ok(c.take(true));
        }
        if conns.len() >= MAX_CONNECTIONS {
            if let Some(least) = conns.iter().min_by_key(|c| busy(c)) {
                return Ok(least.take(true));
            }
        }
        let c = open(server, dial, max_head).await?;
        let handle = c.take(false);
        conns.push(c);
        Ok(handle)
    }

    /// Logs a new connection that failed before its first answer, at most once a minute per
    /// server: most often a server that does not speak HTTP/2 with prior knowledge there.
    pub fn warn_first_failure(&self, server: SocketAddr, e: &dyn std::fmt::Display) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if warned
            .get(&server)
            .is_some_and(|t| now.duration_since(*t) < WARN_EVERY)
        {
            return;
        }
        warned.insert(server, now);
        tracing::warn!(
            %server,
            "h2c connection failed before its first answer: {e} (does the server speak \
             HTTP/2 on that port without an upgrade?)"
        );
    }

    /// Whether the server has a connection that has not ended.
    pub fn is_open(&self, server: SocketAddr) -> bool {
        let slot = self.slot(server);
        let open = slot.try_lock().map(|c| c.iter().any(Conn::alive));
        // Locked: a request is opening or taking one right now.
        open.unwrap_or(true)
    }

    fn slot(&self, server: SocketAddr) -> Arc<tokio::sync::Mutex<Vec<Conn>>> {
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        servers.entry(server).or_default().clone()
    }
}

/// Connects, sends the connection preface and settings, and runs the connection in a task
/// of its own (it reads the server's frames for every stream).
async fn open(server: SocketAddr, dial: Dial, max_head: usize) -> Result<Conn, ConnectError> {
    let tcp = connect_addr(server, dial).await?;
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(u32::try_from(max_head).unwrap_or(u32::MAX))
        .enable_push(false)
        .handshake::<_, Bytes>(tcp)
        .await
        .map_err(|e| ConnectError::Other(std::io::Error::other(format!("HTTP/2 preface: {e}"))))?;
    let alive = Arc::new(AtomicBool::new(true));
    let flag = alive.clone();
    tokio::spawn(async move {
        match connection.await {
            Ok(()) => tracing::debug!(%server, "h2c connection closed"),
            Err(e) => tracing::debug!(%server, "h2c connection ended: {e}"),
        }
        flag.store(false, Ordering::Release);
    });
    Ok(Conn {
        send,
        alive,
        streams: Arc::default(),
    })
}
