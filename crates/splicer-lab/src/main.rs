//! `splicer-lab`: build a scenario's test bed, or clean up after crashed runs.
#![forbid(unsafe_code)]

use std::io::Read;

use splicer_lab::{bed, Bed, Scenario};

const USAGE: &str = "usage: splicer-lab up SCENARIO.toml   build the bed, print its hosts, tear down at end of input
       splicer-lab check SCENARIO.toml   validate a scenario file
       splicer-lab clean                 delete namespaces left by crashed runs";

fn load(path: &str) -> anyhow::Result<Scenario> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {path}: {e}"))?;
    Scenario::from_toml(&text).map_err(|e| anyhow::anyhow!("{path}: {e}"))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match (args.first().map(String::as_str), args.get(1)) {
        (Some("check"), Some(path)) => {
            let s = load(path)?;
            println!(
                "{path}: OK ({} hosts, {} links)",
                s.hosts.len(),
                s.links.len()
            );
        }
        (Some("up"), Some(path)) => {
            let bed = Bed::build(load(path)?)?;
            for h in &load(path)?.hosts {
                let addr = bed.addr(&h.name).map_or("-".to_string(), |a| a.to_string());
                println!("{:<12} netns {:<24} {addr}", h.name, bed.netns(&h.name));
            }
            println!("up; end of input (Ctrl-D) tears it down");
            // Ctrl-C ends the process too; `splicer-lab clean` then removes the namespaces.
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            drop(bed);
        }
        (Some("clean"), None) => {
            let removed = bed::clean()?;
            println!(
                "removed {} namespace(s){}",
                removed.len(),
                if removed.is_empty() {
                    String::new()
                } else {
                    format!(": {}", removed.join(" "))
                }
            );
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
    Ok(())
}
