//! The sweep's report: the plots, `points.csv` with every run, the claims table (the
//! paper's words beside our figures) and the tables of every point.

use std::path::Path;

use super::figs::{fig, range, verdict, Fig, Figs};
use super::{Params, CPU};
use crate::experiment::run::VariantRun;
use crate::reproduce::rosu::Kind;
use crate::reproduce::table::{num, Table};

fn proxy_ms(f: &Fig) -> f64 {
    f.proxy_ms
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
    Ok(format!(
        "## The paper's figures beside ours\n\n\
         Gain = (relay − splice) · 100 / relay, the paper's definition, per point; \
         the ranges are over every size (as stated), client count and splice engine. \
         An \"up to\" claim holds when our best point goes the paper's way by at least \
         half the paper's figure; a bound (≥ 30%, ≈ 2) holds as stated. \
         Failed or timed-out requests over the whole experiment: {errors}.\n\n{claims}\n\
         {get_section}{tcp}\n\
         ![Fig 5](rosu-sweep/fig5.svg) ![Fig 9](rosu-sweep/fig9.svg)\n\n\
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

/// Figs 5, 9, 13 and 14 as SVGs: the gain of each engine over the relay.
fn plots(get: &Figs<'_>, ssl: &Figs<'_>, out: &Path) -> anyhow::Result<()> {
    get.plot(
        &out.join("fig5.svg"),
        "Proxy CPU per request: gain of splice over the relay (Fig 5)",
        &proxy_ms,
    )?;
    get.plot(
        &out.join("fig9.svg"),
        "Latency: gain of splice over the relay (Fig 9)",
        &lat,
    )?;
    ssl.plot(
        &out.join("fig13.svg"),
        "SSL: proxy CPU per request, gain over the relay (Fig 13)",
        &proxy_ms,
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
        "kind,engine,clients,size_kib,round,req_per_s,proxy_cpu_pct,proxy_ms_per_req,machine_ms_per_req,latency_mean_ms,latency_cv,server_data_per_ack,server_rto_per_1000,errors\n",
    );
    for r in runs {
        let f = fig(r);
        let parts: Vec<&str> = r.variant.split('.').collect();
        let [e, c, s, k] = parts[..] else { continue };
        csv += &format!(
            "{k},{e},{},{},{},{:.1},{:.2},{:.4},{:.4},{:.1},{:.3},{:.2},{:.2},{}\n",
            c.trim_start_matches('c'),
            s.trim_end_matches('k'),
            r.round,
            f.per_s,
            f.proxy_pct,
            f.proxy_ms,
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

/// Where the range is empty (no such point), the grid cannot tell.
fn holds_in(r: (f64, f64), ok: bool) -> String {
    verdict(r.0.is_finite().then_some(ok))
}

/// The median gain of splice in proxy CPU per request, per size.
fn by_size(f: &Figs<'_>) -> Vec<(u64, f64)> {
    f.sizes
        .iter()
        .map(|s| (*s, f.size_gain(*s, &proxy_ms)))
        .collect()
}

fn show(v: &[(u64, f64)]) -> String {
    v.iter()
        .map(|(s, g)| format!("{s} KB {}", num(*g, 0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The size whose (finite) gain is the largest, or the smallest, of `(size, gain)` pairs.
fn size_with_gain(v: &[(u64, f64)], largest: bool) -> Option<u64> {
    let finite = v.iter().filter(|x| x.1.is_finite());
    let pick = if largest {
        finite.max_by(|a, b| a.1.total_cmp(&b.1))
    } else {
        finite.min_by(|a, b| a.1.total_cmp(&b.1))
    };
    pick.map(|x| x.0)
}

/// The paper's claims, each with our figure and whether it holds.
fn claims(p: &Params, get: &Figs<'_>, ssl: &Figs<'_>) -> Table {
    let mut claims = Table::new(["figure", "claim", "paper", "ours", "holds?"]);
    get_cpu_claims(&mut claims, get);
    tcp_claims(&mut claims, get);
    let (llo, lhi) = get.gain_range(&lat, |s| s > 10);
    claims.row([
        "Fig 9".into(),
        "latency, gain of splice above 10 KB".to_string(),
        "up to 25%".into(),
        range((llo, lhi)),
        holds_in((llo, lhi), lhi >= 12.5),
    ]);
    ssl_claims(&mut claims, p, get, ssl);
    claims
}

/// Fig 5: the gain in proxy CPU per request of plain GETs, and where it is smallest.
fn get_cpu_claims(claims: &mut Table, get: &Figs<'_>) {
    let (lo, hi) = get.gain_range(&proxy_ms, |s| s >= 5);
    claims.row([
        "Fig 5".into(),
        "proxy CPU per request, gain of splice, 5–128 KB".to_string(),
        "≥ 30%, up to 55%".into(),
        range((lo, hi)),
        holds_in((lo, hi), lo >= 30.0),
    ]);
    let get_sizes = by_size(get);
    claims.row([
        "Fig 5".into(),
        "the gain is smallest at 1 KB (median gain % per size)".to_string(),
        "least at 1 KB".into(),
        show(&get_sizes),
        verdict((get_sizes.len() > 1).then(|| size_with_gain(&get_sizes, false) == Some(1))),
    ]);
}

/// Figs 6 and 7: the server's data packets per ACK, and its retransmission timeouts.
fn tcp_claims(claims: &mut Table, get: &Figs<'_>) {
    // Fig 6's point is at large objects under load, where the relay reads in big
    // chunks and so ACKs less often: the largest size and client count of the grid.
    let (Some(&big), Some(&most), Some(&small_c)) =
        (get.sizes.last(), get.clients.last(), get.clients.first())
    else {
        return;
    };
    let dpa = |e: &str, c: u32, z: u64| get.at(e, c, z, &|f| f.data_per_ack).median;
    let (pipe_big, copy_big) = (dpa("pipe", most, big), dpa("copy", most, big));
    claims.row([
        "Fig 6".into(),
        format!("server data packets per ACK with splice ({big} KB, {most} clients)"),
        "≈ 2".into(),
        format!("{} (relay {})", num(pipe_big, 2), num(copy_big, 2)),
        verdict(Some((1.7..=2.3).contains(&pipe_big))),
    ]);
    let (pipe_small, copy_small) = (dpa("pipe", small_c, big), dpa("copy", small_c, big));
    claims.row([
        "Fig 6".into(),
        format!(
            "the relay's ratio rises with load, the splice's does not ({big} KB, \
             {small_c} → {most} clients)"
        ),
        "relay rises with size and load; splice constant".into(),
        format!(
            "relay {} → {}, splice {} → {}",
            num(copy_small, 2),
            num(copy_big, 2),
            num(pipe_small, 2),
            num(pipe_big, 2)
        ),
        verdict(Some(
            copy_big > copy_small * 1.15 && (pipe_big - pipe_small).abs() < pipe_small * 0.1,
        )),
    ]);
    let rto = |e: &str| get.overall(e, &|f| f.rto_per_k);
    claims.row([
        "Fig 7".into(),
        "server RTOs per 1000 data packets, splice (relay)".to_string(),
        "fewer with splice".into(),
        format!("{} ({})", num(rto("pipe"), 1), num(rto("copy"), 1)),
        verdict(Some(rto("pipe") < rto("copy"))),
    ]);
}

/// Figs 4 and 12–14: SSL against plain GETs, and the gains of splice over SSL tunnels.
fn ssl_claims(claims: &mut Table, p: &Params, get: &Figs<'_>, ssl: &Figs<'_>) {
    let small = p.ssl_sizes[0];
    let c = p.ssl_clients[0];
    let doubling =
        ssl.at("copy", c, small, &proxy_ms).median / get.at("copy", c, small, &proxy_ms).median;
    let both = get.sizes.contains(&small) && get.clients.contains(&c);
    claims.row([
        "Figs 4, 12".into(),
        format!("SSL / plain GET, relay's CPU per request ({small} KB, {c} clients)"),
        "≈ 2 for small objects".into(),
        if both {
            num(doubling, 2)
        } else {
            "– (not in the grid)".into()
        },
        verdict(both.then_some(doubling >= 1.5)),
    ]);
    let (slo, shi) = ssl.gain_range(&proxy_ms, |_| true);
    claims.row([
        "Fig 13".into(),
        "SSL: proxy CPU per request, gain of splice".to_string(),
        "up to 57%".into(),
        range((slo, shi)),
        holds_in((slo, shi), shi >= 28.5),
    ]);
    let ssl_sizes = by_size(ssl);
    claims.row([
        "Fig 13".into(),
        "SSL: the gain is largest for small objects (median gain % per size)".to_string(),
        "higher for smaller objects".into(),
        show(&ssl_sizes),
        verdict(
            (ssl_sizes.len() > 1)
                .then(|| size_with_gain(&ssl_sizes, true) == ssl.sizes.first().copied()),
        ),
    ]);
    let (sllo, slhi) = ssl.gain_range(&lat, |_| true);
    claims.row([
        "Fig 14".into(),
        "SSL: latency, gain of splice".to_string(),
        "up to 20%".into(),
        range((sllo, slhi)),
        holds_in((sllo, slhi), slhi >= 10.0),
    ]);
}

/// The tables of every point of one kind (plain GETs or SSL), headed by the paper's
/// figure numbers `figs` (CPU, latency, its variation, utilisation).
fn section(f: &Figs<'_>, title: &str, figs: [&str; 4]) -> String {
    format!(
        "## {title}\n\n\
         ### {} Splicer's CPU per request, ms\n\n{}\n\
         Gain of each splice engine over the relay, % (columns: engine and clients):\n\n{}\n\
         ### The machine's CPU per request, ms (client, server and kernel; emulators excluded)\n\n{}\n\
         ### {} Latency, mean ms\n\n{}\n\
         Gain over the relay, %:\n\n{}\n\
         ### {} Latency, coefficient of variation\n\n{}\n\
         Gain over the relay, %:\n\n{}\n\
         ### {} Splicer's CPU, % of one CPU (budget {CPU}%)\n\n{}\n\
         ### Requests per second\n\n{}\n",
        figs[0],
        f.table(&proxy_ms, 3),
        f.gains(&proxy_ms),
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
