//! The reverse-proxy benchmark (`splicer-lab edge-bench`): Splicer's edge front end beside
//! HAProxy (http mode, `http-reuse always`) and nginx (`proxy_pass` to an upstream with
//! `keepalive`), in a client — proxy — server bed, interleaved over rounds, as one lab
//! experiment. The clients are kept-alive s-clients (each sends its next GET when its last
//! response has ended, and checks every byte) asking the lab's origin for 1 KiB or 64 KiB.
//! Every load also runs without a proxy (`direct`, the client routed through the proxy
//! host): the baseline each variant is compared with.
//!
//! Splicer runs twice: `splicer`, its edge as configured by default with a warm pool
//! (`min_idle = 4`), one request per upstream connection at a time, as HAProxy and nginx;
//! and `splicer-pipelined`, the same with `pipeline = 8`. None of the proxies writes an
//! access log, and each gets the machine's two cores. The summary gives req/s, latency
//! percentiles, the proxy's (its whole process tree) and the machine's CPU per request,
//! and, per request, the connections the origin accepted and its CPU.

use crate::bench::bench_variant;

/// What to run.
pub type Params = crate::bench::HttpBench;

/// A proxy's name, the command on the proxy host and the address clients reach the origin
/// at (none: no proxy, the origin itself).
type Proxy = (&'static str, Option<&'static [&'static str]>, &'static str);

const PROXIES: [Proxy; 5] = [
    ("direct", None, "{server}:8080"),
    (
        "splicer",
        Some(&["splicer", "run", "--config", "{file:splicer.toml}"]),
        "{proxy}:8080",
    ),
    (
        "splicer-pipelined",
        Some(&[
            "splicer",
            "run",
            "--config",
            "{file:splicer-pipelined.toml}",
        ]),
        "{proxy}:8080",
    ),
    (
        "haproxy",
        Some(&["haproxy", "-db", "-f", "{file:haproxy.cfg}"]),
        "{proxy}:9000",
    ),
    (
        "nginx",
        Some(&["nginx", "-c", "{file:nginx.conf}", "-e", "stderr"]),
        "{proxy}:9080",
    ),
];

/// Name and body size.
const LOADS: [(&str, u64); 2] = [("1k", 1024), ("64k", 65536)];

/// The proxies' configuration files: the edge, the edge with `pipeline = 8`, HAProxy and
/// nginx.
fn files() -> String {
    use crate::bench::files;
    [
        "[files]\n".to_string(),
        files::splicer_edge("splicer.toml", "", ""),
        files::splicer_edge("splicer-pipelined.toml", "pipeline = 8\n", ""),
        files::haproxy("haproxy.cfg", 9000, &[]),
        files::nginx_reverse("nginx.conf", "edge", 9080, "", ""),
    ]
    .concat()
}

/// The experiment's scenario text.
pub fn scenario(p: &Params) -> String {
    let mut s = crate::bench::three_hosts("edge-bench", p.rounds);
    s += &files();
    let wanted = Params::wanted;
    for (load, size) in LOADS.iter().filter(|l| wanted(&p.loads, l.0)) {
        for (name, command, origin) in PROXIES {
            if !(name == "direct" || wanted(&p.only, name)) {
                continue;
            }
            let cmd = p.client(origin, "direct", *size, &[]);
            let process = command.map(|c| (c, origin));
            let v = format!("{name}.{load}");
            bench_variant(&mut s, &v, &format!("direct.{load}"), process, &cmd);
        }
    }
    let sizes: Vec<u64> = LOADS.iter().map(|l| l.1).collect();
    s += &p.origin_process(&sizes);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_parses_and_pairs_every_variant_with_its_baseline() {
        let p = Params::default();
        let text = scenario(&p);
        let names = crate::bench::checked_variants(&text);
        assert_eq!(names.len(), 2 * 5, "{names:?}");
        assert!(names.contains(&"nginx.64k".to_string()));
        assert!(text.contains("http-reuse always") && text.contains("keepalive 64"));
        assert!(text.contains("role = \"server\""));
        assert!(text.contains("pipeline = 8") && text.contains("{file:splicer-pipelined.toml}"));
        let narrow = Params {
            only: vec!["haproxy".into()],
            loads: vec!["1k".into()],
            ..p
        };
        let names = crate::bench::checked_variants(&scenario(&narrow));
        assert_eq!(names, ["direct.1k", "haproxy.1k"]);
    }
}
