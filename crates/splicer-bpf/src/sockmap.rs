//! The `sockmap` engine's kernel side: a SOCKHASH of spliced sockets, a map from each
//! socket's cookie to its partner's key, and the `sk_skb` stream-verdict program that
//! redirects every arriving skb onto the partner's send queue, first cutting off any bytes of
//! it the socket had already consumed (a partly overlapping retransmission). That is seed
//! 000's socket-level splice: both TCP connections stay terminated at the proxy, the bytes
//! never reach user space.
//!
//! A pair gets keys `2n` and `2n + 1`. Peers are recorded first, then the first socket is
//! inserted, then the second. Bytes queued before a socket's insertion stay in its TCP
//! queue (the relay flushes them afterwards, docs/kernel-notes.md); an skb arriving on the first
//! socket before the second is in the map cannot be redirected, so the program keeps it for
//! the proxy and counts it in `passed`. [`Sockmap::splice`] reports that count: non-zero
//! means some bytes may have overtaken others, and the relay resets the pair.

use std::os::fd::{AsRawFd, BorrowedFd};

use splicer_sys::sock::socket_cookie;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use aya::maps::{Array, HashMap, MapData, SockHash};
use aya::programs::SkSkb;
use aya::Ebpf;

use crate::Error;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sockmap.bpf.o"));

/// The loaded program and its maps; one per process is enough for every tunnel.
pub struct Sockmap {
    socks: Mutex<SockHash<MapData, u64>>,
    targets: Mutex<SockHash<MapData, u64>>,
    bounds: Mutex<HashMap<MapData, u64, BoundValue>>,
    partners: Mutex<HashMap<MapData, u64, u64>>,
    passed: Mutex<HashMap<MapData, u64, u64>>,
    gates: Mutex<HashMap<MapData, u64, GateValue>>,
    resumes: Mutex<HashMap<MapData, u64, u64>>,
    handed_on: Mutex<HashMap<MapData, u64, u32>>,
    stats: Array<MapData, u64>,
    next: AtomicU64,
    // Keeps the program loaded and attached.
    _bpf: Ebpf,
}

/// Counts kept by the verdict program (since it was loaded, over every tunnel).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Skbs that arrived starting before the bytes the socket had consumed (a partly
    /// overlapping retransmission) and had that overlap cut off before the redirect.
    pub trimmed_skbs: u64,
    /// Bytes cut off them.
    pub trimmed_bytes: u64,
    /// Cuts that failed: the skb was kept for the proxy instead, and its tunnel reset.
    pub failed_trims: u64,
    /// FINs that came without data, dropped rather than redirected (the proxy passes FINs
    /// on itself).
    pub bare_fins: u64,
    /// Times a direction's gate closed (its redirect queue reached its bound).
    pub gate_closings: u64,
}

/// A direction's gate, as the proxy sees it ([`Sockmap::bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// Closed: what the source sends is held on its receive side for the proxy.
    pub closed: bool,
    /// Bytes held for the proxy so far, over every closing.
    pub held: u64,
}

/// `struct gate` of the program, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct GateValue {
    limit: u64,
    redirected: u64,
    held: u64,
    base: u32,
    based: u32,
    closed: u32,
    pad: u32,
}

// SAFETY: plain integers with no padding (8 + 8 + 8 + 4 × 4 bytes, `repr(C)`).
unsafe impl aya::Pod for GateValue {}

/// Where a one-way splice's bound stands ([`Sockmap::splice_one_way`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bound {
    /// Bytes of the body not yet handed on by the program (redirected or held by the gate).
    pub remaining: u64,
    /// Bytes passed to the source's own receive side at or past the bound: the skb that
    /// would have reached or crossed it (whole) and every later one.
    pub beyond: u64,
    /// Nothing more is redirected: an skb reached or crossed the bound.
    pub reached: bool,
}

/// `struct bound` of the program, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct BoundValue {
    remaining: u64,
    beyond: u64,
    reached: u32,
    pad: u32,
}

// SAFETY: plain integers with no padding (8 + 8 + 4 + 4 bytes, `repr(C)`).
unsafe impl aya::Pod for BoundValue {}

