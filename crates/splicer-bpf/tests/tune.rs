//! The per-leg tuning program on real TCP connections on loopback: an accepted connection
//! and an opened one of configured legs get their initial window, congestion control and
//! minimum RTO as they are established; a connection of no configured leg keeps the
//! kernel's defaults; a setting the kernel refuses is counted with its error. Needs root.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use splicer_bpf::tune::{Refused, Setting};
use splicer_bpf::{Leg, Tuner, Tuning};
use splicer_sys::sock::{congestion, tcp_info};

mod common;
use common::root;

/// A connected pair through a fresh listener: (opened, accepted).
fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
    let opened = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (accepted, _) = listener.accept().unwrap();
    (opened, accepted)
}

#[test]
fn each_leg_gets_its_settings_as_it_is_established() {
    if !root() {
        return;
    }
    let tuner = Tuner::load().unwrap();
    let default_cc = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (o, _a) = pair(&l);
        congestion(o.as_fd()).unwrap()
    };
    let other_cc = if default_cc == "reno" {
        "cubic"
    } else {
        "reno"
    };

    // A "front end" listener: connections accepted on it are tuned (by its local address).
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    tuner
        .set(
            Leg::Accepted(front.local_addr().unwrap()),
            &Tuning {
                initial_window: Some(40),
                congestion: Some(other_cc.into()),
                rto_min: Some(Duration::from_millis(50)),
                delack_max: Some(Duration::from_millis(5)),
            },
        )
        .unwrap();
    // An "upstream server": connections opened to it are tuned (by its remote address).
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    tuner
        .set(
            Leg::Opened(server.local_addr().unwrap()),
            &Tuning {
                initial_window: Some(25),
                ..Tuning::default()
            },
        )
        .unwrap();

    let (client, accepted) = pair(&front);
    let a = tcp_info(accepted.as_fd()).unwrap();
    assert_eq!(a.snd_cwnd, 40, "the accepted leg's initial window");
    assert_eq!(congestion(accepted.as_fd()).unwrap(), other_cc);
    // The client's side of that connection is an opened leg of no configured address.
    let c = tcp_info(client.as_fd()).unwrap();
    assert_eq!(
        c.snd_cwnd, 10,
        "an unconfigured connection keeps the kernel's window"
    );
    assert_eq!(congestion(client.as_fd()).unwrap(), default_cc);
    // The RTO follows the new floor as round-trip samples come (the variance term decays
    // towards it by a quarter per round trip): ping-pong until it had time to.
    for _ in 0..40 {
        (&accepted).write_all(b"p").unwrap();
        (&client).read_exact(&mut [0u8; 1]).unwrap();
        (&client).write_all(b"q").unwrap();
        (&accepted).read_exact(&mut [0u8; 1]).unwrap();
    }
    let a = tcp_info(accepted.as_fd()).unwrap();
    assert!(
        a.rto_us < 100_000,
        "RTO near rto_min 50 ms on loopback, got {} µs",
        a.rto_us
    );
    let c = tcp_info(client.as_fd()).unwrap();
    assert!(
        c.rto_us >= 200_000,
        "default RTO floor, got {} µs",
        c.rto_us
    );

    let (opened, served) = pair(&server);
    assert_eq!(tcp_info(opened.as_fd()).unwrap().snd_cwnd, 25);
    assert_eq!(
        congestion(opened.as_fd()).unwrap(),
        default_cc,
        "left alone"
    );
    assert_eq!(tcp_info(served.as_fd()).unwrap().snd_cwnd, 10);

    let seen = tuner.outcomes();
    assert_eq!(seen.tuned, 2, "one accepted and one opened connection");
    assert!(seen.refused.is_empty(), "{:?}", seen.refused);
    drop((client, accepted, opened, served));
}

#[test]
fn a_setting_the_kernel_refuses_is_counted_with_its_error() {
    if !root() {
        return;
    }
    let tuner = Tuner::load().unwrap();
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = server.local_addr().unwrap();
    // The kernel takes a minimum RTO of at most 200 ms.
    tuner
        .set(
            Leg::Opened(addr),
            &Tuning {
                initial_window: Some(20),
                rto_min: Some(Duration::from_secs(1)),
                ..Tuning::default()
            },
        )
        .unwrap();
    let (opened, _served) = pair(&server);
    let (opened2, _served2) = pair(&server);
    assert_eq!(
        tcp_info(opened.as_fd()).unwrap().snd_cwnd,
        20,
        "the rest still set"
    );
    let seen = tuner.outcomes();
    assert_eq!(seen.tuned, 2);
    assert_eq!(
        seen.refused,
        vec![Refused {
            setting: Setting::RtoMin,
            times: 2,
            errno: libc::EINVAL,
        }]
    );
    drop(opened2);
}

#[test]
fn an_unknown_congestion_control_is_refused_at_once() {
    if !root() {
        return;
    }
    let tuner = Tuner::load().unwrap();
    let e = tuner
        .set(
            Leg::Opened(([127, 0, 0, 1], 9).into()),
            &Tuning {
                congestion: Some("no-such-cc".into()),
                ..Tuning::default()
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("no-such-cc"), "{e}");
}
