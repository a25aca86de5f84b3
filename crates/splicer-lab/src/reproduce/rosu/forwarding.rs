//! `rosu-forwarding`: seed 000's Table IV. One s-client, one request at a time, through
//! the proxy; `tcpdump` on the proxy's two interfaces records every packet, and from the
//! captures come how long the proxy held each request (from its arrival from the client to
//! its departure toward the server) and each response's first data packet (from its
//! arrival from the server to its departure toward the client).
//!
//! With one exchange at a time the events alternate, so they pair up by time alone: a
//! request leaving toward the server is the last data the client sent before it, and a
//! response's first packet toward the client is the first data toward the client after the
//! server's. That holds whatever the proxy does to the bytes (it rewrites a GET's request
//! line and the response head) and whatever connections it opens.
//!
//! Variants: IP forwarding (the proxy host as a router), plain GETs through the HTTP front
//! end with every engine (the kernel engines take the body after the head, seed 000's
//! splice), and GETs in CONNECT tunnels with every engine (the tunnel is open before the
//! GET, so its forwarding is the splice's alone). Like the paper's proxy, Splicer keeps no
//! upstream connection here (`pool_per_origin = 0`): a GET's request delay includes the
//! connect, on bare veth links (the paper's included 180 ms of RTT).
//!
//! The report gives means over rounds with seed 000's 90% interval, and the splice's gain
//! over the relay paired by round, with the verdict it carries.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::{bed, by_engine, header, origins, sclient, splicer_files, splicers, Kind, Timing};
use super::{GET_ENGINES, TUNNEL_ENGINES};
use crate::experiment::stats::{paired_gains, Interval, Level, Verdict};
use crate::experiment::summary::nearest_rank;
use crate::reproduce::capture::{read_packets, Packet};
use crate::reproduce::table::{num, Table};
use crate::reproduce::{Experiment, Grid, Part, Ran};

pub struct Forwarding;

struct Params {
    timing: Timing,
    rounds: u32,
}

fn params(g: Grid) -> Params {
    let t = |seconds, edge| Timing {
        seconds,
        edge,
        pause_s: PAUSE_S,
    };
    match g {
        // The paper's 6 runs a point; hundreds of exchanges each (the paper's were 120 s).
        Grid::Full => Params {
            timing: t(15, 1),
            rounds: 6,
        },
        Grid::Quick => Params {
            timing: t(10, 1),
            rounds: 1,
        },
        Grid::Tiny => Params {
            timing: t(4, 1),
            rounds: 1,
        },
    }
}

/// Think time between exchanges: they never overlap, and tcpdump's load stays small.
const PAUSE_S: f64 = 0.02;
const SIZE_KIB: u64 = 10;
/// Longer than this between the two ends of a pair is not a pair (a lost exchange).
const PAIR_WITHIN_NS: u64 = 100_000_000;

/// The variants: (name, kind, engine); `forward` has no proxy.
fn variants() -> Vec<(String, Kind, &'static str)> {
    let mut v = vec![("forward".to_string(), Kind::Get, "")];
    for e in GET_ENGINES {
        v.push((format!("{e}.get"), Kind::Get, e));
    }
    for e in TUNNEL_ENGINES {
        v.push((format!("{e}.tunnel"), Kind::Tunnel, e));
    }
    v
}

/// The paper's Table IV, µs: request and first response packet, relay and socket splice;
/// and IP forwarding of a packet.
const PAPER_REQUEST: [f64; 2] = [228_185.0, 260_686.0];
const PAPER_RESPONSE: [f64; 2] = [1_240.0, 278.0];
const PAPER_IP_US: f64 = 159.8;

/// The two captures at the proxy (each interface, both directions), into files of this run.
fn captures(variants: &[String]) -> String {
    let mut s = String::new();
    for (iface, file, settle) in [("v0client", "client", 0), ("v1server", "server", 700)] {
        let cmd = [
            "tcpdump",
            "-i",
            iface,
            "-n",
            "-s",
            "128",
            "-B",
            "8192",
            "--time-stamp-precision=nano",
            "-w",
            &format!("{{out}}/{{run}}-{file}.pcap"),
            "tcp",
        ];
        writeln!(
            s,
            "[[process]]\nhost = \"proxy\"\nvariants = {variants:?}\ncommand = {cmd:?}\n\
             settle_ms = {settle}\ndrain_ms = 1000"
        )
        .unwrap();
    }
    s
}

/// Forwarding delays of one run, µs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Delays {
    pub request_us: Vec<f64>,
    pub response_us: Vec<f64>,
}

