//! The HTTP cache benchmark (`splicer-lab cache-bench`): proxies side by side in a
//! client — proxy — server bed, interleaved over rounds, as one lab experiment. The clients
//! are 50 kept-alive s-clients (each sends its next GET when its last response has ended,
//! and checks every byte); the origin is the lab's.
//! - hits (`hit-1k`, `hit-64k`: one cacheable object, so every request after the first is a
//!   hit): Splicer's HTTP front end, Squid (`cache_mem` only) and nginx (`proxy_cache` on
//!   tmpfs, `proxy_cache_lock`);
//! - responses that cannot be cached (`pass-1k`, `pass-64k`, `pass-1m`: `Cache-Control:
//!   no-store`): Splicer, HAProxy (http mode, `http-reuse always`; again with `option
//!   splice-auto`, `haproxy-splice`) and nginx as a reverse
//!   proxy without a cache (`nginx`, upstream keep-alive), with the same s-clients, and
//!   again with s-clients that open a connection per request (`pass-64k-close`,
//!   `pass-1m-close`: HTTP/1.0, seed 000's clients, whose answers a kernel engine takes to
//!   the end of the client's connection);
//! - every load also without a proxy (`direct`, the client routed through the proxy host):
//!   the baseline each variant is compared with;
//! - Splicer again with its admin listener (which both Splicer variants have) scraped once
//!   a second (`splicer-scraped`, by `splicer-lab scrape` on the proxy host): what metrics
//!   cost under load;
//! - Splicer with `sockmap` forced on the pass loads (`splicer-sockmap`): the bodies move
//!   in the kernel, bounded (seed 000's splice), where `auto` moves them with `pipe`
//!   (or `copy` below 4 KiB);
//! - the kept-alive pass loads through one CONNECT tunnel per client, spliced whole by
//!   `sockmap` or `ipsplice` (`splicer-sockmap-tunnel`, `splicer-ipsplice-tunnel`): the
//!   engine's kernel path with no per-request work in the proxy, the floor of a per-body
//!   splice by that engine.
//!
//! None of the proxies writes an access log (Splicer's log level is `warn`), and each gets
//! the machine's two cores. The summary gives req/s, latency percentiles, and the proxy's
//! (its whole process tree) and the machine's CPU per request.

use crate::bench::bench_variant;

/// What to run.
pub type Params = crate::bench::HttpBench;

/// A proxy: how clients reach the origin through it and what runs on the proxy host.
struct Proxy {
    name: &'static str,
    /// `--via` and `--origin` for the s-clients.
    via: &'static str,
    origin: &'static str,
    /// The command on the proxy host and the address it listens on (none: no proxy).
    process: Option<(&'static [&'static str], &'static str)>,
    /// Whether it runs the hit loads, the pass loads.
    hits: bool,
    passes: bool,
}

const SPLICER: Proxy = Proxy {
    name: "splicer",
    via: "http://{proxy}:3128",
    origin: "{server}:8080",
    process: Some((
        &["splicer", "run", "--config", "{file:splicer.toml}"],
        "{proxy}:3128",
    )),
    hits: true,
    passes: true,
};

