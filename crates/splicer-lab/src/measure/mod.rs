//! Measurements read from /proc: CPU time of a process and of the whole machine, resident
//! memory, a network namespace's TCP counters (what `nstat` shows), so runs can report
//! CPU per GiB or per request and the server's data-to-ACK ratio and timeouts (seed 000),
//! and the machine's TCP memory against `net.ipv4.tcp_mem` (above its pressure mark the
//! kernel drops segments: docs/engines.md, "Socket memory under load").
//!
//! [`hist`]: HDR latency histograms and the summary every generator reports.
//! [`sockets`]: what one namespace's TCP sockets hold, sampled with `ss`.
//! [`events`]: what a process asks of the kernel (system calls, context switches; `perf stat`)
//! and how long its threads waited for a CPU.
//! [`tcpstates`]: the TCP segments a host receives, by the state of the socket taking each.

pub mod events;
pub mod hist;
pub mod sockets;
pub mod tcpstates;

use std::collections::HashMap;
use std::process::Command;

/// Clock ticks per second in /proc (USER_HZ is 100 on Linux).
const HZ: f64 = 100.0;

/// Fields of `/proc/PID/stat` after the command name (which is in parentheses and may
/// contain spaces): index 1 is the parent PID, 11–14 utime, stime, cutime, cstime.
fn stat_fields(pid: u32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    rest.split_whitespace().map(String::from).collect()
}

/// CPU seconds used by a process and its whole tree so far: its own user + system time
/// (all threads), its reaped children's, and every live descendant's. Proxies that work in
/// child processes (nginx workers, socat's fork per connection, Dante) count in full.
pub fn process_cpu(pid: u32) -> f64 {
    let ticks =
        |f: &[String], i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let all = |f: &[String]| ticks(f, 11) + ticks(f, 12) + ticks(f, 13) + ticks(f, 14);
    // Parent of every live process, to find the descendants.
    let mut parent: HashMap<u32, u32> = HashMap::new();
    if let Ok(d) = std::fs::read_dir("/proc") {
        for e in d.flatten() {
            if let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() {
                let f = stat_fields(p);
                if let Some(pp) = f.get(1).and_then(|v| v.parse::<u32>().ok()) {
                    parent.insert(p, pp);
                }
            }
        }
    }
    let descends = |mut p: u32| {
        for _ in 0..64 {
            match parent.get(&p) {
                Some(&pp) if pp == pid => return true,
                Some(&pp) if pp > 1 => p = pp,
                _ => return false,
            }
        }
        false
    };
    let mut total = all(&stat_fields(pid));
    for &p in parent.keys() {
        if p != pid && descends(p) {
            total += all(&stat_fields(p));
        }
    }
    total / HZ
}

/// PIDs of the processes (kernel threads included) whose name starts with `prefix`:
/// `napi/` for receive threads, `kworker/` for the kernel's workers.
pub fn threads_named(prefix: &str) -> Vec<u32> {
    let Ok(d) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    d.flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.starts_with(prefix))
        })
        .collect()
}

/// CPU seconds of one process or kernel thread so far, its own only (user + system).
pub fn own_cpu(pid: u32) -> f64 {
    let f = stat_fields(pid);
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / HZ
}

/// The CPU of a changing set of threads (the kernel's workers come and go): each one's
/// time at the start, so that [`ThreadsCpu::since`] sums what every thread alive at the
/// end spent since (a new one: all of its time). A worker that exits meanwhile takes its
/// time with it; the kernel keeps them for minutes.
pub struct ThreadsCpu {
    prefix: &'static str,
    start: HashMap<u32, f64>,
}

impl ThreadsCpu {
    pub fn start(prefix: &'static str) -> ThreadsCpu {
        let start = threads_named(prefix)
            .into_iter()
            .map(|p| (p, own_cpu(p)))
            .collect();
        ThreadsCpu { prefix, start }
    }

    pub fn since(&self) -> f64 {
        threads_named(self.prefix)
            .into_iter()
            .map(|p| (own_cpu(p) - self.start.get(&p).copied().unwrap_or(0.0)).max(0.0))
            .sum()
    }
}

