//! The lab's count of received TCP segments by the state of the socket that takes them:
//! the TC ingress program of `bpf/tcpstate.bpf.c` and its `counts` map (per interface and
//! state, per CPU). Nothing of Splicer uses it; `splicer-lab` attaches it to a host's
//! interfaces for seed 002's count of the packets its booster took in `FIN_WAIT_1`.
//!
//! Attached with TCX links (Linux 6.6 and later), dropped with the process; older kernels
//! get netlink filters, which stay until the lab removes the host's namespace. (The time
//! spent per state, seed 002's Fig 8, would need a program timing the kernel's receive
//! functions: fentry programs fail to load on this kernel, with `EPERM`, and it has no
//! kprobes; docs/kernel-notes.md.)

use std::collections::BTreeMap;
use std::sync::Mutex;

use aya::maps::{MapData, PerCpuHashMap};
use aya::programs::tc::SchedClassifier;
use aya::Ebpf;

use crate::Error;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tcpstate.bpf.o"));

const PROGRAM: &str = "tcpstate_ingress";

/// The kernel's TCP states (`include/net/tcp_states.h`), by number; 0 is "no socket".
pub const STATES: [&str; 13] = [
    "NONE",
    "ESTABLISHED",
    "SYN_SENT",
    "SYN_RECV",
    "FIN_WAIT1",
    "FIN_WAIT2",
    "TIME_WAIT",
    "CLOSE",
    "CLOSE_WAIT",
    "LAST_ACK",
    "LISTEN",
    "CLOSING",
    "NEW_SYN_RECV",
];

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct StateKey {
    ifindex: u32,
    state: u32,
}

// SAFETY: `#[repr(C)]`, two `u32`s: no padding, every bit pattern valid.
unsafe impl aya::Pod for StateKey {}

/// The loaded program and its counts.
pub struct TcpStates {
    counts: PerCpuHashMap<MapData, StateKey, u64>,
    bpf: Mutex<Ebpf>,
}

impl TcpStates {
    /// Loads the program, attached nowhere yet. Needs `CAP_BPF` and `CAP_NET_ADMIN`.
    pub fn load() -> Result<TcpStates, Error> {
        let mut bpf = Ebpf::load(crate::object(OBJECT, "tcpstate")?)?;
        let counts =
            PerCpuHashMap::try_from(bpf.take_map("counts").ok_or(Error::Missing("map counts"))?)?;
        let prog: &mut SchedClassifier = bpf
            .program_mut(PROGRAM)
            .ok_or(Error::Missing("program tcpstate_ingress"))?
            .try_into()?;
        prog.load()?;
        Ok(TcpStates {
            counts,
            bpf: Mutex::new(bpf),
        })
    }

    /// Counts the segments arriving on interface `ifname` (of the calling thread's
    /// network namespace) from now on.
    pub fn attach(&self, ifname: &str) -> Result<(), Error> {
        let mut bpf = crate::lock(&self.bpf);
        let prog: &mut SchedClassifier = bpf
            .program_mut(PROGRAM)
            .ok_or(Error::Missing("program tcpstate_ingress"))?
            .try_into()?;
        crate::attach_ingress(prog, ifname)
    }

    /// The segments counted so far, by interface index and state name.
    pub fn counts(&self) -> Result<BTreeMap<u32, BTreeMap<&'static str, u64>>, Error> {
        let mut out: BTreeMap<u32, BTreeMap<&'static str, u64>> = BTreeMap::new();
        for entry in self.counts.iter() {
            let (k, per_cpu) = entry?;
            let state = STATES.get(k.state as usize).copied().unwrap_or("OTHER");
            *out.entry(k.ifindex).or_default().entry(state).or_default() +=
                per_cpu.iter().sum::<u64>();
        }
        Ok(out)
    }
}
