//! The `ipsplice` engine's kernel side: the TC ingress program of `bpf/ipsplice.bpf.c` and
//! its `flows` map (one entry per direction of a spliced connection pair, keyed by the
//! packet's 4-tuple as it arrives). The relay decides what goes in an entry; this module
//! loads the program, attaches it to interfaces on demand and reads and writes entries.
//!
//! Attachment uses TCX links (Linux 6.6 and later), which the kernel drops when the proxy
//! exits, however it exits: a killed proxy leaves no filter behind. Older kernels get
//! netlink `cls_bpf` filters, which outlive the process, so [`Ipsplice::load`] first
//! removes any filter of this program's name left on any interface.

use std::collections::HashMap as StdMap;
use std::net::SocketAddrV4;
use std::sync::Mutex;

use aya::maps::{Array, HashMap, MapData};
use aya::programs::tc::{qdisc_detach_program, SchedClassifier, TcAttachType};
use aya::Ebpf;

use crate::Error;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ipsplice.bpf.o"));

/// The program's name, as `bpftool` and netlink filters show it.
pub const PROGRAM: &str = "ipsplice_ingress";

/// A direction's key: the packet's addresses and ports as it reaches the proxy.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    saddr: u32,
    daddr: u32,
    sport: u16,
    dport: u16,
}

impl FlowKey {
    /// Packets from `from` to `to`.
    pub fn new(from: SocketAddrV4, to: SocketAddrV4) -> FlowKey {
        FlowKey {
            saddr: u32::from(*from.ip()).to_be(),
            daddr: u32::from(*to.ip()).to_be(),
            sport: from.port().to_be(),
            dport: to.port().to_be(),
        }
    }
}

/// How the program treats a direction's packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Pass to the proxy's socket; record the sender's TSval and highest sequence.
    Observe = 0,
    /// Drop new data, pass ACKs, resets and retransmissions (the snapshot is being taken).
    Freeze = 1,
    /// Rewrite into the other connection and send on.
    Active = 2,
}

pub const FLAG_FIN: u8 = 1;
pub const FLAG_RST: u8 = 2;
pub const SEEN_TSVAL: u32 = 1;
pub const SEEN_SEQ: u32 = 2;
pub const SEEN_ACK: u32 = 4;

/// A direction's entry; the same layout as `struct flow` in the C program.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flow {
    saddr: u32,
    daddr: u32,
    sport: u16,
    dport: u16,
    /// Interface index to send rewritten packets out of.
    pub oif: u32,
    pub seq_delta: u32,
    pub ack_delta: u32,
    pub tsval_delta: u32,
    pub tsecr_delta: u32,
    pub wscale_in: u8,
    pub wscale_out: u8,
    mode: u8,
    /// [`FLAG_FIN`], [`FLAG_RST`]: seen from the source while active.
    pub flags: u8,
    pub seq_max: u32,
    pub last_tsval: u32,
    /// [`SEEN_TSVAL`], [`SEEN_SEQ`], [`SEEN_ACK`].
    pub seen: u32,
    /// Highest ACK from the source, as it arrived, valid with [`SEEN_ACK`].
    pub ack_max: u32,
    /// See [`Flow::learn_tsval`].
    ts_off: u32,
    learn: u32,
    /// The slot of the `clamps` map that caps the windows this direction carries to its
    /// receiver's peer (0: none); see [`Ipsplice::take_slot`].
    pub pace: u32,
    /// Data bytes sent on while active.
    pub bytes: u64,
    /// `CLOCK_MONOTONIC` ns of the last packet.
    pub last_ns: u64,
    /// Packets dropped while frozen; packets that had no route out.
    pub dropped: u64,
    pub unroutable: u64,
}

// SAFETY: plain C-layout integers with no padding holes the kernel could leave undefined
// (the fields are ordered by size as in the C struct).
unsafe impl aya::Pod for FlowKey {}
// SAFETY: as above.
unsafe impl aya::Pod for Flow {}

impl Flow {
    /// A fresh entry in `mode`, rewriting nothing yet.
    pub fn observing() -> Flow {
        Flow::default()
    }
    /// Sets the packet's new addresses and ports (what the other connection uses).
    pub fn rewrite_to(&mut self, from: SocketAddrV4, to: SocketAddrV4) {
        let k = FlowKey::new(from, to);
        (self.saddr, self.daddr, self.sport, self.dport) = (k.saddr, k.daddr, k.sport, k.dport);
    }
    /// The TSval delta is set by the program from the first packet with timestamps (the
    /// endpoint's clock is not known yet), so that its TSvals continue from
    /// `CLOCK_MONOTONIC` ms + `ts_off`, the clock of the proxy's socket on the other leg;
    /// the other direction's entry gets the inverse as its TSecr delta.
    pub fn learn_tsval(&mut self, ts_off: u32) {
        self.ts_off = ts_off;
        self.learn = 1;
    }
    pub fn mode(&self) -> Mode {
        match self.mode {
            1 => Mode::Freeze,
            2 => Mode::Active,
            _ => Mode::Observe,
        }
    }
    pub fn set_mode(&mut self, m: Mode) {
        self.mode = m as u8;
    }
}

/// Slots in the `clamps` map (slot 0 is none).
const CLAMP_SLOTS: u32 = 65536;

