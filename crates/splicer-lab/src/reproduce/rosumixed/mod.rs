//! Seed 000's mixed-load experiment (Rosu & Rosu, Figs 16–17), `splicer-lab rosu-mixed`: a
//! proxy cache serving hits itself while it splices requests it cannot serve, on the
//! corporate network (`scenarios/corporate.toml`), with the relay (`copy`) against the
//! kernel engines.
//!
//! - Fig 16: 40 spliced clients (25 plain GETs of non-cacheable objects, 15 CONNECT tunnels
//!   with the SSL-handshake emulation) while 0, 40, 80 and 120 clients fetch a cacheable
//!   object (hits): how much the spliced requests' latency rises over the run without hits.
//! - Fig 17: 40 clients fetching hits while 0, 13, 40 and 120 clients make spliced GETs
//!   (0, 25, 50 and 75% of all clients): how much the hits' latency changes over the run
//!   with hits alone, every engine: the kernel engines take a GET's body after its head
//!   (seed 000's splice, in the kernel's softirq: what the paper found slows the hits).
//!
//! Every client is seed 000's s-client (HTTP/1.0, a new connection per request). The
//! paper's 133 MHz proxy ran at 98% CPU; `--proxy-cpu` gives Splicer a CPU budget (a cgroup
//! quota) so that it is the bottleneck here too; a quota charges the process only, so
//! `--steal` instead slows the one CPU Splicer and its receive threads share (the kernel
//! engines' work counted too). Splicer runs with `small_threshold = 0`, so
//! the engine named is the one that moves even 1 KiB bodies, and with `pool_per_origin =
//! 0`, so that every engine connects to the server per request as the paper's proxy did
//! (and as `ipsplice` must: it takes an answer only to the end of both connections). Runs
//! before 2026-11-27 kept the default pool for `copy`, `pipe` and `sockmap`.
//!
//! After the run, [`report()`] (in `report.rs`; Fig 16's table and claim in `fig16.rs`)
//! writes `figures.md`, `fig16.svg`, `fig17.svg`, `points.csv` (each variant's means over
//! the rounds) and `params.json` (the grid) into the results directory beside the lab's
//! usual summary.

mod fig16;
mod report;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

pub use report::report;

/// What to run. [`report()`] keeps it beside the figures (`params.json`), so that they can
/// be drawn again from the raw runs with the grid they ran.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Params {
    pub rounds: u32,
    /// Seconds each variant's loads run (a sixth of it warm-up, a sixth cool-down).
    pub seconds: u32,
    /// Object sizes, KiB.
    pub sizes: Vec<u64>,
    /// Engines for the spliced requests.
    pub engines: Vec<String>,
    /// Percent of one CPU Splicer may use (0: no limit).
    pub proxy_cpu: f64,
    /// Instead of a quota: the share of CPU 1 `splicer-lab steal` takes from Splicer and
    /// its host's receive threads, pinned there with everything else on CPU 0 (0: off).
    /// A quota charges the process alone; the kernel engines' work runs in the receive
    /// threads, so only a slower CPU holds every engine to the same budget.
    pub steal: f64,
    /// Figures to run (16, 17).
    pub figs: Vec<u32>,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            rounds: 3,
            seconds: 30,
            sizes: vec![1, 10, 45, 128],
            engines: ENGINES.map(String::from).to_vec(),
            proxy_cpu: 5.0,
            steal: 0.0,
            figs: vec![16, 17],
        }
    }
}

/// Fig 16's numbers of hit clients beside the 40 spliced ones.
pub const FIG16_HITS: [u32; 4] = [0, 40, 80, 120];
/// Fig 16's spliced clients: plain GETs and SSL tunnels.
pub const FIG16_GETS: u32 = 25;
pub const FIG16_SSL: u32 = 15;
/// Fig 17's hit clients, and its numbers of spliced clients (0, 25, 50, 75% of all).
pub const FIG17_HITS: u32 = 40;
pub const FIG17_SPLICED: [u32; 4] = [0, 13, 40, 120];

const ENGINES: [&str; 4] = ["copy", "pipe", "sockmap", "ipsplice"];

