//! `panteleenko`: seed 002's experiments (Panteleenko & Freeh, the web booster). Clients on
//! emulated modem lines (per connection: 100 ms each way, 56 kbit/s, MTU 536 — the paper's
//! base setting) reach a server through Splicer's edge, which carries their requests over
//! a few kept-alive connections to the origin.
//!
//! Two kinds of part:
//!
//! - `server` (the companion report's server-side claim, and Fig 8's comparison with a
//!   full web server): SURGE users against the origin straight (`direct`), through the edge
//!   (`edge`, and `edge-pipelined` with 8 requests in flight per upstream connection), and
//!   against nginx serving the same objects itself from the edge's host (`nginx`: the full
//!   web server in the booster's place, as TUX was in the paper). Per object: the origin's
//!   connections and segments; the edge host's CPU (its process and its receive threads).
//! - the sweeps (Figs 5–7 and 11–15): s-clients fetch one object again and again through
//!   the edge, and one thing changes from the base setting at a time: the object's size,
//!   the requests per connection, the line's MTU, delay or rate. Per request: the packets
//!   the clients send the edge (pure ACKs, and those the booster could fold into the one
//!   before), and the edge host's CPU normalised to the paper's 6 MB/s sent to clients.
//!   The base point is one run (`size-10000`) that every sweep shares.
//!
//! `report.rs` reads `runs.json` only, so the report can be written again from the raw
//! files (`--render`).

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

mod report;
mod sweeps;

use super::{Experiment, Grid, Part, Ran};

pub struct Booster;

/// The clients' lines: MTU, one-way delay and rate, per connection.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    pub mtu: u32,
    pub one_way_ms: f64,
    pub rate_bps: u64,
}

/// The paper's base setting: 200 ms (here a round trip), 56 kbit/s, MTU 536.
pub const BASE: Line = Line {
    mtu: 536,
    one_way_ms: 100.0,
    rate_bps: 56_000,
};

/// The link from the edge to the origin: the paper's 4 KB MTU (its gigabit link).
const SERVER_MTU: u32 = 4096;
/// SURGE's objects, and their cut (a 56 kbit/s line takes 15 s for 100 KB).
const FILES: u64 = 2000;
const MAX_SIZE: u64 = 100_000;
/// The size every sweep but the size's own fetches (the paper's SURGE mean).
pub const SIZE: u64 = 10_000;

struct Params {
    rounds: usize,
    /// SURGE runs: users, duration, warm-up and cool-down, seconds.
    users: usize,
    server_s: (f64, f64, f64),
    /// S-client runs: clients, and duration, warm-up, cool-down; `long_s` for many
    /// requests per connection (a connection of 16 lasts about 25 s at 56 kbit/s).
    clients: usize,
    point_s: (f64, f64, f64),
    long_s: (f64, f64, f64),
    sizes: Vec<u64>,
    per_connection: Vec<u32>,
    mtus: Vec<u32>,
    one_way_ms: Vec<f64>,
    rates: Vec<u64>,
}

fn params(g: Grid) -> Params {
    match g {
        Grid::Full => Params {
            rounds: 3,
            users: 100,
            server_s: (40.0, 10.0, 5.0),
            clients: 100,
            point_s: (20.0, 4.0, 2.0),
            long_s: (40.0, 4.0, 2.0),
            sizes: vec![2_000, 5_000, SIZE, 30_000, 60_000],
            per_connection: vec![4, 16],
            mtus: vec![256, 1500],
            one_way_ms: vec![25.0, 200.0],
            rates: vec![28_000, 256_000],
        },
        Grid::Quick => Params {
            rounds: 2,
            users: 100,
            server_s: (25.0, 5.0, 3.0),
            clients: 50,
            point_s: (12.0, 3.0, 1.0),
            long_s: (20.0, 3.0, 1.0),
            sizes: vec![2_000, SIZE, 60_000],
            per_connection: vec![16],
            mtus: vec![1500],
            one_way_ms: vec![200.0],
            rates: vec![256_000],
        },
        Grid::Tiny => Params {
            rounds: 1,
            users: 10,
            server_s: (6.0, 1.0, 1.0),
            clients: 5,
            point_s: (4.0, 1.0, 0.5),
            long_s: (4.0, 1.0, 0.5),
            sizes: vec![SIZE],
            per_connection: vec![4],
            mtus: vec![],
            one_way_ms: vec![],
            rates: vec![],
        },
    }
}

