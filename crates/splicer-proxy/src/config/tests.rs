//! Unit tests of `config`.

use super::*;

/// Beyond loopback every allowed path must be limited to some clients or users; the
/// configurations the issue found starting exposed are refused, in `check` and `run`
/// alike (both load through `from_toml`).
#[test]
fn exposed_listeners_need_every_allowed_path_limited() {
    let exposed =
        |acl: &str| Config::from_toml(&format!("[http]\nlisten = [\"0.0.0.0:3128\"]\n{acl}"));
    for open in [
        "[[acl.rule]]\naction = \"deny\"\nports = [25]\n",
        "[[acl.rule]]\naction = \"allow\"\n",
        "[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nports = [80]\n",
        "[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"0.0.0.0/0\"]\n",
        "[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"10.0.0.0/8\", \"::/0\"]\n",
        "[[acl.rule]]\naction = \"allow\"\nclients = [\"10.0.0.0/8\"]\n",
        // Issue 34, item 7: networks that are a catch-all only together.
        "[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"0.0.0.0/1\", \"128.0.0.0/1\"]\n",
        "[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"0.0.0.0/1\"]\n\
         [[acl.rule]]\naction = \"allow\"\nports = [80]\nclients = [\"128.0.0.0/2\", \"192.0.0.0/2\"]\n",
        "[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"::/1\", \"8000::/1\"]\n",
    ] {
        let e = exposed(open).unwrap_err().to_string();
        assert!(e.contains("open proxy"), "{open:?} → {e}");
    }
    for closed in [
        "[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"10.0.0.0/8\"]\n",
        "[acl]\ndefault = \"deny\"\n",
        "[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"0.0.0.0/1\", \"192.0.0.0/2\"]\n",
        "[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\nclients = [\"0.0.0.0/1\"]\n\
         [[acl.rule]]\naction = \"deny\"\nclients = [\"128.0.0.0/1\"]\n",
        "[[users]]\nname = \"a\"\npassword = \"b\"\n",
        "[acl]\nopen_proxy = true\n",
    ] {
        exposed(closed).unwrap_or_else(|e| panic!("{closed:?} refused: {e}"));
    }
    assert!(
        Config::from_toml("[http]\nlisten = [\"127.0.0.1:3128\"]\n").is_ok(),
        "loopback needs no rule"
    );
}

#[test]
fn defaults_are_loopback_and_valid() {
    assert!(Config::from_toml("")
        .unwrap_err()
        .to_string()
        .contains("no front end"));
    let c = Config::from_toml("[http]\n").unwrap();
    assert!(c.socks.is_none());
    assert_eq!(c.http.unwrap().listen, HttpConfig::default().listen);
    let d = Config::default();
    assert!(!d.listens_beyond_loopback());
    d.validate().unwrap();
}

