//! Per-leg TCP tuning (seed 004): the cgroup `sockops` program of `bpf/tune.bpf.c`, which
//! sets the initial congestion window (`TCP_BPF_IW`), the congestion control, the minimum
//! RTO and the delayed-ACK bound of each TCP connection of a configured leg as it is
//! established. The initial window cannot be set any other way per connection: only a
//! sockops program may, and only before the first byte is sent.
//!
//! A leg is named by address within this process's network namespace: [`Leg::Accepted`]
//! by a listener's address (the unspecified address stands for every local one),
//! [`Leg::Opened`] by an upstream server's address. The program is attached to the cgroup
//! (v2) this process runs in, as a link: one program among many, displacing none;
//! another process of that cgroup, in the same namespace, connecting to a configured server
//! would be tuned too (docs/edge.md says so).

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::time::Duration;

use aya::maps::{Array, HashMap, MapData};
use aya::programs::{CgroupAttachMode, SockOps};
use aya::Ebpf;

use crate::Error;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tune.bpf.o"));

/// Longest congestion-control name the kernel takes (`TCP_CA_NAME_MAX`, with its NUL).
pub const CONGESTION_NAME_MAX: usize = 16;

/// What to set on the connections of one leg; `None` leaves the kernel's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuning {
    /// Initial congestion window, in segments.
    pub initial_window: Option<u32>,
    /// Congestion control (`cubic`, `bbr`, …); it must be loaded ([`Tuner::load`] loads it).
    pub congestion: Option<String>,
    /// Minimum retransmission timeout (the kernel takes 2 jiffies to 200 ms).
    pub rto_min: Option<Duration>,
    /// Longest an ACK is delayed (the kernel takes 2 jiffies to 200 ms).
    pub delack_max: Option<Duration>,
}

/// Which connections a [`Tuning`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leg {
    /// Accepted on this local address (a listener's).
    Accepted(SocketAddr),
    /// Opened to this remote address (an upstream server's).
    Opened(SocketAddr),
}

/// A setting the kernel may refuse, in the program's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    InitialWindow,
    Congestion,
    RtoMin,
    DelackMax,
}

impl Setting {
    pub const ALL: [Setting; 4] = [
        Setting::InitialWindow,
        Setting::Congestion,
        Setting::RtoMin,
        Setting::DelackMax,
    ];

    /// The option's name, for logs.
    pub fn option(self) -> &'static str {
        match self {
            Setting::InitialWindow => "TCP_BPF_IW",
            Setting::Congestion => "TCP_CONGESTION",
            Setting::RtoMin => "TCP_BPF_RTO_MIN",
            Setting::DelackMax => "TCP_BPF_DELACK_MAX",
        }
    }
}

/// What the program did since it was loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// Connections of a configured leg it saw established.
    pub tuned: u64,
    /// Each setting the kernel refused at least once.
    pub refused: Vec<Refused>,
}

/// A setting the kernel refused: how often, and its last error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub setting: Setting,
    pub times: u64,
    pub errno: i32,
}

impl Refused {
    pub fn error(&self) -> std::io::Error {
        std::io::Error::from_raw_os_error(self.errno)
    }
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct LegKey {
    netns: u64,
    addr: [u32; 4],
    port: u16,
    family: u8,
    side: u8,
    pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct LegTuning {
    initial_window: u32,
    rto_min_us: u32,
    delack_max_us: u32,
    pad: u32,
    congestion: [u8; CONGESTION_NAME_MAX],
}

// SAFETY: plain C structs of integers with explicit padding fields, the layout the program
// declares.
unsafe impl aya::Pod for LegKey {}
// SAFETY: as above.
unsafe impl aya::Pod for LegTuning {}

/// The loaded and attached program and its maps.
pub struct Tuner {
    legs: Mutex<HashMap<MapData, LegKey, LegTuning>>,
    outcomes: Array<MapData, i64>,
    netns: u64,
    // Keeps the program loaded and attached.
    _bpf: Ebpf,
}

impl std::fmt::Debug for Tuner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tuner").field("netns", &self.netns).finish()
    }
}

impl Tuner {
    /// Loads the program and attaches it to this process's cgroup. Needs root (`CAP_BPF`,
    /// `CAP_NET_ADMIN`) and cgroup v2.
    pub fn load() -> Result<Tuner, Error> {
        let probe = std::net::UdpSocket::bind("127.0.0.1:0")?;
        let netns = splicer_sys::sock::netns_cookie(probe.as_fd())?;
        let cgroup = std::fs::File::open(own_cgroup()?)?;
        let mut bpf = Ebpf::load(crate::object(OBJECT, "tune")?)?;
        let legs = HashMap::try_from(bpf.take_map("legs").ok_or(Error::Missing("map legs"))?)?;
        let outcomes = Array::try_from(
            bpf.take_map("outcomes")
                .ok_or(Error::Missing("map outcomes"))?,
        )?;
        let prog: &mut SockOps = bpf
            .program_mut("splicer_tune")
            .ok_or(Error::Missing("program splicer_tune"))?
            .try_into()?;
        prog.load()?;
        // As a link (aya uses one on 5.7 and later) the program is always attached as one of
        // many; the link API refuses any flag, so the mode must be the default.
        prog.attach(cgroup, CgroupAttachMode::Single)?;
        Ok(Tuner {
            legs: Mutex::new(legs),
            outcomes,
            netns,
            _bpf: bpf,
        })
    }

