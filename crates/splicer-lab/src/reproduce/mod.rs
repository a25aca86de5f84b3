//! `splicer-lab reproduce NAME`: one of the seeds' experiments end to end. It builds the
//! experiment's scenario (or scenarios: one bed each, called parts) from its grid, runs it
//! with `splicer-lab run` (bed up, variants interleaved over rounds, bed down), then writes a
//! report: `NAME.md` with the paper's figures beside ours, plots, and the raw results in
//! `NAME/`.
//!
//! Three grids: `default` is the paper's, reduced only where this machine cannot run it (each
//! experiment says how); `quick` is a reduced grid of a few minutes; `tiny` checks the
//! machinery in seconds (the tests run it) and its figures mean nothing.
//!
//! - [`grid`]: axes crossed into points, the variants of a scenario.
//! - [`capture`]: per-byte forwarding latency from packet captures at the proxy.
//! - `maltz`: seed 003's experiments (throughput and CPU; forwarding latency).
//! - [`rosumixed`]: seed 000's mixed load (`splicer-lab rosu-mixed`, Figs 16-17): hits
//!   beside spliced requests.
//! - `rosu`: seed 000's experiments (the size × clients sweep, plain and SSL; forwarding
//!   delays; modem clients).
//! - `kong`: seed 001's (hits beside spliced requests, the pacer's modes).
//! - `panteleenko`: seed 002's (the web booster: the server's load, the booster against
//!   nginx, packets and cost by size, MTU, requests per connection, delay and rate).
//! - `pathak`: seed 004's (queries through the edge and straight, Figs 5–6; one
//!   persistent connection under load, Fig 9).

pub mod capture;
#[cfg(test)]
pub(crate) mod fake;
pub mod grid;
mod kong;
mod maltz;
mod panteleenko;
mod parts;
mod pathak;
mod rosu;
pub mod rosumixed;
mod table;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::experiment::mmss;
use crate::experiment::run::VariantRun;
use crate::Scenario;

pub use parts::run_part;

/// The files of a part's run a report reads, kept beside it (`PART-FILE` in a report's
/// directory).
const KEPT_FILES: [&str; 3] = ["scenario.toml", "runs.json", "summary.md"];

/// Which grid to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grid {
    Tiny,
    Quick,
    Full,
}

impl Grid {
    pub fn name(self) -> &'static str {
        match self {
            Grid::Tiny => "tiny",
            Grid::Quick => "quick",
            Grid::Full => "default",
        }
    }
}

/// One bed of an experiment and the scenario run on it.
pub struct Part {
    /// File-name friendly (`paper-buffers`).
    pub name: &'static str,
    pub scenario: String,
}

/// A part after its run: where its raw results are, and the runs.
pub struct Ran {
    pub part: Part,
    pub dir: PathBuf,
    pub runs: Vec<VariantRun>,
}

impl Ran {
    /// The rounds that ran in the parts `ran` (the most of any variant), or `grid`'s when
    /// none did: a grid's rounds may change after a report was made, and its note says what
    /// ran.
    pub fn rounds(ran: &[Ran], grid: u32) -> usize {
        let ran = ran.iter().flat_map(|r| &r.runs).map(|v| v.round + 1).max();
        ran.unwrap_or(grid as usize)
    }
}

/// A reproducible experiment.
pub trait Experiment {
    fn name(&self) -> &'static str;
    /// The paper and figures: `Seed 003 (Maltz & Bhagwat), Figs 9–11: ...`.
    fn title(&self) -> &'static str;
    /// How long the grid takes on this machine, roughly.
    fn estimate(&self, grid: Grid) -> Duration;
    /// What the grid is, and how it differs from the paper's. `ran` is what ran (its
    /// scenarios), for a bed whose settings changed between runs of the same grid.
    fn grid_note(&self, grid: Grid, ran: &[Ran]) -> anyhow::Result<String>;
    /// The scenarios to run, in order. `lab` is this binary.
    fn parts(&self, grid: Grid, lab: &Path) -> Vec<Part>;
    /// Reads the runs (and files the runs left in each part's directory), writes plots and
    /// data files into `out`, and returns the report's body (Markdown, linking files in
    /// `out` by `NAME/FILE`).
    fn report(&self, grid: Grid, ran: &[Ran], out: &Path) -> anyhow::Result<String>;
    /// Whether the report reads the committed raw files only (`runs.json` of each part, and
    /// what the report itself keeps in `out`), so that it can be written again from them
    /// ([`render_again`]).
    fn renders_from_runs(&self) -> bool {
        false
    }
    /// The parts a report of `grid` made before its parts changed was kept under (a grid
    /// split in two to run apart), so that [`render_again`] still writes it.
    fn former_parts(&self, _grid: Grid) -> &'static [&'static str] {
        &[]
    }
}