/// Busy CPU seconds of the whole machine (all CPUs, everything but idle and iowait). In-kernel
/// work done for a process (softirq) shows here, and in the CPU of whichever task it
/// interrupted, not of the process it was for (docs/kernel-notes.md, "Whose CPU a host's
/// network receive is").
pub fn machine_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let line = stat.lines().next().unwrap_or("");
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: f64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    (total - idle) / HZ
}

/// Resident memory of a process in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Pages of memory all TCP sockets of the machine hold (`TCP: ... mem N` in
/// /proc/net/sockstat: the kernel counts it for every namespace together).
pub fn parse_tcp_memory(sockstat: &str) -> Option<u64> {
    let line = sockstat.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = line.split_whitespace();
    words.find(|w| *w == "mem")?;
    words.next()?.parse().ok()
}

/// `net.ipv4.tcp_mem` in pages: below the first TCP memory is not limited, the second is the
/// pressure mark, the third the hard limit.
pub fn tcp_mem_limits() -> Option<[u64; 3]> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_mem").ok()?;
    let v: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    v.try_into().ok()
}

/// How far below the truth a reading of /proc/net/sockstat's TCP memory can be, in pages:
/// the kernel batches each CPU's charges and releases and moves them to the machine's count
/// only past `net.core.mem_pcpu_rsv` pages (256, 1 MiB) either way, so up to that much per
/// possible CPU is not yet counted. Small loads read as 0; the bulk loads this is for hold
/// hundreds of thousands of pages.
pub fn tcp_memory_slack_pages() -> u64 {
    let rsv = std::fs::read_to_string("/proc/sys/net/core/mem_pcpu_rsv")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(256);
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|t| possible_cpus(&t))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64));
    rsv * cpus
}

/// Counts the CPUs of a kernel CPU list such as `0-1` or `0,2-5`.
fn possible_cpus(list: &str) -> Option<u64> {
    let mut n = 0;
    for part in list.trim().split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<u64>().ok()? - a.parse::<u64>().ok()? + 1,
            None => {
                part.parse::<u64>().ok()?;
                1
            }
        };
    }
    Some(n)
}

/// The highest TCP memory (pages) seen while it runs, sampled every `every` on a thread of
/// its own: a transfer's queues peak and drain within a run, which readings before and after
/// it would miss.
pub struct TcpMemoryPeak {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl TcpMemoryPeak {
    pub fn start(every: std::time::Duration) -> TcpMemoryPeak {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            loop {
                let now = std::fs::read_to_string("/proc/net/sockstat")
                    .ok()
                    .and_then(|t| parse_tcp_memory(&t))
                    .unwrap_or(0);
                peak = peak.max(now);
                if flag.load(std::sync::atomic::Ordering::Relaxed) {
                    return peak;
                }
                std::thread::sleep(every);
            }
        });
        TcpMemoryPeak {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling (after one last reading) and returns the peak, in pages.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}

impl Drop for TcpMemoryPeak {
    /// A run that fails before `finish` still ends the sampling thread.
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// TCP counters of one network namespace, as `Tcp:` and `TcpExt:` of /proc/net/snmp and
/// /proc/net/netstat name them (e.g. `Tcp.OutSegs`, `Tcp.RetransSegs`, `TcpExt.TCPTimeouts`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpCounters(pub HashMap<String, u64>);

impl TcpCounters {
    /// Reads the counters of `netns` (or of this process's namespace when `None`).
    pub fn read(netns: Option<&str>) -> anyhow::Result<TcpCounters> {
        let text = match netns {
            None => {
                std::fs::read_to_string("/proc/net/snmp")?
                    + &std::fs::read_to_string("/proc/net/netstat")?
            }
            Some(ns) => {
                let out = Command::new("ip")
                    .args([
                        "netns",
                        "exec",
                        ns,
                        "cat",
                        "/proc/net/snmp",
                        "/proc/net/netstat",
                    ])
                    .output()?;
                anyhow::ensure!(
                    out.status.success(),
                    "cannot read counters of {ns}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8_lossy(&out.stdout).into_owned()
            }
        };
        Ok(TcpCounters::parse(&text))
    }

    /// Parses the header/value line pairs of /proc/net/snmp and /proc/net/netstat.
    pub fn parse(text: &str) -> TcpCounters {
        let mut map = HashMap::new();
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.windows(2) {
            let (Some((p1, names)), Some((p2, values))) =
                (pair[0].split_once(':'), pair[1].split_once(':'))
            else {
                continue;
            };
            if p1 != p2
                || !(p1 == "Tcp" || p1 == "TcpExt")
                || names
                    .trim_start()
                    .starts_with(|c: char| c.is_ascii_digit() || c == '-')
            {
                continue;
            }
            for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
                if let Ok(v) = v.parse::<u64>() {
                    map.insert(format!("{p1}.{n}"), v);
                }
            }
        }
        TcpCounters(map)
    }

    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Counter increases since `before` (counters that went down, like CurrEstab, give 0).
    pub fn since(&self, before: &TcpCounters) -> TcpCounters {
        TcpCounters(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(before.get(k))))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_memory_is_the_mem_field_of_the_tcp_line() {
        let text =
            "sockets: used 7\nTCP: inuse 1 orphan 0 tw 0 alloc 1 mem 108\nUDP: inuse 0 mem 3\n";
        assert_eq!(parse_tcp_memory(text), Some(108));
        assert_eq!(parse_tcp_memory("UDP: inuse 0 mem 3\n"), None);
        assert_eq!(parse_tcp_memory("TCP: inuse 1 mem\n"), None);
    }