    /// Tunes the connections of `leg` established from now on. A congestion control is
    /// first set on a probe socket: that loads its module (the program cannot) and says
    /// clearly when there is no such algorithm.
    pub fn set(&self, leg: Leg, tuning: &Tuning) -> Result<(), Error> {
        let mut value = LegTuning {
            initial_window: tuning.initial_window.unwrap_or(0),
            rto_min_us: micros(tuning.rto_min),
            delack_max_us: micros(tuning.delack_max),
            ..LegTuning::default()
        };
        if let Some(name) = &tuning.congestion {
            if name.is_empty() || name.len() >= CONGESTION_NAME_MAX {
                return Err(Error::Io(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("congestion control {name:?}: not a name"),
                )));
            }
            let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
            splicer_sys::sock::set_congestion(probe.as_fd(), name).map_err(|e| {
                std::io::Error::new(e.kind(), format!("congestion control {name:?}: {e}"))
            })?;
            value.congestion[..name.len()].copy_from_slice(name.as_bytes());
        }
        let key = self.key(leg);
        let mut legs = self.legs.lock().unwrap_or_else(|e| e.into_inner());
        legs.insert(key, value, 0)?;
        Ok(())
    }

    /// What the program did so far.
    pub fn outcomes(&self) -> Outcomes {
        let get = |k: u32| self.outcomes.get(&k, 0).unwrap_or(0);
        let refused = Setting::ALL
            .iter()
            .enumerate()
            .filter_map(|(i, &s)| {
                let k = 2 * (i as u32 + 1);
                let times = get(k) as u64;
                (times > 0).then(|| Refused {
                    setting: s,
                    times,
                    errno: -(get(k + 1) as i32),
                })
            })
            .collect();
        Outcomes {
            tuned: get(0) as u64,
            refused,
        }
    }

    fn key(&self, leg: Leg) -> LegKey {
        let (side, addr) = match leg {
            Leg::Accepted(a) => (0, a),
            Leg::Opened(a) => (1, a),
        };
        let mut key = LegKey {
            netns: self.netns,
            port: addr.port(),
            side,
            ..LegKey::default()
        };
        match addr.ip() {
            IpAddr::V4(ip) => {
                key.family = 4;
                key.addr[0] = u32::from_ne_bytes(ip.octets());
            }
            IpAddr::V6(ip) => {
                key.family = 6;
                for (i, c) in ip.octets().chunks_exact(4).enumerate() {
                    key.addr[i] = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
        }
        key
    }
}

fn micros(d: Option<Duration>) -> u32 {
    d.map_or(0, |d| d.as_micros().clamp(1, u32::MAX as u128) as u32)
}

/// The directory of this process's cgroup in the cgroup v2 hierarchy: where that hierarchy
/// is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host) joined with
/// the `0::` line of `/proc/self/cgroup`. Under `ip netns exec`, whose mount namespace has
/// a fresh `/sys` without the cgroup mounts, the hierarchy is looked for through the mounts
/// of process 1 (`/proc/1/root`), which a sandbox may deny: the error then says to enter
/// the namespace with `nsenter --net=` instead.
fn own_cgroup() -> Result<std::path::PathBuf, Error> {
    let no_v2 = || {
        Error::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no cgroup v2 hierarchy is mounted here (per-leg TCP tuning attaches to one; \
             under `ip netns exec`, which mounts a fresh /sys, use `nsenter --net=/run/netns/NAME` \
             or mount cgroup2 on /sys/fs/cgroup)",
        ))
    };
    let own = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mount = match cgroup2_mount(&own) {
        Some(m) => m.to_string(),
        None => {
            let init = std::fs::read_to_string("/proc/1/mountinfo").unwrap_or_default();
            let m = format!("/proc/1/root{}", cgroup2_mount(&init).ok_or_else(no_v2)?);
            if std::fs::metadata(&m).is_err() {
                return Err(no_v2());
            }
            m
        }
    };
    let cgroups = std::fs::read_to_string("/proc/self/cgroup")?;
    let path = cgroups
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(no_v2)?;
    Ok(std::path::Path::new(&mount).join(path.trim_start_matches('/')))
}

/// Where a `mountinfo` text has the cgroup v2 hierarchy mounted.
fn cgroup2_mount(mountinfo: &str) -> Option<&str> {
    // Fields: id parent major:minor root mount-point options ... - fstype source options.
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (right.split(' ').next() == Some("cgroup2")).then(|| left.split(' ').nth(4))?
    })
}
