use super::*;

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

#[test]
fn placeholders_expand() {
    let look = |n: &str| (n == "a").then(|| "1".to_string());
    assert_eq!(expand("x{a}y{a}", &look).unwrap(), "x1y1");
    assert!(expand("{b}", &look)
        .unwrap_err()
        .to_string()
        .contains("{b}"));
    assert!(expand("{a", &look).is_err());
}

#[test]
fn parses_a_chain() {
    let s = Scenario::from_toml(CHAIN).unwrap();
    assert_eq!(s.hosts.len(), 3);
    assert!(s.hosts[1].forward);
    assert_eq!(s.host_index("server"), Some(2));
}

#[test]
fn errors_name_the_key() {
    let bad = CHAIN.replace("b = \"server\"", "b = \"sever\"");
    let e = Scenario::from_toml(&bad).unwrap_err().to_string();
    assert!(e.contains("link[1].b") && e.contains("sever"), "{e}");
    let e = Scenario::from_toml(&CHAIN.replace("name = \"proxy\"", "name = \"Proxy-Host\""))
        .unwrap_err()
        .to_string();
    assert!(e.contains("host[1].name"), "{e}");
    let e = Scenario::from_toml(&CHAIN.replace("forward = true", "forwad = true"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("forwad") && e.contains("line"), "{e}");
    let e = Scenario::from_toml(&format!("{CHAIN}[[link]]\na = \"server\"\nb = \"proxy\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("link[2]") && e.contains("already linked"), "{e}");
    let emu = "[[emulate]]\nrouter = \"proxy\"\nfrom = \"client\"\nto = \"server\"\n";
    assert!(Scenario::from_toml(&format!("{CHAIN}{emu}loss_p = 0.01\n")).is_ok());
    let e = Scenario::from_toml(&format!("{CHAIN}{emu}loss_p = 1.5\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("emulate[0].loss_p"), "{e}");
    let exp = "[[variant]]\nname = \"a\"\nvars = { via = \"http://{proxy}:3128\" }\n\
               [[load]]\nhost = \"client\"\ncommand = [\"lab\", \"sclient\", \"--via\", \"{via}\", \"--origin\", \"{server}:80\"]\n";
    assert!(Scenario::from_toml(&format!("{CHAIN}{exp}")).is_ok());
    let e = Scenario::from_toml(&format!("{CHAIN}{}", exp.replace("{server}", "{sevrer}")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("load[0].command") && e.contains("{sevrer}"),
        "{e}"
    );
    let e = Scenario::from_toml(&format!("{CHAIN}{exp}variants = [\"b\"]\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("load[0].variants"), "{e}");
    // A CPU budget below 0.1% cannot be set (a 1 ms quota would need a period over 1 s).
    let proc = |limit: &str| {
        format!("{CHAIN}[[process]]\nhost = \"proxy\"\ncommand = [\"true\"]\ncpu_limit = {limit}\n")
    };
    assert!(Scenario::from_toml(&proc("3.0")).is_ok());
    let e = Scenario::from_toml(&proc("0.03")).unwrap_err().to_string();
    assert!(
        e.contains("process[0].cpu_limit") && e.contains("0.1"),
        "{e}"
    );
}

#[test]
fn link_rates_are_checked_and_sized() {
    let with = |r: &str| {
        Scenario::from_toml(&CHAIN.replacen(
            "b = \"server\"",
            &format!("b = \"server\"\nrate_mbit = {r}"),
            1,
        ))
    };
    assert_eq!(with("100").unwrap().links[1].rate_mbit, Some(100));
    for bad in ["0", "100001"] {
        let e = with(bad).unwrap_err().to_string();
        assert!(e.contains("link[1].rate_mbit"), "{e}");
    }
    let mtu = |m: &str| {
        Scenario::from_toml(&CHAIN.replacen(
            "b = \"server\"",
            &format!("b = \"server\"\nmtu = {m}"),
            1,
        ))
    };
    assert_eq!(mtu("536").unwrap().links[1].mtu, Some(536));
    for bad in ["255", "65536"] {
        let e = mtu(bad).unwrap_err().to_string();
        assert!(e.contains("link[1].mtu"), "{e}");
    }
    let e = Scenario::from_toml(
        &CHAIN
            .replace("name = \"server\"", "name = \"out\"")
            .replace("b = \"server\"", "b = \"out\""),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("host[2].name") && e.contains("placeholder"),
        "{e}"
    );
}

#[test]
fn host_sysctls_are_net_names_with_plain_values() {
    let with = |t: &str| {
        Scenario::from_toml(&CHAIN.replacen(
            "name = \"server\"",
            &format!("name = \"server\"\nsysctl = {{ {t} }}"),
            1,
        ))
    };
    let s = with("\"net.ipv4.tcp_slow_start_after_idle\" = \"0\"").unwrap();
    assert_eq!(s.hosts[2].sysctl["net.ipv4.tcp_slow_start_after_idle"], "0");
    let s = with("\"net.ipv4.tcp_rmem\" = \"4096 16384 16384\"").unwrap();
    assert_eq!(s.hosts[2].sysctl["net.ipv4.tcp_rmem"], "4096 16384 16384");
    for bad in [
        "\"kernel.panic\" = \"1\"",
        "\"net.x\" = \"1; reboot\"",
        "\"net.a b\" = \"1\"",
        "\"net.ipv4.tcp_rmem\" = \"4096  16384\"",
        "\"net.ipv4.tcp_rmem\" = \"4096 16384 \"",
    ] {
        let e = with(bad).unwrap_err().to_string();
        assert!(e.contains("host[2].sysctl"), "{bad}: {e}");
    }
    // The shipped scenarios parse.
    for f in [
        "corporate.toml",
        "corporate-haproxy.toml",
        "pathak.toml",
        "pathak-stress.toml",
        "pathak-2009.toml",
        "pathak-settings.toml",
        "pathak-loss.toml",
        "panteleenko.toml",
    ] {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/").to_string() + f;
        let text = std::fs::read_to_string(&path).unwrap();
        Scenario::from_toml(&text).unwrap_or_else(|e| panic!("{f}: {e:#}"));
    }
}
