//! Every relay engine in a client — r1 — proxy — r2 — server bed with two-state loss (1%
//! first loss, 40% after a loss) on both legs, through Splicer's SOCKS5 front end: bulk
//! pushes checked byte by byte at the sink, the proxy's TCP recovering the losses of each
//! leg, and nothing left behind afterwards. Needs root (namespaces, eBPF); CI runs as root.

mod common;

use common::{ensure_splicer, lab, netns_of, root};

const CONNS: u64 = 4;
const BYTES: u64 = 24 << 20;

fn scenario() -> String {
    let leg = |router: &str, a: &str, b: &str, seed: u32| {
        format!(
            "[[emulate]]\nrouter = \"{router}\"\nfrom = \"{a}\"\nto = \"{b}\"\ndelay_ms = 2\n\
             loss_p = 0.01\nloss_r = 0.4\nseed = {seed}\n\
             [[emulate]]\nrouter = \"{router}\"\nfrom = \"{b}\"\nto = \"{a}\"\ndelay_ms = 2\n\
             loss_p = 0.01\nloss_r = 0.4\nseed = {}\n",
            seed + 1
        )
    };
    let mut s = String::from("[experiment]\nname = \"engines\"\n");
    for h in ["client", "r1", "proxy", "r2", "server"] {
        let fwd = if h.starts_with('r') || h == "proxy" {
            "forward = true\n"
        } else {
            ""
        };
        s += &format!("[[host]]\nname = \"{h}\"\n{fwd}");
    }
    for (a, b) in [
        ("client", "r1"),
        ("r1", "proxy"),
        ("proxy", "r2"),
        ("r2", "server"),
    ] {
        s += &format!("[[link]]\na = \"{a}\"\nb = \"{b}\"\n");
    }
    s += &leg("r1", "client", "proxy", 11);
    s += &leg("r2", "proxy", "server", 21);
    s += "[files]\n";
    for e in ["copy", "pipe", "sockmap"] {
        s += &format!(
            "\"{e}.toml\" = \"\"\"\n[log]\nformat = \"json\"\n[relay]\nengine = \"{e}\"\n[socks]\nlisten = [\"{{proxy}}:1080\"]\n\
             [[acl.rule]]\naction = \"allow\"\nclients = [\"10.231.0.0/16\"]\n\"\"\"\n"
        );
    }
    for e in ["copy", "pipe", "sockmap"] {
        s += &format!("[[variant]]\nname = \"{e}\"\nvars = {{ config = \"{e}.toml\" }}\n");
        s += &format!(
            "[[process]]\nhost = \"proxy\"\nrole = \"proxy\"\nvariants = [\"{e}\"]\n\
             command = [\"splicer\", \"run\", \"--config\", \"{{file:{e}.toml}}\"]\n\
             wait_for = \"{{proxy}}:1080\"\n"
        );
    }
    s += "[[process]]\nhost = \"server\"\ncommand = [\"lab\", \"loadserver\", \"--listen\", \"{server}:7000\"]\n\
          wait_for = \"{server}:7000\"\n";
    s += &format!(
        "[[load]]\nhost = \"client\"\ncommand = [\"lab\", \"loadclient\", \"--sink\", \"{{server}}:7000\", \
         \"--via\", \"socks5://{{proxy}}:1080\", \"--conns\", \"{CONNS}\", \"--bytes\", \"{BYTES}\", \
         \"--timeout\", \"120\"]\n"
    );
    s
}

#[test]
fn every_engine_carries_bulk_through_lossy_legs() {
    if !root() {
        return;
    }
    ensure_splicer();
    let dir = std::env::temp_dir().join(format!("splab-engines-{}", std::process::id()));
    let file = dir.with_extension("toml");
    std::fs::write(&file, scenario()).unwrap();
    let child = std::process::Command::new(lab())
        .arg("run")
        .arg(&file)
        .arg("--out")
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        netns_of(pid).is_empty(),
        "namespaces left: {:?}",
        netns_of(pid)
    );
    let runs: Vec<splicer_lab::experiment::VariantRun> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("runs.json")).unwrap()).unwrap();
    assert_eq!(runs.len(), 3);
    for r in &runs {
        let l = &r.loads[0];
        assert_eq!(l.error_total(), 0, "{}: {:?}", r.variant, l.errors);
        assert_eq!(
            (l.completed, l.bytes),
            (CONNS, CONNS * BYTES),
            "{}",
            r.variant
        );
        // The emulators dropped packets on both legs, and the proxy's TCP resent its share.
        assert!(
            r.links.iter().all(|k| k.lost > 0),
            "{}: {:?}",
            r.variant,
            r.links
        );
        assert!(
            r.tcp["proxy"]["Tcp.RetransSegs"] > 0,
            "{}: {:?}",
            r.variant,
            r.tcp["proxy"]
        );
        eprintln!(
            "{}: {:.0} Mbit/s, proxy {:.2} CPU s, losses {:?}",
            r.variant,
            l.extra["gbit_per_second"].as_f64().unwrap_or(0.0) * 1000.0,
            r.proxy_cpu_s,
            r.links.iter().map(|k| k.lost).collect::<Vec<_>>()
        );
    }
    // The access log of each variant names its engine.
    for e in ["copy", "pipe", "sockmap"] {
        let log = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|f| f.ok())
            .filter(|f| {
                f.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{e}-r0-process"))
            })
            .map(|f| std::fs::read_to_string(f.path()).unwrap_or_default())
            .collect::<String>();
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("\"front\":\"socks\"") && l.contains("\"method\":\"CONNECT\""))
            .collect();
        assert_eq!(lines.len() as u64, CONNS, "{e}: access lines in\n{log}");
        let engine = format!("\"engine\":\"{e}\"");
        assert!(lines.iter().all(|l| l.contains(&engine)), "{e}: {lines:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
