//! The test bed with real namespaces, veth links and processes. Needs root; without it each
//! test says so and returns (CI runs as root).

use std::process::Command;
use std::time::Duration;

use splicer_lab::{bed, Bed, Scenario};

mod common;
use common::{namespaces, root};

const CHAIN: &str = r#"
[[host]]
name = "client"
[[host]]
name = "proxy"
forward = true
[[host]]
name = "server"
[[link]]
a = "client"
b = "proxy"
[[link]]
a = "proxy"
b = "server"
"#;

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// A client reaches the server through the forwarding proxy host, and everything is gone
/// after the bed is dropped.
#[test]
fn chain_routes_through_the_proxy_host_and_cleans_up() {
    if !root() {
        return;
    }
    // One bed per test process at a time: the tests share the process id in their names.
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = Bed::build(Scenario::from_toml(CHAIN).unwrap()).unwrap();
    let server = b.addr("server").unwrap();
    assert_eq!(server.to_string(), "10.231.1.2");
    let (url, pid) = b.serve_http("server", 8000, None).unwrap();
    b.wait_http("client", &url, Duration::from_secs(15))
        .unwrap();
    // The server's subnet is not the client's: the way there is through the proxy host.
    let route = b
        .command("client", "ip")
        .args(["route", "get", &server.to_string()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&route.stdout).contains("via 10.231.0.2"));
    // Every host can open connections at the load generators' rates without running out
    // of ports (TIME_WAIT ports reused, a wide range).
    for (key, want) in [
        ("net.ipv4.ip_local_port_range", "1024\t65535"),
        ("net.ipv4.tcp_tw_reuse", "1"),
    ] {
        let v = b
            .command("client", "sysctl")
            .args(["-n", key])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&v.stdout).trim(), want, "{key}");
    }
    let ns = b.netns("client");
    assert!(namespaces().contains(&ns));
    drop(b);
    assert!(!namespaces().contains(&ns), "namespace left behind");
    assert!(!alive(pid), "process left behind");
}

/// A panic while the bed is up still removes it (Drop runs during unwinding).
#[test]
fn panic_cleans_up() {
    if !root() {
        return;
    }
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let r = std::panic::catch_unwind(|| {
        let b = Bed::build(Scenario::from_toml(CHAIN).unwrap()).unwrap();
        assert!(namespaces().contains(&b.netns("server")));
        panic!("experiment failed");
    });
    assert!(r.is_err());
    assert!(!namespaces().contains(&format!("{}{}-", bed::PREFIX, std::process::id())));
}

/// `clean` removes namespaces of dead runs and leaves live ones alone.
#[test]
fn clean_removes_leftovers_of_dead_runs_only() {
    if !root() {
        return;
    }
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // No process can have this id (above the kernel's pid_max limit).
    let dead = format!("{}999999999-client", bed::PREFIX);
    assert!(Command::new("ip")
        .args(["netns", "add", &dead])
        .status()
        .unwrap()
        .success());
    let b = Bed::build(Scenario::from_toml("[[host]]\nname = \"solo\"\n").unwrap()).unwrap();
    let removed = bed::clean().unwrap();
    assert!(removed.contains(&dead), "{removed:?}");
    assert!(!namespaces().contains(&dead));
    assert!(
        namespaces().contains(&b.netns("solo")),
        "a live run's bed is kept"
    );
}

static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A namespace's TCP counters see its own traffic: the server's segments out grow with a
/// transfer, and the client namespace's counters are its own.
#[test]
fn tcp_counters_per_namespace() {
    if !root() {
        return;
    }
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = Bed::build(Scenario::from_toml(CHAIN).unwrap()).unwrap();
    let (url, _) = b.serve_http("server", 8001, None).unwrap();
    let before = splicer_lab::measure::TcpCounters::read(Some(&b.netns("server"))).unwrap();
    b.wait_http("client", &url, Duration::from_secs(15))
        .unwrap();
    let after = splicer_lab::measure::TcpCounters::read(Some(&b.netns("server"))).unwrap();
    let d = after.since(&before);
    assert!(
        d.get("Tcp.OutSegs") >= 2 && d.get("Tcp.InSegs") >= 2,
        "{d:?}"
    );
    assert_eq!(
        d.get("Tcp.PassiveOpens"),
        1,
        "exactly the curl connection in this namespace"
    );
    let proxy = splicer_lab::measure::TcpCounters::read(Some(&b.netns("proxy"))).unwrap();
    assert_eq!(
        proxy.get("Tcp.InSegs"),
        0,
        "the forwarding host terminates no TCP"
    );
}

