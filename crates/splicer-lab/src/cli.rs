//! The command line of `splicer-lab`: every subcommand and its flags, with their defaults.
//! Scenario files run the lab's own servers and generators through these same commands
//! (`command = ["lab", "sclient", "--origin", ...]`), so a flag renamed here is renamed there.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use splicer_lab::load::Via;
use splicer_lab::origin::Think;

mod loads;
pub use loads::*;

const VIA: &str = "V: direct, http://PROXY (forward proxy), connect://PROXY (HTTP CONNECT) or \
                   socks5://PROXY";

#[derive(Parser)]
#[command(
    name = "splicer-lab",
    version,
    about = "Splicer's lab: build a scenario's test bed, run its experiment, emulate links, \
             serve origins and sinks, generate load, or clean up after crashed runs.",
    after_help = VIA
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run one of the seeds' experiments end to end and write DIR/NAME.md (plots, the
    /// paper's figures beside ours) and DIR/NAME/ (raw results); root.
    ///
    /// The default grid is the paper's (reduced only where this machine cannot: the report
    /// says how) and writes to docs/experiments; --quick is a reduced grid of minutes,
    /// --tiny checks the machinery in seconds (both write to results/experiments unless
    /// --out is given).
    Reproduce(Reproduce),
    /// Build the bed, run its processes and loads, write results.
    Run {
        scenario: PathBuf,
        /// Where the results go (default: results/NAME-TIMESTAMP).
        #[arg(long)]
        out: Option<String>,
    },
    /// Build the bed, print its hosts, tear it down at the end of input.
    Up { scenario: PathBuf },
    /// Validate a scenario file.
    Check { scenario: PathBuf },
    /// Delete namespaces and CPU-limit groups left by crashed runs.
    Clean,
    /// Measure the emulator against configured RTTs and rates (root).
    Calibrate,
    /// Emulate one link direction fed by NFQUEUE N.
    Emulate(Emulate),
    /// Takes --share of CPU --cpu at real-time priority until killed: a slower CPU (root).
    Steal {
        #[arg(long)]
        cpu: usize,
        #[arg(long)]
        share: f64,
        #[arg(long, default_value_t = 2.0)]
        period_ms: f64,
    },
    /// Counts the TCP segments this network namespace receives, by interface and socket
    /// state, until standard input ends; then prints them as JSON (root).
    TcpStates,
    /// The lab's origin server (default 127.0.0.1:8080).
    Origin {
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// Think time before each response: MS or LOW-HIGH (uniform).
        #[arg(long, default_value = "0")]
        think: Think,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// nginx as an origin: writes `/bytes/SIZE` for each size (the content of --seed, as
    /// the lab's origin sends it) and a configuration, then becomes nginx.
    NginxOrigin {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, value_delimiter = ',', default_value = "1024,65536")]
        sizes: Vec<u64>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Also every object `surge --files N` asks for with this seed and --max-size.
        #[arg(long)]
        surge: Option<u64>,
        /// The surge objects' cut (as `surge --max-size`).
        #[arg(long, default_value_t = 16 << 20)]
        max_size: u64,
    },
    /// Scrapes Splicer's admin listener (`GET /metrics`) every `--every-ms`, as a
    /// Prometheus server would, until killed or `--seconds` pass; prints what it read.
    Scrape {
        #[arg(long, default_value = "127.0.0.1:9180")]
        admin: std::net::SocketAddr,
        #[arg(long, default_value_t = 1000)]
        every_ms: u64,
        #[arg(long, default_value_t = 3600)]
        seconds: u64,
    },
    /// Bulk sink: counts and checks every byte.
    Loadserver {
        #[arg(long)]
        listen: String,
    },
    /// Echoes one-byte round trips.
    PingpongServer {
        #[arg(long)]
        listen: String,
    },
    /// Seed 000's clients (prints one JSON report).
    Sclient(Sclient),
    /// wrk's kept-alive clients asking for the s-clients' object (prints one JSON report).
    Wrk(Wrk),
    /// SURGE's users (prints one JSON report).
    Surge(Surge),
    /// Bulk transfers to a load server (prints one JSON report).
    Loadclient(Loadclient),
    /// Requests at a fixed rate on persistent connections (prints one JSON report).
    Persist(Persist),
    /// One client reading a body at a fixed rate for at most --seconds, checking every
    /// byte (prints one JSON report).
    Slowread(Slowread),
    /// Seed 004's sessions of queries, each on a new connection, to an origin or an edge
    /// (prints one JSON report).
    Queries(Queries),
    /// Seed 004's Table 1: one object at a time, each on a new connection, its bytes
    /// counted by round trip (prints one JSON report).
    Windows(Windows),
    /// One-byte round trips on one connection (after one exchange and a pause, when
    /// given); prints one JSON report.
    Pingpong {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value = "direct")]
        via: Via,
        #[arg(long, default_value_t = 100)]
        count: usize,
        #[arg(long, default_value_t = 0)]
        pause_ms: u64,
    },
    /// Forward proxies with caches side by side; needs root and BENCH=1 scripts/setup.sh.
    CacheBench(HttpBench),
    /// Reverse proxies side by side: Splicer's edge (alone and pipelined), HAProxy, nginx;
    /// needs root and BENCH=1 scripts/setup.sh.
    EdgeBench(HttpBench),
    /// The per-request path against HAProxy: 1 KiB non-cacheable responses through
    /// Splicer's forward proxy (cache off) and edge, HAProxy and nginx, as ratios to
    /// HAProxy (default: nginx origin, wrk, 3 rounds of 10 s); needs root and BENCH=1
    /// scripts/setup.sh.
    PerfGuard(HttpBench),
    /// Seed 000's mixed load (Figs 16-17) on the corporate setting: hits beside spliced
    /// requests, Splicer held to --proxy-cpu percent of one CPU (0: no limit); root.
    RosuMixed(RosuMixed),
    /// TCP relays side by side (IP forwarding, Splicer's engines, HAProxy, nginx stream,
    /// Dante, socat): bulk one way and both ways with 1/10/100 connections, 1-byte round
    /// trips; needs root and BENCH=1 scripts/setup.sh.
    RelayBench(RelayBench),
    /// What the proxy's kernel holds behind a client reading a large body at 1 Mbit/s,
    /// per relay engine, HTTP/1.0 and kept-alive (root).
    SlowReader(SlowReader),
    /// What a splice costs to start and end per engine: CPU and system calls per request,
    /// a connection per request and kept-alive, per body size (root).
    SpliceCost(SpliceCost),
    /// How close to its cap the pacer's rate mode holds bodies and tunnels, per relay
    /// engine, beside the same load uncapped (root).
    PaceBench(PaceBench),
}

