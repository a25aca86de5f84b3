//! The sweep's report: the plots, `points.csv` with every run, the claims table (the
//! paper's words beside our figures, each verdict computed from the intervals) and the
//! tables of every point.

use std::path::Path;

use super::figs::{best, fig, mean_range, Fig, Figs, LEVEL};
use super::{Params, CPU};
use crate::experiment::run::VariantRun;
use crate::experiment::stats::{Interval, Verdict};
use crate::reproduce::rosu::Kind;
use crate::reproduce::table::Table;

fn proxy_ms(f: &Fig) -> f64 {
    f.proxy_ms
}

fn kernel_ms(f: &Fig) -> f64 {
    f.kernel_ms
}

fn lat(f: &Fig) -> f64 {
    f.lat_ms
}

/// Writes the plots and `points.csv` into `out` and returns the report's text.
pub(super) fn write(p: &Params, runs: &[VariantRun], out: &Path) -> anyhow::Result<String> {
    let get = Figs {
        runs,
        kind: Kind::Get,
        sizes: p.get_sizes,
        clients: p.get_clients,
    };
    let ssl = Figs {
        runs,
        kind: Kind::Ssl,
        sizes: p.ssl_sizes,
        clients: p.ssl_clients,
    };
    plots(&get, &ssl, out)?;
    std::fs::write(out.join("points.csv"), points_csv(runs))?;
    let errors: u64 = runs.iter().map(|r| fig(r).errors).sum();
    let level = LEVEL.percent();
    Ok(format!(
        "## The paper's figures beside ours\n\n\
         Gain = (relay − splice) · 100 / relay, the paper's definition, computed round by \
         round (the engines of a point run next to each other in each round) and given as \
         the mean over the rounds ± half its {level}% confidence interval (Student's t, the \
         paper's level). Splicer's CPU is given two ways: its process alone, and with the \
         kernel work it causes, its host's receive threads and the kernel's workers \
         (docs/lab.md, \"The proxy's kernel work\"): the paper's proxy was a machine of its \
         own, whose CPU counted both. The workers' time is the whole machine's: the \
         relay's runs show some too, which is not Splicer's and narrows every gain \
         towards zero (the receive threads' and workers' own tables are below). \
         Verdicts are computed from the intervals: a bound \
         (≥ 30%) **holds** where every point's interval lies at or beyond it, an \"up to\" \
         claim where at least one point's interval lies at or beyond half the paper's \
         figure; **in direction** where the intervals are on the claim's side of zero but \
         not that far; **not** otherwise; `–` without an interval (one round). Failed or \
         timed-out requests over the whole experiment: {errors}.\n\n{claims}\n\
         {get_section}{tcp}\n\
         ![Fig 5](rosu-sweep/fig5.svg) ![Fig 5, the process alone](rosu-sweep/fig5-process.svg) \
         ![Fig 9](rosu-sweep/fig9.svg)\n\n\
         {ssl_section}\n\
         ![Fig 13](rosu-sweep/fig13.svg) ![Fig 14](rosu-sweep/fig14.svg)\n\n\
         Per run: [`points.csv`](rosu-sweep/points.csv). The paper's figures survive \
         only as the text's words (its plots were lost), so the claims are compared, \
         not ratios.\n\n",
        claims = claims(p, &get, &ssl).markdown(),
        get_section = section(
            &get,
            "Figs 4–11: plain GETs",
            ["Figs 4–5:", "Figs 8–9:", "Fig 10:", "Fig 11:"]
        ),
        tcp = tcp_section(&get),
        ssl_section = section(
            &ssl,
            "Figs 12–15: SSL tunnels",
            [
                "Figs 12–13:",
                "Fig 14:",
                "SSL (the paper has no figure):",
                "Fig 15:"
            ]
        ),
    ))
}

/// Figs 5, 9, 13 and 14 as SVGs: the gain of each engine over the relay, with intervals.
fn plots(get: &Figs<'_>, ssl: &Figs<'_>, out: &Path) -> anyhow::Result<()> {
    get.plot(
        &out.join("fig5.svg"),
        "Proxy CPU per request with its kernel work: gain over the relay (Fig 5)",
        &kernel_ms,
    )?;
    get.plot(
        &out.join("fig5-process.svg"),
        "Proxy process CPU per request: gain over the relay (Fig 5)",
        &proxy_ms,
    )?;
    get.plot(
        &out.join("fig9.svg"),
        "Latency: gain of splice over the relay (Fig 9)",
        &lat,
    )?;
    ssl.plot(
        &out.join("fig13.svg"),
        "SSL: proxy CPU per request with its kernel work, gain over the relay (Fig 13)",
        &kernel_ms,
    )?;
    ssl.plot(
        &out.join("fig14.svg"),
        "SSL: latency, gain over the relay (Fig 14)",
        &lat,
    )
}

