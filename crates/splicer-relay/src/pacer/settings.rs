//! The pacer's settings: front ends, classes, modes, and the tables of `[pacer]`.

/// Which front end a splice serves: each has its own pacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Front {
    Socks,
    #[default]
    Http,
    Edge,
}

impl Front {
    pub const ALL: [Front; 3] = [Front::Socks, Front::Http, Front::Edge];

    pub fn name(self) -> &'static str {
        match self {
            Front::Socks => "socks",
            Front::Http => "http",
            Front::Edge => "edge",
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// A class of spliced traffic, paced apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Request and answer bodies the proxy does not store (whichever engine moves them),
    /// and answers handed to a kernel engine to the end of the connection.
    Bodies,
    /// SOCKS and CONNECT tunnels.
    Tunnels,
    /// Answer bodies being stored while they go to the client (a cache fill).
    Fills,
}

impl Class {
    pub const ALL: [Class; 3] = [Class::Bodies, Class::Tunnels, Class::Fills];

    pub fn name(self) -> &'static str {
        match self {
            Class::Bodies => "bodies",
            Class::Tunnels => "tunnels",
            Class::Fills => "fills",
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// How one class is paced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Splices run as fast as the engines move them.
    #[default]
    Off,
    /// Caps in bytes a second: `per_splice`, `total`.
    Rate,
}

/// One class's pacing: a `[pacer.<class>]` table (docs/configuration.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClassPace {
    pub mode: Mode,
    /// Bytes a second one splice (one direction of one connection) may move; 0: no cap.
    pub per_splice: u64,
    /// Bytes a second the class's splices of one front end may move together; 0: no cap.
    pub total: u64,
    /// Most bytes a splice or the class may move at once after a pause; 0: a fiftieth of
    /// the rate (20 ms of it), at least 64 KiB.
    pub burst: u64,
}

/// The least rate a cap may have: below a few packets a second TCP's own timers decide.
pub const MIN_RATE: u64 = 4096;

impl ClassPace {
    /// Whether this class is paced at all.
    pub fn paced(&self) -> bool {
        self.mode == Mode::Rate && (self.per_splice > 0 || self.total > 0)
    }

    /// What is wrong with the table, for the configuration's check.
    pub fn check(&self) -> Result<(), String> {
        if self.mode == Mode::Off {
            return Ok(());
        }
        if self.per_splice == 0 && self.total == 0 {
            return Err("mode = \"rate\" needs per_splice or total (bytes a second)".into());
        }
        for (name, v) in [("per_splice", self.per_splice), ("total", self.total)] {
            if v != 0 && v < MIN_RATE {
                return Err(format!(
                    "{name} = {v}: at least {MIN_RATE} bytes a second, or 0"
                ));
            }
        }
        if self.burst != 0 && self.burst < 1500 {
            return Err(format!(
                "burst = {}: at least 1500 bytes (a packet), or 0",
                self.burst
            ));
        }
        Ok(())
    }

    pub(super) fn burst_for(&self, rate: u64) -> u64 {
        if self.burst > 0 {
            self.burst
        } else {
            (rate / 50).max(64 * 1024)
        }
    }
}

/// A front end's pacing: one table per class (`[pacer]`, or a front end's own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PacerConfig {
    pub bodies: ClassPace,
    pub tunnels: ClassPace,
    pub fills: ClassPace,
}

impl PacerConfig {
    pub fn class(&self, c: Class) -> &ClassPace {
        match c {
            Class::Bodies => &self.bodies,
            Class::Tunnels => &self.tunnels,
            Class::Fills => &self.fills,
        }
    }
}

/// The pacing of every front end: what [`crate::Relay::set_pacing`] takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pacing {
    pub fronts: [PacerConfig; 3],
}

impl Pacing {
    pub fn set(&mut self, front: Front, p: PacerConfig) {
        self.fronts[front.index()] = p;
    }

    pub fn get(&self, front: Front, class: Class) -> ClassPace {
        *self.fronts[front.index()].class(class)
    }
}
