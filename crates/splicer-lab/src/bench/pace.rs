//! How close to its cap the pacer's `rate` mode holds a splice (`splicer-lab pace-bench`),
//! per relay engine, in a client — proxy — server bed of veth links: Splicer's forward
//! proxy with each engine forced, `clients` kept-alive s-clients fetching `size`-byte
//! non-cacheable bodies, each body (`body`) or each client's CONNECT tunnel (`tunnel`)
//! capped at `rate` bytes a second, beside the same load uncapped. A client's rate is the
//! load's throughput over its clients (each has one body in flight at a time), so the
//! ratio to the cap is read from the summary; every body is checked by the s-clients.
//! `ipsplice` paces a tunnel by clamping its windows, never below two segments a round
//! trip (on this bed's bare veth links that is above the default cap: docs/pacer.md), and
//! moves no bounded body.

use crate::bench::bench_variant;

pub const ENGINES: [&str; 4] = ["copy", "pipe", "sockmap", "ipsplice"];
pub const CASES: [&str; 2] = ["body", "tunnel"];

/// What to run.
#[derive(Debug, Clone)]
pub struct Params {
    pub rounds: u32,
    pub seconds: u32,
    pub clients: u32,
    /// Bytes of each body.
    pub size: u64,
    /// The cap, bytes a second per splice.
    pub rate: u64,
    /// Engines to run (empty: all).
    pub only: Vec<String>,
}

/// 3 rounds of 20 s, 4 clients, 8 MiB bodies capped at 4 MiB/s (32 Mbit/s), every engine.
impl Default for Params {
    fn default() -> Params {
        Params {
            rounds: 3,
            seconds: 20,
            clients: 4,
            size: 8 << 20,
            rate: 4 << 20,
            only: vec![],
        }
    }
}

/// The variant's name: `ENGINE.CASE.paced` or `ENGINE.CASE.unpaced`.
pub fn variant(engine: &str, case: &str, paced: bool) -> String {
    let p = if paced { "paced" } else { "unpaced" };
    format!("{engine}.{case}.{p}")
}

/// Splicer's configuration for `engine`, tunnels to the origin's port allowed, and when
/// `rate` is given both classes capped at it.
fn config(engine: &str, rate: Option<u64>) -> String {
    let mut s = format!(
        "[log]\nformat = \"json\"\n[relay]\nengine = \"{engine}\"\n\
         [http]\nlisten = [\"{{proxy}}:3128\"]\nconnect_ports = [8080]\n[acl]\n\
         default = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"10.231.0.0/16\"]\n"
    );
    if let Some(r) = rate {
        for class in ["bodies", "tunnels"] {
            s += &format!("[pacer.{class}]\nmode = \"rate\"\nper_splice = {r}\n");
        }
    }
    s
}

/// The experiment's scenario text.
pub fn scenario(p: &Params) -> String {
    let mut s = crate::bench::three_hosts("pace-bench", p.rounds);
    let engines: Vec<&str> = ENGINES
        .iter()
        .copied()
        .filter(|e| crate::bench::HttpBench::wanted(&p.only, e))
        .collect();
    s += "[files]\n";
    for e in &engines {
        for (name, rate) in [("", None), ("-paced", Some(p.rate))] {
            s += &format!(
                "\"splicer-{e}{name}.toml\" = \"\"\"\n{}\"\"\"\n",
                config(e, rate)
            );
        }
    }
    // The kept-alive s-clients of the HTTP benchmarks, with this bench's clients and time.
    let clients = crate::bench::HttpBench {
        rounds: p.rounds,
        seconds: p.seconds,
        clients: p.clients,
        ..crate::bench::HttpBench::default()
    };
    for case in CASES {
        let via = match case {
            "body" => "http://{proxy}:3128",
            _ => "connect://{proxy}:3128",
        };
        for e in &engines {
            for paced in [false, true] {
                let file = if paced {
                    format!("{{file:splicer-{e}-paced.toml}}")
                } else {
                    format!("{{file:splicer-{e}.toml}}")
                };
                let process: &[&str] = &["splicer", "run", "--config", &file];
                let load = clients.client("{server}:8080", via, p.size, &[]);
                bench_variant(
                    &mut s,
                    &variant(e, case, paced),
                    &variant(e, case, false),
                    Some((process, "{proxy}:3128")),
                    &load,
                );
            }
        }
    }
    s += crate::bench::ORIGIN_PROCESS;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_runs_each_case_capped_and_not() {
        let text = scenario(&Params::default());
        let names = crate::bench::checked_variants(&text);
        assert_eq!(names.len(), 16, "{names:?}");
        assert!(names.contains(&"sockmap.tunnel.paced".to_string()));
        assert!(text.contains("per_splice = 4194304") && text.contains("connect://"));
        let one = Params {
            only: vec!["pipe".into()],
            ..Params::default()
        };
        let names = crate::bench::checked_variants(&scenario(&one));
        assert_eq!(
            names,
            [
                "pipe.body.unpaced",
                "pipe.body.paced",
                "pipe.tunnel.unpaced",
                "pipe.tunnel.paced"
            ]
        );
    }
}