#[derive(Args)]
pub struct PaceBench {
    #[arg(long, default_value_t = splicer_lab::bench::pace::Params::default().rounds)]
    pub rounds: u32,
    #[arg(long, default_value_t = splicer_lab::bench::pace::Params::default().seconds)]
    pub seconds: u32,
    #[arg(long, default_value_t = splicer_lab::bench::pace::Params::default().clients)]
    pub clients: u32,
    /// Bytes of each body.
    #[arg(long, default_value_t = splicer_lab::bench::pace::Params::default().size)]
    pub size: u64,
    /// The cap in bytes a second per splice.
    #[arg(long, default_value_t = splicer_lab::bench::pace::Params::default().rate)]
    pub rate: u64,
    /// Engines to run (default: all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    #[arg(long)]
    pub out: Option<String>,
}

#[derive(Args)]
pub struct SpliceCost {
    #[arg(long, default_value_t = splicer_lab::bench::splicecost::Params::default().rounds)]
    pub rounds: u32,
    #[arg(long, default_value_t = splicer_lab::bench::splicecost::Params::default().seconds)]
    pub seconds: u32,
    #[arg(long, default_value_t = splicer_lab::bench::splicecost::Params::default().clients)]
    pub clients: u32,
    /// Body sizes in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = splicer_lab::bench::splicecost::Params::default().sizes)]
    pub sizes: Vec<u64>,
    /// `close` (HTTP/1.0, a connection per request), `kept` (HTTP/1.1 kept alive).
    #[arg(long, value_delimiter = ',', default_values_t = splicer_lab::bench::splicecost::Params::default().cases)]
    pub cases: Vec<String>,
    /// Engines to run (default: all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    #[arg(long)]
    pub out: Option<String>,
}