/// Pairs the events of the two captures. `client` and `server` are the hosts' addresses.
pub fn delays(
    client_side: &[Packet],
    server_side: &[Packet],
    client: [u8; 4],
    server: [u8; 4],
) -> Delays {
    let from_client: Vec<u64> = client_side
        .iter()
        .filter(|p| p.len > 0 && p.src.0 == client)
        .map(|p| p.t_ns)
        .collect();
    let to_client: Vec<u64> = client_side
        .iter()
        .filter(|p| p.len > 0 && p.dst.0 == client)
        .map(|p| p.t_ns)
        .collect();
    let mut d = Delays::default();
    // The server side alternates: a request (data toward the server), then the response
    // (data from it). The first packet of each run of one direction is the event.
    let mut last_was_request = false;
    // The last server-side data before this packet: a request's data from the client came
    // after the previous response (one exchange at a time).
    let mut prev_t = 0;
    for p in server_side.iter().filter(|p| p.len > 0) {
        let request = p.dst.0 == server;
        if request && !last_was_request {
            // The last data the client sent before it.
            let i = from_client.partition_point(|t| *t <= p.t_ns);
            if let Some(t) = i.checked_sub(1).map(|i| from_client[i]) {
                if t > prev_t && p.t_ns - t <= PAIR_WITHIN_NS {
                    d.request_us.push((p.t_ns - t) as f64 / 1000.0);
                }
            }
        } else if !request && last_was_request {
            // The first data toward the client after it.
            let i = to_client.partition_point(|t| *t < p.t_ns);
            if let Some(t) = to_client.get(i) {
                if t - p.t_ns <= PAIR_WITHIN_NS {
                    d.response_us.push((t - p.t_ns) as f64 / 1000.0);
                }
            }
        }
        last_was_request = request;
        prev_t = p.t_ns;
    }
    d
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn percentile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    nearest_rank(&v, q).unwrap_or(f64::NAN)
}

/// One run's summary: what `delays.json` keeps of the captures, which are deleted once
/// read.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RunDelays {
    variant: String,
    round: usize,
    exchanges: u64,
    requests: usize,
    request_mean_us: f64,
    request_p50_us: f64,
    request_p99_us: f64,
    responses: usize,
    response_mean_us: f64,
    response_p50_us: f64,
    response_p99_us: f64,
}

/// The hosts' addresses as the bed gives them: link 0 is client–proxy, link 1 proxy–server
/// (10.231.N.1 the first host, .2 the second; docs/lab.md).
const CLIENT: [u8; 4] = [10, 231, 0, 1];
const SERVER: [u8; 4] = [10, 231, 1, 2];

/// Where the delays read from the captures are kept, beside the runs.
const DELAYS: &str = "delays.json";

/// Whether the runs' captures are still there (they are deleted once read).
fn captured(ran: &Ran) -> bool {
    ran.runs.first().is_some_and(|r| {
        ran.dir
            .join(format!("{}-r{}-client.pcap", r.variant, r.round))
            .exists()
    })
}

fn measure(ran: &Ran) -> anyhow::Result<Vec<RunDelays>> {
    let mut out = Vec::new();
    for r in &ran.runs {
        let tag = format!("{}-r{}", r.variant, r.round);
        let (c, s) = (
            ran.dir.join(format!("{tag}-client.pcap")),
            ran.dir.join(format!("{tag}-server.pcap")),
        );
        let d = delays(&read_packets(&c)?, &read_packets(&s)?, CLIENT, SERVER);
        anyhow::ensure!(
            !d.request_us.is_empty() && !d.response_us.is_empty(),
            "{tag}: no request or response paired across the captures {} and {}",
            c.display(),
            s.display()
        );
        let _ = std::fs::remove_file(&c);
        let _ = std::fs::remove_file(&s);
        out.push(RunDelays {
            variant: r.variant.clone(),
            round: r.round,
            exchanges: r.operations,
            requests: d.request_us.len(),
            request_mean_us: mean(&d.request_us),
            request_p50_us: percentile(&d.request_us, 0.5),
            request_p99_us: percentile(&d.request_us, 0.99),
            responses: d.response_us.len(),
            response_mean_us: mean(&d.response_us),
            response_p50_us: percentile(&d.response_us, 0.5),
            response_p99_us: percentile(&d.response_us, 0.99),
        });
    }
    Ok(out)
}