/// One sweep point: a variant of s-clients through the edge.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub variant: String,
    pub size: u64,
    pub per_connection: u32,
    pub line: Line,
}

/// The part a line other than the base runs in, and its one variant's name.
fn line_name(l: Line) -> String {
    if l.mtu != BASE.mtu {
        format!("mtu-{}", l.mtu)
    } else if l.one_way_ms != BASE.one_way_ms {
        format!("rtt-{}", 2.0 * l.one_way_ms)
    } else if l.rate_bps != BASE.rate_bps {
        format!("rate-{}", l.rate_bps / 1000)
    } else {
        "base".into()
    }
}

/// The sweeps' points: the base line's (sizes, then requests per connection), then one per
/// other line.
fn points(p: &Params) -> Vec<Point> {
    let mut v: Vec<Point> = p
        .sizes
        .iter()
        .map(|&size| Point {
            variant: format!("size-{size}"),
            size,
            per_connection: 1,
            line: BASE,
        })
        .collect();
    v.extend(p.per_connection.iter().map(|&k| Point {
        variant: format!("requests-{k}"),
        size: SIZE,
        per_connection: k,
        line: BASE,
    }));
    let lines = p
        .mtus
        .iter()
        .map(|&mtu| Line { mtu, ..BASE })
        .chain(
            p.one_way_ms
                .iter()
                .map(|&one_way_ms| Line { one_way_ms, ..BASE }),
        )
        .chain(p.rates.iter().map(|&rate_bps| Line { rate_bps, ..BASE }));
    v.extend(lines.map(|line| Point {
        variant: line_name(line),
        size: SIZE,
        per_connection: 1,
        line,
    }));
    v
}

/// The hosts, links and lines of a bed whose clients have `line`; `tcp_states`: the edge
/// host's received segments counted by socket state.
fn bed(name: &str, rounds: usize, line: Line, tcp_states: bool) -> String {
    let mut s = format!(
        "# Generated by `splicer-lab reproduce panteleenko`.\n[experiment]\n\
         name = \"panteleenko-{name}\"\nrounds = {rounds}\nserver = \"origin\"\n\
         proxy_tcp_states = {tcp_states}\n\n\
         [[host]]\nname = \"client\"\n[[host]]\nname = \"r1\"\nforward = true\n\
         [[host]]\nname = \"edge\"\nforward = true\nnapi_threads = true\n\
         [[host]]\nname = \"origin\"\n\n\
         [[link]]\na = \"client\"\nb = \"r1\"\nmtu = {m}\n\
         [[link]]\na = \"r1\"\nb = \"edge\"\nmtu = {m}\n\
         [[link]]\na = \"edge\"\nb = \"origin\"\nmtu = {SERVER_MTU}\n",
        m = line.mtu
    );
    for (from, to) in [("client", "edge"), ("edge", "client")] {
        writeln!(
            s,
            "[[emulate]]\nrouter = \"r1\"\nfrom = \"{from}\"\nto = \"{to}\"\n\
             delay_ms = {}\nper_client_rate_bps = {}\nqueue_limit = 100000",
            line.one_way_ms, line.rate_bps
        )
        .unwrap();
    }
    s += "\n[[process]]\nhost = \"origin\"\nrole = \"server\"\n\
          command = [\"lab\", \"origin\", \"--listen\", \"{origin}:8080\"]\n\
          wait_for = \"{origin}:8080\"\n";
    s
}

/// Splicer's edge in front of the origin (`pipeline` requests in flight per upstream
/// connection), as a file of the scenario.
fn edge_toml(pipeline: u32) -> String {
    let pipe = if pipeline > 1 {
        format!("pipeline = {pipeline}\n")
    } else {
        String::new()
    };
    format!(
        "[log]\nlevel = \"warn\"\n[edge]\nlisten = [\"{{edge}}:8080\"]\n\
         [[edge.upstream]]\nname = \"origin\"\nservers = [\"{{origin}}:8080\"]\nmin_idle = 4\n\
         {pipe}[[edge.route]]\nupstream = \"origin\"\n"
    )
}

/// The `server` part's variants.
pub const SERVER_VARIANTS: [&str; 4] = ["direct", "edge", "edge-pipelined", "nginx"];

