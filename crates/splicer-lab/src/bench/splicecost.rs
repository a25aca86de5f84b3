//! What a splice costs to start and end, per engine (`splicer-lab splice-cost`): seed 000's
//! clients open a connection per request, so an engine's set-up and end decide whether it
//! saves anything. s-clients fetch non-cacheable bodies through Splicer's forward proxy
//! with each engine forced, in a client — proxy — server bed without emulation:
//! HTTP/1.0, a connection per request (`close`: a kernel engine takes the answer to the end
//! of both connections) and kept-alive HTTP/1.1 (`kept`: the body is bounded).
//!
//! The summary gives the proxy's and the machine's CPU per request and the proxy's system
//! calls per request (`perf stat`, which itself costs a little per call); the access log
//! says which engine moved each body ([`engines_used`]).

use std::collections::BTreeMap;
use std::path::Path;

use crate::bench::bench_variant;

pub const ENGINES: [&str; 4] = ["copy", "pipe", "sockmap", "ipsplice"];

/// What to run.
#[derive(Debug, Clone)]
pub struct Params {
    pub rounds: u32,
    pub seconds: u32,
    pub clients: u32,
    /// Body sizes, bytes.
    pub sizes: Vec<u64>,
    /// `close`, `kept` or both.
    pub cases: Vec<String>,
    /// Engines to run (empty: all).
    pub only: Vec<String>,
}

/// 3 rounds of 10 s, 20 clients (seed 000's lightest load), 1 KiB, 64 KiB and 1 MiB,
/// both cases, every engine.
impl Default for Params {
    fn default() -> Params {
        Params {
            rounds: 3,
            seconds: 10,
            clients: 20,
            sizes: vec![1024, 64 << 10, 1 << 20],
            cases: vec!["close".into(), "kept".into()],
            only: vec![],
        }
    }
}

/// A size as the variant names show it: `1k`, `64k`, `1m`, or bytes.
pub fn size_name(size: u64) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{}m", s >> 20),
        s if s >= 1024 && s % 1024 == 0 => format!("{}k", s >> 10),
        s => s.to_string(),
    }
}

/// The variant's name: `ENGINE.SIZE.CASE`.
pub fn variant(engine: &str, size: u64, case: &str) -> String {
    format!("{engine}.{}.{case}", size_name(size))
}

/// The experiment's scenario text.
pub fn scenario(p: &Params) -> String {
    let mut s = crate::bench::three_hosts("splice-cost", p.rounds).replacen(
        "server = \"server\"\n",
        "server = \"server\"\nproxy_syscalls = true\n",
        1,
    );
    let (engines, files) = crate::bench::engine_files(&ENGINES, &p.only);
    s += &files;
    let first = engines.first().copied().unwrap_or("copy");
    let (warmup, cooldown) = ((p.seconds / 5).max(1), (p.seconds / 10).max(1));
    for case in &p.cases {
        for &size in &p.sizes {
            for e in &engines {
                let config = format!("{{file:splicer-{e}.toml}}");
                let process: &[&str] = &["splicer", "run", "--config", &config];
                let load = crate::bench::through_forward_proxy(
                    "sclient",
                    &[
                        ("--clients", u64::from(p.clients)),
                        ("--size", size),
                        ("--duration", u64::from(p.seconds)),
                        ("--warmup", u64::from(warmup)),
                        ("--cooldown", u64::from(cooldown)),
                    ],
                    case == "kept",
                );
                bench_variant(
                    &mut s,
                    &variant(e, size, case),
                    &variant(first, size, case),
                    Some((process, "{proxy}:3128")),
                    &load,
                );
            }
        }
    }
    s += crate::bench::ORIGIN_PROCESS;
    s
}

/// How many requests of each variant (all rounds) each engine moved, from the access
/// lines in the proxy's logs in `dir`: (engine, requests) per variant.
pub fn engines_used(dir: &Path) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let Ok(files) = std::fs::read_dir(dir) else {
        return out;
    };
    for f in files.flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        let Some((variant, _)) = name.rsplit_once("-r") else {
            continue;
        };
        if !name.ends_with(".log") {
            continue;
        }
        let text = std::fs::read_to_string(f.path()).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("\"target\":\"access\"")) {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if let Some(e) = v["engine"].as_str() {
                *out.entry(variant.to_string())
                    .or_default()
                    .entry(e.to_string())
                    .or_default() += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_pair_each_engine_with_copy_per_size_and_case() {
        let text = scenario(&Params::default());
        let names = crate::bench::checked_variants(&text);
        assert_eq!(names.len(), 4 * 3 * 2, "{names:?}");
        assert!(names.contains(&"ipsplice.64k.close".to_string()));
        assert!(names.contains(&"sockmap.1m.kept".to_string()));
        let s = crate::bed::scenario::Scenario::from_toml(&text).unwrap();
        assert!(s.experiment.proxy_syscalls);
        assert_eq!(size_name(1000), "1000");
    }

    #[test]
    fn engines_are_counted_from_access_lines() {
        let dir = std::env::temp_dir().join(format!("splab-cost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let line = |e: &str| {
            format!("{{\"engine\":\"{e}\",\"target\":\"access\"}}\n{{\"target\":\"splicer\"}}\n")
        };
        std::fs::write(
            dir.join("sockmap.1k.close-r0-process0.log"),
            line("sockmap") + &line("pipe"),
        )
        .unwrap();
        std::fs::write(
            dir.join("sockmap.1k.close-r1-process0.log"),
            line("sockmap"),
        )
        .unwrap();
        let used = engines_used(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(used["sockmap.1k.close"]["sockmap"], 2);
        assert_eq!(used["sockmap.1k.close"]["pipe"], 1);
    }
}