impl Params {
    /// The engines a claim compares with `copy`: those other than `copy`, when `copy` ran
    /// too and there is one.
    fn splices(&self) -> Option<Vec<&str>> {
        let splices: Vec<&str> = self
            .engines
            .iter()
            .map(String::as_str)
            .filter(|e| *e != "copy")
            .collect();
        let copy = self.engines.iter().any(|e| e == "copy");
        (copy && !splices.is_empty()).then_some(splices)
    }

    /// Fails if `dir` was drawn before with another grid (its `params.json`): drawing its
    /// runs with this one would mislabel its figures.
    pub fn same_as_kept(&self, dir: &Path) -> anyhow::Result<()> {
        let kept = dir.join("params.json");
        if !kept.exists() {
            return Ok(());
        }
        let had: Params = serde_json::from_str(&std::fs::read_to_string(&kept)?)?;
        anyhow::ensure!(
            had == *self,
            "{}: its runs had the grid {had:?}; give the same options",
            kept.display()
        );
        Ok(())
    }

    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.rounds >= 1, "--rounds: at least 1");
        anyhow::ensure!(self.seconds >= 6, "--seconds: at least 6");
        anyhow::ensure!(
            !self.sizes.is_empty() && self.sizes.iter().all(|s| (1..=1 << 20).contains(s)),
            "--sizes: KiB, 1 to 1048576 each"
        );
        for e in &self.engines {
            anyhow::ensure!(
                ENGINES.contains(&e.as_str()),
                "--engines: {e:?} is not one of {ENGINES:?}"
            );
        }
        anyhow::ensure!(!self.engines.is_empty(), "--engines: at least one");
        anyhow::ensure!(
            self.proxy_cpu == 0.0 || (1.0..=200.0).contains(&self.proxy_cpu),
            "--proxy-cpu: percent of one CPU, 1 to 200 (0: no limit)"
        );
        anyhow::ensure!(
            (0.0..=0.9).contains(&self.steal),
            "--steal: a share of CPU {PROXY_CPU}, 0 to 0.9 (0: off)"
        );
        anyhow::ensure!(
            self.steal == 0.0 || self.proxy_cpu == 0.0,
            "--steal replaces the quota: give --proxy-cpu 0 with it"
        );
        for f in &self.figs {
            anyhow::ensure!(*f == 16 || *f == 17, "--figs: 16, 17 or both");
        }
        anyhow::ensure!(!self.figs.is_empty(), "--figs: at least one");
        Ok(())
    }
}

/// With `--steal`: the CPU Splicer and its receive threads have, and the one everything
/// else runs on (seed 001's bed, `reproduce kong`).
const PROXY_CPU: &str = "1";
const OTHERS: &str = "0";

/// The corporate bed (hosts, links and emulated legs) of `scenarios/corporate.toml`, the
/// proxy host receiving in threads of its own so that the kernel work of its splices is
/// counted (docs/lab.md, "The proxy's kernel work"); `pinned`, those threads on
/// [`PROXY_CPU`] and the link emulators on [`OTHERS`].
fn corporate_bed(pinned: bool) -> String {
    let text = include_str!("../../../scenarios/corporate.toml");
    let start = text.find("[[host]]").expect("corporate.toml has hosts");
    let end = text.find("\n[files]").expect("corporate.toml has [files]");
    let proxy = "name = \"proxy\"\n";
    assert!(
        text[start..end].contains(proxy),
        "corporate.toml has a proxy host"
    );
    let napi = if pinned {
        format!("napi_threads = true\nnapi_cpus = \"{PROXY_CPU}\"\n")
    } else {
        "napi_threads = true\n".into()
    };
    let bed = text[start..end].replacen(proxy, &format!("{proxy}{napi}"), 1);
    if pinned {
        bed.replace(
            "[[emulate]]\n",
            &format!("[[emulate]]\ncpus = \"{OTHERS}\"\n"),
        )
    } else {
        bed
    }
}

/// A command, run on [`OTHERS`] when the bed is pinned (`lab` stands for this binary only
/// as a command's first word, so a pinned one names it).
fn on_others(pinned: bool, lab: &Path, cmd: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    if pinned {
        v.extend(["taskset", "-c", OTHERS].map(String::from));
        v.push(lab.display().to_string());
        v.extend(cmd[1..].iter().map(|a| a.to_string()));
    } else {
        v.extend(cmd.iter().map(|a| a.to_string()));
    }
    v
}