/// One line per run: its point, round and every figure taken from it.
fn points_csv(runs: &[VariantRun]) -> String {
    let mut csv = String::from(
        "kind,engine,clients,size_kib,round,req_per_s,proxy_cpu_pct,proxy_ms_per_req,proxy_kernel_ms_per_req,receive_threads_ms_per_req,kworker_ms_per_req,machine_ms_per_req,latency_mean_ms,latency_cv,server_data_per_ack,server_rto_per_1000,errors\n",
    );
    for r in runs {
        let f = fig(r);
        let parts: Vec<&str> = r.variant.split('.').collect();
        let [e, c, s, k] = parts[..] else { continue };
        csv += &format!(
            "{k},{e},{},{},{},{:.1},{:.2},{:.4},{:.4},{:.4},{:.4},{:.4},{:.1},{:.3},{:.2},{:.2},{}\n",
            c.trim_start_matches('c'),
            s.trim_end_matches('k'),
            r.round,
            f.per_s,
            f.proxy_pct,
            f.proxy_ms,
            f.kernel_ms,
            f.napi_ms,
            f.kworker_ms,
            f.machine_ms,
            f.lat_ms,
            f.cv,
            f.data_per_ack,
            f.rto_per_k,
            f.errors
        );
    }
    csv
}

/// `lo to hi%; least a ± b`: the range of the points' mean gains and the worst point.
fn range_and_worst(v: &[Interval]) -> String {
    let worst = v
        .iter()
        .filter(|i| i.mean.is_finite())
        .min_by(|a, b| a.mean.total_cmp(&b.mean));
    match worst {
        Some(w) => format!("{}; least {}", mean_range(v), w.show(0)),
        None => mean_range(v),
    }
}

fn range_and_best(v: &[Interval]) -> String {
    match best(v) {
        Some(b) => format!("{}; best {}", mean_range(v), b.show(0)),
        None => mean_range(v),
    }
}

/// Where a size's gain lies against the others': `Holds` where the one size's interval is
/// wholly below (`least`) or above every other's, `InDirection` where its mean alone is.
fn extreme_size(v: &[(u64, Interval)], size: u64, least: bool) -> Verdict {
    let Some(x) = v.iter().find(|(s, _)| *s == size).map(|x| x.1) else {
        return Verdict::Unknown;
    };
    let others: Vec<Interval> = v.iter().filter(|(s, _)| *s != size).map(|x| x.1).collect();
    if others.is_empty() || !x.known() || others.iter().any(|o| !o.known()) {
        return Verdict::Unknown;
    }
    let apart = |o: &Interval| {
        if least {
            x.hi() < o.lo()
        } else {
            x.lo() > o.hi()
        }
    };
    let ahead = |o: &Interval| {
        if least {
            x.mean < o.mean
        } else {
            x.mean > o.mean
        }
    };
    if others.iter().all(apart) {
        Verdict::Holds
    } else if others.iter().all(ahead) {
        Verdict::InDirection
    } else {
        Verdict::Not
    }
}

