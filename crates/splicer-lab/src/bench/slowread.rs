//! The slow-reader measurement (`splicer-lab slow-reader`): what the proxy's kernel holds
//! between an origin that sends a large non-cacheable body at full speed and a client
//! that reads it at 1 Mbit/s (a download to a phone), per relay engine, in a client —
//! proxy — server bed. Splicer's forward proxy runs with each engine forced; each engine
//! meets both cases of seed 000's splice: an HTTP/1.0 client (the answer ends both
//! connections: `close`) and an HTTP/1.1 client on a kept-alive connection (the body is
//! bounded: `kept`). The client reads for `seconds`, then closes.
//!
//! The proxy host's sockets are sampled with `ss` four times a second
//! ([`crate::measure::sockets`]); the summary's last table gives the peak and the median
//! of what they held, beside their buffer limits. The access log says which engine moved
//! each body (a kernel engine that declines a case hands it to `pipe`, with its reason).

use crate::bench::bench_variant;

pub const ENGINES: [&str; 4] = ["copy", "pipe", "sockmap", "ipsplice"];
pub const CASES: [&str; 2] = ["close", "kept"];

/// What to run.
#[derive(Debug, Clone)]
pub struct Params {
    pub rounds: u32,
    /// How long the client reads each body.
    pub seconds: u32,
    /// Bytes per second the client reads.
    pub rate: u64,
    /// The body's size: more than the client can read in `seconds`, so that the origin
    /// is always ahead.
    pub size: u64,
    /// Engines to run (empty: all).
    pub only: Vec<String>,
}

/// 3 rounds of 20 s at 1 Mbit/s, 256 MiB bodies, every engine.
impl Default for Params {
    fn default() -> Params {
        Params {
            rounds: 3,
            seconds: 20,
            rate: 125_000,
            size: 256 << 20,
            only: vec![],
        }
    }
}

/// The variant's name: `ENGINE.CASE`.
pub fn variant(engine: &str, case: &str) -> String {
    format!("{engine}.{case}")
}

/// The experiment's scenario text.
pub fn scenario(p: &Params) -> String {
    let mut s = crate::bench::three_hosts("slow-reader", p.rounds);
    // The scenario's own setting: sample the proxy's sockets.
    s = s.replacen(
        "server = \"server\"\n",
        "server = \"server\"\nproxy_sockets_ms = 250\n",
        1,
    );
    let (engines, files) = crate::bench::engine_files(&ENGINES, &p.only);
    s += &files;
    let first = engines.first().copied().unwrap_or("pipe");
    for case in CASES {
        for e in &engines {
            let config = format!("{{file:splicer-{e}.toml}}");
            let process: &[&str] = &["splicer", "run", "--config", &config];
            let load = crate::bench::through_forward_proxy(
                "slowread",
                &[
                    ("--size", p.size),
                    ("--rate", p.rate),
                    ("--seconds", u64::from(p.seconds)),
                ],
                case == "kept",
            );
            bench_variant(
                &mut s,
                &variant(e, case),
                &variant(first, case),
                Some((process, "{proxy}:3128")),
                &load,
            );
        }
    }
    s += crate::bench::ORIGIN_PROCESS;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_meets_both_cases_and_the_proxy_is_sampled() {
        let text = scenario(&Params::default());
        let names = crate::bench::checked_variants(&text);
        assert_eq!(names.len(), 8, "{names:?}");
        assert!(names.contains(&"ipsplice.kept".to_string()));
        let s = crate::bed::scenario::Scenario::from_toml(&text).unwrap();
        assert_eq!(s.experiment.proxy_sockets_ms, 250);
        assert!(text.contains("engine = \"sockmap\"") && text.contains("--keep-alive"));
        let one = Params {
            only: vec!["pipe".into()],
            ..Params::default()
        };
        let names = crate::bench::checked_variants(&scenario(&one));
        assert_eq!(names, ["pipe.close", "pipe.kept"]);
    }
}
