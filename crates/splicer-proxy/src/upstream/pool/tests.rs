use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A connected pair: ours (as the pool holds it) and the origin's end.
async fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ours = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (theirs, _) = l.accept().await.unwrap();
    (ours, theirs)
}

/// Lets the reactor take in what the kernel has for it.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[tokio::test]
async fn the_reactor_check_sees_bytes_and_closes_and_clears_stale_readiness() {
    let (mut ours, mut theirs) = pair().await;
    settle().await;
    assert!(quiet_as_seen(&ours), "nothing came");
    // A stray byte while idle.
    theirs.write_all(b"x").await.unwrap();
    settle().await;
    assert!(!quiet_as_seen(&ours), "a byte came");
    assert!(!quiet(&ours));
    // Read to the last byte with a read that fills its buffer: tokio keeps the
    // readiness, which no longer means anything. The kernel is asked and clears it.
    let mut one = [0u8; 1];
    ours.read_exact(&mut one).await.unwrap();
    assert!(quiet_as_seen(&ours), "stale readiness, nothing waiting");
    assert!(quiet_as_seen(&ours), "and again, from the reactor alone");
    // Clearing did not blind it to what comes next.
    theirs.write_all(b"y").await.unwrap();
    settle().await;
    assert!(!quiet_as_seen(&ours), "a second byte came");
    ours.read_exact(&mut one).await.unwrap();
    assert!(quiet_as_seen(&ours));
    // The origin closes its end while the connection is idle.
    drop(theirs);
    settle().await;
    assert!(!quiet_as_seen(&ours), "a FIN came");
    assert!(!quiet_as_seen(&ours), "and stays seen");
}

/// Reads from the origin's end until the pool's end closes, or gives up.
async fn closed(theirs: &mut TcpStream, wait_ms: u64) -> bool {
    let mut b = [0u8; 1];
    let wait = Duration::from_millis(wait_ms);
    let read = tokio::time::timeout(wait, theirs.read(&mut b)).await;
    matches!(read, Ok(Ok(0)))
}

#[tokio::test]
async fn a_full_pool_closes_the_oldest_of_the_origin_or_of_all() {
    let pool = Pool::new(2, Duration::from_secs(60)).with_max_idle(3);
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut ends = Vec::new();
    for origin in ["a", "a", "b"] {
        let (ours, theirs) = pair().await;
        pool.put(origin, ours, addr);
        ends.push(theirs);
    }
    assert_eq!(pool.len(), 3);
    // A third for `a`: past its 2, so `a`'s oldest (the first) closes.
    let (ours, theirs) = pair().await;
    pool.put("a", ours, addr);
    ends.push(theirs);
    assert!(closed(&mut ends[0], 1000).await, "a's oldest");
    assert_eq!(pool.len(), 3);
    // One for `c`: past the 3 in all, so the oldest of all (`a`'s second) closes.
    let (ours, theirs) = pair().await;
    pool.put("c", ours, addr);
    ends.push(theirs);
    assert!(closed(&mut ends[1], 1000).await, "the oldest of all");
    assert_eq!(pool.len(), 3);
    for (i, end) in ends.iter_mut().enumerate().skip(2) {
        assert!(!closed(end, 100).await, "connection {i} kept");
    }
    assert_eq!(pool.idle_for("a"), 1);
    assert_eq!(pool.idle_for("b"), 1);
    assert_eq!(pool.idle_for("c"), 1);
    // A warm origin's floor is not closed for another's: with `c` kept warm at 1 and
    // every origin at one, a connection for `d` closes the oldest of `a` and `b`.
    pool.keep_warm("c".into(), 1);
    let (ours, theirs) = pair().await;
    pool.put("d", ours, addr);
    ends.push(theirs);
    assert!(closed(&mut ends[2], 1000).await, "b's, the oldest not warm");
    assert_eq!(pool.idle_for("c"), 1, "the warm one kept");
    // Taken and swept: the count follows.
    assert_eq!(pool.idle_for("b"), 0);
    assert!(pool.take("a", Check::Kernel).is_some());
    assert_eq!(pool.len(), 2);
    pool.sweep();
    assert_eq!(pool.len(), 2);
}