const PROXIES: [Proxy; 11] = [
    Proxy {
        name: "direct",
        via: "direct",
        origin: "{server}:8080",
        process: None,
        hits: true,
        passes: true,
    },
    SPLICER,
    // The same, with its admin listener scraped (a process of its own, added in `scenario`).
    Proxy {
        name: "splicer-scraped",
        ..SPLICER
    },
    Proxy {
        name: "splicer-sockmap",
        process: Some((
            &["splicer", "run", "--config", "{file:splicer-sockmap.toml}"],
            "{proxy}:3128",
        )),
        hits: false,
        ..SPLICER
    },
    // The same bodies through a CONNECT tunnel per client, spliced whole by a kernel engine
    // once and then carrying every kept-alive request: no work per request in the proxy's
    // process, so the machine's CPU per request is what the engine's kernel path costs
    // with no set-up, the least a per-body splice by it could reach (kept-alive loads
    // only).
    Proxy {
        name: "splicer-sockmap-tunnel",
        via: "connect://{proxy}:3128",
        process: Some((
            &[
                "splicer",
                "run",
                "--config",
                "{file:splicer-sockmap-tunnel.toml}",
            ],
            "{proxy}:3128",
        )),
        hits: false,
        ..SPLICER
    },
    Proxy {
        name: "splicer-ipsplice-tunnel",
        via: "connect://{proxy}:3128",
        process: Some((
            &[
                "splicer",
                "run",
                "--config",
                "{file:splicer-ipsplice-tunnel.toml}",
            ],
            "{proxy}:3128",
        )),
        hits: false,
        ..SPLICER
    },
    Proxy {
        name: "squid",
        via: "http://{proxy}:3129",
        origin: "{server}:8080",
        process: Some((&["squid", "-N", "-f", "{file:squid.conf}"], "{proxy}:3129")),
        hits: true,
        passes: false,
    },
    Proxy {
        name: "nginx-cache",
        via: "direct",
        origin: "{proxy}:9080",
        process: Some((
            &["nginx", "-c", "{file:nginx.conf}", "-e", "stderr"],
            "{proxy}:9080",
        )),
        hits: true,
        passes: false,
    },
    Proxy {
        name: "nginx",
        via: "direct",
        origin: "{proxy}:9081",
        process: Some((
            &["nginx", "-c", "{file:nginx-pass.conf}", "-e", "stderr"],
            "{proxy}:9081",
        )),
        hits: false,
        passes: true,
    },
    Proxy {
        name: "haproxy",
        via: "direct",
        origin: "{proxy}:9000",
        process: Some((
            &["haproxy", "-db", "-f", "{file:haproxy.cfg}"],
            "{proxy}:9000",
        )),
        hits: false,
        passes: true,
    },
    // HAProxy with its own kernel splice (`option splice-auto`: `splice(2)` through a
    // pipe when it judges it pays, as Splicer's `pipe` does).
    Proxy {
        name: "haproxy-splice",
        via: "direct",
        origin: "{proxy}:9001",
        process: Some((
            &["haproxy", "-db", "-f", "{file:haproxy-splice.cfg}"],
            "{proxy}:9001",
        )),
        hits: false,
        passes: true,
    },
];

/// Name, body size, cacheable, kept-alive clients (else a connection per request).
const LOADS: [(&str, u64, bool, bool); 7] = [
    ("hit-1k", 1024, true, true),
    ("hit-64k", 65536, true, true),
    ("pass-1k", 1024, false, true),
    ("pass-64k", 65536, false, true),
    ("pass-1m", 1 << 20, false, true),
    ("pass-64k-close", 65536, false, false),
    ("pass-1m-close", 1 << 20, false, false),
];

/// The proxies' configuration files: Splicer's forward proxy (with the admin listener
/// whose metrics the report reads, and with the kernel engines), HAProxy with and without
/// `splice-auto`, nginx passing and caching, Squid.
fn files() -> String {
    use crate::bench::files;
    let sockmap = "[relay]\nengine = \"sockmap\"\n";
    let ipsplice = "[relay]\nengine = \"ipsplice\"\n";
    let tunnel = "connect_ports = [8080]\n";
    let cache = "  proxy_cache_path /dev/shm/splicer-lab-nginx-cache keys_zone=hits:16m \
                 max_size=256m inactive=1h use_temp_path=off;\n";
    [
        "[files]\n".to_string(),
        files::splicer_forward(
            "splicer.toml",
            "",
            "",
            "[admin]\nlisten = [\"127.0.0.1:9180\"]\n",
        ),
        files::splicer_forward("splicer-sockmap.toml", sockmap, "", ""),
        files::splicer_forward("splicer-sockmap-tunnel.toml", sockmap, tunnel, ""),
        files::splicer_forward("splicer-ipsplice-tunnel.toml", ipsplice, tunnel, ""),
        files::haproxy("haproxy.cfg", 9000, &[]),
        files::haproxy("haproxy-splice.cfg", 9001, &["splice-auto"]),
        files::nginx_reverse("nginx-pass.conf", "pass", 9081, "", ""),
        files::nginx_reverse(
            "nginx.conf",
            "cache",
            9080,
            cache,
            "      proxy_cache hits;\n      proxy_cache_lock on;\n",
        ),
        SQUID_FILE.to_string(),
    ]
    .concat()
}

