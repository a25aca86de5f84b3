//! The relay benchmark (`splicer-lab relay-bench`): TCP relays side by side in a
//! client — proxy — server bed, interleaved over rounds, as one lab experiment. Each variant
//! is one relay under one load, so its CPU figures belong to that load alone:
//! - relays: IP forwarding through the proxy host (no relay: the physical limit), Splicer
//!   with each engine (SOCKS5), HAProxy in tcp mode without splice and with forced splicing
//!   (`option splice-request` + `option splice-response`), nginx stream, Dante (SOCKS5)
//!   and socat;
//! - loads: bulk one way and both ways with 1, 10 and 100 connections (the same total bytes),
//!   and one-byte request/response round trips with client, relay and server pinned to CPU 0
//!   (on this kind of VM, waking an idle vCPU costs more than forwarding: docs/kernel-notes.md).
//!
//! The summary reports throughput, the relay's CPU (its whole process tree) and the
//! machine's CPU per GiB, and round-trip percentiles, with ratios to IP forwarding.

use std::fmt::Write as _;
use std::path::Path;

/// What to run.
#[derive(Debug, Clone)]
pub struct Params {
    pub rounds: u32,
    /// Bytes per bulk run, over all its connections, per direction.
    pub bytes: u64,
    /// Round trips per ping-pong run.
    pub count: u64,
    /// Relays to run (empty: all).
    pub only: Vec<String>,
    /// Loads to run (empty: all).
    pub loads: Vec<String>,
    /// Bytes of receive buffer fixed on the relay's sockets: Splicer's
    /// `limits.receive_buffer` and HAProxy's `tune.rcvbuf.client`/`.server` (0: the kernel
    /// autotunes, as by default).
    pub receive_buffer: usize,
}

/// A relay: how the client reaches the server through it, and what runs on the proxy host.
struct Relay {
    name: &'static str,
    /// `--via` for the client, and the bulk and ping-pong targets it dials.
    via: &'static str,
    bulk: &'static str,
    rtt: &'static str,
    /// Commands on the proxy host, with the address it listens on (to wait for).
    processes: Vec<(Vec<String>, &'static str)>,
}

const SPLICER_ENGINES: [&str; 4] = ["copy", "pipe", "sockmap", "ipsplice"];

fn relays() -> Vec<Relay> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut out = vec![Relay {
        name: "forward",
        via: "direct",
        bulk: "{server}:7000",
        rtt: "{server}:7001",
        processes: vec![],
    }];
    for e in SPLICER_ENGINES {
        out.push(Relay {
            name: match e {
                "copy" => "splicer-copy",
                "pipe" => "splicer-pipe",
                "sockmap" => "splicer-sockmap",
                _ => "splicer-ipsplice",
            },
            via: "socks5://{proxy}:1080",
            bulk: "{server}:7000",
            rtt: "{server}:7001",
            processes: vec![(
                s(&[
                    "splicer",
                    "run",
                    "--config",
                    &format!("{{file:splicer-{e}.toml}}"),
                ]),
                "{proxy}:1080",
            )],
        });
    }
    for (name, cfg) in [
        ("haproxy", "haproxy.cfg"),
        ("haproxy-splice", "haproxy-splice.cfg"),
    ] {
        out.push(Relay {
            name,
            via: "direct",
            bulk: "{proxy}:9000",
            rtt: "{proxy}:9001",
            processes: vec![(
                s(&["haproxy", "-db", "-f", &format!("{{file:{cfg}}}")]),
                "{proxy}:9000",
            )],
        });
    }
    out.push(Relay {
        name: "nginx",
        via: "direct",
        bulk: "{proxy}:9000",
        rtt: "{proxy}:9001",
        processes: vec![(
            s(&["nginx", "-c", "{file:nginx.conf}", "-e", "stderr"]),
            "{proxy}:9000",
        )],
    });
    out.push(Relay {
        name: "dante",
        via: "socks5://{proxy}:1081",
        bulk: "{server}:7000",
        rtt: "{server}:7001",
        processes: vec![(s(&["danted", "-f", "{file:danted.conf}"]), "{proxy}:1081")],
    });
    out.push(Relay {
        name: "socat",
        via: "direct",
        bulk: "{proxy}:9000",
        rtt: "{proxy}:9001",
        processes: [(9000, 7000), (9001, 7001)]
            .iter()
            .map(|(l, t)| {
                (
                    s(&[
                        "socat",
                        // Half-closes: by default socat ends the connection 0.5 s after
                        // one side's EOF, cutting the other direction short.
                        "-t",
                        "600",
                        &format!("TCP-LISTEN:{l},bind={{proxy}},fork,reuseaddr,backlog=1024"),
                        &format!("TCP:{{server}}:{t},nodelay"),
                    ]),
                    if *l == 9000 {
                        "{proxy}:9000"
                    } else {
                        "{proxy}:9001"
                    },
                )
            })
            .collect(),
    });
    out
}

