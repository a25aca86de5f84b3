//! Fills: a response stored while it is spliced to the client that asked for it, and read
//! by the other clients that ask for it meanwhile (collapsed forwarding: one upstream
//! request for N clients, as Squid's `collapsed_forwarding` and nginx's `proxy_cache_lock`).
//!
//! A reader must tell the end of a fill from its failure (Pingora #932): a fill that did
//! not complete ends its readers with [`Cut`], never with a clean end, so the front end
//! resets the client instead of sending a short body as if it were whole.

use std::sync::Arc;

use bytes::Bytes;
use splicer_wire::http::Headers;
use tokio::sync::watch;

use crate::object::{Body, Object};
use crate::policy::Policy;

/// The head of the response being filled, as it will be stored.
#[derive(Debug, Clone)]
pub struct Head {
    pub status: u16,
    pub reason: String,
    /// Stored fields ([`Object::stored_fields`]).
    pub headers: Headers,
    pub policy: Policy,
    /// The body's length when the response announced it.
    pub length: Option<u64>,
}

/// Where a fill is.
#[derive(Debug, Clone)]
pub enum State {
    /// Waiting for the response head.
    Asking,
    /// The head is known and the body is arriving.
    Filling,
    /// Complete and stored.
    Done(Arc<Object>),
    /// Given up after the head: its readers are cut.
    Failed,
    /// Given up before the head (the response may not be stored): its readers ask the
    /// origin themselves.
    Abandoned,
}

/// What readers see.
#[derive(Debug)]
pub struct Progress {
    pub head: Option<Arc<Head>>,
    pub body: Vec<u8>,
    pub state: State,
}

/// One fill in progress.
#[derive(Debug)]
pub struct Fill {
    tx: watch::Sender<Progress>,
}

impl Fill {
    pub(crate) fn new() -> Arc<Fill> {
        let (tx, _) = watch::channel(Progress {
            head: None,
            body: Vec::new(),
            state: State::Asking,
        });
        Arc::new(Fill { tx })
    }

    /// A reader from the start.
    pub fn reader(&self) -> Reader {
        Reader {
            rx: self.tx.subscribe(),
            offset: 0,
        }
    }

    /// How many readers wait on it.
    pub fn readers(&self) -> usize {
        self.tx.receiver_count()
    }

    /// The head is known; `reserve` bytes are set aside for the body.
    pub(crate) fn set_head(&self, head: Head, reserve: usize) {
        self.tx.send_modify(|p| {
            p.body.reserve_exact(reserve);
            p.head = Some(Arc::new(head));
            p.state = State::Filling;
        });
    }

    /// Adds body bytes, the body's capacity grown to `capacity` when it must grow (the
    /// writer charged that much to the fills' budget). Returns the body's length.
    pub(crate) fn append(&self, bytes: &[u8], capacity: usize) -> usize {
        let mut len = 0;
        self.tx.send_modify(|p| {
            let need = p.body.len() + bytes.len();
            if need > p.body.capacity() {
                p.body.reserve_exact(capacity.max(need) - p.body.len());
            }
            p.body.extend_from_slice(bytes);
            len = p.body.len();
        });
        len
    }

    /// Ends the fill: `Done` with the object made of the head and the body, else the
    /// given end. Returns the object when there is one.
    pub(crate) fn end(&self, state: impl FnOnce(&mut Progress) -> State) -> Option<Arc<Object>> {
        let mut out = None;
        self.tx.send_modify(|p| {
            let s = state(p);
            if let State::Done(o) = &s {
                out = Some(o.clone());
            }
            // Done: the readers go on from the object, so the fill holds no second copy.
            // Failed or abandoned: readers are cut, the bytes are of no use.
            p.body = Vec::new();
            p.state = s;
        });
        out
    }

    /// Takes the body and head out to make the stored object.
    pub(crate) fn object(p: &mut Progress) -> Option<Object> {
        let head = p.head.as_ref()?;
        // A body of unknown length grew by doubling: keep only what it holds.
        if p.body.capacity() > p.body.len() + p.body.len() / 8 {
            p.body.shrink_to_fit();
        }
        Some(Object {
            status: head.status,
            reason: head.reason.clone(),
            headers: head.headers.clone(),
            body: Body::Memory(Bytes::from(std::mem::take(&mut p.body))),
            policy: head.policy.clone(),
            hit_head: Default::default(),
        })
    }
}

/// The fill failed after its head: the reader's client must be cut (reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut;

/// One client reading a fill.
#[derive(Debug)]
pub struct Reader {
    rx: watch::Receiver<Progress>,
    offset: usize,
}