#[derive(Args)]
pub struct SlowReader {
    #[arg(long, default_value_t = splicer_lab::bench::slowread::Params::default().rounds)]
    pub rounds: u32,
    /// How long the client reads each body.
    #[arg(long, default_value_t = splicer_lab::bench::slowread::Params::default().seconds)]
    pub seconds: u32,
    /// Bytes per second the client reads.
    #[arg(long, default_value_t = splicer_lab::bench::slowread::Params::default().rate)]
    pub rate: u64,
    #[arg(long, default_value_t = splicer_lab::bench::slowread::Params::default().size)]
    pub size: u64,
    /// Engines to run (default: all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    #[arg(long)]
    pub out: Option<String>,
}

#[derive(Args)]
pub struct Reproduce {
    /// The experiment (see --list).
    #[arg(required_unless_present = "list")]
    pub name: Option<String>,
    /// List the experiments, with how long each grid takes.
    #[arg(long, conflicts_with_all = ["name", "quick", "tiny", "out", "from", "render", "part"])]
    pub list: bool,
    /// A reduced grid of minutes.
    #[arg(long, conflicts_with = "tiny")]
    pub quick: bool,
    /// A grid that checks the machinery in seconds.
    #[arg(long)]
    pub tiny: bool,
    /// Where the report goes (default: docs/experiments for the default grid, else
    /// results/experiments).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Report again from the raw results of an earlier run (results/reproduce-NAME-TS).
    #[arg(long)]
    pub from: Option<PathBuf>,
    /// Write the report again from the raw files beside it (OUT/NAME/), nothing run: what
    /// a reader can check a committed report with.
    #[arg(long, conflicts_with_all = ["from", "quick", "tiny"])]
    pub render: bool,
    /// Run this part (one bed) of the experiment alone, keeping its raw files in
    /// INTO/PART/; once every part has run there, `--from INTO` writes the report. For
    /// grids longer than a sitting.
    #[arg(long, conflicts_with_all = ["from", "render"])]
    pub part: Option<String>,
    /// Where parts run alone keep their raw files (default: OUT/NAME-parts).
    #[arg(long, requires = "part")]
    pub into: Option<PathBuf>,
}

#[derive(Args)]
pub struct Emulate {
    #[arg(long)]
    pub queue: u16,
    /// One-way delay.
    #[arg(long, default_value_t = 0.0)]
    pub delay_ms: f64,
    /// Link rate in bits per second (0: unlimited).
    #[arg(long, default_value_t = 0)]
    pub rate_bps: u64,
    /// Packets waiting at most; more are dropped (tail drop).
    #[arg(long, default_value_t = 1000)]
    pub queue_limit: usize,
    /// Two-state loss: probability of going from the good state to the bad.
    #[arg(long, default_value_t = 0.0)]
    pub loss_p: f64,
    /// Two-state loss: probability of going from the bad state back to the good.
    #[arg(long, default_value_t = 0.0)]
    pub loss_r: f64,
    /// Bits per second each flow (connection) may use on its own (0: no cap).
    #[arg(long, default_value_t = 0)]
    pub per_client_rate_bps: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A file the emulator's counters are written to.
    #[arg(long)]
    pub stats: Option<PathBuf>,
    /// Wake this long before a packet's release and yield-wait the rest.
    #[arg(long, default_value_t = splicer_lab::bed::emulator::SPIN.as_micros() as u64)]
    pub spin_us: u64,
}

/// A flag's value that does not parse.
#[derive(Debug, thiserror::Error)]
enum BadValue {
    #[error("{0:?}: seconds, 0 or more")]
    Seconds(String),
    #[error("{0:?}: MS or LOW-HIGH")]
    Milliseconds(String),
}

