//! Command-line flags of `splicer-lab` subcommands: `--name value` pairs and bare switches.
//! Each subcommand takes what it knows; anything left over is an error naming the flag.

use std::collections::BTreeMap;
use std::str::FromStr;

pub struct Flags {
    values: BTreeMap<String, String>,
    switches: Vec<String>,
}

impl Flags {
    /// Parses `args`; the names in `switches` take no value.
    pub fn parse(args: &[String], switches: &[&str]) -> anyhow::Result<Flags> {
        let mut values = BTreeMap::new();
        let mut on = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            anyhow::ensure!(a.starts_with("--"), "unexpected argument {a:?}");
            if switches.contains(&a.as_str()) {
                on.push(a.clone());
                continue;
            }
            let v = it
                .next()
                .ok_or_else(|| anyhow::anyhow!("{a} needs a value"))?;
            anyhow::ensure!(
                values.insert(a.clone(), v.clone()).is_none(),
                "{a} is given twice"
            );
        }
        Ok(Flags {
            values,
            switches: on,
        })
    }

    pub fn str(&mut self, name: &str) -> Option<String> {
        self.values.remove(name)
    }

    pub fn required<T: FromStr>(&mut self, name: &str) -> anyhow::Result<T>
    where
        T::Err: std::fmt::Display,
    {
        let v = self
            .str(name)
            .ok_or_else(|| anyhow::anyhow!("{name} is required"))?;
        v.parse().map_err(|e| anyhow::anyhow!("{name} {v:?}: {e}"))
    }

    pub fn get<T: FromStr>(&mut self, name: &str, default: T) -> anyhow::Result<T>
    where
        T::Err: std::fmt::Display,
    {
        match self.str(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|e| anyhow::anyhow!("{name} {v:?}: {e}")),
        }
    }

    pub fn switch(&mut self, name: &str) -> bool {
        let had = self.switches.iter().any(|s| s == name);
        self.switches.retain(|s| s != name);
        had
    }

    /// Fails on flags no one took.
    pub fn finish(self) -> anyhow::Result<()> {
        let left: Vec<&String> = self.values.keys().chain(self.switches.iter()).collect();
        anyhow::ensure!(left.is_empty(), "unknown flag(s): {left:?}");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn values_switches_and_leftovers() {
        let mut f = Flags::parse(&args("--clients 20 --ssl --size 1024"), &["--ssl"]).unwrap();
        assert_eq!(f.required::<usize>("--clients").unwrap(), 20);
        assert!(f.switch("--ssl"));
        assert_eq!(f.get("--seed", 1u64).unwrap(), 1);
        let e = f.finish().unwrap_err().to_string();
        assert!(e.contains("--size"), "{e}");
        let mut f = Flags::parse(&args("--clients x"), &[]).unwrap();
        let e = f.required::<usize>("--clients").unwrap_err().to_string();
        assert!(e.contains("--clients") && e.contains("\"x\""), "{e}");
        assert!(Flags::parse(&args("--clients"), &[]).is_err());
        assert!(Flags::parse(&args("--a 1 --a 2"), &[]).is_err());
    }
}