#[test]
fn errors_name_key_and_line() {
    let e = Config::from_toml(
        "[socks]\nlisten = [\"127.0.0.1:1\"]\n[limits]\nidle_timeout = \"5 parsecs\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("line 4") && e.contains("idle_timeout"), "{e}");
    let e = Config::from_toml("[socks]\nlisten = [\"127.0.0.1:1\"]\n[relay]\nengine = \"turbo\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 4") && e.contains("unknown engine"), "{e}");
    let e = Config::from_toml("[socks]\nlisten = [\"127.0.0.1:1\"]\nbogus = 1\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("bogus"), "{e}");
    let e = Config::from_toml("[socks]\nlisten = [\"0.0.0.0:1080\"]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("open proxy") && e.contains("acl.rule"), "{e}");
    let e = Config::from_toml("[socks]\nlisten = [\"127.0.0.1:1\"]\n[[acl.rule]]\naction = \"allow\"\nports = [\"9-1\"]\n").unwrap_err().to_string();
    assert!(e.contains("line 5") && e.contains("bad port range"), "{e}");
    let e = Config::from_toml("[relay]\nengine = \"copy\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("no front end"), "{e}");
    // sockmap needs no opt-in any more; the old opt-in key still loads.
    let sockmap = "[socks]\nlisten = [\"127.0.0.1:1\"]\n[relay]\nengine = \"sockmap\"\n";
    assert!(Config::from_toml(sockmap).is_ok());
    assert!(Config::from_toml(&format!("{sockmap}experimental_sockmap = true\n")).is_ok());
    // It is still checked to be a boolean, and `[relay]`'s other keys still name their own
    // line when it stands before them.
    let e = Config::from_toml(&format!("{sockmap}experimental_sockmap = \"yes\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 5") && e.contains("boolean"), "{e}");
    let e = Config::from_toml(&format!(
        "{sockmap}experimental_sockmap = false\nbogus = 1\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("line 6") && e.contains("unknown field `bogus`"),
        "{e}"
    );
    let relay = Config::from_toml(&format!(
        "{sockmap}experimental_sockmap = true\npipe_size = 65536\n"
    ))
    .unwrap()
    .relay;
    assert_eq!(
        (relay.engine.to_string().as_str(), relay.pipe_size),
        ("sockmap", 65536)
    );
    let rcvbuf = |v: &str| {
        Config::from_toml(&format!(
            "[socks]\nlisten = [\"127.0.0.1:1\"]\n[limits]\nreceive_buffer = {v}\n"
        ))
    };
    for bad in ["100", "2147483648"] {
        let e = rcvbuf(bad).unwrap_err().to_string();
        assert!(e.contains("limits.receive_buffer"), "{bad}: {e}");
    }
    assert!(rcvbuf("-1").is_err());
    for good in ["0", "4096", "4194304"] {
        assert_eq!(
            rcvbuf(good).unwrap().limits.receive_buffer.to_string(),
            good
        );
    }
}

#[test]
fn durations() {
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert!(parse_duration("10").is_err());
    assert!(parse_duration("1d").is_err());
}

/// Every `[cache]` limit is checked, names its key, and sizes take units.
#[test]
fn cache_limits() {
    let load = |cache: &str| Config::from_toml(&format!("[http]\n{cache}"));
    let c = load("[cache]\nmemory = \"64MiB\"\nmax_object = \"1MiB\"\n").unwrap();
    assert_eq!((c.cache.memory, c.cache.max_object), (64 << 20, 1 << 20));
    assert_eq!(
        c.cache.settings().fill_memory,
        64 << 20,
        "the default budget"
    );
    let c = load("[cache]\nfill_memory = \"16MiB\"\n").unwrap();
    assert_eq!(c.cache.settings().fill_memory, 16 << 20);
    assert_eq!(
        c.cache.settings().pass_ttl.as_secs(),
        120,
        "Varnish's default"
    );
    let c = load("[cache]\npass_ttl = \"0s\"\n").unwrap();
    assert!(
        c.cache.settings().pass_ttl.is_zero(),
        "zero turns the marks off"
    );
    assert!(c.cache.settings().disk.is_none(), "no disk tier by default");
    for (bad, key) in [
        ("[cache]\nmemory = \"512KiB\"\n", "cache.memory"),
        (
            "[cache]\nmemory = \"8MiB\"\nmax_object = \"3MiB\"\n",
            "cache.max_object",
        ),
        ("[cache]\nmax_object = 0\n", "cache.max_object"),
        ("[cache]\nfill_memory = \"4MiB\"\n", "cache.fill_memory"),
        ("[cache]\nheuristic = 1.5\n", "cache.heuristic"),
        ("[cache]\nquick_abort_pct = 101\n", "cache.quick_abort_pct"),
        (
            "[cache]\nquick_abort_min = \"1MiB\"\n",
            "cache.quick_abort_min",
        ),
        ("[cache]\nmemory = \"12 parsecs\"\n", "parsecs"),
        ("[cache]\npass_ttl = \"2 weeks\"\n", "pass_ttl"),
        ("[cache.disk]\npath = \"relative/dir\"\n", "cache.disk.path"),
        (
            "[cache.disk]\npath = \"/var/cache/s\"\nsize = \"16MiB\"\n",
            "cache.disk.size",
        ),
        ("[cache.disk]\nsize = \"1GiB\"\n", "path"),
        (
            "[cache.disk]\npath = \"/c\"\nsize = \"1024GiB\"\n",
            "cache.disk.index_memory",
        ),
        (
            "[cache.disk]\npath = \"/c\"\nindex_memory = \"512KiB\"\n",
            "cache.disk.index_memory",
        ),
        ("[cache.disk]\npath = \"/x\"\nsizes = 1\n", "sizes"),
    ] {
        let e = load(bad).unwrap_err().to_string();
        assert!(e.contains(key), "{bad:?} → {e}");
    }
    let c = load("[cache.disk]\npath = \"/var/cache/s\"\n").unwrap();
    let d = c.cache.settings().disk.unwrap();
    assert_eq!((d.path.to_str(), d.size), (Some("/var/cache/s"), 1 << 30));
    assert_eq!(d.index_memory, 64 << 20, "the index's default bound");
}

#[test]
fn warm_pools_and_leg_tuning_are_checked_with_their_keys() {
    let edge = |group_extra: &str, http: &str| {
        Config::from_toml(&format!(
            "{http}[edge]\nlisten = [\"127.0.0.1:8080\"]\n[[edge.upstream]]\nname = \"a\"\n\
             servers = [\"127.0.0.1:80\"]\n{group_extra}\n[[edge.route]]\nupstream = \"a\"\n"
        ))
    };
    let c = edge(
        "min_idle = 4\n[edge.upstream.tcp]\ninitial_window = 40\n",
        "",
    )
    .unwrap();
    let e = c.edge.as_ref().unwrap();
    assert_eq!(e.upstream[0].min_idle, 4);
    assert_eq!(c.tcp_tunings().len(), 1);
    let err = edge("min_idle = 9\n", "[http]\npool_per_origin = 8\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("edge.upstream[0].min_idle") && err.contains("pool_per_origin = 8"),
        "{err}"
    );
    let err = edge("min_idle = 9\n", "[http]\npool_max_idle = 8\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("edge.upstream") && err.contains("pool_max_idle = 8"),
        "{err}"
    );
    let err = edge("[edge.upstream.tcp]\ninitial_window = 0\n", "")
        .unwrap_err()
        .to_string();
    assert!(err.contains("edge.upstream[0].tcp.initial_window"), "{err}");
    let err = edge("[edge.upstream.tcp]\nrto_min = \"1s\"\n", "")
        .unwrap_err()
        .to_string();
    assert!(err.contains("rto_min") && err.contains("200 ms"), "{err}");
    let err = edge("[edge.upstream.tcp]\nwindow = 3\n", "")
        .unwrap_err()
        .to_string();
    assert!(err.contains("window"), "{err}");
    let c = Config::from_toml("[http]\n[http.client_tcp]\ncongestion = \"reno\"\n").unwrap();
    assert_eq!(c.tcp_tunings()[0].0, "http.client_tcp");
    let err = Config::from_toml("[socks]\n[socks.client_tcp]\ncongestion = \"no such\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("socks.client_tcp.congestion"), "{err}");
}

#[test]
fn an_h2c_group_is_checked_with_its_keys() {
    let edge = |group_extra: &str| {
        Config::from_toml(&format!(
            "[edge]\nlisten = [\"127.0.0.1:8080\"]\n[[edge.upstream]]\nname = \"a\"\n\
             servers = [\"127.0.0.1:80\"]\n{group_extra}\n[[edge.route]]\nupstream = \"a\"\n"
        ))
    };
    let c = edge("").unwrap();
    assert_eq!(c.edge.unwrap().upstream[0].protocol, super::Protocol::Http1);
    let c = edge("protocol = \"h2c\"\nmin_idle = 1\n").unwrap();
    assert_eq!(c.edge.unwrap().upstream[0].protocol, super::Protocol::H2c);
    let err = edge("protocol = \"h2c\"\npipeline = 8\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("edge.upstream[0].pipeline") && err.contains("h2c"),
        "{err}"
    );
    let err = edge("protocol = \"h2c\"\nmin_idle = 2\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("edge.upstream[0].min_idle") && err.contains("first connection"),
        "{err}"
    );
    let err = edge("protocol = \"h3\"\n").unwrap_err().to_string();
    assert!(err.contains("h3") && err.contains("h2c"), "{err}");
}

/// Issue 34, item 15: what `run` refuses, the checks refuse (`check` and `run` share them):
/// listeners that cannot all be bound, a log level the logger would take as a target, a
/// congestion control the kernel lacks. `0.0.0.0:P` beside `[::]:P` is fine (IPv6 listeners
/// are IPv6-only).
#[test]
fn what_run_refuses_the_checks_refuse() {
    let http = |listen: &str, extra: &str| {
        Config::from_toml(&format!(
            "[http]\nlisten = {listen}\n[acl]\ndefault = \"deny\"\n[[acl.rule]]\naction = \"allow\"\n\
             clients = [\"10.0.0.0/8\"]\n{extra}"
        ))
    };
    for (listen, extra) in [
        ("[\"127.0.0.1:3128\", \"127.0.0.1:3128\"]", ""),
        ("[\"0.0.0.0:3128\", \"127.0.0.1:3128\"]", ""),
        (
            "[\"127.0.0.1:3128\"]",
            "[socks]\nlisten = [\"127.0.0.1:3128\"]\n",
        ),
        ("[\"[::]:3128\", \"[::1]:3128\"]", ""),
        (
            "[\"127.0.0.1:3128\"]",
            "[edge]\nlisten = [\"0.0.0.0:3128\"]\n",
        ),
    ] {
        let e = http(listen, extra).unwrap_err().to_string();
        assert!(
            e.contains("listen") && e.contains("3128"),
            "{listen} {extra:?}: {e}"
        );
    }
    http("[\"0.0.0.0:3128\", \"[::]:3128\"]", "").expect("both families on one port");
    for level in ["verbose", "info,splicer=loud", "", "debug,=info"] {
        let e = http(
            "[\"127.0.0.1:3128\"]",
            &format!("[log]\nlevel = \"{level}\"\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("log.level"), "{level:?}: {e}");
    }
    for level in [
        "info",
        "WARN",
        "warn,access=info",
        "info,splicer_proxy::http=debug",
    ] {
        http(
            "[\"127.0.0.1:3128\"]",
            &format!("[log]\nlevel = \"{level}\"\n"),
        )
        .unwrap_or_else(|e| panic!("{level:?}: {e}"));
    }
    // Log files: their directory must exist, the two streams in two files, and the
    // analysers' formats only in a file of access lines.
    for (log, key) in [
        ("file = \"/nonexistent-dir/splicer.log\"", "log.file"),
        (
            "access_file = \"/nonexistent-dir/access.log\"",
            "log.access_file",
        ),
        ("access_file = \"/tmp\"", "log.access_file"),
        (
            "file = \"/tmp/splicer.log\"\naccess_file = \"/tmp/splicer.log\"",
            "log.access_file",
        ),
        ("access_format = \"squid\"", "log.access_format"),
        ("access_format = \"combined\"", "log.access_format"),
    ] {
        let e = http("[\"127.0.0.1:3128\"]", &format!("[log]\n{log}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{log}: {e}");
    }
    http(
        "[\"127.0.0.1:3128\"]",
        "[log]\nfile = \"/tmp/splicer.log\"\naccess_file = \"/tmp/access.log\"\naccess_format = \"squid\"\n",
    )
    .expect("two files, Squid's format");
    let cc = |name: &str| {
        http(
            "[\"127.0.0.1:3128\"]",
            &format!("[http.client_tcp]\ncongestion = \"{name}\"\n"),
        )
    };
    let e = cc("nosuchcc").unwrap_err().to_string();
    assert!(
        e.contains("congestion") && e.contains("does not take it"),
        "{e}"
    );
    cc("cubic").expect("cubic is in every kernel");
}

/// Issue 34, item 16: every problem is reported, each at the line of its own key (not the
/// first line with a key of the same name).
#[test]
fn every_error_is_reported_at_its_own_line() {
    let text = "\
[socks]
listen = [\"127.0.0.1:1080\"]

[[users]]
name = \"alice\"
password = \"one\"

[[users]]
name = \"bob\"
password = \"two\"

[[users]]
name = \"alice\"
password = \"three\"

[[acl.rule]]
action = \"allow\"
users = [\"alice\"]

[[acl.rule]]
action = \"allow\"
users = [\"carol\"]

[limits]
max_connections = 0
";
    let e = Config::from_toml(text).unwrap_err().to_string();
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 3, "{e}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("line 13: users[2].name") && l.contains("twice")),
        "{e}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("line 22: acl.rule[1].users") && l.contains("carol")),
        "{e}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("line 25: limits.max_connections")),
        "{e}"
    );
}

/// Issue 34, item 18: what the docs say is taken is taken (`0s` grace: cut at once; a `0s`
/// window while the login limit is off), and a type error speaks of numbers, not of Rust's
/// types.
#[test]
fn the_checker_agrees_with_the_docs() {
    let socks = "[socks]\nlisten = [\"127.0.0.1:1080\"]\n";
    let c = Config::from_toml(&format!("{socks}[limits]\nshutdown_grace = \"0s\"\n")).unwrap();
    assert!(c.limits.shutdown_grace.is_zero());
    Config::from_toml(&format!(
        "{socks}[limits]\nauth_failures = 0\nauth_failure_window = \"0s\"\n"
    ))
    .unwrap();
    let e = Config::from_toml(&format!("{socks}[limits]\nauth_failure_window = \"0s\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("auth_failure_window"), "{e}");
    let e = Config::from_toml(&format!("{socks}[limits]\nmax_connections = \"many\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("a whole number") && !e.contains("usize"), "{e}");
    let edge = Config::from_toml(
        "[edge]\nlisten = [\"127.0.0.1:8080\"]\n[[edge.upstream]]\nname = \"a\"\n\
         servers = [\"127.0.0.1:80\"]\n[[edge.route]]\nupstream = \"a\"\n",
    )
    .unwrap();
    let all: Vec<String> = edge.all_listen_addresses().map(|a| a.to_string()).collect();
    assert_eq!(all, ["127.0.0.1:8080"]);
}

/// `[admin]` is off unless present, on loopback by default, and refused beyond loopback
/// unless `allow_remote`; its port clashes with a front end's like any listener's.
#[test]
fn the_admin_listener_stays_on_loopback_unless_allowed() {
    assert!(Config::default().admin.is_none());
    let c = Config::from_toml("[http]\n[admin]\n").unwrap();
    assert_eq!(
        c.admin.unwrap().listen,
        vec![SocketAddr::from(([127, 0, 0, 1], 9180))]
    );
    let e = Config::from_toml("[http]\n[admin]\nlisten = [\"0.0.0.0:9180\"]\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("admin.listen") && e.contains("allow_remote"),
        "{e}"
    );
    Config::from_toml("[http]\n[admin]\nlisten = [\"0.0.0.0:9180\"]\nallow_remote = true\n")
        .unwrap();
    let e = Config::from_toml("[http]\n[admin]\nlisten = []\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least one address"), "{e}");
    let e = Config::from_toml(
        "[http]\nlisten = [\"127.0.0.1:3128\"]\n[admin]\nlisten = [\"127.0.0.1:3128\"]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("given twice"), "{e}");
}

/// Issue 37, item 5: an edge server is an address or a DNS name with a port; a name
/// cannot go with per-leg tuning, and names are resolved again no faster than every 1 s.
#[test]
fn edge_servers_are_addresses_or_names_with_a_port() {
    for (text, want) in [
        (
            "10.0.0.7:80",
            Ok(ServerName::Addr("10.0.0.7:80".parse().unwrap())),
        ),
        (
            "[2001:db8::7]:80",
            Ok(ServerName::Addr("[2001:db8::7]:80".parse().unwrap())),
        ),
        (
            "Origin.Example.:8080",
            Ok(ServerName::Name {
                host: "origin.example".into(),
                port: 8080,
            }),
        ),
        ("origin.example", Err("needs a port")),
        ("origin.example:0", Err("is not a port")),
        ("origin.example:http", Err("is not a port")),
        ("-bad.example:80", Err("neither an address")),
        ("a b:80", Err("neither an address")),
        (":80", Err("neither an address")),
    ] {
        let got: Result<ServerName, String> = text.parse();
        match (got, want) {
            (Ok(g), Ok(w)) => assert_eq!(g, w, "{text}"),
            (Err(e), Err(w)) => assert!(e.contains(w), "{text}: {e}"),
            (g, w) => panic!("{text}: {g:?}, wanted {w:?}"),
        }
    }
    let edge = |group: &str, extra: &str| {
        Config::from_toml(&format!(
            "[edge]\nlisten = [\"127.0.0.1:8000\"]\n{extra}\n[[edge.upstream]]\nname = \"a\"\n\
             {group}\n[[edge.route]]\nupstream = \"a\"\n"
        ))
    };
    edge("servers = [\"origin.example:80\", \"10.0.0.7:80\"]", "").unwrap();
    let e = edge(
        "servers = [\"origin.example:80\"]\n[edge.upstream.tcp]\ncongestion = \"cubic\"",
        "",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("edge.upstream[0].tcp") && e.contains("by name"),
        "{e}"
    );
    let e = edge(
        "servers = [\"origin.example:80\"]",
        "resolve_every = \"500ms\"",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("edge.resolve_every"), "{e}");
}

mod pacing;

#[test]
fn the_idle_pool_holds_as_many_as_the_proxy_has_clients_unless_told() {
    let c = Config::from_toml("[http]\n[limits]\nmax_connections = 1500\n").unwrap();
    assert_eq!(c.pool_bounds(), (1500, 1500));
    let c = Config::from_toml("[http]\npool_per_origin = 0\npool_max_idle = 20\n").unwrap();
    assert_eq!(c.pool_bounds(), (0, 20));
    assert_eq!(Config::default().pool_bounds(), (10_000, 10_000));
}

/// `limits.threads`: unset (one connection thread per CPU), 0 (the same), a count and
/// `"shared"` (the work-stealing runtime) are taken; past `MAX_THREADS`, a negative count
/// and any other word are refused at their line, 0 resolves to at least one thread, and
/// an unset `limits.io` follows them (rings beside connection threads).
#[test]
fn connection_threads_are_checked() {
    use crate::config::ConnectionThreads::{Count, Shared};
    let socks = "[socks]\nlisten = [\"127.0.0.1:1080\"]\n";
    let c = Config::from_toml(&format!("{socks}[limits]\nthreads = 3\n")).unwrap();
    assert_eq!(c.limits.threads, Count(3));
    assert_eq!(crate::threads::count(3), 3);
    let c = Config::from_toml(&format!("{socks}[limits]\nthreads = 0\n")).unwrap();
    assert_eq!(c.limits.threads, Count(0));
    assert!(crate::threads::count(0) >= 1);
    let c = Config::from_toml(socks).unwrap();
    assert_eq!(c.limits.threads, Count(0));
    let c = Config::from_toml(&format!("{socks}[limits]\nthreads = \"shared\"\n")).unwrap();
    assert_eq!(c.limits.threads, Shared);
    assert_eq!(c.limits.io(), crate::config::Io::Runtime);
    let c = Config::from_toml(socks).unwrap();
    assert_eq!(c.limits.io(), crate::config::Io::Ring);
    for (bad, says) in [
        ("-1", "not negative"),
        ("\"one\"", "neither a count of threads nor \"shared\""),
        ("1.5", "a count of threads (0: one per CPU) or \"shared\""),
    ] {
        let e = Config::from_toml(&format!("{socks}[limits]\nthreads = {bad}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 4") && e.contains(says), "{bad}: {e}");
    }
    let e = Config::from_toml(&format!("{socks}[limits]\nthreads = 100000\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("line 4: limits.threads") && e.contains("1024"),
        "{e}"
    );
}