impl Reader {
    /// The head, once the origin's response arrived; `None` when the fill was given up
    /// before (the reader asks the origin itself).
    pub async fn head(&mut self) -> Option<Arc<Head>> {
        loop {
            {
                let p = self.rx.borrow_and_update();
                match (&p.head, &p.state) {
                    (_, State::Abandoned) => return None,
                    (Some(h), _) => return Some(h.clone()),
                    (None, State::Failed) => return None,
                    _ => {}
                }
            }
            if self.rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// The next bytes of the body: `Ok(Some)` bytes, `Ok(None)` the complete end,
    /// `Err(Cut)` when the fill failed.
    pub async fn next(&mut self) -> Result<Option<Bytes>, Cut> {
        loop {
            {
                let p = self.rx.borrow_and_update();
                match &p.state {
                    State::Done(o) => {
                        // A fill's object is in memory: the disk tier gets a copy.
                        let Some(body) = o.body.bytes() else {
                            return Err(Cut);
                        };
                        if self.offset >= body.len() {
                            return Ok(None);
                        }
                        let b = body.slice(self.offset..);
                        self.offset = body.len();
                        return Ok(Some(b));
                    }
                    State::Failed | State::Abandoned => return Err(Cut),
                    State::Asking | State::Filling => {
                        if p.body.len() > self.offset {
                            let b = Bytes::copy_from_slice(&p.body[self.offset..]);
                            self.offset = p.body.len();
                            return Ok(Some(b));
                        }
                    }
                }
            }
            if self.rx.changed().await.is_err() {
                // The fill was dropped without an end: a failure.
                return Err(Cut);
            }
        }
    }
}

/// Whether a fill whose client went away is finished anyway (Squid's
/// `quick_abort_min/max/pct`): yes while other clients read it; else yes when at most
/// `min` bytes remain; no when more than `max` remain; else yes when at least `pct` percent
/// has arrived. A body of unknown length (chunked) is read on while it ends within `max`
/// more bytes ([`QuickAbort::go_on`]): where Squid gives such a body up at once, this
/// bounds the waste the same way a known length does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuickAbort {
    pub min: u64,
    pub max: u64,
    pub pct: u8,
}

impl Default for QuickAbort {
    /// Squid's defaults: 16 KiB, 16 KiB, 95 %.
    fn default() -> Self {
        QuickAbort {
            min: 16 * 1024,
            max: 16 * 1024,
            pct: 95,
        }
    }
}

impl QuickAbort {
    /// Whether to go on when the client leaves, `received` bytes of `total` in.
    pub fn finish(&self, received: u64, total: Option<u64>, readers: usize) -> bool {
        if readers > 0 {
            return true;
        }
        let Some(total) = total else {
            return self.max > 0;
        };
        let remaining = total.saturating_sub(received);
        if remaining <= self.min {
            return true;
        }
        if remaining > self.max {
            return false;
        }
        received.saturating_mul(100) >= u64::from(self.pct).saturating_mul(total)
    }

    /// Whether to read on, `alone` bytes read since the client left. A known length was
    /// judged when the client left and is read to its end; an unknown one is read while
    /// other clients read it or until `max` bytes more have come without its end.
    pub fn go_on(&self, alone: u64, total: Option<u64>, readers: usize) -> bool {
        total.is_some() || readers > 0 || alone <= self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_abort_follows_squid() {
        let q = QuickAbort {
            min: 10,
            max: 100,
            pct: 90,
        };
        assert!(q.finish(0, Some(1000), 1), "another client reads it");
        assert!(q.finish(995, Some(1000), 0), "5 bytes left ≤ min");
        assert!(!q.finish(500, Some(1000), 0), "500 left > max");
        assert!(q.finish(910, Some(1000), 0), "91 % done, 90 left ≤ max");
        assert!(!q.finish(850, Some(950), 0), "89 % done");
        assert!(
            q.finish(10, None, 0),
            "unknown length: read on, bounded by max"
        );
        let never = QuickAbort {
            min: 0,
            max: 0,
            pct: 100,
        };
        assert!(
            !never.finish(10, None, 0),
            "max 0 gives up an unknown length"
        );
        assert!(never.finish(10, None, 2), "unless others read it");
    }

    #[test]
    fn an_unknown_length_is_read_alone_at_most_max_further() {
        let q = QuickAbort {
            min: 10,
            max: 100,
            pct: 90,
        };
        assert!(q.go_on(100, None, 0));
        assert!(!q.go_on(101, None, 0), "past max with no reader");
        assert!(q.go_on(10_000, None, 1), "a reader keeps it going");
        assert!(
            q.go_on(10_000, Some(20_000), 0),
            "a known length was judged at the abort"
        );
    }

    fn head() -> Head {
        let h = Headers::default();
        let ask = crate::policy::Ask {
            method: "GET",
            headers: &h,
            host: "h:80",
        };
        Head {
            status: 200,
            reason: "OK".into(),
            headers: Headers::default(),
            policy: Policy::new(ask, 200, &h, std::time::SystemTime::now(), 0.1),
            length: Some(6),
        }
    }

    #[tokio::test]
    async fn readers_get_every_byte_then_the_end() {
        let fill = Fill::new();
        let mut r = fill.reader();
        fill.set_head(head(), 0);
        assert_eq!(r.head().await.unwrap().status, 200);
        fill.append(b"abc", 0);
        assert_eq!(&r.next().await.unwrap().unwrap()[..], b"abc");
        fill.append(b"def", 0);
        let late = fill.reader();
        fill.end(|p| State::Done(Arc::new(Fill::object(p).unwrap())));
        assert_eq!(&r.next().await.unwrap().unwrap()[..], b"def");
        assert_eq!(r.next().await, Ok(None));
        let mut late = late;
        assert_eq!(&late.next().await.unwrap().unwrap()[..], b"abcdef");
    }

    #[tokio::test]
    async fn a_failed_fill_cuts_its_readers() {
        let fill = Fill::new();
        let mut r = fill.reader();
        fill.set_head(head(), 0);
        fill.append(b"abc", 0);
        fill.end(|_| State::Failed);
        // What arrived before the failure may or may not be read; the end is a cut.
        let mut saw_cut = false;
        for _ in 0..3 {
            if r.next().await == Err(Cut) {
                saw_cut = true;
                break;
            }
        }
        assert!(saw_cut);
        let dropped = Fill::new();
        let mut r = dropped.reader();
        drop(dropped);
        assert_eq!(
            r.next().await,
            Err(Cut),
            "a fill dropped without an end is a cut"
        );
    }

    #[tokio::test]
    async fn an_abandoned_fill_sends_readers_upstream() {
        let fill = Fill::new();
        let mut r = fill.reader();
        fill.end(|_| State::Abandoned);
        assert!(r.head().await.is_none());
    }
}
