//! The proxies' configuration files the HTTP benchmarks share, as `[files]` entries of a
//! generated scenario (each follows a `[files]` table header). One builder per proxy, so
//! that a benchmark comparing the same proxy (HAProxy, nginx, Splicer's edge or forward
//! proxy) runs it configured alike in cache-bench, edge-bench and perf-guard.

/// HAProxy as an HTTP reverse proxy in front of the bed's origin on `{proxy}:port`,
/// reusing idle server connections across clients (`http-reuse always`), with `options`
/// (`splice-auto`, `http-no-delay`) in its defaults.
pub fn haproxy(file: &str, port: u16, options: &[&str]) -> String {
    let options: String = options
        .iter()
        .map(|o| format!("    option {o}\n"))
        .collect();
    format!(
        "\"{file}\" = \"\"\"\nglobal\n    maxconn 4000\ndefaults\n    mode http\n    \
         http-reuse always\n{options}    timeout connect 10s\n    timeout client 600s\n    \
         timeout server 600s\nlisten web\n    bind {{proxy}}:{port}\n    \
         server origin {{server}}:8080\n\"\"\"\n"
    )
}

/// nginx as a reverse proxy in front of the bed's origin on `{proxy}:port`, keeping up to
/// 64 idle origin connections and every connection for as many requests as come; `pid`
/// names its pid file (each nginx of a scenario has its own); `http` and `location` are
/// added lines (a cache's).
pub fn nginx_reverse(file: &str, pid: &str, port: u16, http: &str, location: &str) -> String {
    format!(
        "\"{file}\" = \"\"\"\ndaemon off;\nworker_processes auto;\n\
         pid /run/splicer-lab-nginx-{pid}.pid;\nerror_log stderr;\n\
         events {{ worker_connections 4096; }}\nhttp {{\n  access_log off;\n  \
         keepalive_requests 100000000;\n{http}  upstream origin {{ server {{server}}:8080; \
         keepalive 64; keepalive_requests 100000000; }}\n  server {{\n    \
         listen {{proxy}}:{port};\n    location / {{\n      proxy_pass http://origin;\n      \
         proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n{location}    \
         }}\n  }}\n}}\n\"\"\"\n"
    )
}

/// Splicer's edge on `{proxy}:8080`, one upstream group (`origin`, the bed's origin, 4
/// warm connections, `upstream` added lines) taking every request; `tail` after its route
/// (a `[limits]` section).
pub fn splicer_edge(file: &str, upstream: &str, tail: &str) -> String {
    format!(
        "\"{file}\" = \"\"\"\n[log]\nlevel = \"warn\"\n[edge]\nlisten = [\"{{proxy}}:8080\"]\n\
         [[edge.upstream]]\nname = \"origin\"\nservers = [\"{{server}}:8080\"]\nmin_idle = 4\n\
         {upstream}[[edge.route]]\nupstream = \"origin\"\n{tail}\"\"\"\n"
    )
}

/// Splicer's forward proxy on `{proxy}:3128`, serving the bed's client network only;
/// `relay` goes before its `[http]` section (a `[relay]` section), `http` into it, `tail`
/// after its ACL (a `[cache]` or `[admin]` section).
pub fn splicer_forward(file: &str, relay: &str, http: &str, tail: &str) -> String {
    format!(
        "\"{file}\" = \"\"\"\n[log]\nlevel = \"warn\"\n{relay}[http]\n\
         listen = [\"{{proxy}}:3128\"]\n{http}[acl]\ndefault = \"deny\"\n[[acl.rule]]\n\
         action = \"allow\"\nclients = [\"10.231.0.0/16\"]\n{tail}\"\"\"\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each builder's text is a valid `[files]` entry whose file says what was asked.
    #[test]
    fn each_file_is_a_files_entry_with_what_was_asked() {
        let text = [
            haproxy("h.cfg", 9001, &["splice-auto", "http-no-delay"]),
            nginx_reverse("n.conf", "t", 9081, "  proxy_cache_path x;\n", "      y;\n"),
            splicer_edge("e.toml", "pipeline = 8\n", "[limits]\nthreads = 0\n"),
            splicer_forward("f.toml", "[relay]\nengine = \"sockmap\"\n", "", "[cache]\n"),
        ]
        .concat();
        let table: toml::Table = toml::from_str(&format!("[files]\n{text}")).unwrap();
        let file = |name: &str| table["files"][name].as_str().unwrap().to_string();
        let h = file("h.cfg");
        assert!(h.contains("    option splice-auto\n    option http-no-delay\n    timeout"));
        assert!(h.contains("bind {proxy}:9001\n"));
        let n = file("n.conf");
        assert!(n.contains("pid /run/splicer-lab-nginx-t.pid;"));
        assert!(n.contains("listen {proxy}:9081;"));
        assert!(n.contains("  proxy_cache_path x;\n  upstream origin"));
        assert!(n.contains("\"\";\n      y;\n    }"));
        let e: toml::Table = toml::from_str(&file("e.toml")).unwrap();
        assert_eq!(e["edge"]["upstream"][0]["pipeline"].as_integer(), Some(8));
        assert_eq!(e["limits"]["threads"].as_integer(), Some(0));
        let f: toml::Table = toml::from_str(&file("f.toml")).unwrap();
        assert_eq!(f["relay"]["engine"].as_str(), Some("sockmap"));
        assert_eq!(f["acl"]["default"].as_str(), Some("deny"));
        assert!(f.contains_key("cache"));
    }
}
