//! The `[cache]` section: the HTTP front end's cache (docs/cache.md).

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use splicer_cache::{QuickAbort, Rule, Settings};

use super::BadValue;

/// The cache of the `http` front end. On by default (as Squid's `cache_mem`), in memory.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// `false` turns the cache off: every response is spliced, nothing is stored.
    pub enabled: bool,
    /// Bytes the memory store may hold (`256MiB`).
    #[serde(deserialize_with = "size")]
    pub memory: u64,
    /// Largest response body stored (`8MiB`).
    #[serde(deserialize_with = "size")]
    pub max_object: u64,
    /// Bytes all fills in progress may hold together (`64MiB`); a fill past it is given
    /// up, its client served on untapped.
    #[serde(deserialize_with = "size")]
    pub fill_memory: u64,
    /// Fraction of the time since `Last-Modified` that a response without explicit
    /// freshness stays fresh (RFC 9111 §4.2.2).
    pub heuristic: f32,
    /// Concurrent misses for one URI share one upstream request.
    pub collapse: bool,
    /// After a response that could not be stored, misses for its URI are not collapsed
    /// for this long (`120s`, Varnish's hit-for-miss; `0s`: always collapsed).
    #[serde(deserialize_with = "super::duration_or_zero")]
    pub pass_ttl: std::time::Duration,
    /// A fill whose client left is finished when at most this much remains …
    #[serde(deserialize_with = "size")]
    pub quick_abort_min: u64,
    /// … given up when more than this remains …
    #[serde(deserialize_with = "size")]
    pub quick_abort_max: u64,
    /// … and otherwise finished when this percentage has arrived (Squid's rules).
    pub quick_abort_pct: u8,
    /// Clients allowed to send `PURGE` (none by default).
    pub purge_clients: Vec<IpNet>,
    /// Decisions from the request, first match wins (default: cache).
    pub rule: Vec<Rule>,
    /// The disk tier (`[cache.disk]`); none by default.
    pub disk: Option<DiskConfig>,
}

/// `[cache.disk]`: objects kept in files, across restarts, served with `sendfile(2)`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskConfig {
    /// A directory of its own: created if missing; an existing one must be empty or
    /// Splicer's (it holds a `SPLICER-CACHE` file).
    pub path: std::path::PathBuf,
    /// Bytes its files may take (`1GiB`).
    #[serde(deserialize_with = "size", default = "default_disk_size")]
    pub size: u64,
    /// Bytes the index of what is on disk may hold in memory (`64MiB`): the heads.
    #[serde(deserialize_with = "size", default = "default_index_memory")]
    pub index_memory: u64,
}

fn default_disk_size() -> u64 {
    1 << 30
}

fn default_index_memory() -> u64 {
    64 << 20
}

impl Default for CacheConfig {
    fn default() -> Self {
        let s = Settings::default();
        CacheConfig {
            enabled: true,
            memory: s.memory,
            max_object: s.max_object,
            fill_memory: s.fill_memory,
            heuristic: s.heuristic,
            collapse: s.collapse,
            pass_ttl: s.pass_ttl,
            quick_abort_min: s.quick_abort.min,
            quick_abort_max: s.quick_abort.max,
            quick_abort_pct: s.quick_abort.pct,
            purge_clients: Vec::new(),
            rule: Vec::new(),
            disk: None,
        }
    }
}

impl CacheConfig {
    /// The checks; `Err((key, message))`.
    pub fn validate(&self, p: &mut super::Problems) {
        if self.memory < 1 << 20 {
            p.add("cache.memory", "must be at least 1MiB".into());
        }
        if self.max_object == 0 || self.max_object > self.memory / 4 {
            p.add(
                "cache.max_object",
                format!(
                    "must be between 1 byte and a quarter of cache.memory ({} bytes)",
                    self.memory / 4
                ),
            );
        }
        if self.fill_memory < self.max_object {
            p.add(
                "cache.fill_memory",
                format!(
                    "must be at least cache.max_object ({} bytes), or the largest objects \
                     could never be filled",
                    self.max_object
                ),
            );
        }
        if !(0.0..=1.0).contains(&self.heuristic) {
            p.add("cache.heuristic", "must be between 0 and 1".into());
        }
        if self.quick_abort_pct > 100 {
            p.add("cache.quick_abort_pct", "must be at most 100".into());
        }
        if self.quick_abort_min > self.quick_abort_max {
            p.add(
                "cache.quick_abort_min",
                "must not exceed cache.quick_abort_max".into(),
            );
        }
        for (i, r) in self.rule.iter().enumerate() {
            if let Err(e) = r.validate() {
                p.add(format!("cache.rule[{i}]"), e.to_string());
            }
        }
        if let Some(d) = &self.disk {
            if d.path.as_os_str().is_empty() || d.path.is_relative() {
                p.add(
                    "cache.disk.path",
                    "must be an absolute directory path".into(),
                );
            }
            if d.size < 4 * self.max_object {
                p.add(
                    "cache.disk.size",
                    format!(
                        "must be at least four times cache.max_object ({} bytes)",
                        4 * self.max_object
                    ),
                );
            }
            // An entry weighs its head's memory times size / index_memory in the index
            // (splicer_cache::store): past 256 a plain head would outweigh a shard.
            if d.index_memory < (1 << 20) || d.index_memory < d.size / 256 {
                p.add(
                    "cache.disk.index_memory",
                    format!(
                        "must be at least 1MiB and at least cache.disk.size / 256 ({} bytes)",
                        d.size / 256
                    ),
                );
            }
        }
    }

    pub fn settings(&self) -> Settings {
        Settings {
            memory: self.memory,
            max_object: self.max_object,
            fill_memory: self.fill_memory,
            heuristic: self.heuristic,
            quick_abort: QuickAbort {
                min: self.quick_abort_min,
                max: self.quick_abort_max,
                pct: self.quick_abort_pct,
            },
            collapse: self.collapse,
            pass_ttl: self.pass_ttl,
            rules: self.rule.clone(),
            disk: self.disk.as_ref().map(|d| splicer_cache::DiskSettings {
                path: d.path.clone(),
                size: d.size,
                index_memory: d.index_memory,
            }),
        }
    }
}

/// Parses sizes such as `512`, `64KiB`, `256MiB`, `1GiB` (K, M, G and KB, MB, GB are
/// read as binary units too, as Squid does).
pub fn parse_size(s: &str) -> Result<u64, BadValue> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| BadValue::NotASize(s.to_string()))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        u => {
            return Err(BadValue::UnknownUnit {
                text: s.to_string(),
                unit: u.to_string(),
                expected: "B, KiB, MiB or GiB",
            })
        }
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| BadValue::TooLarge(s.to_string()))
}

fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(d)? {
        Size::Bytes(n) => Ok(n),
        Size::Text(t) => parse_size(&t).map_err(serde::de::Error::custom),
    }
}