fn server_scenario(p: &Params) -> String {
    let mut s = bed("server", p.rounds, BASE, false);
    writeln!(
        s,
        "[files]\n\"edge.toml\" = '''\n{}'''\n\"edge-pipelined.toml\" = '''\n{}'''\n",
        edge_toml(1),
        edge_toml(8)
    )
    .unwrap();
    for (v, target) in
        SERVER_VARIANTS
            .iter()
            .zip(["{origin}:8080", "{edge}:8080", "{edge}:8080", "{edge}:8081"])
    {
        writeln!(
            s,
            "[[variant]]\nname = \"{v}\"\nvars = {{ target = \"{target}\" }}"
        )
        .unwrap();
    }
    for v in ["edge", "edge-pipelined"] {
        writeln!(
            s,
            "[[process]]\nhost = \"edge\"\nrole = \"proxy\"\nvariants = [\"{v}\"]\n\
             command = [\"splicer\", \"run\", \"--config\", \"{{file:{v}.toml}}\"]\n\
             wait_for = \"{{edge}}:8080\""
        )
        .unwrap();
    }
    // nginx serves every object SURGE asks for, the content of the same seed.
    writeln!(
        s,
        "[[process]]\nhost = \"edge\"\nrole = \"proxy\"\nvariants = [\"nginx\"]\n\
         command = [\"lab\", \"nginx-origin\", \"--listen\", \"{{edge}}:8081\", \
         \"--surge\", \"{FILES}\", \"--max-size\", \"{MAX_SIZE}\"]\n\
         wait_for = \"{{edge}}:8081\""
    )
    .unwrap();
    let (d, w, c) = p.server_s;
    writeln!(
        s,
        "[[load]]\nhost = \"client\"\ncommand = [\"lab\", \"surge\", \"--origin\", \
         \"{{target}}\", \"--users\", \"{}\", \"--files\", \"{FILES}\", \"--max-size\", \
         \"{MAX_SIZE}\", \"--time-scale\", \"1\", \"--duration\", \"{d}\", \"--warmup\", \
         \"{w}\", \"--cooldown\", \"{c}\", \"--timeout\", \"60\"]",
        p.users
    )
    .unwrap();
    s
}

/// A part of sweep points that share one line.
fn sweep_scenario(name: &str, p: &Params, pts: &[&Point]) -> String {
    // The sweeps count the segments the edge takes in FIN_WAIT_1 (Figs 5–7).
    let mut s = bed(name, p.rounds, pts[0].line, true);
    writeln!(
        s,
        "[files]\n\"edge.toml\" = '''\n{}'''\n\n[[process]]\nhost = \"edge\"\n\
         role = \"proxy\"\ncommand = [\"splicer\", \"run\", \"--config\", \
         \"{{file:edge.toml}}\"]\nwait_for = \"{{edge}}:8080\"",
        edge_toml(1)
    )
    .unwrap();
    for pt in pts {
        let (d, w, c) = if pt.per_connection > 4 {
            p.long_s
        } else {
            p.point_s
        };
        writeln!(
            s,
            "[[variant]]\nname = \"{v}\"\n[[load]]\nhost = \"client\"\nvariants = [\"{v}\"]\n\
             command = [\"lab\", \"sclient\", \"--origin\", \"{{edge}}:8080\", \"--clients\", \
             \"{}\", \"--size\", \"{}\", \"--keep-alive\", \"--per-connection\", \"{}\", \
             \"--duration\", \"{d}\", \"--warmup\", \"{w}\", \"--cooldown\", \"{c}\", \
             \"--timeout\", \"60\"]",
            p.clients,
            pt.size,
            pt.per_connection,
            v = pt.variant
        )
        .unwrap();
    }
    s
}

/// The parts' names: `server`, then one per line (`base` first).
fn parts_of(p: &Params) -> Vec<(String, String)> {
    let pts = points(p);
    let mut out = vec![("server".to_string(), server_scenario(p))];
    let mut names: Vec<String> = Vec::new();
    for pt in &pts {
        let n = line_name(pt.line);
        if !names.contains(&n) {
            names.push(n);
        }
    }
    for n in names {
        let of: Vec<&Point> = pts.iter().filter(|x| line_name(x.line) == n).collect();
        let s = sweep_scenario(&n, p, &of);
        out.push((n, s));
    }
    out
}