/// Seconds: a finite number, 0 or more.
fn seconds(s: &str) -> Result<f64, BadValue> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(BadValue::Seconds(s.to_string())),
    }
}

/// The HTTP benchmarks' flags; those not given take the command's defaults.
#[derive(Args)]
pub struct HttpBench {
    #[arg(long, default_value_t = splicer_lab::bench::HttpBench::default().rounds)]
    pub rounds: u32,
    /// Seconds each load runs (cache-bench, edge-bench: 20; perf-guard: 10).
    #[arg(long)]
    pub seconds: Option<u32>,
    /// The origin: lab (the lab's) or nginx (static files).
    #[arg(long)]
    pub origin: Option<splicer_lab::bench::Origin>,
    /// The clients: sclient (check every byte) or wrk.
    #[arg(long)]
    pub generator: Option<splicer_lab::bench::Generator>,
    #[arg(long, default_value_t = splicer_lab::bench::HttpBench::default().clients)]
    pub clients: u32,
    /// Proxies to run (default: all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Loads to run (default: all).
    #[arg(long, value_delimiter = ',')]
    pub loads: Vec<String>,
    /// perf-guard: this many more clients, each downloading 1 MiB answers over and over on
    /// its own kept-alive connection beside the small requests (a mixed load; 0: none).
    #[arg(long, default_value_t = 0)]
    pub bulk: u32,
    #[arg(long)]
    pub out: Option<String>,
}

#[derive(Args)]
pub struct RosuMixed {
    #[arg(long, default_value_t = splicer_lab::reproduce::rosumixed::Params::default().rounds)]
    pub rounds: u32,
    #[arg(long, default_value_t = splicer_lab::reproduce::rosumixed::Params::default().seconds)]
    pub seconds: u32,
    /// Response sizes in KiB.
    #[arg(long, value_delimiter = ',', default_values_t = splicer_lab::reproduce::rosumixed::Params::default().sizes)]
    pub sizes: Vec<u64>,
    #[arg(long, value_delimiter = ',', default_values_t = splicer_lab::reproduce::rosumixed::Params::default().engines)]
    pub engines: Vec<String>,
    /// Percent of one CPU Splicer may use (0: no limit).
    #[arg(long, default_value_t = splicer_lab::reproduce::rosumixed::Params::default().proxy_cpu)]
    pub proxy_cpu: f64,
    /// Instead of a quota (`--proxy-cpu 0`): the share of CPU 1, 0 to 0.9, that
    /// `splicer-lab steal` takes from Splicer and its host's receive threads pinned there,
    /// so that the kernel engines' work is held to the same CPU as the process's.
    #[arg(long, default_value_t = splicer_lab::reproduce::rosumixed::Params::default().steal)]
    pub steal: f64,
    #[arg(long, value_delimiter = ',', default_values_t = splicer_lab::reproduce::rosumixed::Params::default().figs)]
    pub figs: Vec<u32>,
    #[arg(long)]
    pub out: Option<String>,
    /// Report again from an earlier run's results directory (its `runs.json`) instead of
    /// running; give the same grid options the run had (checked against the directory's
    /// `params.json` where it has one).
    #[arg(long)]
    pub from: Option<String>,
}

#[derive(Args)]
pub struct RelayBench {
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// GiB moved by each bulk transfer.
    #[arg(long, default_value_t = 1.0)]
    pub gib: f64,
    /// Round trips of the 1-byte load.
    #[arg(long, default_value_t = 20_000)]
    pub count: u64,
    /// Relays to run (default: all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Loads to run (default: all).
    #[arg(long, value_delimiter = ',')]
    pub loads: Vec<String>,
    /// Receive buffer of Splicer's (limits.receive_buffer) and HAProxy's (tune.rcvbuf.*)
    /// sockets (0: the kernel's autotuning).
    #[arg(long, default_value_t = 0)]
    pub receive_buffer: usize,
    #[arg(long)]
    pub out: Option<String>,
}