impl Experiment for Forwarding {
    fn name(&self) -> &'static str {
        "rosu-forwarding"
    }
    fn title(&self) -> &'static str {
        "Seed 000 (Rosu & Rosu), Table IV: how long the proxy holds a request and a response's first packet"
    }
    fn estimate(&self, g: Grid) -> Duration {
        let p = params(g);
        let run = f64::from(p.timing.seconds) + 4.0;
        Duration::from_secs_f64(variants().len() as f64 * run * f64::from(p.rounds) + 10.0)
    }
    fn grid_note(&self, g: Grid, ran: &[Ran]) -> anyhow::Result<String> {
        let p = params(g);
        // The rounds that ran (the full grid had 3 before 2026-12-03).
        let rounds = Ran::rounds(ran, p.rounds);
        Ok(format!(
            "one s-client fetching {SIZE_KIB} KB objects with {} ms between exchanges for {} \
             s per run, {} variants, {} round(s); client, proxy and server joined by bare \
             veth links (no WAN emulation: the delays measured are inside the proxy host). \
             The paper ran one client on its corporate testbed.",
            PAUSE_S * 1000.0,
            p.timing.seconds,
            variants().len(),
            rounds
        ))
    }
    fn parts(&self, g: Grid, _lab: &Path) -> Vec<Part> {
        let p = params(g);
        let vs = variants();
        let mut s = header(self.name(), p.rounds);
        s += &bed(None, None, &|_| vec![], false);
        s += &splicer_files(&TUNNEL_ENGINES, false);
        for (v, _, _) in &vs {
            writeln!(s, "[[variant]]\nname = \"{v}\"\nbaseline = \"forward\"").unwrap();
        }
        s += &captures(&vs.iter().map(|v| v.0.clone()).collect::<Vec<_>>());
        s += &origins();
        let engines: Vec<(String, &str)> = vs.iter().map(|v| (v.0.clone(), v.2)).collect();
        s += &splicers(&by_engine(&engines), None);
        for (v, kind, engine) in &vs {
            s += &sclient(v, *kind, !engine.is_empty(), 1, SIZE_KIB, p.timing);
        }
        vec![Part {
            name: "one-client",
            scenario: s,
        }]
    }
    /// After a run the captures are read into `delays.json`; without them (`--render`, or
    /// a report written again) the delays are read back from it.
    fn report(&self, _g: Grid, ran: &[Ran], out: &Path) -> anyhow::Result<String> {
        let kept = out.join(DELAYS);
        let runs = if captured(&ran[0]) {
            let runs = measure(&ran[0])?;
            std::fs::write(&kept, serde_json::to_string(&runs)?)?;
            runs
        } else {
            let text = std::fs::read_to_string(&kept).with_context(|| {
                format!(
                    "{}: neither the runs' captures nor the delays read from them",
                    kept.display()
                )
            })?;
            serde_json::from_str(&text).with_context(|| format!("{}", kept.display()))?
        };
        Ok(render(&runs))
    }
    fn renders_from_runs(&self) -> bool {
        true
    }
}

/// Seed 000's confidence level.
const LEVEL: Level = Level::P90;

/// One figure of a variant's runs, by round.
fn per_round(runs: &[RunDelays], v: &str, f: fn(&RunDelays) -> f64) -> Vec<(usize, f64)> {
    runs.iter()
        .filter(|r| r.variant == v)
        .map(|r| (r.round, f(r)))
        .collect()
}

/// The mean of a variant's figure over its rounds, with its interval.
fn interval(runs: &[RunDelays], v: &str, f: fn(&RunDelays) -> f64) -> Interval {
    let x: Vec<f64> = per_round(runs, v, f).into_iter().map(|(_, x)| x).collect();
    Interval::of(&x, LEVEL)
}

/// `a / b` round by round (the variants of a round ran next to each other), with its
/// interval.
fn paired_ratio(a: &[(usize, f64)], b: &[(usize, f64)]) -> Interval {
    let x: Vec<f64> = a
        .iter()
        .filter_map(|(round, x)| Some(x / b.iter().find(|(r, _)| r == round)?.1))
        .collect();
    Interval::of(&x, LEVEL)
}

fn response(r: &RunDelays) -> f64 {
    r.response_mean_us
}

fn request(r: &RunDelays) -> f64 {
    r.request_mean_us
}

