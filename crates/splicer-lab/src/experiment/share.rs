//! Exact (Clopper–Pearson) confidence bounds for a share counted over `n` trials: `k` slow
//! requests of `n`. Seed 004's claim is a share ("< 0.1% of requests need 2 round trips"),
//! and a count of zero says only as much as its `n` allows: 0 of `n` puts the share below
//! about 3/`n` at 95% (the rule of three), so 0 of 290 cannot show "< 0.1%" and 0 of 3,000
//! just can.
//!
//! The bounds come from the binomial distribution itself, summed in logarithms (a share's
//! terms underflow a `f64` at the sizes counted here) and inverted by bisection: a few
//! dozen lines where a statistics crate would be a large dependency for two functions.

use super::stats::Verdict;

/// ln P(X ≤ k) for X ~ Binomial(n, p), 0 < p < 1.
fn ln_cdf(k: u64, n: u64, p: f64) -> f64 {
    let (lp, lq) = (p.ln(), (-p).ln_1p());
    // ln of the i = 0 term, then each next from the last: C(n, i+1) / C(n, i) = (n−i)/(i+1).
    let mut term = n as f64 * lq;
    let mut terms = Vec::with_capacity(k as usize + 1);
    terms.push(term);
    for i in 0..k.min(n) {
        term += ((n - i) as f64).ln() - ((i + 1) as f64).ln() + lp - lq;
        terms.push(term);
    }
    let top = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    top + terms.iter().map(|t| (t - top).exp()).sum::<f64>().ln()
}

/// The `p` in (0, 1) at which the decreasing `f(p)` crosses `target`.
fn bisect(f: impl Fn(f64) -> f64, target: f64) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if f(mid) > target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// The one-sided upper bound of the share at confidence `1 − alpha`: the largest share
/// under which `k` or fewer of `n` would still happen with probability `alpha`.
pub fn upper(k: u64, n: u64, alpha: f64) -> f64 {
    if n == 0 || k >= n {
        return 1.0;
    }
    bisect(|p| ln_cdf(k, n, p), alpha.ln())
}

/// The one-sided lower bound at confidence `1 − alpha`: the smallest share under which `k`
/// or more of `n` would still happen with probability `alpha`.
pub fn lower(k: u64, n: u64, alpha: f64) -> f64 {
    if n == 0 || k == 0 {
        return 0.0;
    }
    // P(X ≥ k) = alpha where its complement P(X ≤ k−1), which falls with p, is 1 − alpha.
    bisect(|p| ln_cdf(k - 1, n, p), (-alpha).ln_1p())
}

/// A claim that a share is below `bound`, judged at confidence `1 − alpha`: holds when the
/// upper bound is below it, not when the lower bound is above it, and `Unknown` when the
/// count cannot tell (too few trials for the bound, or a count near it).
pub fn below(k: u64, n: u64, bound: f64, alpha: f64) -> Verdict {
    if n == 0 {
        Verdict::Unknown
    } else if upper(k, n, alpha) < bound {
        Verdict::Holds
    } else if lower(k, n, alpha) > bound {
        Verdict::Not
    } else {
        Verdict::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_of_n_is_the_rule_of_three() {
        // Exactly 1 − 0.05^(1/n); about 3/n.
        for n in [29u64, 290, 2_900, 10_000] {
            let u = upper(0, n, 0.05);
            let exact = 1.0 - 0.05f64.powf(1.0 / n as f64);
            assert!((u - exact).abs() < 1e-9, "n={n}: {u} against {exact}");
            assert!((u * n as f64 - 3.0).abs() < 0.2, "n={n}: {u}");
        }
    }

    #[test]
    fn bounds_match_published_clopper_pearson_values() {
        // k = n: the lower bound is alpha^(1/n); one of ten, one-sided 95%: 0.3942 (the
        // upper of the two-sided 90% interval, as tabulated for Clopper–Pearson).
        let l = lower(10, 10, 0.05);
        assert!((l - 0.05f64.powf(0.1)).abs() < 1e-9, "{l}");
        let u = upper(1, 10, 0.05);
        assert!((u - 0.3942).abs() < 5e-4, "{u}");
        let l = lower(1, 10, 0.05);
        assert!((l - 0.005116).abs() < 5e-6, "{l}");
        // Large counts stay finite (the terms underflow without logarithms).
        let (l, u) = (lower(842, 10_000, 0.05), upper(842, 10_000, 0.05));
        assert!(l < 0.0842 && 0.0842 < u && u - l < 0.012, "{l} {u}");
    }

    #[test]
    fn a_share_below_a_bound_is_judged_by_the_count() {
        assert_eq!(below(0, 290, 0.001, 0.05), Verdict::Unknown);
        assert_eq!(below(0, 3_000, 0.001, 0.05), Verdict::Holds);
        assert_eq!(below(2, 10_000, 0.001, 0.05), Verdict::Holds);
        assert_eq!(below(49, 3_000, 0.001, 0.05), Verdict::Not);
        assert_eq!(below(0, 0, 0.001, 0.05), Verdict::Unknown);
    }
}