/// The loaded program, its maps and the interfaces it is attached to; one per process.
pub struct Ipsplice {
    flows: Mutex<HashMap<MapData, FlowKey, Flow>>,
    clamps: Mutex<Array<MapData, u32>>,
    /// Slots of `clamps` not in use.
    free_slots: Mutex<Vec<u32>>,
    bpf: Mutex<Ebpf>,
    attached: Mutex<StdMap<u32, ()>>,
}

impl Ipsplice {
    /// Loads the program (not yet attached anywhere) after removing netlink filters a
    /// killed proxy may have left. Needs `CAP_BPF` and `CAP_NET_ADMIN` (root).
    pub fn load() -> Result<Ipsplice, Error> {
        for name in splicer_sys::net::interfaces() {
            let _ = qdisc_detach_program(&name, TcAttachType::Ingress, PROGRAM);
        }
        let mut bpf = Ebpf::load(crate::object(OBJECT, "ipsplice")?)?;
        let flows: HashMap<MapData, FlowKey, Flow> =
            HashMap::try_from(bpf.take_map("flows").ok_or(Error::Missing("map flows"))?)?;
        let clamps: Array<MapData, u32> =
            Array::try_from(bpf.take_map("clamps").ok_or(Error::Missing("map clamps"))?)?;
        let prog: &mut SchedClassifier = bpf
            .program_mut(PROGRAM)
            .ok_or(Error::Missing("program ipsplice_ingress"))?
            .try_into()?;
        prog.load()?;
        Ok(Ipsplice {
            flows: Mutex::new(flows),
            clamps: Mutex::new(clamps),
            // Popped from the end: low slots first.
            free_slots: Mutex::new((1..CLAMP_SLOTS).rev().collect()),
            bpf: Mutex::new(bpf),
            attached: Mutex::new(StdMap::new()),
        })
    }

    /// Attaches the program to interface `ifindex`'s ingress, once.
    pub fn attach(&self, ifindex: u32) -> Result<(), Error> {
        let mut attached = crate::lock(&self.attached);
        if attached.contains_key(&ifindex) {
            return Ok(());
        }
        let name = splicer_sys::net::ifname(ifindex)?;
        let mut bpf = crate::lock(&self.bpf);
        let prog: &mut SchedClassifier = bpf
            .program_mut(PROGRAM)
            .ok_or(Error::Missing("program ipsplice_ingress"))?
            .try_into()?;
        crate::attach_ingress(prog, &name)?;
        attached.insert(ifindex, ());
        Ok(())
    }

    /// Interfaces the program is attached to.
    pub fn attached(&self) -> Vec<u32> {
        let mut v: Vec<u32> = crate::lock(&self.attached).keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Inserts or replaces a direction's entry.
    pub fn set(&self, key: FlowKey, flow: Flow) -> Result<(), Error> {
        crate::lock(&self.flows).insert(key, flow, 0)?;
        Ok(())
    }

    /// A direction's entry, if present.
    pub fn get(&self, key: &FlowKey) -> Option<Flow> {
        crate::lock(&self.flows).get(key, 0).ok()
    }

    /// Removes a direction's entry (absent is fine).
    pub fn remove(&self, key: &FlowKey) {
        let _ = crate::lock(&self.flows).remove(key);
    }

    /// A slot of the `clamps` map for an entry's [`Flow::pace`], its clamp cleared; `None`
    /// when all are taken (the entry then cannot be paced).
    pub fn take_slot(&self) -> Option<u32> {
        let slot = crate::lock(&self.free_slots).pop()?;
        if self.set_clamp(slot, 0).is_err() {
            crate::lock(&self.free_slots).push(slot);
            return None;
        }
        Some(slot)
    }

    /// Gives a slot back, its clamp cleared. Its entries must be gone (or no longer name it):
    /// the slot may be taken for another at once.
    pub fn give_slot(&self, slot: u32) {
        if slot == 0 || slot >= CLAMP_SLOTS {
            return;
        }
        let _ = self.set_clamp(slot, 0);
        crate::lock(&self.free_slots).push(slot);
    }

    /// Caps the windows of the entries that name `slot` at `bytes` (0: no cap).
    pub fn set_clamp(&self, slot: u32, bytes: u32) -> Result<(), Error> {
        crate::lock(&self.clamps).set(slot, bytes, 0)?;
        Ok(())
    }

    /// The clamp in `slot` (0: none).
    pub fn clamp(&self, slot: u32) -> Result<u32, Error> {
        Ok(crate::lock(&self.clamps).get(&slot, 0)?)
    }

    /// Entries in the map (two per spliced pair).
    pub fn entries(&self) -> usize {
        crate::lock(&self.flows).keys().count()
    }
}

/// Names of the TCX ingress programs attached to interface `ifname` of the calling thread's
/// namespace (what `bpftool net` shows on newer versions): how tests check that nothing of
/// this program is left behind.
pub fn tcx_ingress_programs(ifname: &str) -> Result<Vec<String>, Error> {
    let (_, progs) = SchedClassifier::query_tcx(ifname, TcAttachType::Ingress)?;
    Ok(progs
        .iter()
        .map(|p| p.name_as_str().unwrap_or("?").to_string())
        .collect())
}
