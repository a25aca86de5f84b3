//! Confidence intervals over an experiment's rounds, and the verdict a claim gets from one.
//!
//! The seeds report means with confidence intervals from a few runs per point (seed 000: 6
//! runs, 90%; seed 001: 95%): Student's t interval of the mean, which is what this computes.
//! The quantiles are the published table's (two-sided 90% and 95%, 1 to 30 degrees of
//! freedom, the normal quantile beyond): sixty fixed numbers, where a statistics crate would
//! bring a random-number generator and a linear-algebra library into the lab's build.

/// Student's t quantile t(0.95, df), df = 1..=30: the two-sided 90% interval.
const T90: [f64; 30] = [
    6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771,
    1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706,
    1.703, 1.701, 1.699, 1.697,
];
/// t(0.975, df), df = 1..=30: the two-sided 95% interval.
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// A confidence level the tables have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// 90%: seed 000's.
    P90,
    /// 95%: seed 001's.
    P95,
}

impl Level {
    pub fn percent(self) -> u32 {
        match self {
            Level::P90 => 90,
            Level::P95 => 95,
        }
    }

    /// The two-sided t quantile for `df` degrees of freedom (`df` ≥ 1).
    fn t(self, df: usize) -> f64 {
        let (table, normal) = match self {
            Level::P90 => (&T90, 1.645),
            Level::P95 => (&T95, 1.960),
        };
        table.get(df.wrapping_sub(1)).copied().unwrap_or(normal)
    }
}

/// The mean of some runs and its confidence interval, `mean ± half`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub mean: f64,
    /// Half the interval's width; NaN with fewer than two runs (no interval).
    pub half: f64,
    pub n: usize,
}

impl Interval {
    /// The mean of the finite `samples` and its `level` interval.
    pub fn of(samples: &[f64], level: Level) -> Interval {
        let v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        let n = v.len();
        if n == 0 {
            return Interval {
                mean: f64::NAN,
                half: f64::NAN,
                n,
            };
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        let half = if n < 2 {
            f64::NAN
        } else {
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            level.t(n - 1) * (var / n as f64).sqrt()
        };
        Interval { mean, half, n }
    }

    pub fn lo(&self) -> f64 {
        self.mean - self.half
    }

    pub fn hi(&self) -> f64 {
        self.mean + self.half
    }

    /// Whether there is an interval at all (two runs or more).
    pub fn known(&self) -> bool {
        self.half.is_finite() && self.mean.is_finite()
    }

    /// `12.3 ± 4.5`, the mean alone for one run, `–` for none.
    pub fn show(&self, digits: usize) -> String {
        // A mean that rounds to zero shows as 0, not -0: a sum of rounds that cancel can
        // land a hair below zero, and "-0.0" would read as a sign.
        let mean = if (self.mean * 10f64.powi(digits as i32)).round() == 0.0 {
            0.0
        } else {
            self.mean
        };
        match (mean.is_finite(), self.half.is_finite()) {
            (false, _) => "–".into(),
            (true, false) => format!("{:.*}", digits, mean),
            (true, true) => format!("{:.*} ± {:.*}", digits, mean, digits, self.half),
        }
    }
}

/// What the numbers say of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The whole interval is where the claim puts it.
    Holds,
    /// The whole interval is on the claim's side of zero, but not as far as it says.
    InDirection,
    /// Neither: the interval reaches the other side of zero.
    Not,
    /// No interval (fewer than two runs), or no such point.
    Unknown,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::InDirection => "in direction",
            Verdict::Not => "not",
            Verdict::Unknown => "–",
        }
    }

    /// A claim that a quantity (a gain, positive the claim's way) is at least `bound`.
    pub fn at_least(i: Interval, bound: f64) -> Verdict {
        if !i.known() {
            Verdict::Unknown
        } else if i.lo() >= bound {
            Verdict::Holds
        } else if i.lo() > 0.0 {
            Verdict::InDirection
        } else {
            Verdict::Not
        }
    }

    /// A claim that a quantity lies within `lo..=hi` (`≈ 2`): in direction when the whole
    /// interval has left the reference `from` (the relay's figure) towards the range
    /// without reaching it.
    pub fn within(i: Interval, lo: f64, hi: f64, from: f64) -> Verdict {
        if !i.known() {
            Verdict::Unknown
        } else if i.lo() >= lo && i.hi() <= hi {
            Verdict::Holds
        } else if (lo > from && i.lo() > from) || (hi < from && i.hi() < from) {
            Verdict::InDirection
        } else {
            Verdict::Not
        }
    }

    /// A claim that something is at least `bound` times another ("n× fewer", "≥ 2× the
    /// relay"), `i` the ratio: in direction when the interval's low end is above 1.
    pub fn factor_at_least(i: Interval, bound: f64) -> Verdict {
        if !i.known() {
            Verdict::Unknown
        } else if i.lo() >= bound {
            Verdict::Holds
        } else if i.lo() > 1.0 {
            Verdict::InDirection
        } else {
            Verdict::Not
        }
    }

    /// A claim that something is at most `bound` (< 1) times another ("a fraction of"), `i`
    /// the ratio: in direction when the interval's high end is below 1.
    pub fn fraction_at_most(i: Interval, bound: f64) -> Verdict {
        if !i.known() {
            Verdict::Unknown
        } else if i.hi() <= bound {
            Verdict::Holds
        } else if i.hi() < 1.0 {
            Verdict::InDirection
        } else {
            Verdict::Not
        }
    }

    /// A claim that one quantity is above another where the two were measured apart (in
    /// different parts of an experiment, so no round pairs them): it holds where the
    /// intervals do not overlap, in direction where only the means are in order.
    pub fn apart(higher: Interval, lower: Interval) -> Verdict {
        if !higher.known() || !lower.known() {
            Verdict::Unknown
        } else if higher.lo() > lower.hi() {
            Verdict::Holds
        } else if higher.mean > lower.mean {
            Verdict::InDirection
        } else {
            Verdict::Not
        }
    }

    /// A claim that a quantity lies above a fixed `bound` ("most": above 50%), with no
    /// reference of its own to say a direction by: it holds where the whole interval is
    /// above the bound, in direction where only the mean is.
    pub fn above(i: Interval, bound: f64) -> Verdict {
        if !i.known() {
            Verdict::Unknown
        } else if i.lo() > bound {
            Verdict::Holds
        } else if i.mean > bound {
            Verdict::InDirection
        } else {
            Verdict::Not
        }
    }

    /// How far a verdict goes, for [`Verdict::all`] and [`Verdict::any`].
    fn rank(self) -> u8 {
        match self {
            Verdict::Unknown => 0,
            Verdict::Not => 1,
            Verdict::InDirection => 2,
            Verdict::Holds => 3,
        }
    }

    /// The weakest of several verdicts (a claim over many points holds only where each
    /// does); `Unknown` when there are none or any is unknown.
    pub fn all(v: impl IntoIterator<Item = Verdict>) -> Verdict {
        v.into_iter()
            .min_by_key(|v| v.rank())
            .unwrap_or(Verdict::Unknown)
    }

    /// The strongest of several (an "up to" claim needs one point); `Unknown` when none is
    /// known.
    pub fn any(v: impl IntoIterator<Item = Verdict>) -> Verdict {
        v.into_iter()
            .max_by_key(|v| v.rank())
            .unwrap_or(Verdict::Unknown)
    }
}