/// A variant's name: figure, engine (or `ref`), the level, the size.
fn name(fig: u32, engine: &str, level: &str, size: u64) -> String {
    format!("f{fig}-{engine}-{level}-{size}k")
}

struct Scen<'a> {
    s: String,
    p: &'a Params,
    lab: &'a Path,
    /// The variants of each engine (each runs Splicer with that engine's file).
    by_engine: BTreeMap<String, Vec<String>>,
}

impl Scen<'_> {
    fn variant(&mut self, name: &str, baseline: &str, engine: &str) {
        writeln!(
            self.s,
            "[[variant]]\nname = \"{name}\"\nbaseline = \"{baseline}\""
        )
        .unwrap();
        self.by_engine
            .entry(engine.to_string())
            .or_default()
            .push(name.to_string());
    }

    fn sclient(&mut self, variant: &str, clients: u32, size: u64, kind: &str) {
        if clients == 0 {
            return;
        }
        let s = self.p.seconds;
        let (warmup, cooldown) = (s / 6, s / 6);
        let (origin, via, extra): (&str, &str, &[&str]) = match kind {
            "hit" => ("{server}:8080", "http://{proxy}:3128", &["--cacheable"]),
            "get" => ("{server}:8080", "http://{proxy}:3128", &[]),
            _ => ("{server}:443", "connect://{proxy}:3128", &["--ssl"]),
        };
        let mut cmd = on_others(
            self.p.steal > 0.0,
            self.lab,
            &[
                "lab",
                "sclient",
                "--origin",
                origin,
                "--via",
                via,
                "--clients",
            ],
        );
        cmd.push(clients.to_string());
        cmd.extend(["--size".into(), (size * 1024).to_string()]);
        cmd.extend(["--duration".into(), s.to_string()]);
        cmd.extend(["--warmup".into(), warmup.to_string()]);
        cmd.extend(["--cooldown".into(), cooldown.to_string()]);
        cmd.extend(extra.iter().map(|e| e.to_string()));
        writeln!(
            self.s,
            "[[load]]\nhost = \"client\"\nvariants = [\"{variant}\"]\ncommand = {cmd:?}"
        )
        .unwrap();
    }
}

