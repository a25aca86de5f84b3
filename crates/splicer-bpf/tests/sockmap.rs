//! The sockmap program between two real TCP connections on loopback: the "proxy" accepts
//! one, opens the other, splices them and never reads; bytes flow both ways through the
//! kernel, intact. Needs root (CAP_BPF); skipped with a message otherwise (CI runs as root).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use splicer_bpf::Sockmap;

mod common;
use common::root;

/// Deterministic bytes: position-dependent so a lost or repeated chunk shows.
fn content(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

/// The program loaded, and two real TCP connections on loopback as a proxy holds them:
/// `client` — `a` (accepted by the proxy), and `b` (opened by the proxy) — `server`.
/// `None` without root (the check prints why).
fn bed() -> Option<(Sockmap, TcpStream, TcpStream, TcpStream, TcpStream)> {
    if !root() {
        return None;
    }
    let map = Sockmap::load().unwrap();
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(front.local_addr().unwrap()).unwrap();
    let (a, _) = front.accept().unwrap();
    let b = TcpStream::connect(origin.local_addr().unwrap()).unwrap();
    let (server, _) = origin.accept().unwrap();
    Some((map, client, a, b, server))
}

#[test]
fn bytes_move_both_ways_in_the_kernel() {
    let Some((map, client, a, b, server)) = bed() else {
        return;
    };

    let (pair, kept) = map.splice(a.as_fd(), b.as_fd()).unwrap();
    assert_eq!(kept, 0, "nothing arrived during set-up");
    assert_eq!(map.pairs(), 1);

    // The kernel forwards data; the FINs stay with the proxy's sockets (a relay passes
    // them on itself), so each side sends, then the test closes the far ends by hand.
    let up = content(1, 8 << 20);
    let down = content(2, 8 << 20);
    let (mut c, mut s) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let send_up = std::thread::spawn({
        let up = up.clone();
        move || c.write_all(&up).unwrap()
    });
    let send_down = std::thread::spawn({
        let down = down.clone();
        move || s.write_all(&down).unwrap()
    });
    let read = |mut x: TcpStream, n: usize| {
        std::thread::spawn(move || {
            x.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut got = vec![0u8; n];
            x.read_exact(&mut got).unwrap();
            got
        })
    };
    let at_server = read(server.try_clone().unwrap(), up.len());
    let at_client = read(client.try_clone().unwrap(), down.len());
    send_up.join().unwrap();
    send_down.join().unwrap();
    assert!(
        at_server.join().unwrap() == up,
        "client → server bytes differ"
    );
    assert!(
        at_client.join().unwrap() == down,
        "server → client bytes differ"
    );

    // Nothing reached the proxy's own sockets.
    a.set_nonblocking(true).unwrap();
    let mut probe = [0u8; 1];
    assert!(matches!((&a).read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock));

    map.unsplice(pair);
    assert_eq!(map.pairs(), 0);
    // Once out of the map the sockets are ordinary again: the proxy reads what arrives.
    a.set_nonblocking(false).unwrap();
    (&client).write_all(b"after").unwrap();
    let mut five = [0u8; 5];
    (&a).read_exact(&mut five).unwrap();
    assert_eq!(&five, b"after");
}

/// A pair whose second socket the kernel refuses (it already got a FIN) is not spliced, and
/// the first socket, in the map for a moment, works as an ordinary socket afterwards.
#[test]
fn refused_pair_leaves_both_sockets_usable() {
    let Some((map, mut client, mut a, mut b, mut server)) = bed() else {
        return;
    };
    server.write_all(b"hello").unwrap();
    server.shutdown(std::net::Shutdown::Write).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let e = map.splice(a.as_fd(), b.as_fd()).unwrap_err();
    assert!(e.to_string().contains("not supported"), "{e}");
    assert_eq!(map.pairs(), 0);
    // Both still carry bytes in user space.
    let mut hello = Vec::new();
    b.read_to_end(&mut hello).unwrap();
    assert_eq!(hello, b"hello");
    a.write_all(b"hello").unwrap();
    client.write_all(b"up").unwrap();
    let mut up = [0u8; 2];
    a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    a.read_exact(&mut up).unwrap();
    assert_eq!(&up, b"up");
    let mut got = [0u8; 5];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hello");
}

/// Bytes the proxy already read from a socket's queue are not forwarded again. The proxy
/// reads the first 100 bytes of a 1,000-byte segment (as a front end reads a request that
/// arrived with data behind it), then splices: that segment is still queued whole, its
/// start before what the socket consumed, and the kernel's verdict path hands skbs over
/// whole. The program cuts the 100 bytes off, so the server gets the other 900 once, then
/// what follows.
#[test]
fn bytes_read_before_the_splice_are_not_sent_twice() {
    let Some((map, client, a, b, server)) = bed() else {
        return;
    };
    server
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();

    let bytes = content(3, 2000);
    // One write, one segment on loopback (below the MSS), of which the proxy reads 100.
    (&client).write_all(&bytes[..1000]).unwrap();
    let mut head = [0u8; 100];
    (&a).read_exact(&mut head).unwrap();
    assert_eq!(head[..], bytes[..100]);
    std::thread::sleep(Duration::from_millis(20));

    let (pair, kept) = map.splice(a.as_fd(), b.as_fd()).unwrap();
    assert_eq!(kept, 0);
    // More bytes arrive; the kernel then goes through the socket's queue, oldest first.
    (&client).write_all(&bytes[1000..]).unwrap();
    let mut got = vec![0u8; 1900];
    (&server).read_exact(&mut got).unwrap();
    assert!(
        got[..] == bytes[100..],
        "the server got bytes the proxy had read"
    );
    // And nothing more: a repeated chunk would still be arriving.
    server
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut more = [0u8; 1];
    assert!(
        (&server).read(&mut more).is_err(),
        "extra bytes after the stream"
    );
    let stats = map.stats();
    assert_eq!(
        (stats.trimmed_bytes, stats.failed_trims),
        (100, 0),
        "{stats:?}"
    );
    map.unsplice(pair);
}

/// Once an skb of a socket was kept for the proxy (here: it arrived while the partner was not
/// yet in the map), nothing more of that socket is redirected, so no later byte can
/// overtake it at the partner; [`Sockmap::kept`] counts them for the relay, which resets.
#[test]
fn after_a_kept_skb_nothing_more_is_redirected() {
    let Some((map, client, a, b, server)) = bed() else {
        return;
    };

    let (pair, kept) = map
        .splice_with(a.as_fd(), b.as_fd(), || {
            (&client).write_all(b"early")?;
            std::thread::sleep(Duration::from_millis(50));
            Ok(())
        })
        .unwrap();
    assert_eq!(kept, 1, "the early skb was kept");
    (&client).write_all(b"later").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(map.kept(pair), 2, "the later skb was kept too");
    server
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = [0u8; 5];
    assert!(
        (&server).read(&mut got).is_err(),
        "a byte was redirected after a kept one"
    );
    map.unsplice(pair);
}

/// With a bound, the program stops redirecting once the redirect queue toward a
/// destination that does not read holds that much: the source's bytes wait on its own
/// receive side, its window closes, and the sender blocks. Without it the kernel's queue
/// grew without bound (1.7 GiB in 3 s). The proxy then relays what was held, in order,
/// once the queue has drained, and the gate opens again: every byte arrives once.
#[test]
fn a_gate_holds_back_a_source_whose_destination_does_not_read() {
    use splicer_sys::sock::{outq_bytes, readable_bytes, recv_now, tcp_info};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let Some((map, client, a, b, server)) = bed() else {
        return;
    };
    const LIMIT: u64 = 256 << 10;
    const TOTAL: usize = 48 << 20;
    let (pair, _) = map.splice(a.as_fd(), b.as_fd()).unwrap();
    map.bound(pair, LIMIT).unwrap();
    // What `b` was handed before the splice (its SYN counts one in `bytes_acked`).
    let base = tcp_info(b.as_fd()).unwrap().bytes_acked;
    let up = content(3, TOTAL);
    let mut c = client.try_clone().unwrap();
    let send = std::thread::spawn({
        let up = up.clone();
        move || c.write_all(&up).unwrap()
    });

    // The server does not read: once the gate closed and the sender is stalled (nothing
    // more acknowledged for 200 ms), what the proxy's kernel holds stays bounded.
    let acked = || tcp_info(client.as_fd()).unwrap().bytes_acked;
    let (mut last, mut since) = (acked(), std::time::Instant::now());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        let now = acked();
        if now != last {
            (last, since) = (now, std::time::Instant::now());
        } else if map.gate(pair, 0).is_some_and(|g| g.closed)
            && since.elapsed() >= Duration::from_millis(200)
        {
            break;
        }
    }
    let accepted = acked();
    let at_server = readable_bytes(server.as_fd()).unwrap() as u64;
    let held = accepted.saturating_sub(at_server);
    let buffers = splicer_sys::sock::receive_buffer(a.as_fd()).unwrap() as u64
        + splicer_sys::sock::send_buffer(b.as_fd()).unwrap() as u64;
    let gate = map.gate(pair, 0).unwrap();
    assert!(gate.closed && gate.held > 0, "{gate:?}");
    assert!(
        held <= LIMIT + buffers + (1 << 20),
        "the proxy's kernel holds {held} bytes (bound {LIMIT}, buffers {buffers})"
    );
    assert!(accepted < TOTAL as u64, "the sender was held back");

    // Now the server reads, and the proxy relays what was held as the relay does.
    let got = Arc::new(AtomicU64::new(0));
    let reader = std::thread::spawn({
        let mut s = server.try_clone().unwrap();
        let got = got.clone();
        move || {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut all = vec![0u8; TOTAL];
            let mut n = 0;
            while n < TOTAL {
                let k = s.read(&mut all[n..]).unwrap();
                assert!(k > 0, "end of stream after {n}");
                n += k;
                got.store(n as u64, Ordering::Relaxed);
            }
            all
        }
    });
    let (mut relayed, mut buf) = (0u64, vec![0u8; 64 << 10]);
    for _ in 0..30_000 {
        if got.load(Ordering::Relaxed) == TOTAL as u64 {
            break;
        }
        let held = map.gate(pair, 0).unwrap().held;
        let arrived = tcp_info(a.as_fd()).unwrap().bytes_received;
        let handed =
            tcp_info(b.as_fd()).unwrap().bytes_acked + outq_bytes(b.as_fd()).unwrap() as u64;
        // Redirected bytes not yet in the destination's TCP: relay only once there are none.
        let queued = (arrived - held + relayed).saturating_sub(handed - base);
        if held > relayed && queued == 0 {
            match recv_now(a.as_fd(), &mut buf) {
                Ok(n) if n > 0 => {
                    (&b).write_all(&buf[..n]).unwrap();
                    relayed += n as u64;
                    continue;
                }
                _ => map.resume(pair, 0, relayed).unwrap(),
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        got.load(Ordering::Relaxed),
        TOTAL as u64,
        "the server got everything (relayed {relayed}, {:?})",
        map.gate(pair, 0)
    );
    send.join().unwrap();
    let all = reader.join().unwrap();
    assert!(all == up, "bytes differ (relayed {relayed} of them)");
    assert!(relayed > 0, "the proxy relayed the held bytes");
    assert!(map.stats().gate_closings >= 1);
    map.unsplice(pair);
}

/// A one-way splice with a bound (an HTTP response body on a kept-alive connection): the
/// kernel hands on the body and nothing after it; the skb that crosses the bound and the
/// bytes after it wait on the source for the proxy, counted; what the destination's peer
/// sends meanwhile (the next request) stays unread on the destination; both sockets are
/// ordinary again once out of the maps.
#[test]
fn a_bounded_one_way_splice_stops_at_its_bound_and_leaves_the_rest() {
    let Some((map, client, a, b, server)) = bed() else {
        return;
    };
    let body = content(3, (1 << 20) + 1234);
    let (pair, kept) = map
        .splice_one_way(b.as_fd(), a.as_fd(), Some(body.len() as u64), 64 << 20)
        .unwrap();
    assert_eq!(kept, 0);
    assert_eq!(map.pairs(), 1);
    (&client).write_all(b"NEXT").unwrap();
    let sent = std::thread::spawn({
        let mut wire = body.clone();
        wire.extend_from_slice(b"SURPLUS");
        let mut s = server.try_clone().unwrap();
        move || s.write_all(&wire).unwrap()
    });
    // Everything arrived once what was passed beyond the bound is the body's tail and the
    // 7 bytes after it.
    let mut st = map.bound_of(pair).unwrap();
    for _ in 0..1000 {
        if st.reached && st.beyond == st.remaining + 7 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        st = map.bound_of(pair).unwrap();
    }
    assert!(st.reached && st.beyond == st.remaining + 7, "{st:?}");
    sent.join().unwrap();
    let redirected = body.len() - st.remaining as usize;
    let mut got = vec![0u8; redirected];
    let mut c = client.try_clone().unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.read_exact(&mut got).unwrap();
    // The proxy's part: the body's tail and the surplus, from the source's own side.
    let mut rest = vec![0u8; st.remaining as usize + 7];
    b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    (&b).read_exact(&mut rest).unwrap();
    assert_eq!(&rest[st.remaining as usize..], b"SURPLUS");
    (&a).write_all(&rest[..st.remaining as usize]).unwrap();
    got.resize(body.len(), 0);
    c.read_exact(&mut got[redirected..]).unwrap();
    assert!(got == body, "the body differs");
    // The next request waited on the destination, unread by the kernel.
    a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut next = [0u8; 4];
    (&a).read_exact(&mut next).unwrap();
    assert_eq!(&next, b"NEXT");
    map.unsplice(pair);
    assert_eq!((map.pairs(), map.bound_of(pair)), (0, None));
    // Ordinary sockets again, both ways.
    (&server).write_all(b"second answer").unwrap();
    let mut second = [0u8; 13];
    (&b).read_exact(&mut second).unwrap();
    assert_eq!(&second, b"second answer");
}