/// A spliced pair; [`Sockmap::unsplice`] takes it out of the maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    keys: [u64; 2],
    cookies: [u64; 2],
    /// Spliced one way ([`Sockmap::splice_one_way`]): socket 0 in `socks`, socket 1 in
    /// `targets`, and per-socket entries for socket 0 only.
    one_way: bool,
}

impl Pair {
    /// The sockets whose cookies key entries of the per-socket maps.
    fn sources(&self) -> &[u64] {
        if self.one_way {
            &self.cookies[..1]
        } else {
            &self.cookies
        }
    }
}

impl Sockmap {
    /// Loads and attaches the program. Needs `CAP_BPF` and `CAP_NET_ADMIN` (root).
    pub fn load() -> Result<Sockmap, Error> {
        let mut bpf = Ebpf::load(crate::object(OBJECT, "sockmap")?)?;
        let socks: SockHash<MapData, u64> =
            SockHash::try_from(bpf.take_map("socks").ok_or(Error::Missing("map socks"))?)?;
        let targets: SockHash<MapData, u64> = SockHash::try_from(
            bpf.take_map("targets")
                .ok_or(Error::Missing("map targets"))?,
        )?;
        let bounds: HashMap<MapData, u64, BoundValue> =
            HashMap::try_from(bpf.take_map("bounds").ok_or(Error::Missing("map bounds"))?)?;
        let partners: HashMap<MapData, u64, u64> = HashMap::try_from(
            bpf.take_map("partners")
                .ok_or(Error::Missing("map partners"))?,
        )?;
        let passed: HashMap<MapData, u64, u64> =
            HashMap::try_from(bpf.take_map("passed").ok_or(Error::Missing("map passed"))?)?;
        let stats: Array<MapData, u64> =
            Array::try_from(bpf.take_map("stats").ok_or(Error::Missing("map stats"))?)?;
        let gates: HashMap<MapData, u64, GateValue> =
            HashMap::try_from(bpf.take_map("gates").ok_or(Error::Missing("map gates"))?)?;
        let resumes: HashMap<MapData, u64, u64> = HashMap::try_from(
            bpf.take_map("resumes")
                .ok_or(Error::Missing("map resumes"))?,
        )?;
        let handed_on: HashMap<MapData, u64, u32> = HashMap::try_from(
            bpf.take_map("handed_on")
                .ok_or(Error::Missing("map handed_on"))?,
        )?;
        let prog: &mut SkSkb = bpf
            .program_mut("splice_verdict")
            .ok_or(Error::Missing("program splice_verdict"))?
            .try_into()?;
        prog.load()?;
        prog.attach(socks.fd())?;
        Ok(Sockmap {
            socks: Mutex::new(socks),
            targets: Mutex::new(targets),
            bounds: Mutex::new(bounds),
            partners: Mutex::new(partners),
            passed: Mutex::new(passed),
            gates: Mutex::new(gates),
            resumes: Mutex::new(resumes),
            handed_on: Mutex::new(handed_on),
            stats,
            next: AtomicU64::new(0),
            _bpf: bpf,
        })
    }