/// The experiment's scenario text; `lab` is this binary.
pub fn scenario(p: &Params, lab: &Path) -> String {
    let pinned = p.steal > 0.0;
    let mut sc = Scen {
        s: String::new(),
        p,
        lab,
        by_engine: BTreeMap::new(),
    };
    writeln!(
        sc.s,
        "# Generated by `splicer-lab rosu-mixed`.\n[experiment]\nname = \"rosu-mixed\"\n\
         rounds = {}\nserver = \"server\"\n",
        p.rounds
    )
    .unwrap();
    sc.s += &corporate_bed(pinned);
    sc.s += "\n[files]\n";
    for e in &p.engines {
        writeln!(
            sc.s,
            "\"splicer-{e}.toml\" = \"\"\"\n[log]\nlevel = \"warn\"\n[relay]\nengine = \"{e}\"\n\
             small_threshold = 0\n[http]\nlisten = [\"{{proxy}}:3128\"]\npool_per_origin = 0\n[acl]\ndefault = \"deny\"\n\
             [[acl.rule]]\naction = \"allow\"\nclients = [\"10.231.0.0/16\"]\n\"\"\""
        )
        .unwrap();
    }
    // Sizes outermost, engines innermost: the variants compared with each other run
    // close together in time.
    for &size in &p.sizes {
        if p.figs.contains(&16) {
            let base = |e: &str| name(16, e, "h0", size);
            for h in FIG16_HITS {
                for e in &p.engines {
                    let v = name(16, e, &format!("h{h}"), size);
                    sc.variant(&v, &base(e), e);
                    sc.sclient(&v, FIG16_GETS, size, "get");
                    sc.sclient(&v, FIG16_SSL, size, "ssl");
                    sc.sclient(&v, h, size, "hit");
                }
            }
        }
        if p.figs.contains(&17) {
            let engines: Vec<&str> = p.engines.iter().map(String::as_str).collect();
            // Hits alone do not depend on the splice engine: one reference run.
            let base = name(17, "ref", "s0", size);
            sc.variant(&base, &base, engines[0]);
            sc.sclient(&base, FIG17_HITS, size, "hit");
            for k in FIG17_SPLICED.iter().filter(|k| **k > 0) {
                for e in &engines {
                    let v = name(17, e, &format!("s{k}"), size);
                    sc.variant(&v, &base, e);
                    sc.sclient(&v, FIG17_HITS, size, "hit");
                    sc.sclient(&v, *k, size, "get");
                }
            }
        }
    }
    let limit = if p.proxy_cpu > 0.0 {
        format!("cpu_limit = {}\n", p.proxy_cpu)
    } else {
        String::new()
    };
    if pinned {
        writeln!(
            sc.s,
            "[[process]]\nhost = \"proxy\"\n\
             command = [\"lab\", \"steal\", \"--cpu\", \"{PROXY_CPU}\", \"--share\", \"{}\"]\n\
             settle_ms = 100",
            p.steal
        )
        .unwrap();
    }
    for port in [8080, 443] {
        let listen = format!("{{server}}:{port}");
        let cmd = on_others(pinned, lab, &["lab", "origin", "--listen", &listen]);
        writeln!(
            sc.s,
            "[[process]]\nhost = \"server\"\ncommand = {cmd:?}\nwait_for = \"{listen}\""
        )
        .unwrap();
    }
    let splicer = lab.with_file_name("splicer").display().to_string();
    for (e, variants) in &sc.by_engine {
        let file = format!("{{file:splicer-{e}.toml}}");
        let run = ["run", "--config", file.as_str()];
        let cmd: Vec<&str> = if pinned {
            ["taskset", "-c", PROXY_CPU, splicer.as_str()]
                .into_iter()
                .chain(run)
                .collect()
        } else {
            ["splicer"].into_iter().chain(run).collect()
        };
        writeln!(
            sc.s,
            "[[process]]\nhost = \"proxy\"\nrole = \"proxy\"\n{limit}variants = {variants:?}\n\
             command = {cmd:?}\nwait_for = \"{{proxy}}:3128\""
        )
        .unwrap();
    }
    sc.s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_grid_refuses_another() {
        let dir = std::env::temp_dir().join(format!("splab-kept-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = Params {
            steal: 0.9,
            proxy_cpu: 0.0,
            ..Params::default()
        };
        // Nothing kept yet: any grid.
        p.same_as_kept(&dir).unwrap();
        std::fs::write(dir.join("params.json"), serde_json::to_string(&p).unwrap()).unwrap();
        p.same_as_kept(&dir).unwrap();
        let other = Params {
            rounds: 6,
            ..p.clone()
        };
        let e = other.same_as_kept(&dir).unwrap_err().to_string();
        assert!(e.contains("rounds: 3"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_scenario_has_every_point_and_its_baseline() {
        let p = Params::default();
        let text = scenario(&p, Path::new("/x/splicer-lab"));
        let names = crate::bench::checked_variants(&text);
        let s = crate::Scenario::from_toml(&text).expect("checked");
        // Per size: Fig 16 4 levels × 4 engines, Fig 17 the reference + 3 levels × 4 engines.
        assert_eq!(names.len(), 4 * (4 * 4 + 1 + 3 * 4), "{names:?}");
        assert!(names.contains(&"f16-sockmap-h120-128k".to_string()));
        assert!(names.contains(&"f17-ipsplice-s40-128k".to_string()));
        assert!(s.hosts.iter().any(|h| h.name == "proxy" && h.napi_threads));
        // The corporate legs are there, and Splicer runs under its budget.
        assert_eq!(s.emulations.len(), 4);
        assert!(text.contains("cpu_limit = 5"));
        assert!(text.contains("small_threshold = 0"));
        assert!(text.contains("pool_per_origin = 0"));
        // Fig 16 at 120 hit clients: 25 GETs, 15 SSL and 120 hit clients.
        let loads: Vec<&crate::bed::scenario::Load> = s
            .loads
            .iter()
            .filter(|l| l.variants == ["f16-copy-h120-1k"])
            .collect();
        assert_eq!(loads.len(), 3);
        let clients = |l: &crate::bed::scenario::Load| {
            let i = l.command.iter().position(|a| a == "--clients").unwrap();
            (
                l.command[i + 1].clone(),
                l.command.contains(&"--ssl".to_string()),
            )
        };
        let mut got: Vec<(String, bool)> = loads.iter().map(|l| clients(l)).collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("120".into(), false),
                ("15".into(), true),
                ("25".into(), false)
            ]
        );
        let narrow = Params {
            sizes: vec![1],
            engines: vec!["sockmap".into()],
            figs: vec![17],
            proxy_cpu: 0.0,
            ..Params::default()
        };
        assert!(narrow.check().is_ok());
        let unlimited = Params {
            engines: vec!["pipe".into()],
            ..narrow
        };
        assert!(unlimited.check().is_ok());
        let text = scenario(&unlimited, Path::new("/x/splicer-lab"));
        assert!(!text.contains("cpu_limit"));
        let s = crate::Scenario::from_toml(&text).unwrap();
        let names: Vec<String> = s.variants().iter().map(|v| v.name.clone()).collect();
        assert_eq!(
            names,
            [
                "f17-ref-s0-1k",
                "f17-pipe-s13-1k",
                "f17-pipe-s40-1k",
                "f17-pipe-s120-1k"
            ]
        );
    }

    #[test]
    fn with_steal_the_proxy_and_its_receive_threads_share_a_slowed_cpu() {
        let p = Params {
            sizes: vec![1],
            engines: vec!["copy".into(), "sockmap".into()],
            figs: vec![16],
            proxy_cpu: 0.0,
            steal: 0.9,
            ..Params::default()
        };
        assert!(p.check().is_ok());
        let text = scenario(&p, Path::new("/x/splicer-lab"));
        let s = crate::Scenario::from_toml(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(!text.contains("cpu_limit"));
        let proxy = s.hosts.iter().find(|h| h.name == "proxy").unwrap();
        assert!(proxy.napi_threads);
        assert_eq!(proxy.napi_cpus.as_deref(), Some(PROXY_CPU));
        assert_eq!(s.emulations.len(), 4);
        assert!(s
            .emulations
            .iter()
            .all(|e| e.cpus.as_deref() == Some(OTHERS)));
        let steal: Vec<_> = s
            .processes
            .iter()
            .filter(|x| x.command.get(1).map(String::as_str) == Some("steal"))
            .collect();
        assert_eq!(steal.len(), 1);
        assert_eq!(steal[0].command[2..], ["--cpu", "1", "--share", "0.9"]);
        let proxies: Vec<_> = s.processes.iter().filter(|x| x.role.is_some()).collect();
        assert_eq!(proxies.len(), 2);
        for x in &proxies {
            assert_eq!(&x.command[..4], ["taskset", "-c", "1", "/x/splicer"]);
        }
        let origins: Vec<_> = s
            .processes
            .iter()
            .filter(|x| x.command.contains(&"origin".to_string()))
            .collect();
        assert_eq!(origins.len(), 2);
        for x in origins
            .iter()
            .map(|x| &x.command)
            .chain(s.loads.iter().map(|l| &l.command))
        {
            assert_eq!(&x[..4], ["taskset", "-c", "0", "/x/splicer-lab"], "{x:?}");
        }
        // A quota and a stolen CPU are two ways of the same budget: one at a time.
        let both = Params {
            proxy_cpu: 5.0,
            ..p
        };
        assert!(both.check().is_err());
    }

    #[test]
    fn params_are_checked() {
        assert!(Params::default().check().is_ok());
        let bad = |f: fn(&mut Params)| {
            let mut p = Params::default();
            f(&mut p);
            p.check().is_err()
        };
        assert!(bad(|p| p.engines = vec!["splice".into()]));
        assert!(bad(|p| p.sizes = vec![0]));
        assert!(bad(|p| p.proxy_cpu = 0.5));
        assert!(bad(|p| p.figs = vec![18]));
        assert!(bad(|p| p.seconds = 3));
        assert!(bad(|p| {
            p.proxy_cpu = 0.0;
            p.steal = 0.95;
        }));
    }
}