/// `a / b` round by round (the variants compared ran one after the other in each round), for
/// a "n times" claim. Rounds either misses, and those where `b` is not above 0, are left out.
pub fn paired_ratios(a: &[(usize, f64)], b: &[(usize, f64)]) -> Vec<f64> {
    a.iter()
        .filter_map(|(round, x)| {
            let y = b.iter().find(|(r, _)| r == round)?.1;
            (x.is_finite() && y > 0.0).then(|| x / y)
        })
        .collect()
}

/// `a − b` round by round (the variants compared ran next to each other in each round).
/// Rounds either misses are left out.
pub fn paired_differences(a: &[(usize, f64)], b: &[(usize, f64)]) -> Vec<f64> {
    a.iter()
        .filter_map(|(round, x)| Some(x - b.iter().find(|(r, _)| r == round)?.1))
        .collect()
}

/// The gain of `b` over `a`, `(a − b) · 100 / a` (seed 000's definition), round by round:
/// the variants of a point run next to each other in each round, so the gains pair them.
/// Rounds either misses are left out.
pub fn paired_gains(a: &[(usize, f64)], b: &[(usize, f64)]) -> Vec<f64> {
    a.iter()
        .filter_map(|(round, x)| {
            let y = b.iter().find(|(r, _)| r == round)?.1;
            (x.is_finite() && y.is_finite() && *x != 0.0).then(|| (x - y) * 100.0 / x)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_and_fractions_get_their_verdicts() {
        let i = |mean: f64, half: f64| Interval { mean, half, n: 3 };
        assert_eq!(Verdict::factor_at_least(i(12.0, 1.0), 10.0), Verdict::Holds);
        assert_eq!(
            Verdict::factor_at_least(i(10.5, 1.0), 10.0),
            Verdict::InDirection
        );
        assert_eq!(Verdict::factor_at_least(i(1.2, 0.5), 10.0), Verdict::Not);
        assert_eq!(Verdict::fraction_at_most(i(0.3, 0.1), 0.5), Verdict::Holds);
        assert_eq!(
            Verdict::fraction_at_most(i(0.6, 0.1), 0.5),
            Verdict::InDirection
        );
        assert_eq!(Verdict::fraction_at_most(i(0.95, 0.1), 0.5), Verdict::Not);
        let one = Interval::of(&[3.0], Level::P95);
        assert_eq!(Verdict::factor_at_least(one, 2.0), Verdict::Unknown);
        assert_eq!(Verdict::apart(i(2.0, 0.5), i(1.0, 0.4)), Verdict::Holds);
        assert_eq!(
            Verdict::apart(i(2.0, 0.5), i(1.0, 0.6)),
            Verdict::InDirection
        );
        assert_eq!(Verdict::apart(i(1.0, 0.1), i(2.0, 0.1)), Verdict::Not);
        assert_eq!(Verdict::apart(one, i(2.0, 0.1)), Verdict::Unknown);
        assert_eq!(Verdict::above(i(60.0, 5.0), 50.0), Verdict::Holds);
        assert_eq!(Verdict::above(i(55.0, 10.0), 50.0), Verdict::InDirection);
        assert_eq!(Verdict::above(i(45.0, 10.0), 50.0), Verdict::Not);
        assert_eq!(Verdict::above(one, 50.0), Verdict::Unknown);
    }

    #[test]
    fn ratios_pair_rounds() {
        let a = [(0, 10.0), (1, 20.0), (2, 30.0), (3, 1.0)];
        let b = [(0, 1.0), (2, 3.0), (3, 0.0)];
        assert_eq!(paired_ratios(&a, &b), [10.0, 10.0]);
    }

    #[test]
    fn a_mean_that_rounds_to_zero_has_no_sign() {
        let i = Interval {
            mean: -1e-15,
            half: 16.9,
            n: 3,
        };
        assert_eq!(i.show(1), "0.0 ± 16.9");
        let j = Interval {
            mean: -0.04,
            half: f64::NAN,
            n: 1,
        };
        assert_eq!(j.show(1), "0.0");
        let k = Interval {
            mean: -0.06,
            half: f64::NAN,
            n: 1,
        };
        assert_eq!(k.show(1), "-0.1");
    }

    #[test]
    fn an_interval_is_students_t_over_the_runs() {
        // Mean 2, sample standard deviation 1, three runs: t(0.95, 2) = 2.920.
        let i = Interval::of(&[1.0, 2.0, 3.0], Level::P90);
        assert_eq!((i.mean, i.n), (2.0, 3));
        assert!((i.half - 2.920 / 3f64.sqrt()).abs() < 1e-9, "{i:?}");
        let j = Interval::of(&[1.0, 2.0, 3.0], Level::P95);
        assert!((j.half - 4.303 / 3f64.sqrt()).abs() < 1e-9);
        assert_eq!(i.show(2), "2.00 ± 1.69");
        // NaN runs are left out; one run has no interval, none no mean.
        let one = Interval::of(&[f64::NAN, 5.0], Level::P90);
        assert_eq!((one.mean, one.n, one.known()), (5.0, 1, false));
        assert_eq!(one.show(1), "5.0");
        assert_eq!(Interval::of(&[], Level::P90).show(1), "–");
        // Beyond the table: the normal quantile.
        let many: Vec<f64> = (0..41).map(|k| f64::from(k % 2)).collect();
        let w = Interval::of(&many, Level::P90);
        let sd = (many.iter().map(|x| (x - w.mean).powi(2)).sum::<f64>() / 40.0).sqrt();
        assert!((w.half - 1.645 * sd / 41f64.sqrt()).abs() < 1e-9);
    }

    #[test]
    fn the_quantiles_fall_towards_the_normal_ones() {
        for (t, normal) in [(&T90, 1.645), (&T95, 1.960)] {
            assert!(t.windows(2).all(|w| w[0] > w[1]), "{t:?}");
            assert!(t[29] > normal && t[29] - normal < 0.1);
        }
    }

    #[test]
    fn a_verdict_is_what_the_interval_carries() {
        let iv = |mean, half| Interval { mean, half, n: 3 };
        // A gain of at least 30%.
        assert_eq!(Verdict::at_least(iv(40.0, 5.0), 30.0), Verdict::Holds);
        assert_eq!(
            Verdict::at_least(iv(40.0, 15.0), 30.0),
            Verdict::InDirection
        );
        assert_eq!(Verdict::at_least(iv(10.0, 12.0), 30.0), Verdict::Not);
        assert_eq!(Verdict::at_least(iv(-5.0, 1.0), 30.0), Verdict::Not);
        assert_eq!(
            Verdict::at_least(iv(40.0, f64::NAN), 30.0),
            Verdict::Unknown
        );
        // ≈ 2 (1.7..=2.3), from a relay's 1.2.
        assert_eq!(Verdict::within(iv(2.0, 0.2), 1.7, 2.3, 1.2), Verdict::Holds);
        assert_eq!(
            Verdict::within(iv(1.5, 0.2), 1.7, 2.3, 1.2),
            Verdict::InDirection
        );
        assert_eq!(Verdict::within(iv(1.3, 0.2), 1.7, 2.3, 1.2), Verdict::Not);
        use Verdict::*;
        assert_eq!(Verdict::all([Holds, InDirection, Holds]), InDirection);
        assert_eq!(Verdict::all([Holds, Unknown]), Unknown);
        assert_eq!(Verdict::any([Not, InDirection, Unknown]), InDirection);
        assert_eq!(Verdict::any([]), Unknown);
    }

    #[test]
    fn gains_pair_the_runs_of_one_round() {
        let relay = [(0, 10.0), (1, 20.0), (2, 8.0)];
        let splice = [(1, 15.0), (0, 5.0)];
        assert_eq!(paired_gains(&relay, &splice), vec![50.0, 25.0]);
    }
}
