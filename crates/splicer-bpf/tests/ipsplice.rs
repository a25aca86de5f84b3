//! The ipsplice program passes the kernel's verifier, attaches to an interface, and its map
//! takes and returns entries. The rewriting itself is tested between real namespaces by the
//! relay's and the lab's tests. Needs root; skipped with a message otherwise (CI runs as
//! root).

use std::net::SocketAddrV4;

use splicer_bpf::ipsplice::{Flow, FlowKey, Mode};
use splicer_bpf::Ipsplice;

mod common;
use common::root;

#[test]
fn loads_attaches_and_keeps_entries() {
    if !root() {
        return;
    }
    // A private network namespace for this thread, so attaching touches nothing else.
    let t = std::thread::spawn(|| {
        // SAFETY: unshare affects only this thread's network namespace.
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0);
        let ip = Ipsplice::load().expect("verifier accepts the program");
        ip.attach(1).expect("attach to lo");
        ip.attach(1).expect("attaching twice is a no-op");
        assert_eq!(ip.attached(), vec![1]);
        let a: SocketAddrV4 = "10.0.0.1:1000".parse().unwrap();
        let b: SocketAddrV4 = "10.0.0.2:2000".parse().unwrap();
        let key = FlowKey::new(a, b);
        let mut f = Flow::observing();
        f.rewrite_to(b, a);
        f.set_mode(Mode::Freeze);
        f.seq_delta = 7;
        ip.set(key, f).unwrap();
        let got = ip.get(&key).unwrap();
        assert_eq!((got.mode(), got.seq_delta), (Mode::Freeze, 7));
        assert_eq!(ip.entries(), 1);
        ip.remove(&key);
        assert_eq!(ip.entries(), 0);
        assert!(ip.get(&key).is_none());
        // Window clamps: slots are handed out once, cleared when taken and given back.
        let (s1, s2) = (ip.take_slot().unwrap(), ip.take_slot().unwrap());
        assert!(s1 != 0 && s2 != 0 && s1 != s2, "{s1} {s2}");
        ip.set_clamp(s1, 64 << 10).unwrap();
        assert_eq!(
            (ip.clamp(s1).unwrap(), ip.clamp(s2).unwrap()),
            (64 << 10, 0)
        );
        ip.give_slot(s1);
        assert_eq!(ip.clamp(s1).unwrap(), 0);
        let again = ip.take_slot().unwrap();
        assert_eq!(again, s1, "a slot given back is taken again");
        assert_eq!(ip.clamp(again).unwrap(), 0);
    });
    t.join().unwrap();
}