impl Experiment for Booster {
    fn name(&self) -> &'static str {
        "panteleenko"
    }
    fn title(&self) -> &'static str {
        "Seed 002 (Panteleenko & Freeh), the web booster: the server's load (companion \
         report), the booster against a full web server (Fig 8), packets and cost by size, \
         MTU, requests per connection, delay and bandwidth (Figs 5–7, 11–15)"
    }
    fn estimate(&self, g: Grid) -> Duration {
        let p = params(g);
        // A run's own time, and about 3 s to start and stop its processes; a bed 8 s.
        let run = |(d, _, _): (f64, f64, f64)| d + 3.0;
        let pts = points(&p);
        let sweeps: f64 = pts
            .iter()
            .map(|x| {
                run(if x.per_connection > 4 {
                    p.long_s
                } else {
                    p.point_s
                })
            })
            .sum();
        let server = SERVER_VARIANTS.len() as f64 * run(p.server_s);
        let beds = parts_of(&p).len() as f64 * 8.0;
        Duration::from_secs_f64(p.rounds as f64 * (server + sweeps) + beds)
    }
    fn grid_note(&self, g: Grid, _ran: &[Ran]) -> anyhow::Result<String> {
        let p = params(g);
        let list = |v: Vec<String>| v.join(", ");
        Ok(format!(
            "{} rounds, the variants of each part interleaved. `server`: {} SURGE users \
             (2,000 objects cut at 100 KB), {} s runs ({} s warm-up, {} s cool-down not \
             counted). Sweeps: {} s-clients, each a line of its own, fetching one object \
             again and again through the edge, {} s runs ({} s for 16 requests per \
             connection); sizes {} bytes; requests per connection 1, {}; MTU {}; round \
             trip {} ms; rate {} kbit/s (each with the base's others: MTU 536, 200 ms, \
             56 kbit/s, 10,000 bytes, 1 request per connection). The paper's sweeps used \
             SURGE with a 10 KB mean (the size sweep, one document); here one 10 KB object \
             (SURGE's own mean here is 27 KB and its tail makes short runs noisy). Its \
             ranges for delay and bandwidth are not in the text.",
            p.rounds,
            p.users,
            p.server_s.0,
            p.server_s.1,
            p.server_s.2,
            p.clients,
            p.point_s.0,
            p.long_s.0,
            list(p.sizes.iter().map(|s| s.to_string()).collect()),
            list(p.per_connection.iter().map(|s| s.to_string()).collect()),
            list(
                std::iter::once(BASE.mtu)
                    .chain(p.mtus.iter().copied())
                    .map(|s| s.to_string())
                    .collect()
            ),
            list(
                std::iter::once(BASE.one_way_ms)
                    .chain(p.one_way_ms.iter().copied())
                    .map(|s| (2.0 * s).to_string())
                    .collect()
            ),
            list(
                std::iter::once(BASE.rate_bps)
                    .chain(p.rates.iter().copied())
                    .map(|s| (s / 1000).to_string())
                    .collect()
            ),
        ))
    }
    fn parts(&self, g: Grid, _lab: &Path) -> Vec<Part> {
        parts_of(&params(g))
            .into_iter()
            .map(|(name, scenario)| Part {
                name: Box::leak(name.into_boxed_str()),
                scenario,
            })
            .collect()
    }
    fn report(&self, g: Grid, ran: &[Ran], out: &Path) -> anyhow::Result<String> {
        report::write(&points(&params(g)), ran, out)
    }
    fn renders_from_runs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_grid_s_scenarios_parse() {
        for g in [Grid::Tiny, Grid::Quick, Grid::Full] {
            let parts = parts_of(&params(g));
            for (name, text) in &parts {
                let s = crate::Scenario::from_toml(text)
                    .unwrap_or_else(|e| panic!("{g:?} {name}: {e}\n{text}"));
                assert!(s.links[0].mtu.is_some());
            }
            assert_eq!(parts[0].0, "server");
            assert_eq!(parts[1].0, "base");
        }
    }

    #[test]
    fn each_line_other_than_the_base_is_a_part_of_its_own() {
        let p = params(Grid::Full);
        let parts = parts_of(&p);
        let names: Vec<&str> = parts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["server", "base", "mtu-256", "mtu-1500", "rtt-50", "rtt-400", "rate-28", "rate-256"]
        );
        let base = crate::Scenario::from_toml(&parts[1].1).unwrap();
        // Sizes, then requests per connection, on the base line.
        assert_eq!(base.variants().len(), 5 + 2);
        let rtt = crate::Scenario::from_toml(&parts[5].1).unwrap();
        assert_eq!(rtt.emulations[0].delay_ms, 200.0);
        assert_eq!(rtt.links[0].mtu, Some(536));
    }
}