/// The loads: name, connections, both ways (`None` for the ping-pong).
const LOADS: [(&str, u32, Option<bool>); 7] = [
    ("one-1", 1, Some(false)),
    ("one-10", 10, Some(false)),
    ("one-100", 100, Some(false)),
    ("both-1", 1, Some(true)),
    ("both-10", 10, Some(true)),
    ("both-100", 100, Some(true)),
    ("rtt", 1, None),
];

fn files(receive_buffer: usize) -> String {
    let mut f = String::from("[files]\n");
    let haproxy_rcvbuf = if receive_buffer > 0 {
        format!(
            "    tune.rcvbuf.client {receive_buffer}\n    tune.rcvbuf.server {receive_buffer}\n"
        )
    } else {
        String::new()
    };
    for e in SPLICER_ENGINES {
        writeln!(
            f,
            "\"splicer-{e}.toml\" = \"\"\"\n[relay]\nengine = \"{e}\"\n\
             [limits]\nreceive_buffer = {receive_buffer}\n\
             [socks]\nlisten = [\"{{proxy}}:1080\"]\n[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\n\
             clients = [\"10.231.0.0/16\"]\n\"\"\""
        )
        .unwrap();
    }
    for (name, splice) in [
        ("haproxy.cfg", ""),
        (
            "haproxy-splice.cfg",
            "    option splice-request\n    option splice-response\n",
        ),
    ] {
        writeln!(
            f,
            "\"{name}\" = \"\"\"\nglobal\n    maxconn 4000\n{haproxy_rcvbuf}defaults\n    mode tcp\n{splice}\
             \x20   timeout connect 10s\n    timeout client 600s\n    timeout server 600s\n\
             listen bulk\n    bind {{proxy}}:9000\n    server s {{server}}:7000\n\
             listen rtt\n    bind {{proxy}}:9001\n    server s {{server}}:7001\n\"\"\""
        )
        .unwrap();
    }
    // The stream module is a separate package on Debian (libnginx-mod-stream).
    writeln!(
        f,
        "\"nginx.conf\" = \"\"\"\nload_module /usr/lib/nginx/modules/ngx_stream_module.so;\n\
         daemon off;\nworker_processes auto;\npid /run/splicer-lab-nginx.pid;\n\
         error_log stderr;\nevents {{ worker_connections 4096; }}\n\
         stream {{\n  proxy_half_close on;\n  server {{ listen {{proxy}}:9000; proxy_pass {{server}}:7000; }}\n\
         \x20 server {{ listen {{proxy}}:9001; proxy_pass {{server}}:7001; tcp_nodelay on; }}\n}}\n\"\"\""
    )
    .unwrap();
    // Dante: the proxy host's server-side interface is v1server (link 1 of the bed).
    writeln!(
        f,
        "\"danted.conf\" = \"\"\"\nlogoutput: stderr\ninternal: {{proxy}} port = 1081\n\
         external: v1server\nsocksmethod: none\nclientmethod: none\nuser.privileged: root\n\
         user.unprivileged: nobody\nclient pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 }}\n\
         socks pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 }}\n\"\"\""
    )
    .unwrap();
    f
}