/// Squid as a forward proxy with an in-memory cache, on `{proxy}:3129`.
const SQUID_FILE: &str = r#""squid.conf" = """
http_port {proxy}:3129
http_access allow all
cache_mem 256 MB
maximum_object_size_in_memory 8 MB
memory_cache_shared off
workers 1
access_log none
cache_store_log none
cache_log /dev/null
pid_filename /run/splicer-lab-squid.pid
coredump_dir /tmp
shutdown_lifetime 0 seconds
forwarded_for delete
"""
"#;

/// The experiment's scenario text.
pub fn scenario(p: &Params) -> String {
    let mut s = String::new();
    s += &crate::bench::three_hosts("cache-bench", p.rounds);
    s += &files();
    let wanted = Params::wanted;
    for (load, size, cacheable, kept) in LOADS.iter().filter(|l| wanted(&p.loads, l.0)) {
        for proxy in &PROXIES {
            let runs = if *cacheable { proxy.hits } else { proxy.passes };
            if !runs || !(proxy.name == "direct" || wanted(&p.only, proxy.name)) {
                continue;
            }
            // A tunnel per request is the set-up cost again, which the close loads of the
            // other variants already show.
            if !kept && proxy.via.starts_with("connect://") {
                continue;
            }
            let extra: &[&str] = if *cacheable { &["--cacheable"] } else { &[] };
            let mut cmd = p.client(proxy.origin, proxy.via, *size, extra);
            if !kept {
                cmd.retain(|a| a != "--keep-alive");
            }
            let v = format!("{}.{load}", proxy.name);
            bench_variant(&mut s, &v, &format!("direct.{load}"), proxy.process, &cmd);
            if proxy.name == "splicer-scraped" {
                s += &format!(
                    "[[process]]\nhost = \"proxy\"\nvariants = [\"{v}\"]\n\
                     command = [\"lab\", \"scrape\", \"--admin\", \"127.0.0.1:9180\"]\n"
                );
            }
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
        assert_eq!(names.len(), 2 * 5 + 5 * 7 + 3 * 2, "{names:?}");
        assert!(names.contains(&"splicer-ipsplice-tunnel.pass-64k".to_string()));
        assert!(!names.contains(&"splicer-sockmap-tunnel.pass-64k-close".to_string()));
        assert!(text.contains("option splice-auto"));
        assert!(names.contains(&"nginx.pass-1m-close".to_string()));
        assert!(!names.contains(&"nginx.hit-1k".to_string()));
        let close = text
            .lines()
            .skip_while(|l| !l.contains("\"splicer-sockmap.pass-1m-close\""))
            .find(|l| l.contains("\"sclient\""))
            .unwrap();
        assert!(!close.contains("--keep-alive"), "{close}");
        assert!(names.contains(&"splicer-scraped.pass-1k".to_string()));
        assert!(names.contains(&"splicer-sockmap.pass-1m".to_string()));
        assert!(!names.contains(&"splicer-sockmap.hit-1k".to_string()));
        assert!(text.contains("engine = \"sockmap\""));
        assert!(text.contains("\"lab\", \"scrape\""));
        assert!(names.contains(&"squid.hit-64k".to_string()));
        assert!(!names.contains(&"squid.pass-1k".to_string()));
        assert!(text.contains("--keep-alive") && text.contains("--cacheable"));
        let narrow = Params {
            only: vec!["haproxy".into()],
            loads: vec!["pass-1k".into()],
            ..p
        };
        let names = crate::bench::checked_variants(&scenario(&narrow));
        assert_eq!(names, ["direct.pass-1k", "haproxy.pass-1k"]);
    }
}