/// Where, when and how the runs behind a report ran: `NAME/provenance.json`, beside the raw
/// files, so that the report can be written again from the committed files alone.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Provenance {
    /// The grid's name (`default`, `quick`, `tiny`).
    pub grid: String,
    /// The sentence that says when, at which commit and with which command the runs ran.
    pub when: String,
    pub machine: String,
    pub model: String,
    /// The directory of the runs' full logs, on the machine that ran them.
    pub scratch: String,
}

const PROVENANCE: &str = "provenance.json";

/// The report of `e` from its runs: the body the experiment writes (with its plots and data
/// files into `data`), between the header and the list of raw files. Depends on nothing but
/// its arguments and the files in `data`, so that [`render_again`] gives the same bytes.
fn render(
    e: &dyn Experiment,
    grid: Grid,
    ran: &[Ran],
    data: &Path,
    prov: &Provenance,
) -> anyhow::Result<String> {
    let name = e.name();
    let body = e.report(grid, ran, data)?;
    let note = e.grid_note(grid, ran)?;
    let mut files: Vec<String> = std::fs::read_dir(data)?
        .filter_map(|f| f.ok().map(|f| f.file_name().to_string_lossy().to_string()))
        .collect();
    files.sort();
    Ok(format!(
        "# {title}\n\n\
         {when}\n\n\
         Machine: {machine}; {model}. Client, proxy and server are network namespaces of this \
         one VM, joined by veth links (`splicer-lab`, docs/lab.md).\n\n\
         Grid: {note}\n\n{body}\n\
         ## Raw results\n\n\
         In [`{name}/`]({name}/): {list}. Each part's `runs.json` holds every run's \
         measurements; `summary.md` is the lab's own summary of the part; `scenario.toml` \
         is what ran (`splicer-lab run` runs it again). The full logs stay in `{scratch}`.\n",
        title = e.title(),
        when = prov.when,
        machine = prov.machine,
        model = prov.model,
        list = files
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", "),
        scratch = prov.scratch,
    ))
}

/// `--render`: writes `out/NAME.md` again from the raw files in `out/NAME/` alone (what a
/// reader has from the repository), nothing run. Only experiments whose report reads
/// nothing but the runs can ([`Experiment::renders_from_runs`]); a test renders each
/// committed one again and compares it byte for byte.
pub fn render_again(name: &str, out: &Path) -> anyhow::Result<PathBuf> {
    let exps = all();
    let Some(e) = exps.iter().find(|e| e.name() == name) else {
        anyhow::bail!("no experiment named {name:?}:\n{}", list());
    };
    anyhow::ensure!(
        e.renders_from_runs(),
        "{name}: its report reads files the runs left beside them (captures, sampled \
         data), which its raw files do not keep; run it again with --from"
    );
    let data = out.join(name);
    let prov: Provenance = serde_json::from_str(
        &std::fs::read_to_string(data.join(PROVENANCE))
            .with_context(|| format!("{}: no {PROVENANCE}", data.display()))?,
    )?;
    let grid = [Grid::Tiny, Grid::Quick, Grid::Full]
        .into_iter()
        .find(|g| g.name() == prov.grid)
        .with_context(|| format!("{PROVENANCE}: no grid named {:?}", prov.grid))?;
    // The experiment's parts, or those of an older report of the grid.
    let kept = |n: &str| data.join(format!("{n}-runs.json")).is_file();
    let mut names: Vec<&'static str> = e
        .parts(grid, Path::new("splicer-lab"))
        .iter()
        .map(|p| p.name)
        .collect();
    let former = e.former_parts(grid);
    if !names.iter().all(|n| kept(n)) && !former.is_empty() && former.iter().all(|n| kept(n)) {
        names = former.to_vec();
    }
    let mut ran = Vec::new();
    for name in names {
        let read = |f: &str| {
            let path = data.join(format!("{name}-{f}"));
            std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))
        };
        let runs: Vec<VariantRun> = serde_json::from_str(&read("runs.json")?)?;
        let part = Part {
            name,
            scenario: read("scenario.toml")?,
        };
        ran.push(Ran {
            part,
            dir: data.clone(),
            runs,
        });
    }
    let report = render(e.as_ref(), grid, &ran, &data, &prov)?;
    let path = out.join(format!("{name}.md"));
    std::fs::write(&path, report)?;
    Ok(path)
}