    /// Splices `a` and `b`: from now on what arrives on one is sent on the other by the
    /// kernel. Both must be connected TCP sockets, in a state a sockmap takes (established:
    /// one that already received a FIN is refused with `EOPNOTSUPP`). `a` is inserted
    /// first: pass the side less likely to send during set-up (a client waiting for its
    /// answer). Returns the pair and how many skbs of either socket the program had to keep
    /// for the proxy during set-up (0: nothing can have been reordered).
    pub fn splice(&self, a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> Result<(Pair, u64), Error> {
        self.splice_with(a, b, || Ok(()))
    }

    /// [`Sockmap::splice`], running `between` after `a` is in the map and before `b` is
    /// (the relay writes the reply owed to the client there). Bytes arriving on `b` until
    /// it is inserted wait in its queue; bytes arriving on `a` meanwhile are kept for the
    /// proxy and counted.
    pub fn splice_with(
        &self,
        a: BorrowedFd<'_>,
        b: BorrowedFd<'_>,
        between: impl FnOnce() -> std::io::Result<()>,
    ) -> Result<(Pair, u64), Error> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let pair = Pair {
            keys: [2 * n, 2 * n + 1],
            cookies: [socket_cookie(a)?, socket_cookie(b)?],
            one_way: false,
        };
        {
            let mut partners = crate::lock(&self.partners);
            partners.insert(pair.cookies[0], pair.keys[1], 0)?;
            partners.insert(pair.cookies[1], pair.keys[0], 0)?;
        }
        let insert = |key: u64, fd: BorrowedFd<'_>| -> Result<(), Error> {
            let mut socks = crate::lock(&self.socks);
            socks.insert(key, fd.as_raw_fd(), 0)?;
            Ok(())
        };
        let inserted = insert(pair.keys[0], a)
            .and_then(|()| between().map_err(Error::from))
            .and_then(|()| insert(pair.keys[1], b));
        if let Err(e) = inserted {
            // Bytes the program kept on the first socket are in its map-side queue, which
            // the kernel discards when the socket leaves the map.
            let kept = self.kept(pair);
            self.unsplice(pair);
            return Err(match kept {
                0 => e,
                kept => Error::KeptThenFailed {
                    kept,
                    source: Box::new(e),
                },
            });
        }
        Ok((pair, self.kept(pair)))
    }

    /// Splices one way, from `from` to `to` (an HTTP body): `to` goes into a map no
    /// program runs for, so what it receives stays on its receive queue for the proxy;
    /// `from` goes into the spliced map with `to` as its partner. With `bound`, at most
    /// that many bytes are handed on ([`Bound`]); without, everything until the end of
    /// stream. `gate` bounds the redirect queue as [`Sockmap::bound`] does. Everything is
    /// in place before `from` goes in, so nothing can fail once the program runs for it.
    /// In the returned pair, `from` is side 0 ([`Sockmap::gate`]). Returns how many skbs
    /// the program kept for the proxy (0 unless something failed).
    pub fn splice_one_way(
        &self,
        from: BorrowedFd<'_>,
        to: BorrowedFd<'_>,
        bound: Option<u64>,
        gate: u64,
    ) -> Result<(Pair, u64), Error> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let pair = Pair {
            keys: [2 * n, 2 * n + 1],
            cookies: [socket_cookie(from)?, socket_cookie(to)?],
            one_way: true,
        };
        let inserted = (|| -> Result<(), Error> {
            crate::lock(&self.targets).insert(pair.keys[1], to.as_raw_fd(), 0)?;
            crate::lock(&self.partners).insert(pair.cookies[0], pair.keys[1], 0)?;
            let b = BoundValue {
                remaining: bound.unwrap_or(u64::MAX),
                ..BoundValue::default()
            };
            crate::lock(&self.bounds).insert(pair.cookies[0], b, 0)?;
            self.bound(pair, gate)?;
            crate::lock(&self.socks).insert(pair.keys[0], from.as_raw_fd(), 0)?;
            Ok(())
        })();
        if let Err(e) = inserted {
            self.unsplice(pair);
            return Err(e);
        }
        Ok((pair, self.kept(pair)))
    }

    /// Where a one-way splice's bound stands (`None` for a pair spliced both ways).
    pub fn bound_of(&self, pair: Pair) -> Option<Bound> {
        let b = crate::lock(&self.bounds).get(&pair.cookies[0], 0).ok()?;
        Some(Bound {
            remaining: b.remaining,
            beyond: b.beyond,
            reached: b.reached != 0,
        })
    }

    /// Takes `pair`'s sockets out of the maps, and leaves the rest (its counts, its bound)
    /// to be read until [`Sockmap::unsplice`]: once out, no verdict is started for them.
    pub fn take_out(&self, pair: Pair) {
        if pair.one_way {
            let _ = crate::lock(&self.socks).remove(&pair.keys[0]);
            let _ = crate::lock(&self.targets).remove(&pair.keys[1]);
            return;
        }
        let mut socks = crate::lock(&self.socks);
        for k in pair.keys {
            let _ = socks.remove(&k);
        }
    }

    /// Skbs of either socket of `pair` the program kept for the proxy instead of
    /// redirecting (during set-up, or later: a failed cut, a partner gone from the map). Once
    /// non-zero nothing more of that socket is redirected, so what its partner got is a clean
    /// prefix of the stream, and the pair should be reset.
    pub fn kept(&self, pair: Pair) -> u64 {
        if pair.one_way {
            // Only the source runs the program.
            return crate::lock(&self.passed)
                .get(&pair.cookies[0], 0)
                .unwrap_or(0);
        }
        self.kept_each(pair).iter().sum()
    }

    /// [`Sockmap::kept`] per socket, in the order they were given to [`Sockmap::splice`].
    pub fn kept_each(&self, pair: Pair) -> [u64; 2] {
        let passed = crate::lock(&self.passed);
        pair.cookies.map(|c| passed.get(&c, 0).unwrap_or(0))
    }

    /// Takes a pair out of the maps (what arrives afterwards stays with the sockets).
    pub fn unsplice(&self, pair: Pair) {
        // Sockets first: once out of `socks` the program no longer runs for them, so it
        // cannot recreate the entries removed next.
        self.take_out(pair);
        self.forget(pair);
    }

    /// Removes a pair's per-socket entries (counts, gates, bound), once [`Sockmap::take_out`]
    /// took its sockets out.
    pub fn forget(&self, pair: Pair) {
        let mut bounds = crate::lock(&self.bounds);
        let mut partners = crate::lock(&self.partners);
        let mut passed = crate::lock(&self.passed);
        let mut gates = crate::lock(&self.gates);
        let mut resumes = crate::lock(&self.resumes);
        let mut handed_on = crate::lock(&self.handed_on);
        for c in pair.sources() {
            let _ = partners.remove(c);
            let _ = passed.remove(c);
            let _ = gates.remove(c);
            let _ = resumes.remove(c);
            let _ = handed_on.remove(c);
            if pair.one_way {
                let _ = bounds.remove(c);
            }
        }
    }

    /// Bounds what each direction of `pair` may hold in the kernel's redirect queue to
    /// `limit` bytes (the program's gate: past it, what the source sends waits on the
    /// source's own receive side, its window closes, and the proxy relays it in order).
    pub fn bound(&self, pair: Pair, limit: u64) -> Result<(), Error> {
        let mut gates = crate::lock(&self.gates);
        let gate = GateValue {
            limit,
            ..GateValue::default()
        };
        for c in pair.sources() {
            gates.insert(c, gate, 0)?;
        }
        Ok(())
    }

    /// The gate of the direction whose source is `pair`'s socket `side` (0 or 1, in the
    /// order given to [`Sockmap::splice`]); `None` when the pair has no bound.
    pub fn gate(&self, pair: Pair, side: usize) -> Option<Gate> {
        let g = crate::lock(&self.gates).get(&pair.cookies[side], 0).ok()?;
        Some(Gate {
            closed: g.closed != 0,
            held: g.held,
        })
    }

    /// Tells the program the proxy relayed `relayed` of the bytes held on socket `side`
    /// (all of them, ever: the gate opens at the next skb when that equals what it held).
    pub fn resume(&self, pair: Pair, side: usize, relayed: u64) -> Result<(), Error> {
        crate::lock(&self.resumes).insert(pair.cookies[side], relayed, 0)?;
        Ok(())
    }

    /// What the verdict program did since it was loaded.
    pub fn stats(&self) -> Stats {
        let get = |i| self.stats.get(&i, 0).unwrap_or(0);
        Stats {
            trimmed_skbs: get(0),
            trimmed_bytes: get(1),
            failed_trims: get(2),
            bare_fins: get(3),
            gate_closings: get(4),
        }
    }

    /// Pairs currently spliced: a pair spliced both ways has two entries in the partner
    /// map, a one-way one has one (and a bound).
    pub fn pairs(&self) -> usize {
        let partners = crate::lock(&self.partners).keys().count();
        let one_way = crate::lock(&self.bounds).keys().count();
        partners.saturating_sub(one_way) / 2 + one_way
    }
}