#[tokio::test]
async fn a_pool_take_passes_over_a_connection_the_origin_closed() {
    let pool = Pool::new(4, Duration::from_secs(60));
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let (closed, theirs) = pair().await;
    let (live, _theirs_live) = pair().await;
    pool.put("o", live, addr);
    pool.put("o", closed, addr);
    drop(theirs);
    settle().await;
    for check in [Check::Reactor, Check::Kernel] {
        let got = pool.take("o", check).expect("the live one");
        assert!(quiet(&got.stream), "{check:?}");
        pool.put("o", got.stream, addr);
    }
    assert_eq!(pool.len(), 1, "the closed one is gone");
}

/// A connection given back on one connection thread is taken there first, by another
/// only when that one has none of its own (the oldest); one given back on the server's
/// runtime (a warm pool's) by either, and it works there.
#[test]
fn a_connection_is_taken_again_on_its_own_thread_or_from_no_thread() {
    use std::sync::Arc;
    let threads = crate::threads::Threads::start(2).unwrap();
    let pool = Arc::new(Pool::new(8, Duration::from_secs(60)));
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    // Their ends, kept open while the pool holds ours.
    let mut ends = Vec::new();
    let on = |i: usize, pool: &Arc<Pool>| {
        let pool = pool.clone();
        threads.run_on(i, async move {
            let (ours, theirs) = pair().await;
            pool.put("o", ours, addr);
            theirs
        })
    };
    ends.push(on(0, &pool));
    let taken = |i: usize, pool: &Arc<Pool>| {
        let pool = pool.clone();
        threads.run_on(i, async move { pool.take("o", Check::Reactor).is_some() })
    };
    assert!(taken(0, &pool), "thread 0 takes its own");
    assert!(pool.is_empty());
    // Thread 1 with none of its own takes the oldest of thread 0's, not the newest.
    let first = on(0, &pool);
    let newest = on(0, &pool);
    let local_of = |i: usize, pool: &Arc<Pool>| {
        let pool = pool.clone();
        threads.run_on(i, async move {
            let idle = pool.take("o", Check::Reactor).expect("one to take");
            let port = idle.stream.local_addr().unwrap();
            pool.put("o", idle.stream, addr);
            port
        })
    };
    assert_eq!(local_of(1, &pool), first.peer_addr().unwrap());
    // Given back on thread 1, it is thread 1's: thread 0 keeps taking its own newest.
    assert_eq!(local_of(0, &pool), newest.peer_addr().unwrap());
    assert_eq!(local_of(1, &pool), first.peer_addr().unwrap());
    ends.extend([first, newest]);
    assert!(
        taken(0, &pool) && taken(0, &pool),
        "thread 1's as thread 0's last resort"
    );
    assert!(pool.is_empty());
    // Opened where no connection thread runs (this test's runtime, as a warm pool's on
    // the server's): thread 1 takes it, registers it with its reactor, and it works.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ours = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut theirs, _) = l.accept().unwrap();
    ours.set_nonblocking(true).unwrap();
    let ours = runtime.block_on(async { TcpStream::from_std(ours).unwrap() });
    pool.put("o", ours, addr);
    let (tx, rx) = std::sync::mpsc::channel();
    let p = pool.clone();
    threads.run_on(1, async move {
        let mut idle = p
            .take("o", Check::Reactor)
            .expect("no thread's is anyone's");
        tokio::spawn(async move {
            let mut b = [0u8; 4];
            let got = idle.stream.read_exact(&mut b).await.map(|_| b);
            let _ = tx.send(got.map_err(|e| e.to_string()));
            let _ = idle.stream.write_all(b"pong").await;
        });
    });
    // The runtime it was registered with does not run: its events reach thread 1 only
    // if it was registered there.
    use std::io::{Read, Write};
    theirs.write_all(b"ping").unwrap();
    let got = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("thread 1 read it");
    assert_eq!(got.unwrap(), *b"ping");
    theirs
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 4];
    theirs.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"pong");
    drop(runtime);
    drop(ends);
}