/// The experiment's scenario text. `lab` is this binary (the ping-pong load runs it under
/// `taskset`, so it cannot use the `lab` shorthand).
pub fn scenario(p: &Params, lab: &Path) -> String {
    let splicer = lab.with_file_name("splicer").display().to_string();
    let lab = lab.display();
    let mut s = String::new();
    s += &crate::bench::three_hosts("relay-bench", p.rounds);
    s += &files(p.receive_buffer);
    let relays: Vec<Relay> = relays()
        .into_iter()
        .filter(|r| p.only.is_empty() || r.name == "forward" || p.only.iter().any(|o| o == r.name))
        .collect();
    let loads: Vec<_> = LOADS
        .iter()
        .filter(|l| p.loads.is_empty() || p.loads.iter().any(|o| o == l.0))
        .collect();
    for (load, conns, both) in &loads {
        for r in &relays {
            let v = format!("{}.{load}", r.name);
            writeln!(
                s,
                "[[variant]]\nname = \"{v}\"\nbaseline = \"forward.{load}\""
            )
            .unwrap();
            let pin = both.is_none();
            for (cmd, wait) in &r.processes {
                let mut c: Vec<String> = cmd.clone();
                if pin {
                    c.splice(0..0, ["taskset".into(), "-c".into(), "0".into()]);
                    if c[3] == "splicer" {
                        c[3] = splicer.clone();
                    }
                }
                writeln!(
                    s,
                    "[[process]]\nhost = \"proxy\"\nrole = \"proxy\"\nvariants = [\"{v}\"]\n\
                     command = {c:?}\nwait_for = \"{wait}\""
                )
                .unwrap();
            }
            let cmd: Vec<String> = match both {
                Some(both) => {
                    let per = (p.bytes / u64::from(*conns)).max(1);
                    let mut c = vec![
                        "lab".to_string(),
                        "loadclient".into(),
                        "--sink".into(),
                        r.bulk.into(),
                        "--via".into(),
                        r.via.into(),
                        "--conns".into(),
                        conns.to_string(),
                        "--bytes".into(),
                        per.to_string(),
                        "--timeout".into(),
                        "600".into(),
                    ];
                    if *both {
                        c.push("--both-ways".into());
                    }
                    c
                }
                None => vec![
                    "taskset".into(),
                    "-c".into(),
                    "0".into(),
                    lab.to_string(),
                    "pingpong".into(),
                    "--connect".into(),
                    r.rtt.into(),
                    "--via".into(),
                    r.via.into(),
                    "--count".into(),
                    p.count.to_string(),
                    // Time for the kernel engines to take the quiet connection over.
                    "--pause-ms".into(),
                    "1500".into(),
                ],
            };
            writeln!(
                s,
                "[[load]]\nhost = \"client\"\nvariants = [\"{v}\"]\ncommand = {cmd:?}"
            )
            .unwrap();
        }
    }
    // The servers, pinned like everything else for the round trips (one process serves all).
    writeln!(
        s,
        "[[process]]\nhost = \"server\"\ncommand = [\"lab\", \"loadserver\", \"--listen\", \"{{server}}:7000\"]\n\
         wait_for = \"{{server}}:7000\"\n\
         [[process]]\nhost = \"server\"\ncommand = [\"taskset\", \"-c\", \"0\", \"{lab}\", \"pingpong-server\", \"--listen\", \"{{server}}:7001\"]\n\
         wait_for = \"{{server}}:7001\""
    )
    .unwrap();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scenario_parses_and_pairs_every_variant_with_its_baseline() {
        let p = Params {
            rounds: 3,
            bytes: 1 << 30,
            count: 1000,
            only: vec![],
            loads: vec![],
            receive_buffer: 0,
        };
        let text = scenario(&p, Path::new("/x/splicer-lab"));
        let names = crate::bench::checked_variants(&text);
        assert_eq!(names.len(), 10 * 7);
        assert!(text.contains("option splice-request"));
        let narrow = Params {
            only: vec!["splicer-ipsplice".into()],
            loads: vec!["rtt".into()],
            ..p
        };
        let names = crate::bench::checked_variants(&scenario(&narrow, Path::new("/x/splicer-lab")));
        assert_eq!(names, ["forward.rtt", "splicer-ipsplice.rtt"]);
        assert!(!text.contains("tune.rcvbuf"));
        let fixed = scenario(
            &Params {
                receive_buffer: 3 << 20,
                ..narrow
            },
            Path::new("/x/splicer-lab"),
        );
        assert!(fixed.contains("tune.rcvbuf.server 3145728"), "{fixed}");
        assert!(fixed.contains("receive_buffer = 3145728"), "{fixed}");
    }
}