/// Every experiment, in the order `--list` shows them.
pub fn all() -> Vec<Box<dyn Experiment>> {
    vec![
        Box::new(maltz::Throughput),
        Box::new(maltz::Latency),
        Box::new(rosu::Sweep),
        Box::new(rosu::Forwarding),
        Box::new(rosu::Modem),
        Box::new(kong::Kong),
        Box::new(panteleenko::Booster),
        Box::new(pathak::Latency),
        Box::new(pathak::Loss),
        Box::new(pathak::Windows),
        Box::new(pathak::Stress),
    ]
}

/// `--list`: each experiment with what it reproduces and how long its grids take.
pub fn list() -> String {
    let mut s = format!("{:<18} {:>7} {:>7}  what\n", "name", "quick", "default");
    for e in all() {
        s += &format!(
            "{:<18} {:>7} {:>7}  {}\n",
            e.name(),
            mmss(e.estimate(Grid::Quick)),
            mmss(e.estimate(Grid::Full)),
            e.title()
        );
    }
    s
}

fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Whether `data` may be replaced by a report's raw files: it is absent, or an earlier
/// report's (it has the [`PROVENANCE`] this command writes). Anything else there (a hand
/// run's files under the report's name) is kept, and the run refused before it starts.
fn replaceable(data: &Path) -> anyhow::Result<()> {
    if !data.exists() || data.join(PROVENANCE).is_file() {
        return Ok(());
    }
    anyhow::bail!(
        "{} holds files no report of `splicer-lab reproduce` wrote (it has no {PROVENANCE}), \
         and the report would replace it whole: move them, or give another --out",
        data.display()
    )
}

