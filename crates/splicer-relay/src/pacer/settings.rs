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
    /// The proxy's own work first: a splice moves only while no request of the proxy's own
    /// is being served, held at most `hold` at a time.
    Conservative,
    /// Splices and the proxy's own work share the machine in proportion to their request
    /// rates, while the proxy's own work is waiting (docs/pacer.md has the formula).
    Proportional,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Rate => "rate",
            Mode::Conservative => "conservative",
            Mode::Proportional => "proportional",
        }
    }

    /// Whether the mode follows the proxy's own work ([`crate::Relay::foreground`]).
    pub fn follows_demand(self) -> bool {
        matches!(self, Mode::Conservative | Mode::Proportional)
    }
}

/// How long a splice may be held at a time in `conservative` and `proportional` modes: a
/// duration such as `"50ms"` or `"1s"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold(pub std::time::Duration);

impl Default for Hold {
    fn default() -> Self {
        Hold(std::time::Duration::from_millis(DEFAULT_HOLD_MS))
    }
}

/// The default `hold`: a hit of a few hundred kilobytes is written within it on this
/// machine, and a splice held that long still moves a chunk twenty times a second.
pub const DEFAULT_HOLD_MS: u64 = 50;
/// The longest `hold` accepted: past it a held splice's peer may time out.
pub const MAX_HOLD_MS: u64 = 10_000;

impl<'de> serde::Deserialize<'de> for Hold {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let t = text.trim();
        let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
            (n, 1)
        } else if let Some(n) = t.strip_suffix('s') {
            (n, 1000)
        } else {
            return Err(serde::de::Error::custom(format!(
                "{text:?}: a duration in ms or s, such as \"50ms\""
            )));
        };
        let n: u64 = num.trim().parse().map_err(|_| {
            serde::de::Error::custom(format!("{text:?} is not a duration (such as \"50ms\")"))
        })?;
        Ok(Hold(std::time::Duration::from_millis(
            n.saturating_mul(scale),
        )))
    }
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
    /// `conservative`, `proportional`: the longest a splice is held at a time.
    pub hold: Hold,
    /// `conservative`, `proportional`: the rate the class's kernel splices of one front end
    /// are paced at together while held, shared evenly (a kernel splice cannot be stopped
    /// between two packets; it is slowed). In `conservative`, also what the class's
    /// user-space splices read together at the end of a `hold` the proxy's work outlasted.
    pub floor: u64,
}

/// The least rate a cap may have: below a few packets a second TCP's own timers decide.
pub const MIN_RATE: u64 = 4096;

/// The default `floor`: 1 MiB/s for the class, a few segments a millisecond.
pub const DEFAULT_FLOOR: u64 = 1 << 20;

impl ClassPace {
    /// Whether this class is paced at all.
    pub fn paced(&self) -> bool {
        match self.mode {
            Mode::Off => false,
            Mode::Rate => self.per_splice > 0 || self.total > 0,
            Mode::Conservative | Mode::Proportional => true,
        }
    }

    /// The rate a held kernel splice is paced at.
    pub fn floor_rate(&self) -> u64 {
        if self.floor > 0 {
            self.floor
        } else {
            DEFAULT_FLOOR
        }
    }

    /// What is wrong with the table, for the configuration's check.
    pub fn check(&self) -> Result<(), String> {
        if self.mode == Mode::Off {
            return Ok(());
        }
        if self.mode.follows_demand() {
            return self.check_demand();
        }
        if self.hold != Hold::default() || self.floor != 0 {
            return Err("hold and floor are for the conservative and proportional modes".into());
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

    fn check_demand(&self) -> Result<(), String> {
        let mode = self.mode.name();
        if self.per_splice != 0 || self.total != 0 || self.burst != 0 {
            return Err(format!(
                "mode = \"{mode}\" takes hold and floor; per_splice, total and burst are the rate mode's"
            ));
        }
        let ms = self.hold.0.as_millis();
        if ms == 0 || ms > u128::from(MAX_HOLD_MS) {
            return Err(format!(
                "hold = {ms}ms: from 1ms to {MAX_HOLD_MS}ms (a splice held longer may time out its peer)"
            ));
        }
        if self.floor != 0 && self.floor < MIN_RATE {
            return Err(format!(
                "floor = {}: at least {MIN_RATE} bytes a second, or 0",
                self.floor
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
