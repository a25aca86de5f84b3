//! HTTP forwarding: wrk with 50 keep-alive connections fetching 1 KiB and 64 KiB objects
//! from an nginx origin (2 workers), directly, through Splicer's HTTP front end, and through
//! HAProxy in http mode with `option http-no-delay`, interleaved.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::measure::{self, Guard};
use crate::tunnel::start_front;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn need(cmd: &str) -> anyhow::Result<()> {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .stdout(Stdio::null())
        .status()?
        .success();
    anyhow::ensure!(
        found,
        "{cmd} not found: run `BENCH=1 scripts/setup.sh` (installs wrk, nginx-light, haproxy)"
    );
    Ok(())
}

fn start_nginx(dir: &Path) -> anyhow::Result<(Guard, u16)> {
    let port = measure::free_port();
    let www = dir.join("www");
    std::fs::create_dir_all(&www)?;
    std::fs::write(www.join("1k"), vec![b'a'; 1024])?;
    std::fs::write(www.join("64k"), vec![b'b'; 64 * 1024])?;
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes 2;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log;\n\
             events {{ worker_connections 4096; }}\n\
             http {{ access_log off; keepalive_requests 100000000; keepalive_timeout 300s;\n\
             client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n\
             server {{ listen 127.0.0.1:{port}; root {w}; }} }}\n",
            d = dir.display(),
            w = www.display()
        ),
    )?;
    let child = Command::new("nginx")
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let g = Guard(child);
    measure::wait_port(([127, 0, 0, 1], port).into())?;
    Ok((g, port))
}

fn start_haproxy(dir: &Path, origin: u16) -> anyhow::Result<(Guard, u16)> {
    let port = measure::free_port();
    let conf = dir.join("haproxy.cfg");
    std::fs::write(
        &conf,
        format!(
            "global\n  maxconn 4000\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  \
             option http-no-delay\nfrontend f\n  bind 127.0.0.1:{port}\n  default_backend b\n\
             backend b\n  http-reuse always\n  server origin 127.0.0.1:{origin}\n"
        ),
    )?;
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let g = Guard(child);
    measure::wait_port(([127, 0, 0, 1], port).into())?;
    Ok((g, port))
}

struct Wrk {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
}

fn to_ms(v: &str) -> f64 {
    let (num, unit) = v.split_at(v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len()));
    let n: f64 = num.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => f64::NAN,
    }
}

