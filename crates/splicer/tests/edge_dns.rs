//! Edge servers given by DNS name (issue 37, item 5): resolved at start and again every
//! `resolve_every`, each address a server; a name that moves takes its group's requests
//! with it; a name that stops resolving keeps its last addresses. Splicer runs in a mount
//! namespace of its own whose /etc/hosts (and /etc/resolv.conf, pointing at a closed port,
//! so a missing name fails at once) are the test's files.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use splicer_testkit::{curl, eventually, expected_digest, free_port, origin, s, Running};

/// Two origins on one port, at 127.0.0.2 and 127.0.0.3.
async fn two_origins() -> (u16, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    for _ in 0..20 {
        let (a, count_a) = origin::start_counted_at("127.0.0.2:0".parse().unwrap())
            .await
            .unwrap();
        let b = SocketAddr::from(([127, 0, 0, 3], a.port()));
        if let Ok((_, count_b)) = origin::start_counted_at(b).await {
            return (a.port(), count_a, count_b);
        }
    }
    panic!("no port free on both 127.0.0.2 and 127.0.0.3");
}

#[tokio::test(flavor = "multi_thread")]
async fn servers_by_name_follow_their_addresses() {
    if !splicer_testkit::require_root("for a mount namespace with the test's /etc/hosts")
        || !splicer_testkit::require(
            splicer_testkit::have_command("unshare"),
            "unshare (package util-linux)",
        )
    {
        return;
    }
    let (port, to_a, to_b) = two_origins().await;
    let dir = splicer_testkit::TempDir::new();
    let hosts = dir.0.join("hosts");
    let resolv = dir.0.join("resolv.conf");
    std::fs::write(&hosts, "127.0.0.1 localhost\n127.0.0.2 origin.test\n").unwrap();
    std::fs::write(
        &resolv,
        "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
    )
    .unwrap();
    let edge = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = format!(
        "[log]\nformat = \"json\"\n[edge]\nlisten = [\"{edge}\"]\nresolve_every = \"1s\"\n\
         [[edge.upstream]]\nname = \"named\"\nservers = [\"origin.test:{port}\"]\n\
         [[edge.route]]\nupstream = \"named\"\n"
    );
    let script = format!(
        "mount --bind {} /etc/hosts && mount --bind {} /etc/resolv.conf && exec \"$@\"",
        hosts.display(),
        resolv.display()
    );
    let prefix = ["unshare", "--mount", "--", "sh", "-c", &script, "sh"];
    let _splicer = Running(splicer_testkit::spawn_splicer(
        &dir.0,
        &config,
        Some(&prefix),
    ));
    let log = || std::fs::read_to_string(dir.0.join("splicer.log")).unwrap_or_default();
    assert!(
        eventually(|| std::net::TcpStream::connect(edge).is_ok()).await,
        "{}",
        log()
    );
    let get = || async {
        let url = format!("http://{edge}/bytes/1000?seed=3");
        let (code, n, digest, err) = curl(s(&["-H", "Host: e.test", &url])).await;
        assert_eq!((code, n), (0, 1000), "{err}\n{}", log());
        assert_eq!(digest, expected_digest(1000, 3));
    };

    get().await;
    assert_eq!(
        (to_a.load(Ordering::SeqCst), to_b.load(Ordering::SeqCst)),
        (1, 0)
    );

    // The name moves: the group follows within a resolve_every or two.
    std::fs::write(&hosts, "127.0.0.1 localhost\n127.0.0.3 origin.test\n").unwrap();
    assert!(
        eventually(|| log().contains("edge servers changed with their names' addresses")).await,
        "{}",
        log()
    );
    let a_before = to_a.load(Ordering::SeqCst);
    for _ in 0..3 {
        get().await;
    }
    assert_eq!(
        to_a.load(Ordering::SeqCst),
        a_before,
        "the old address is not chosen"
    );
    assert!(to_b.load(Ordering::SeqCst) >= 1, "the new address serves");

    // The name stops resolving: its last address stays.
    std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
    assert!(
        eventually(|| log().contains("does not resolve")).await,
        "{}",
        log()
    );
    // Answered (by 127.0.0.3, on its pooled connection or a new one: not by the other).
    get().await;
    assert_eq!(
        to_a.load(Ordering::SeqCst),
        a_before,
        "served by the last address"
    );
    assert!(
        log().contains("\"server\":\"origin.test:"),
        "the name is in the log:\n{}",
        log()
    );
}
