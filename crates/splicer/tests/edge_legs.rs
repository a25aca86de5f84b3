//! The `edge` front end's upstream and client legs against a real `splicer` process: the
//! warm pool (`min_idle`: connections open before any client, kept past the idle timeout,
//! opened again when the origin closes them, and used by requests) and per-leg TCP tuning
//! (the sockops program: an upstream connection's initial window seen in the access line,
//! the client leg's window and congestion control seen by `ss`, a setting the kernel
//! refuses logged).

use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use splicer_testkit::recorder::{read_head, read_response, scripted};
use splicer_testkit::{free_port, require_root, sockets_to, wait_listening, Proxy};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Splicer with `[edge]` on a free port: `edge_extra` in that section, then `rest`.
fn start(edge_extra: &str, rest: &str, http_extra: &str) -> (Proxy, SocketAddr) {
    let port = free_port();
    let extra = format!("[edge]\nlisten = [\"127.0.0.1:{port}\"]\n{edge_extra}\n{rest}");
    let p = Proxy::start_with("copy", &extra, http_extra);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_listening(addr);
    (p, addr)
}

/// An origin that counts its connections, answers `ok` to each request, and closes a
/// connection idle for `keepalive` (as nginx's `keepalive_timeout` does).
async fn origin(keepalive: Duration) -> (SocketAddr, Arc<AtomicUsize>) {
    let conns = Arc::new(AtomicUsize::new(0));
    let counted = conns.clone();
    let addr = scripted(move |mut s| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            let mut buf = Vec::new();
            while let Ok(Some(_)) =
                tokio::time::timeout(keepalive, read_head(&mut s, &mut buf)).await
            {
                let reply = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                if s.write_all(reply.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    })
    .await;
    (addr, conns)
}

async fn get(edge: SocketAddr) -> (u16, Vec<u8>) {
    let mut c = TcpStream::connect(edge).await.unwrap();
    c.write_all(b"GET /x HTTP/1.1\r\nHost: w.test\r\n\r\n")
        .await
        .unwrap();
    let (status, _, body) = read_response(&mut c, &mut Vec::new(), false).await;
    (status, body)
}

fn wait_until(what: &str, p: &Proxy, done: impl FnMut() -> bool) {
    assert!(
        splicer_testkit::eventually_blocking(done),
        "{what}:\n{}",
        p.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_warm_pool_is_open_before_clients_and_kept_open() {
    // The origin keeps idle connections 1.5 s; the proxy's idle timeout is 300 ms.
    let (a, conns) = origin(Duration::from_millis(1500)).await;
    let (p, edge) = start(
        "",
        &format!(
            "[[edge.upstream]]\nname = \"a\"\nservers = [\"{a}\"]\nmin_idle = 3\n\
             [[edge.route]]\nupstream = \"a\"\n"
        ),
        "pool_idle_timeout = \"300ms\"\n",
    );
    // Before any client: three connections.
    wait_until("no warm connections", &p, || {
        conns.load(Ordering::SeqCst) >= 3
    });
    // Past the idle timeout, shown by an ordinary pooled connection (a forward-proxy
    // request's, to another origin) that it closes: the warm ones stay open.
    let (other, _) = origin(Duration::from_secs(30)).await;
    let mut c = TcpStream::connect(p.http).await.unwrap();
    let req = format!("GET http://{other}/x HTTP/1.1\r\nHost: {other}\r\n\r\n");
    c.write_all(req.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut c, &mut Vec::new(), false).await.0, 200);
    drop(c);
    wait_until("a pooled connection outlived the idle timeout", &p, || {
        sockets_to(other.port(), "established") == 0
    });
    assert_eq!(
        conns.load(Ordering::SeqCst),
        3,
        "warm connections expired with the idle timeout and were opened again"
    );
    // Requests ride them: every access line says the connection was reused.
    for _ in 0..6 {
        assert_eq!(get(edge).await, (200, b"ok".to_vec()), "{}", p.log());
    }
    // Each access line is written as its exchange ends, just after the client had its answer.
    let edge_lines = || -> Vec<String> {
        let lines = p.access_lines();
        lines
            .into_iter()
            .filter(|l| l.contains("\"front\":\"edge\""))
            .collect()
    };
    wait_until("six edge access lines", &p, || edge_lines().len() >= 6);
    let edge_lines = edge_lines();
    assert_eq!(edge_lines.len(), 6, "{edge_lines:?}");
    for l in &edge_lines {
        assert!(
            l.contains("\"up_reused\":\"yes\""),
            "not a warm connection: {l}"
        );
    }
    // The origin closes the idle ones after 1.5 s: they are opened again.
    let before = conns.load(Ordering::SeqCst);
    wait_until("closed warm connections not opened again", &p, || {
        conns.load(Ordering::SeqCst) >= before + 3
    });
    assert_eq!(get(edge).await, (200, b"ok".to_vec()));
    p.wait_access(&[
        "\"front\":\"edge\"",
        "\"up_reused\":\"yes\"",
        "\"status\":200",
    ]);
}

/// The `ss -tin` line of the connection of local port `port` to `peer`.
fn ss_line(local: SocketAddr, peer: SocketAddr) -> String {
    let out = Command::new("ss")
        .args(["-H", "-tin", "state", "established"])
        .arg(format!(
            "( sport = :{} and dport = :{} )",
            local.port(),
            peer.port()
        ))
        .output()
        .expect("ss (iproute2) runs");
    String::from_utf8_lossy(&out.stdout).replace('\n', " ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_leg_is_tuned_as_configured_and_refusals_are_logged() {
    if !require_root("to load the sockops program") {
        return;
    }
    let (a, _) = origin(Duration::from_secs(30)).await;
    let other_cc = if std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .unwrap_or_default()
        .trim()
        == "reno"
    {
        "cubic"
    } else {
        "reno"
    };
    // The client leg: window 33, another congestion control, and a minimum RTO of 1 ms,
    // which the kernel refuses (it takes 2 jiffies at least).
    let (p, edge) = start(
        &format!(
            "[edge.client_tcp]\ninitial_window = 33\ncongestion = \"{other_cc}\"\nrto_min = \"1ms\"\n"
        ),
        &format!(
            "[[edge.upstream]]\nname = \"a\"\nservers = [\"{a}\"]\n\
             [edge.upstream.tcp]\ninitial_window = 21\n[[edge.route]]\nupstream = \"a\"\n"
        ),
        "",
    );
    // The upstream leg: a new connection's window as the request was sent is the initial one.
    assert_eq!(get(edge).await, (200, b"ok".to_vec()));
    p.wait_access(&[
        "\"front\":\"edge\"",
        "\"up_reused\":\"no\"",
        "\"up_cwnd\":\"21\"",
    ]);

    // The client leg, as the kernel shows the proxy's side of a client's connection.
    let c = std::net::TcpStream::connect(edge).unwrap();
    let mine = c.local_addr().unwrap();
    let mut line = String::new();
    wait_until("no such connection in ss", &p, || {
        line = ss_line(edge, mine);
        !line.trim().is_empty()
    });
    assert!(line.contains(" cwnd:33 "), "{line}");
    assert!(line.contains(&format!(" {other_cc} ")), "{line}");
    drop(c);
    wait_until("the refused minimum RTO was not logged", &p, || {
        p.log().contains("the kernel refused a TCP setting")
    });
    assert!(p.log().contains("TCP_BPF_RTO_MIN"), "{}", p.log());
}