    #[test]
    fn cpu_lists_count_every_cpu() {
        assert_eq!(possible_cpus("0-1\n"), Some(2));
        assert_eq!(possible_cpus("0"), Some(1));
        assert_eq!(possible_cpus("0,2-5"), Some(5));
        assert_eq!(possible_cpus("x"), None);
        assert!(tcp_memory_slack_pages() >= 1);
    }

    #[test]
    fn the_tcp_memory_peak_sees_bytes_waiting_in_socket_queues() {
        use std::io::Write;
        // The machine's count lags the truth by up to the per-CPU slack, so hold more than
        // that: loopback connections nobody reads, each written until its queues are full.
        let want = (tcp_memory_slack_pages() + 64) * 4096;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peak = TcpMemoryPeak::start(std::time::Duration::from_millis(5));
        let mut held = Vec::new();
        let mut written = 0u64;
        while written < want {
            if held.len() == 400 {
                eprintln!("skipped: {want} bytes of slack need more than 400 connections");
                return;
            }
            let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (unread, _) = l.accept().unwrap();
            c.set_nonblocking(true).unwrap();
            let chunk = vec![7u8; 64 * 1024];
            loop {
                match c.write(&chunk) {
                    Ok(n) => written += n as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            held.push((c, unread));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        // Every byte queued costs at least its size (skb overhead comes on top).
        let counted = peak.finish() + tcp_memory_slack_pages();
        assert!(
            counted * 4096 >= written,
            "{counted} pages with slack, {written} bytes queued"
        );
        let [low, pressure, high] = tcp_mem_limits().expect("tcp_mem readable");
        assert!(low <= pressure && pressure <= high && high > 0);
    }

    #[test]
    fn parses_snmp_and_netstat() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Tcp: RtoAlgorithm RtoMin InSegs OutSegs RetransSegs\nTcp: 1 200 10 20 3\n\
                    TcpExt: SyncookiesSent TCPTimeouts\nTcpExt: 0 4\n";
        let c = TcpCounters::parse(text);
        assert_eq!(
            (
                c.get("Tcp.InSegs"),
                c.get("Tcp.OutSegs"),
                c.get("Tcp.RetransSegs")
            ),
            (10, 20, 3)
        );
        assert_eq!(c.get("TcpExt.TCPTimeouts"), 4);
        assert_eq!(c.get("Ip.Forwarding"), 0, "only TCP counters are kept");
        let later = TcpCounters::parse(&text.replace("1 200 10 20 3", "1 200 15 26 3"));
        assert_eq!(later.since(&c).get("Tcp.OutSegs"), 6);
    }

    #[test]
    fn reads_this_namespace_and_this_process() {
        let c = TcpCounters::read(None).unwrap();
        assert!(c.0.contains_key("Tcp.OutSegs") && c.0.contains_key("TcpExt.TCPTimeouts"));
        assert!(rss_kib(std::process::id()) > 0);
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {}
        assert!(process_cpu(std::process::id()) > 0.0);
        assert!(machine_cpu() > 0.0);
    }
}
