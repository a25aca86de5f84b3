//! The `[pacer]` tables: their checks, and a front end's own table in place of `[pacer]`.

use crate::config::Config;

#[test]
fn pacing_tables_are_checked_and_a_front_ends_own_replaces_the_default() {
    use splicer_relay::pacer::Mode;
    use splicer_relay::{Class, Front};
    let c = Config::from_toml(
        "[pacer.bodies]\nmode = \"rate\"\nper_splice = 1048576\n\
         [socks]\n[http]\n[http.pacer.tunnels]\nmode = \"rate\"\ntotal = 8388608\n",
    )
    .unwrap();
    let p = c.pacing();
    // SOCKS has no table of its own: `[pacer]`'s.
    assert_eq!(p.get(Front::Socks, Class::Bodies).per_splice, 1 << 20);
    assert_eq!(p.get(Front::Socks, Class::Tunnels).mode, Mode::Off);
    // HTTP's own table replaces `[pacer]` whole: its bodies are not paced.
    assert_eq!(p.get(Front::Http, Class::Bodies).mode, Mode::Off);
    assert_eq!(p.get(Front::Http, Class::Tunnels).total, 8 << 20);
    // Unconfigured: nothing paced.
    assert!(!Config::from_toml("[http]\n")
        .unwrap()
        .pacing()
        .get(Front::Http, Class::Bodies)
        .paced());

    let err = Config::from_toml("[http]\n[pacer.fills]\nmode = \"rate\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pacer.fills") && err.contains("per_splice"),
        "{err}"
    );
    let err = Config::from_toml("[http]\n[http.pacer.bodies]\nmode = \"rate\"\nper_splice = 10\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("http.pacer.bodies") && err.contains("4096"),
        "{err}"
    );
    let err = Config::from_toml("[http]\n[pacer.tunnels]\nmode = \"fast\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("line 3") && err.contains("fast"), "{err}");
    let err = Config::from_toml("[http]\n[pacer.hits]\nmode = \"rate\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("hits"), "{err}");
}

#[test]
fn modes_that_follow_the_proxy_s_work_take_a_hold_and_a_floor() {
    use splicer_relay::pacer::{Mode, DEFAULT_FLOOR, DEFAULT_HOLD_MS};
    use splicer_relay::{Class, Front};
    use std::time::Duration;
    let c = Config::from_toml(
        "[http]\n[pacer.bodies]\nmode = \"conservative\"\n\
         [pacer.fills]\nmode = \"proportional\"\nhold = \"2s\"\nfloor = 65536\n",
    )
    .unwrap();
    let p = c.pacing();
    let bodies = p.get(Front::Http, Class::Bodies);
    assert_eq!(bodies.mode, Mode::Conservative);
    assert_eq!(bodies.hold.0, Duration::from_millis(DEFAULT_HOLD_MS));
    assert_eq!(bodies.floor_rate(), DEFAULT_FLOOR);
    let fills = p.get(Front::Http, Class::Fills);
    assert_eq!(fills.mode, Mode::Proportional);
    assert_eq!(fills.hold.0, Duration::from_secs(2));
    assert_eq!(fills.floor_rate(), 65536);

    for (table, words) in [
        (
            "mode = \"conservative\"\nper_splice = 1048576\n",
            &["pacer.bodies", "rate mode"][..],
        ),
        ("mode = \"proportional\"\nhold = \"0ms\"\n", &["hold = 0ms"]),
        ("mode = \"conservative\"\nhold = \"11s\"\n", &["10000ms"]),
        (
            "mode = \"conservative\"\nhold = \"50\"\n",
            &["line 4", "50ms"],
        ),
        (
            "mode = \"conservative\"\nfloor = 100\n",
            &["floor = 100", "4096"],
        ),
        (
            "mode = \"rate\"\nper_splice = 1048576\nhold = \"10ms\"\n",
            &["hold and floor"],
        ),
    ] {
        let err = Config::from_toml(&format!("[http]\n[pacer.bodies]\n{table}"))
            .unwrap_err()
            .to_string();
        for w in words {
            assert!(err.contains(w), "{table}: {err}");
        }
    }
}
