//! `splicer-lab reproduce NAME --part PART`: one part of an experiment (one bed and its
//! scenario) run alone, for grids longer than a sitting (seed 000's modem clients at the
//! paper's six rounds take more than three hours). Each part run keeps what a report needs
//! in `INTO/PART/` (`scenario.toml`, `runs.json`, `summary.md`) with `ran.json`, when, where
//! and at which commit it ran; once every part has run there, `--from INTO` writes the report
//! from them, each part's provenance named in its header.
//!
//! The rounds of a point always run in one sitting, next to the variants they are compared
//! with: a part is a whole bed, never some of its rounds.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;

use super::{all, list, started_at, Grid, KEPT_FILES};
use crate::experiment::mmss;
use crate::Scenario;

/// What a part run alone leaves beside its raw files.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PartRan {
    /// `` `COMMAND` (GRID grid) on DATE at commit C, in MM:SS ``.
    pub when: String,
    /// The directory of the part's full logs, on the machine that ran it.
    pub logs: String,
}

pub const PART_RAN: &str = "ran.json";

/// Runs part `part` of experiment `name` on `grid`, keeping its raw files in `into/PART/`
/// (refused if there already); the logs go to `results/reproduce-NAME-TS/PART`. Returns the
/// part's directory.
pub fn run_part(
    name: &str,
    grid: Grid,
    part: &str,
    into: &Path,
    lab: &Path,
    command: &str,
) -> anyhow::Result<PathBuf> {
    let exps = all();
    let Some(e) = exps.iter().find(|e| e.name() == name) else {
        anyhow::bail!("no experiment named {name:?}:\n{}", list());
    };
    let parts = e.parts(grid, lab);
    let names: Vec<&str> = parts.iter().map(|p| p.name).collect();
    let Some(p) = parts.iter().find(|p| p.name == part) else {
        anyhow::bail!(
            "{name} ({} grid) has no part {part:?}; its parts: {names:?}",
            grid.name()
        );
    };
    let keep = into.join(part);
    anyhow::ensure!(
        !keep.exists(),
        "{} exists: part {part} has run there already (remove it to run the part again)",
        keep.display()
    );
    let s = Scenario::from_toml(&p.scenario)
        .with_context(|| format!("the generated scenario of part {part}"))?;
    let (date, commit) = started_at();
    let t0 = Instant::now();
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let logs = PathBuf::from("results")
        .join(format!("reproduce-{name}-{ts}"))
        .join(part);
    eprintln!(
        "{name}: part {part} ({} grid): {}",
        grid.name(),
        logs.display()
    );
    let dir = crate::experiment::run(&s, &p.scenario, lab, Some(&logs.to_string_lossy()))?;
    std::fs::create_dir_all(&keep).with_context(|| format!("cannot create {}", keep.display()))?;
    for f in KEPT_FILES {
        std::fs::copy(dir.join(f), keep.join(f))
            .with_context(|| format!("{}", dir.join(f).display()))?;
    }
    let ran = PartRan {
        when: format!(
            "`{command}` ({} grid) on {date}{commit}, in {}",
            grid.name(),
            mmss(t0.elapsed())
        ),
        // As a run of the whole grid names its logs: relative to where it ran.
        logs: logs.display().to_string(),
    };
    std::fs::write(
        keep.join(PART_RAN),
        serde_json::to_string_pretty(&ran)? + "\n",
    )?;
    let left: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !into.join(n).join(PART_RAN).is_file())
        .collect();
    if left.is_empty() {
        eprintln!(
            "every part has run: `splicer-lab reproduce {name} --from {}` writes the report",
            into.display()
        );
    } else {
        eprintln!("parts still to run into {}: {left:?}", into.display());
    }
    Ok(keep)
}

/// The provenance of runs made part by part in `from`: the sentence that says when each
/// part ran, and where each one's logs are. `None` when `from` is not such a directory (a
/// run of the whole grid at once); an error when some part has not run.
pub fn ran_in_parts(
    name: &str,
    from: &Path,
    parts: &[&str],
) -> anyhow::Result<Option<(String, String)>> {
    let read = |p: &str| -> anyhow::Result<Option<PartRan>> {
        let f = from.join(p).join(PART_RAN);
        if !f.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&f)?;
        Ok(Some(
            serde_json::from_str(&text).with_context(|| format!("{}", f.display()))?,
        ))
    };
    let ran: Vec<(&str, Option<PartRan>)> = parts
        .iter()
        .map(|p| Ok((*p, read(p)?)))
        .collect::<anyhow::Result<_>>()?;
    if ran.iter().all(|(_, r)| r.is_none()) {
        return Ok(None);
    }
    let missing: Vec<&str> = ran
        .iter()
        .filter(|(_, r)| r.is_none())
        .map(|(p, _)| *p)
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "{}: parts {missing:?} have not run there yet (`splicer-lab reproduce {name} --part {} \
         --into {}` runs the first)",
        from.display(),
        missing[0],
        from.display()
    );
    let ran: Vec<(&str, PartRan)> = ran
        .into_iter()
        .filter_map(|(p, r)| r.map(|r| (p, r)))
        .collect();
    let when = ran
        .iter()
        .map(|(p, r)| format!("part `{p}` with {}", r.when))
        .collect::<Vec<_>>()
        .join("; ");
    let logs = ran
        .iter()
        .map(|(_, r)| r.logs.as_str())
        .collect::<Vec<_>>()
        .join("`, `");
    Ok(Some((format!("they ran part by part: {when}"), logs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_run_apart_are_named_each_and_all_are_needed() {
        let dir = std::env::temp_dir().join(format!("splab-parts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(
            ran_in_parts("x", &dir, &["a", "b"]).unwrap().is_none(),
            "a run of the whole grid"
        );
        let write = |p: &str, when: &str| {
            std::fs::create_dir_all(dir.join(p)).unwrap();
            let r = PartRan {
                when: when.into(),
                logs: format!("results/x/{p}"),
            };
            std::fs::write(
                dir.join(p).join(PART_RAN),
                serde_json::to_string(&r).unwrap(),
            )
            .unwrap();
        };
        write("b", "`lab --part b` on day 2 at commit y, in 40:00");
        let e = ran_in_parts("x", &dir, &["a", "b"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("[\"a\"] have not run"), "{e}");
        assert!(e.contains("reproduce x --part a --into"), "{e}");
        write("a", "`lab --part a` on day 1 at commit x, in 50:00");
        let (when, logs) = ran_in_parts("x", &dir, &["a", "b"]).unwrap().unwrap();
        assert_eq!(
            when,
            "they ran part by part: part `a` with `lab --part a` on day 1 at commit x, in \
             50:00; part `b` with `lab --part b` on day 2 at commit y, in 40:00"
        );
        assert_eq!(logs, "results/x/a`, `results/x/b");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_part_is_one_of_the_experiments_and_runs_once() {
        let dir = std::env::temp_dir().join(format!("splab-part-{}", std::process::id()));
        let lab = Path::new("/x/splicer-lab");
        let e = run_part("rosu-modem", Grid::Full, "nope", &dir, lab, "c").unwrap_err();
        assert!(e.to_string().contains("\"loss1-sack-on\""), "{e}");
        std::fs::create_dir_all(dir.join("loss1-sack-on")).unwrap();
        let e = run_part("rosu-modem", Grid::Full, "loss1-sack-on", &dir, lab, "c").unwrap_err();
        assert!(e.to_string().contains("has run there already"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