/// Runs wrk; `url` is the absolute URL asked for, sent to `connect_port` (a proxy) when given.
fn wrk(dir: &Path, url: &str, connect_port: Option<u16>, seconds: u64) -> anyhow::Result<Wrk> {
    let mut cmd = Command::new("wrk");
    cmd.args(["-t1", "-c50", &format!("-d{seconds}s"), "--latency"]);
    match connect_port {
        Some(port) => {
            // A forward proxy needs the absolute-form target on the request line, with a
            // Host that agrees with it, as curl sends (nginx behind HAProxy answers 400 else).
            let script = dir.join("absolute.lua");
            let host = url
                .trim_start_matches("http://")
                .split('/')
                .next()
                .unwrap_or("");
            std::fs::write(
                &script,
                format!(
                    "local r = wrk.format(\"GET\", \"{url}\", {{Host = \"{host}\"}})\nrequest = function() return r end\n"
                ),
            )?;
            cmd.arg("-s")
                .arg(&script)
                .arg(format!("http://127.0.0.1:{port}/"));
        }
        None => {
            cmd.arg(url);
        }
    }
    let out = cmd.output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let field = |prefix: &str| -> Option<String> {
        text.lines().find_map(|l| {
            l.trim_start()
                .strip_prefix(prefix)
                .map(|r| r.split_whitespace().next().unwrap_or("").to_string())
        })
    };
    let rps = field("Requests/sec:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let p50_ms = field("50%").map(|v| to_ms(&v)).unwrap_or(f64::NAN);
    let p99_ms = field("99%").map(|v| to_ms(&v)).unwrap_or(f64::NAN);
    let non2xx: u64 = field("Non-2xx or 3xx responses:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let socket_errors: u64 = text
        .lines()
        .find(|l| l.contains("Socket errors"))
        .map(|l| {
            l.split(|c: char| !c.is_ascii_digit())
                .filter_map(|x| x.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    anyhow::ensure!(
        rps > 0.0,
        "wrk gave no figures:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if non2xx + socket_errors > 0 {
        eprintln!("wrk reported errors:\n{text}");
    }
    Ok(Wrk {
        rps,
        p50_ms,
        p99_ms,
        errors: non2xx + socket_errors,
    })
}

pub fn run(bin: &Path, seconds: u64, rounds: usize) -> anyhow::Result<()> {
    for c in ["wrk", "nginx", "haproxy"] {
        need(c)?;
    }
    let dir = Dir(std::env::temp_dir().join(format!("splicer-bench-http-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)?;
    let (_nginx, origin) = start_nginx(&dir.0)?;
    let (_haproxy, hport) = start_haproxy(&dir.0, origin)?;
    // Forwarding is what this compares: nginx's static files carry `Last-Modified`, so the
    // cache (on by default) would serve them as heuristically fresh hits
    // (`splicer-lab cache-bench` measures the cache).
    let (_splicer, saddr) = start_front(bin, "auto", "http", "[cache]\nenabled = false")?;
    let hv = Command::new("haproxy").arg("-v").output()?;
    let hv = String::from_utf8_lossy(&hv.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    println!("http: wrk -t1 -c50 -d{seconds}s, nginx origin (2 workers), {rounds} interleaved rounds; {hv}");
    let paths = ["1k", "64k"];
    let targets = ["direct", "splicer", "haproxy"];
    let mut res: Vec<Vec<Vec<Wrk>>> = paths
        .iter()
        .map(|_| targets.iter().map(|_| Vec::new()).collect())
        .collect();
    for round in 1..=rounds {
        for (pi, path) in paths.iter().enumerate() {
            for (ti, t) in targets.iter().enumerate() {
                let url = format!("http://127.0.0.1:{origin}/{path}");
                let via = match *t {
                    "direct" => None,
                    "splicer" => Some(saddr.port()),
                    _ => Some(hport),
                };
                let w = wrk(&dir.0, &url, via, seconds)?;
                println!(
                    "  round {round} {path:>3} {t:>8}: {:9.0} req/s  p50 {:7.3} ms  p99 {:7.3} ms  errors {}",
                    w.rps, w.p50_ms, w.p99_ms, w.errors
                );
                res[pi][ti].push(w);
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
    println!("\n| object | path | req/s median (min–max) | × direct | × HAProxy | p50 ms | p99 ms | p99 × direct | errors |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (pi, path) in paths.iter().enumerate() {
        let med = |ti: usize, f: fn(&Wrk) -> f64| {
            measure::median(&res[pi][ti].iter().map(f).collect::<Vec<_>>())
        };
        let (d_rps, h_rps, d_p99) = (med(0, |w| w.rps), med(2, |w| w.rps), med(0, |w| w.p99_ms));
        for (ti, t) in targets.iter().enumerate() {
            let rps: Vec<f64> = res[pi][ti].iter().map(|w| w.rps).collect();
            let (lo, hi) = measure::min_max(&rps);
            let r = measure::median(&rps);
            let p99 = med(ti, |w| w.p99_ms);
            let errors: u64 = res[pi][ti].iter().map(|w| w.errors).sum();
            println!(
                "| {path} | {t} | {r:.0} ({lo:.0}–{hi:.0}) | {:.2} | {:.2} | {:.3} | {p99:.3} | {:.2} | {errors} |",
                r / d_rps,
                r / h_rps,
                med(ti, |w| w.p50_ms),
                p99 / d_p99
            );
        }
    }
    Ok(())
}