/// The report's text from the runs' delays: the claims with their verdicts, then the
/// table.
fn render(runs: &[RunDelays]) -> String {
    let pct = LEVEL.percent();
    let mut t = Table::new([
        "variant",
        "requests paired",
        "request mean µs",
        "request p50",
        "request p99",
        "response mean µs",
        "response p50",
        "response p99",
        "response / IP forwarding",
    ]);
    let fwd = per_round(runs, "forward", response);
    for (v, _, _) in variants() {
        let i = |f: fn(&RunDelays) -> f64| interval(runs, &v, f).show(1);
        t.row([
            v.clone(),
            num(interval(runs, &v, |r| r.requests as f64).mean, 0),
            i(request),
            i(|r| r.request_p50_us),
            i(|r| r.request_p99_us),
            i(response),
            i(|r| r.response_p50_us),
            i(|r| r.response_p99_us),
            paired_ratio(&per_round(runs, &v, response), &fwd).show(2),
        ]);
    }
    let resp = |v: &str| per_round(runs, v, response);
    let mut claims = Table::new(["what", "paper", "ours", "verdict"]);
    let paper_gain = (PAPER_RESPONSE[0] - PAPER_RESPONSE[1]) * 100.0 / PAPER_RESPONSE[0];
    for (what, relay, splice) in [
        ("GET, pipe", "copy.get", "pipe.get"),
        ("GET, sockmap", "copy.get", "sockmap.get"),
        ("GET, ipsplice", "copy.get", "ipsplice.get"),
        ("tunnel, pipe", "copy.tunnel", "pipe.tunnel"),
        ("tunnel, sockmap", "copy.tunnel", "sockmap.tunnel"),
        ("tunnel, ipsplice", "copy.tunnel", "ipsplice.tunnel"),
    ] {
        let gain = Interval::of(&paired_gains(&resp(relay), &resp(splice)), LEVEL);
        claims.row([
            format!("first response packet: the splice's gain over the relay, % ({what})"),
            format!(
                "{paper_gain:.1} ({} → {} µs)",
                PAPER_RESPONSE[0], PAPER_RESPONSE[1]
            ),
            format!(
                "{} ({} → {} µs)",
                gain.show(1),
                interval(runs, relay, response).show(1),
                interval(runs, splice, response).show(1)
            ),
            Verdict::at_least(gain, paper_gain / 2.0).word().to_string(),
        ]);
    }
    for (what, v, paper) in [
        ("relay", "copy.get", PAPER_RESPONSE[0]),
        ("socket splice", "pipe.tunnel", PAPER_RESPONSE[1]),
        ("socket splice", "sockmap.tunnel", PAPER_RESPONSE[1]),
    ] {
        claims.row([
            format!("first response packet, {what} / IP forwarding (`{v}`)"),
            num(paper / PAPER_IP_US, 2),
            paired_ratio(&resp(v), &fwd).show(2),
            "–".into(),
        ]);
    }
    claims.row([
        "request, splice / relay (GET, pipe)".to_string(),
        format!(
            "{:.2} (both include a 180 ms connect)",
            PAPER_REQUEST[1] / PAPER_REQUEST[0]
        ),
        paired_ratio(
            &per_round(runs, "pipe.get", request),
            &per_round(runs, "copy.get", request),
        )
        .show(2),
        "–".into(),
    ]);
    format!(
        "## The paper's figures beside ours\n\n\
         Ours are means over rounds of each run's mean, ± the {pct}% confidence interval \
         (Student's t; the paper's level), and the gains and ratios are paired by round. A \
         gain \"holds\" where its whole interval is at least half the paper's, \"in \
         direction\" where it is above zero, \"not\" otherwise; a ratio to IP forwarding is \
         context (\"–\"): the paper's proxy was a 133 MHz machine, so its delays are \
         hundreds of µs where ours are tens.\n\n{}\n\
         ## Table IV: forwarding delays at the proxy\n\n\
         Mean ± {pct}% interval over rounds. `.get` is a plain GET through the HTTP front end \
         (the proxy reads and rewrites the request and the response head, then moves the \
         body with the engine: the kernel engines take it after the head, seed 000's \
         splice); `.tunnel` a GET inside a CONNECT tunnel (the engine moves everything). A \
         request's delay through the HTTP front end includes opening an upstream \
         connection (none is kept: `pool_per_origin = 0`, the paper's proxy connected per \
         request). A GET's first response packet through a kernel engine is the head, \
         which the proxy writes itself; the body follows in the kernel.\n\n{}\n\
         Per run: [`delays.json`](rosu-forwarding/delays.json).\n\n",
        claims.markdown(),
        t.markdown()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(t_us: u64, from: [u8; 4], to: [u8; 4], len: u32) -> Packet {
        Packet {
            t_ns: t_us * 1000,
            src: (from, 1000),
            dst: (to, 80),
            seq: 0,
            len,
            syn: false,
            fin: false,
        }
    }

    #[test]
    fn events_pair_up_by_time() {
        let proxy_c = [10, 231, 0, 2];
        let proxy_s = [10, 231, 1, 1];
        // Two exchanges; the second in a tunnel (CONNECT and its reply first), with an ACK
        // and a second response packet that must not count.
        let client_side = vec![
            pkt(100, CLIENT, proxy_c, 80),
            pkt(130, proxy_c, CLIENT, 0),
            pkt(400, proxy_c, CLIENT, 1448),
            pkt(420, proxy_c, CLIENT, 1448),
            pkt(1000, CLIENT, proxy_c, 60),
            pkt(1050, proxy_c, CLIENT, 39),
            pkt(1100, CLIENT, proxy_c, 80),
            pkt(1500, proxy_c, CLIENT, 1448),
        ];
        let server_side = vec![
            pkt(150, proxy_s, SERVER, 80),
            pkt(200, SERVER, proxy_s, 0),
            pkt(350, SERVER, proxy_s, 1448),
            pkt(360, SERVER, proxy_s, 1448),
            pkt(1120, proxy_s, SERVER, 80),
            pkt(1470, SERVER, proxy_s, 1448),
        ];
        let d = delays(&client_side, &server_side, CLIENT, SERVER);
        assert_eq!(d.request_us, [50.0, 20.0]);
        assert_eq!(d.response_us, [50.0, 30.0]);
        // A response whose packet toward the client never came is left out.
        let d = delays(&client_side[..4], &server_side, CLIENT, SERVER);
        assert_eq!(d.response_us, [50.0]);
        assert_eq!(d.request_us, [50.0]);
        assert!(percentile(&[3.0, 1.0, 2.0], 0.5) == 2.0);
    }

    fn run(variant: &str, round: usize, request: f64, response: f64) -> RunDelays {
        RunDelays {
            variant: variant.into(),
            round,
            exchanges: 100,
            requests: 100,
            request_mean_us: request,
            request_p50_us: request,
            request_p99_us: request,
            responses: 100,
            response_mean_us: response,
            response_p50_us: response,
            response_p99_us: response,
        }
    }

    #[test]
    fn the_report_pairs_gains_by_round_and_gives_their_verdicts() {
        let mut runs = Vec::new();
        for (round, relay) in [(0, 100.0), (1, 110.0), (2, 90.0)] {
            runs.push(run("forward", round, 2.0, 5.0));
            runs.push(run("copy.get", round, 200.0, relay));
            // pipe: 50% less, every round (holds: half the paper's 77.6% is 38.8%).
            runs.push(run("pipe.get", round, 220.0, relay / 2.0));
            // sockmap: 10% less (in direction); ipsplice: alike (not).
            runs.push(run("sockmap.get", round, 200.0, relay * 0.9));
            runs.push(run(
                "ipsplice.get",
                round,
                200.0,
                relay * (1.0 + 0.1 * (round as f64 - 1.0)),
            ));
        }
        let md = render(&runs);
        let row = |what: &str| {
            md.lines()
                .find(|l| l.contains(what))
                .unwrap_or_else(|| panic!("no {what} in\n{md}"))
                .to_string()
        };
        assert!(
            row("(GET, pipe)").contains("| 50.0 ± 0.0 (100.0 ± 16.9 → 50.0 ± 8.4 µs) | holds |"),
            "{md}"
        );
        assert!(row("(GET, sockmap)").ends_with("| in direction |"), "{md}");
        assert!(row("(GET, ipsplice)").ends_with("| not |"), "{md}");
        // Tunnels were not run: no verdict.
        assert!(row("(tunnel, pipe)").ends_with("| – |"), "{md}");
        assert!(
            row("request, splice / relay").contains("| 1.10 ± 0.00 |"),
            "{md}"
        );
        // copy.get's response against IP forwarding: 20×, 22×, 18×.
        assert!(md.contains("| 20.00 ± 3.37 |"), "{md}");
    }

    #[test]
    fn the_scenario_captures_every_variant() {
        for g in [Grid::Tiny, Grid::Full] {
            let parts = Forwarding.parts(g, Path::new("/x/splicer-lab"));
            let text = &parts[0].scenario;
            let s = crate::Scenario::from_toml(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(s.variants().len(), 9);
            assert!(s.emulations.is_empty());
            let dumps = s
                .processes
                .iter()
                .filter(|p| p.command[0] == "tcpdump")
                .count();
            assert_eq!(dumps, 2);
            let fwd = s.loads.iter().find(|l| l.variants == ["forward"]).unwrap();
            assert!(fwd.command.contains(&"direct".to_string()));
            let tun = s
                .loads
                .iter()
                .find(|l| l.variants == ["ipsplice.tunnel"])
                .unwrap();
            assert!(tun.command.contains(&"connect://{proxy}:3128".to_string()));
            assert!(tun.command.contains(&"1".to_string()));
        }
    }
}