/// A host's `initcwnd` is on every route it has, its own link's and those through a router,
/// and only on its own; a window outside 1 to 1024 is refused.
#[test]
fn a_hosts_initial_window_is_on_all_its_routes() {
    let bad = CHAIN.replace("name = \"server\"", "name = \"server\"\ninitcwnd = 0");
    let e = Scenario::from_toml(&bad).unwrap_err().to_string();
    assert!(e.contains("host[2].initcwnd"), "{e}");
    if !root() {
        return;
    }
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let text = CHAIN.replace("name = \"server\"", "name = \"server\"\ninitcwnd = 2");
    let b = Bed::build(Scenario::from_toml(&text).unwrap()).unwrap();
    let route = |host: &str, to: &str| {
        let out = b
            .command(host, "ip")
            .args(["route", "get", to])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let (client, proxy) = (b.addr("client").unwrap(), "10.231.1.1");
    // Through the proxy host (a static route) and to the neighbour on its own link.
    assert!(route("server", &client.to_string()).contains("initcwnd 2"));
    assert!(route("server", proxy).contains("initcwnd 2"));
    assert!(!route("client", &b.addr("server").unwrap().to_string()).contains("initcwnd"));
}

/// A link's `mtu` is on both its ends, and the other links keep the veth's 1500.
#[test]
fn a_links_mtu_is_on_both_ends() {
    if !root() {
        return;
    }
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let text = CHAIN.replacen("b = \"proxy\"", "b = \"proxy\"\nmtu = 536", 1);
    let b = Bed::build(Scenario::from_toml(&text).unwrap()).unwrap();
    let mtus = |host: &str| {
        let out = b
            .command(host, "ip")
            .args(["-o", "link", "show"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let mut m: Vec<String> = text
            .lines()
            .filter(|l| !l.contains(": lo:"))
            .filter_map(|l| l.split(" mtu ").nth(1))
            .filter_map(|r| r.split_whitespace().next().map(str::to_string))
            .collect();
        m.sort();
        m
    };
    assert_eq!(mtus("client"), ["536"]);
    assert_eq!(mtus("proxy"), ["1500", "536"]);
    assert_eq!(mtus("server"), ["1500"]);
}

/// Ctrl-C (SIGINT) on `splicer-lab up` removes its namespaces and kills the emulators it
/// started inside them.
#[test]
fn interrupt_removes_the_bed_and_its_processes() {
    if !root() {
        return;
    }
    let scenario = format!(
        "{CHAIN}[[emulate]]\nrouter = \"proxy\"\nfrom = \"client\"\nto = \"server\"\ndelay_ms = 1\n"
    );
    let file = std::env::temp_dir().join(format!("splab-int-{}.toml", std::process::id()));
    std::fs::write(&file, scenario).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_splicer-lab"))
        .arg("up")
        .arg(&file)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let ns = format!("splab-{pid}-proxy");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    // Up once the emulator runs inside the router namespace.
    let emulator = loop {
        let out = Command::new("ip")
            .args(["netns", "pids", &ns])
            .output()
            .unwrap();
        if let Some(p) = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
        {
            break p.parse::<u32>().unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "bed never came up");
        std::thread::sleep(Duration::from_millis(50));
    };
    // Keep stdin open: `wait` would close it, and end of input tears the bed down too.
    let _stdin = child.stdin.take();
    Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    let st = child.wait().unwrap();
    let _ = std::fs::remove_file(&file);
    assert_eq!(st.code(), Some(130));
    assert!(
        !namespaces().contains(&format!("splab-{pid}-")),
        "{}",
        namespaces()
    );
    let gone = std::time::Instant::now() + Duration::from_secs(5);
    while alive(emulator) && std::time::Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(emulator), "emulator {emulator} survived");
}

/// A host with `napi_threads` receives in kernel threads of its own, and the kernel's work
/// for what it receives is their CPU: 1 GiB sent to a sink on the proxy host costs its
/// receive threads CPU time, and an idle second next to none. The check of the lab's
/// attribution of a proxy's kernel work (docs/lab.md) on a known load.
#[test]
fn a_hosts_receive_work_runs_in_its_own_threads() {
    if !root() {
        return;
    }
    let _lock = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let text = CHAIN.replace(
        "name = \"proxy\"\nforward = true",
        "name = \"proxy\"\nforward = true\nnapi_threads = true",
    );
    let b = Bed::build(Scenario::from_toml(&text).unwrap()).unwrap();
    let threads = b.napi_pids("proxy");
    assert_eq!(threads.len(), 2, "one per link end of the proxy host");
    assert!(b.napi_pids("server").is_empty());
    // The peer's end sends no TSO skbs (they would bypass the thread).
    let k = b
        .command("server", "ethtool")
        .args(["-k", "v1proxy"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&k.stdout).contains("tcp-segmentation-offload: off"));
    let cpu = || -> f64 {
        threads
            .iter()
            .map(|p| splicer_lab::measure::own_cpu(*p))
            .sum()
    };
    // An idle second, measured: nothing is sent, and the threads must not be busy.
    let idle0 = cpu();
    std::thread::sleep(Duration::from_secs(1));
    let idle = cpu() - idle0;
    let sink = "import socket,sys\n\
                s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
                s.bind(('10.231.1.1', 5001)); s.listen(1); c,_=s.accept(); n=0\n\
                while True:\n    d=c.recv(1<<20)\n    if not d: break\n    n+=len(d)\n\
                print(n)";
    // Killed by PID on the way out, should an assertion fail before it ends.
    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut sink = Reaped(
        b.command("proxy", "python3")
            .args(["-c", sink])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The sink listens within a bound (python starts in well under a second).
    let listening = || {
        let out = b
            .command("proxy", "ss")
            .args(["-Hltn", "sport = :5001"])
            .output()
            .unwrap();
        !out.stdout.is_empty()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !listening() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sink never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = cpu();
    let send = "import socket\n\
                s=socket.create_connection(('10.231.1.1', 5001)); b=b'x'*(1<<20)\n\
                for i in range(1024): s.sendall(b)\n\
                s.close()";
    let sent = b
        .command("server", "python3")
        .args(["-c", send])
        .status()
        .unwrap();
    let mut got = String::new();
    std::io::Read::read_to_string(&mut sink.0.stdout.take().unwrap(), &mut got).unwrap();
    let busy = cpu() - before;
    assert!(sent.success());
    assert_eq!(got.trim(), "1073741824");
    eprintln!("receive threads: {busy:.2} s for 1 GiB, {idle:.2} s in an idle second");
    assert!(
        busy >= 0.1 && idle < 0.05,
        "receive threads: {busy:.2} s for 1 GiB, {idle:.2} s idle"
    );
}