/// When a run starts and from which commit: `(DATE, " at commit C")`, the commit read
/// before the runs (read at the end, it once named commits made while a long run went on,
/// and the report's own files as uncommitted changes); outside a checkout, the commit the
/// lab was built from (its build script's).
fn started_at() -> (String, String) {
    let date = command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let dirty = command_output("git", &["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| !s.is_empty());
    let commit = command_output("git", &["rev-parse", "--short", "HEAD"]).map_or_else(
        || {
            format!(
                " with splicer-lab built from commit {}",
                env!("SPLICER_COMMIT")
            )
        },
        |c| {
            let changes = if dirty {
                " with uncommitted changes"
            } else {
                ""
            };
            format!(" at commit {c}{changes}")
        },
    );
    (date, commit)
}

/// Runs experiment `name` on `grid`; writes `out/NAME.md` and `out/NAME/`. `command` is the
/// command line, for the report. With `from` (the `results/reproduce-NAME-TS` directory of
/// an earlier run of the same grid, or the directory its parts ran into one by one with
/// [`run_part`]), nothing runs: the report is written from those runs, as when the report's
/// code improved after a long run. Returns the report's path.
pub fn run(
    name: &str,
    grid: Grid,
    out: &Path,
    lab: &Path,
    command: &str,
    from: Option<&Path>,
) -> anyhow::Result<PathBuf> {
    let exps = all();
    let Some(e) = exps.iter().find(|e| e.name() == name) else {
        anyhow::bail!(
            "no experiment named {name:?}; `splicer-lab reproduce --list` lists them:\n{}",
            list()
        );
    };
    // Before the runs, not after an hour of them: the report's directory is replaced whole.
    replaceable(&out.join(name))?;
    eprintln!(
        "{}: {} grid, about {}",
        e.name(),
        grid.name(),
        mmss(e.estimate(grid))
    );
    let started = Instant::now();
    let (date, commit) = started_at();
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let scratch = from.map_or_else(
        || PathBuf::from("results").join(format!("reproduce-{name}-{ts}")),
        Path::to_path_buf,
    );
    let parts = e.parts(grid, lab);
    // Runs made part by part: every part there, before any is read.
    let names: Vec<&str> = parts.iter().map(|p| p.name).collect();
    let in_parts = match from {
        Some(d) => parts::ran_in_parts(name, d, &names)?,
        None => None,
    };
    let mut ran = Vec::new();
    for part in parts {
        let s = Scenario::from_toml(&part.scenario)
            .with_context(|| format!("the generated scenario of part {}", part.name))?;
        let dir = scratch.join(part.name);
        eprintln!("part {}: {}", part.name, dir.display());
        let dir = match from {
            None => crate::experiment::run(&s, &part.scenario, lab, Some(&dir.to_string_lossy()))?,
            Some(_) => {
                // The same grid: the scenario that ran is the one this grid generates.
                let ran = std::fs::read_to_string(dir.join("scenario.toml"))
                    .with_context(|| format!("{}: not a run of {name}", dir.display()))?;
                anyhow::ensure!(
                    ran == part.scenario,
                    "{}: its scenario is not the {} grid's of {name} (another grid, or the \
                     experiment changed since)",
                    dir.display(),
                    grid.name()
                );
                dir
            }
        };
        let runs: Vec<VariantRun> =
            serde_json::from_str(&std::fs::read_to_string(dir.join("runs.json"))?)?;
        ran.push(Ran { part, dir, runs });
    }
    let data = out.join(name);
    if data.exists() {
        std::fs::remove_dir_all(&data)
            .with_context(|| format!("cannot replace {}", data.display()))?;
    }
    std::fs::create_dir_all(&data).with_context(|| format!("cannot create {}", data.display()))?;
    for r in &ran {
        for f in KEPT_FILES {
            std::fs::copy(r.dir.join(f), data.join(format!("{}-{f}", r.part.name)))
                .with_context(|| format!("{}", r.dir.join(f).display()))?;
        }
    }
    // When and at which commit the runs ran, kept beside them for a later `--from`.
    let ran_when = scratch.join("ran.txt");
    let mut logs = scratch.display().to_string();
    let when = match from {
        None => {
            let w = format!(
                "`{command}` ({grid} grid) on {date}{commit}, in {took}",
                grid = grid.name(),
                took = mmss(started.elapsed()),
            );
            let _ = std::fs::write(&ran_when, &w);
            format!("Reproduced with {w}.")
        }
        Some(d) => format!(
            "Reported with `{command}` on {date}{commit} from the runs in `{}`: {}.",
            d.display(),
            match in_parts {
                Some((when, part_logs)) => {
                    logs = part_logs;
                    when
                }
                None => std::fs::read_to_string(&ran_when).map_or_else(
                    |_| "when they ran is the first line of each part's `summary.md`".into(),
                    |w| format!("they ran with {}", w.trim())
                ),
            },
        ),
    };
    let prov = Provenance {
        grid: grid.name().into(),
        when,
        machine: crate::experiment::summary::machine(),
        model: cpu_model(),
        scratch: logs,
    };
    std::fs::write(
        data.join(PROVENANCE),
        serde_json::to_string_pretty(&prov)? + "\n",
    )?;
    let report = render(e.as_ref(), grid, &ran, &data, &prov)?;
    let path = out.join(format!("{name}.md"));
    std::fs::write(&path, report)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_replaces_only_a_report() {
        let dir = std::env::temp_dir().join(format!("splab-replace-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(replaceable(&dir).is_ok(), "an absent directory");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("runs.json"), "[]").unwrap();
        let e = replaceable(&dir).unwrap_err().to_string();
        assert!(e.contains("no provenance.json"), "{e}");
        std::fs::write(dir.join(PROVENANCE), "{}").unwrap();
        assert!(replaceable(&dir).is_ok(), "an earlier report");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
