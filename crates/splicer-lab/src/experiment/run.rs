//! What one variant's run in one round measured (`runs.json` in a results directory): what
//! an experiment writes and its summary, plots and the seeds' reports read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::load::Report;

/// One variant's run in one round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VariantRun {
    pub variant: String,
    pub round: usize,
    pub wall_s: f64,
    /// CPU seconds of the `role = "proxy"` process during the loads (0 if none).
    pub proxy_cpu_s: f64,
    /// Time the proxy's `cpu_limit` held it back during the loads (0 without a limit).
    #[serde(default)]
    pub proxy_throttled_s: f64,
    /// CPU seconds of the `role = "server"` processes (the origins) during the loads (0 if
    /// none; 0 too in results written before it was kept).
    #[serde(default)]
    pub server_cpu_s: f64,
    /// Busy CPU seconds of the machine during the loads, the emulators' own excluded.
    pub machine_cpu_s: f64,
    pub emulator_cpu_s: f64,
    /// CPU seconds of the proxy host's receive threads during the loads, when it has them
    /// (`napi_threads`): the kernel's work for the packets the proxy receives, a kernel
    /// engine's splicing included, which otherwise lands on the emulators (`bed::napi`).
    #[serde(default)]
    pub proxy_napi_cpu_s: f64,
    /// CPU seconds of the kernel's workers (`kworker/*`, the whole machine) during the
    /// loads: `sockmap` sends the bytes it redirects from one.
    #[serde(default)]
    pub kworker_cpu_s: f64,
    /// Operations completed and bytes moved over the whole run of the loads (warm-up and
    /// cool-down included, like the CPU figures).
    pub operations: u64,
    pub bytes: u64,
    pub tcp: BTreeMap<String, BTreeMap<String, u64>>,
    /// The reports of this variant's loads, and each one's index in the scenario.
    pub loads: Vec<Report>,
    pub load_ids: Vec<usize>,
    /// What each `[[emulate]]` entry did during the loads.
    pub links: Vec<LinkRun>,
    /// Highest TCP memory of the whole machine during the loads, pages (sampled every
    /// 100 ms; 0 in results written before it was kept).
    #[serde(default)]
    pub tcp_mem_peak_pages: u64,
    /// What the proxy host's TCP sockets held during the loads, when the scenario samples
    /// them (`[experiment] proxy_sockets_ms`).
    #[serde(default)]
    pub proxy_sockets: Option<crate::measure::sockets::SocketsRun>,
    /// System calls of the proxy process during the loads, when the scenario counts them
    /// (`[experiment] proxy_syscalls`).
    #[serde(default)]
    pub proxy_syscalls: Option<u64>,
    /// The `[experiment] proxy_events` counted on the proxy process during the loads, by
    /// event (left out when none were asked for).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub proxy_events: BTreeMap<String, u64>,
    /// Seconds the proxy's threads waited on a run queue for a CPU during the loads, when
    /// the scenario counts events (`[experiment] proxy_events`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_run_wait_s: Option<f64>,
    /// Context switches of the whole machine during the loads, when the scenario counts
    /// events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_switches: Option<u64>,
    /// TCP segments the proxy's host received during the loads, by interface and socket
    /// state, when the scenario counts them (`[experiment] proxy_tcp_states`); left out
    /// when not counted, so results written before it was kept read back the same bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_tcp_states: Option<crate::measure::tcpstates::Counts>,
}

/// One emulated link direction during a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkRun {
    pub link: String,
    pub passed: u64,
    /// IP bytes of the packets passed (0 in results written before it was kept).
    #[serde(default)]
    pub bytes: u64,
    pub lost: u64,
    pub overflow: u64,
    /// The model's long-run loss rate, for comparison.
    pub theory_loss: f64,
    /// Verdict lateness p99 since the bed started (µs).
    pub late_p99_us: u64,
    /// TCP segments with data and pure ACKs that the sender sent into the link.
    #[serde(default)]
    pub tcp_data: u64,
    #[serde(default)]
    pub tcp_pure_acks: u64,
    /// Pure ACKs that followed a pure ACK of their connection (seed 002's aggregation).
    #[serde(default)]
    pub tcp_acks_after_ack: u64,
}

impl VariantRun {
    pub fn proxy_ms_per_op(&self) -> f64 {
        self.proxy_cpu_s * 1000.0 / self.operations.max(1) as f64
    }
    /// The proxy's CPU with the kernel work it causes, per operation: its process, its
    /// host's receive threads and the kernel's workers (docs/lab.md, "The proxy's kernel
    /// work"). Without receive threads this is the process and the workers only.
    pub fn proxy_kernel_ms_per_op(&self) -> f64 {
        (self.proxy_cpu_s + self.proxy_napi_cpu_s + self.kworker_cpu_s) * 1000.0
            / self.operations.max(1) as f64
    }
    pub fn machine_ms_per_op(&self) -> f64 {
        self.machine_cpu_s * 1000.0 / self.operations.max(1) as f64
    }
    /// The mean latency (ms) of the loads `pick` takes, weighted by their requests; NaN
    /// when they completed none.
    pub fn mean_latency_ms(&self, pick: impl Fn(&Report) -> bool) -> f64 {
        let (mut sum, mut n) = (0.0, 0u64);
        for r in self.loads.iter().filter(|r| pick(r)) {
            sum += r.latency.mean_ms * r.latency.n as f64;
            n += r.latency.n;
        }
        if n == 0 {
            f64::NAN
        } else {
            sum / n as f64
        }
    }

    pub fn gib(&self) -> f64 {
        self.bytes as f64 / (1u64 << 30) as f64
    }
}