fn show_sizes(v: &[(u64, Interval)]) -> String {
    v.iter()
        .map(|(s, g)| format!("{s} KB {}", g.show(0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The paper's claims, each with our figure and the verdict its interval carries.
fn claims(p: &Params, get: &Figs<'_>, ssl: &Figs<'_>) -> Table {
    let mut t = Table::new(["figure", "claim", "engine", "paper", "ours", "verdict"]);
    get_cpu_claims(&mut t, get);
    tcp_claims(&mut t, get);
    for e in get.splices() {
        let g = get.gains_over(e, &lat, |s| s > 10);
        let v = Verdict::any(g.iter().map(|i| Verdict::at_least(*i, 12.5)));
        t.row([
            "Fig 9".into(),
            "latency, gain of splice above 10 KB".to_string(),
            e.to_string(),
            "up to 25%".into(),
            range_and_best(&g),
            v.word().into(),
        ]);
    }
    ssl_claims(&mut t, p, get, ssl);
    t
}

/// Fig 5: the gain in proxy CPU per request of plain GETs, and where it is smallest.
fn get_cpu_claims(t: &mut Table, get: &Figs<'_>) {
    for (what, f) in [
        ("with its kernel work", &kernel_ms as &dyn Fn(&Fig) -> f64),
        ("the process alone", &proxy_ms),
    ] {
        for e in get.splices() {
            let g = get.gains_over(e, f, |s| s >= 5);
            let v = Verdict::all(g.iter().map(|i| Verdict::at_least(*i, 30.0)));
            t.row([
                "Fig 5".into(),
                format!("proxy CPU per request ({what}), gain of splice, 5–128 KB"),
                e.to_string(),
                "≥ 30%, up to 55%".into(),
                range_and_worst(&g),
                v.word().into(),
            ]);
        }
    }
    for e in get.splices() {
        let sizes: Vec<(u64, Interval)> = get
            .sizes
            .iter()
            .map(|s| (*s, get.size_gain(e, *s, &kernel_ms)))
            .collect();
        t.row([
            "Fig 5".into(),
            "the gain (with kernel work) is smallest at 1 KB, every client count".to_string(),
            e.to_string(),
            "least at 1 KB".into(),
            show_sizes(&sizes),
            extreme_size(&sizes, 1, true).word().into(),
        ]);
    }
}

/// Figs 6 and 7: the server's data packets per ACK, and its retransmission timeouts.
fn tcp_claims(t: &mut Table, get: &Figs<'_>) {
    // Fig 6's point is at large objects under load, where the relay reads in big
    // chunks and so ACKs less often: the largest size and client count of the grid.
    let (Some(&big), Some(&most), Some(&fewest)) =
        (get.sizes.last(), get.clients.last(), get.clients.first())
    else {
        return;
    };
    let dpa = |e: &str, c: u32| get.at(e, c, big, &|f| f.data_per_ack);
    let relay = dpa("copy", most);
    for e in get.splices() {
        let x = dpa(e, most);
        t.row([
            "Fig 6".into(),
            format!("server data packets per ACK with splice ({big} KB, {most} clients)"),
            e.to_string(),
            "≈ 2 (1.7–2.3)".into(),
            format!("{} (relay {})", x.show(2), relay.show(2)),
            Verdict::within(x, 1.7, 2.3, relay.mean).word().into(),
        ]);
    }
    let relay_few = dpa("copy", fewest);
    let rises = Verdict::apart(relay, relay_few);
    t.row([
        "Fig 6".into(),
        format!("the relay's ratio rises with load ({big} KB, {fewest} → {most} clients)"),
        "copy".into(),
        "rises with size and load".into(),
        format!("{} → {}", relay_few.show(2), relay.show(2)),
        rises.word().into(),
    ]);
    for e in get.splices() {
        let (a, b) = (dpa(e, fewest), dpa(e, most));
        // "Constant" can only be not shown wrong: the intervals overlap.
        let v = if !a.known() || !b.known() {
            Verdict::Unknown
        } else if a.lo() <= b.hi() && b.lo() <= a.hi() {
            Verdict::Holds
        } else {
            Verdict::Not
        };
        t.row([
            "Fig 6".into(),
            format!(
                "the splice's ratio stays (no change the intervals show, {fewest} → {most} clients)"
            ),
            e.to_string(),
            "constant".into(),
            format!("{} → {}", a.show(2), b.show(2)),
            v.word().into(),
        ]);
    }
    for e in get.splices() {
        let d = get.pooled_difference(e, &|f| f.rto_per_k);
        t.row([
            "Fig 7".into(),
            "server RTOs per 1000 data packets: relay − splice, every point and round".to_string(),
            e.to_string(),
            "fewer with splice".into(),
            format!(
                "{} ({} with the relay); difference {}",
                get.overall(e, &|f| f.rto_per_k).show(1),
                get.overall("copy", &|f| f.rto_per_k).show(1),
                d.show(2)
            ),
            Verdict::at_least(d, 0.0).word().into(),
        ]);
    }
}

/// Figs 4 and 12–14: SSL against plain GETs, and the gains of splice over SSL tunnels.
fn ssl_claims(t: &mut Table, p: &Params, get: &Figs<'_>, ssl: &Figs<'_>) {
    let small = p.ssl_sizes[0];
    let c = p.ssl_clients[0];
    let both = get.sizes.contains(&small) && get.clients.contains(&c);
    // The ratio round by round: the two kinds' relay runs of one round.
    let plain = get.rounds("copy", c, small, &proxy_ms);
    let ratios: Vec<f64> = ssl
        .rounds("copy", c, small, &proxy_ms)
        .into_iter()
        .filter_map(|(r, x)| plain.iter().find(|(k, _)| *k == r).map(|(_, y)| x / y))
        .collect();
    let doubling = Interval::of(&ratios, LEVEL);
    t.row([
        "Figs 4, 12".into(),
        format!("SSL / plain GET, relay's CPU per request ({small} KB, {c} clients)"),
        "copy".into(),
        "≈ 2 for small objects (1.5–2.5)".into(),
        if both {
            doubling.show(2)
        } else {
            "– (not in the grid)".into()
        },
        if both {
            Verdict::within(doubling, 1.5, 2.5, 1.0)
        } else {
            Verdict::Unknown
        }
        .word()
        .into(),
    ]);
    for e in ssl.splices() {
        let g = ssl.gains_over(e, &kernel_ms, |_| true);
        t.row([
            "Fig 13".into(),
            "SSL: proxy CPU per request (with its kernel work), gain of splice".to_string(),
            e.to_string(),
            "up to 57%".into(),
            range_and_best(&g),
            Verdict::any(g.iter().map(|i| Verdict::at_least(*i, 28.5)))
                .word()
                .into(),
        ]);
    }
    for e in ssl.splices() {
        let sizes: Vec<(u64, Interval)> = ssl
            .sizes
            .iter()
            .map(|s| (*s, ssl.size_gain(e, *s, &kernel_ms)))
            .collect();
        t.row([
            "Fig 13".into(),
            "SSL: the gain is largest for the smallest objects".to_string(),
            e.to_string(),
            "higher for smaller objects".into(),
            show_sizes(&sizes),
            extreme_size(&sizes, ssl.sizes[0], false).word().into(),
        ]);
    }
    for e in ssl.splices() {
        let g = ssl.gains_over(e, &lat, |_| true);
        t.row([
            "Fig 14".into(),
            "SSL: latency, gain of splice".to_string(),
            e.to_string(),
            "up to 20%".into(),
            range_and_best(&g),
            Verdict::any(g.iter().map(|i| Verdict::at_least(*i, 10.0)))
                .word()
                .into(),
        ]);
    }
}

/// The tables of every point of one kind (plain GETs or SSL), headed by the paper's
/// figure numbers `figs` (CPU, latency, its variation, utilisation).
fn section(f: &Figs<'_>, title: &str, figs: [&str; 4]) -> String {
    let level = LEVEL.percent();
    format!(
        "## {title}\n\n\
         Every cell: mean over the rounds ± half its {level}% interval.\n\n\
         ### {} Splicer's CPU per request with its kernel work, ms\n\n\
         Its process, its host's receive threads and the kernel's workers:\n\n{}\n\
         Gain of each splice engine over the relay, % (columns: engine and clients):\n\n{}\n\
         ### Splicer's process alone, CPU per request, ms\n\n{}\n\
         Gain over the relay, %:\n\n{}\n\
         ### Of which the proxy host's receive threads, ms per request\n\n{}\n\
         ### Of which the kernel's workers (the whole machine's), ms per request\n\n{}\n\
         ### The machine's CPU per request, ms (client, server and kernel; emulators excluded)\n\n{}\n\
         ### {} Latency, mean ms\n\n{}\n\
         Gain over the relay, %:\n\n{}\n\
         ### {} Latency, coefficient of variation\n\n{}\n\
         Gain over the relay, %:\n\n{}\n\
         ### {} Splicer's CPU, % of one CPU (budget {CPU}%)\n\n{}\n\
         ### Requests per second\n\n{}\n",
        figs[0],
        f.table(&kernel_ms, 3),
        f.gains(&kernel_ms),
        f.table(&proxy_ms, 3),
        f.gains(&proxy_ms),
        f.table(&|x| x.napi_ms, 3),
        f.table(&|x| x.kworker_ms, 3),
        f.table(&|x| x.machine_ms, 3),
        figs[1],
        f.table(&lat, 0),
        f.gains(&lat),
        figs[2],
        f.table(&|x| x.cv, 2),
        f.gains(&|x| x.cv),
        figs[3],
        f.table(&|x| x.proxy_pct, 1),
        f.table(&|x| x.per_s, 0),
    )
}

/// Figs 6 and 7's tables: the server's TCP behaviour under plain GETs.
fn tcp_section(get: &Figs<'_>) -> String {
    format!(
        "### Fig 6: server data packets per ACK\n\n\
         Data segments the server sent per pure ACK it was sent, both counted by the \
         emulator of the proxy–server leg before its loss:\n\n{}\n\
         ### Fig 7: server RTOs per 1000 data packets it sent\n\n{}\n",
        get.table(&|x| x.data_per_ack, 2),
        get.table(&|x| x.rto_per_k, 1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reproduce::rosu::Timing;

    /// A run of `variant` in `round` whose proxy spent `cpu_ms` per request, a fifth of it
    /// in its receive threads.
    fn run(variant: &str, round: usize, cpu_ms: f64) -> VariantRun {
        serde_json::from_value(serde_json::json!({
            "variant": variant, "round": round, "wall_s": 10.0,
            "proxy_cpu_s": cpu_ms * 0.8, "proxy_napi_cpu_s": cpu_ms * 0.2,
            "machine_cpu_s": cpu_ms * 2.0, "emulator_cpu_s": 0.0, "operations": 1000,
            "bytes": 1, "tcp": {}, "loads": [], "load_ids": [], "links": [],
        }))
        .unwrap()
    }

    /// The claims' verdicts come from the rounds' intervals: a splice that halves the CPU
    /// in every round holds the ≥ 30% bound, one that saves 10% goes the paper's way only,
    /// and one that costs more does not.
    #[test]
    fn the_claims_table_gives_each_engine_the_verdict_its_rounds_carry() {
        let p = Params {
            get_sizes: &[64],
            get_clients: &[20],
            ssl_sizes: &[1],
            ssl_clients: &[20],
            timing: Timing {
                seconds: 1,
                edge: 0,
                pause_s: 0.0,
            },
            rounds: 3,
        };
        let mut runs = Vec::new();
        for (round, noise) in [(0, 0.0), (1, 0.02), (2, -0.02)] {
            let relay = 1.0 + noise;
            for (e, cpu) in [
                ("copy", relay),
                ("pipe", relay * 0.9),
                ("sockmap", relay * 0.5),
                ("ipsplice", relay * 1.2),
            ] {
                runs.push(run(&format!("{e}.c20.64k.get"), round, cpu));
            }
        }
        let out = std::env::temp_dir().join(format!("rosu-sweep-report-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let md = write(&p, &runs, &out).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
        let row = |e: &str| {
            md.lines()
                .find(|l| {
                    l.contains("(with its kernel work), gain of splice, 5–128 KB")
                        && l.contains(&format!("| {e} |"))
                })
                .unwrap_or_else(|| panic!("no Fig 5 row for {e}:\n{md}"))
                .to_string()
        };
        assert!(row("sockmap").ends_with("| holds |"), "{}", row("sockmap"));
        assert!(
            row("sockmap").contains("50 to 50%; least 50 ± 0"),
            "{}",
            row("sockmap")
        );
        assert!(row("pipe").ends_with("| in direction |"), "{}", row("pipe"));
        assert!(row("ipsplice").ends_with("| not |"), "{}", row("ipsplice"));
        // The tables give mean ± half the interval.
        assert!(md.contains("| 64 | copy | 1.000 ± 0.034 |"), "{md}");
    }

    #[test]
    fn a_size_is_the_least_only_as_far_as_the_intervals_part() {
        let iv = |mean, half| Interval { mean, half, n: 3 };
        let v = [(1, iv(-10.0, 2.0)), (10, iv(5.0, 3.0)), (64, iv(4.0, 2.0))];
        assert_eq!(extreme_size(&v, 1, true), Verdict::Holds);
        assert_eq!(extreme_size(&v, 10, false), Verdict::InDirection);
        assert_eq!(extreme_size(&v, 64, true), Verdict::Not);
        assert_eq!(extreme_size(&v, 5, true), Verdict::Unknown);
        let one_round = [(1, iv(-10.0, f64::NAN)), (10, iv(5.0, f64::NAN))];
        assert_eq!(extreme_size(&one_round, 1, true), Verdict::Unknown);
        assert_eq!(
            range_and_worst(&[iv(3.0, 1.0), iv(-2.0, 4.0)]),
            "-2 to 3%; least -2 ± 4"
        );
        assert_eq!(
            range_and_best(&[iv(3.0, 1.0), iv(-2.0, 4.0)]),
            "-2 to 3%; best 3 ± 1"
        );
    }
}
