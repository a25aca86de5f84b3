"""Per-round ratios of each variant to a baseline, from a `splicer-lab run` runs.json:
median (min-max) over the rounds, and the geometric mean with its 95% confidence interval
(Student's t on the logarithms of the per-round ratios; rounds are interleaved, so each
round's ratio compares variants measured minutes apart on the same machine).

    python3 ratios.py RUNS_JSON [RUNS_JSON...] BASELINE

Several runs.json are pooled: each file's rounds count as rounds of their own.
"""
import json
import math
import statistics as st
import sys

# Two-sided 95% quantiles of Student's t by degrees of freedom (1-30).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def interval(xs):
    """Geometric mean of xs and its 95% interval (none for a figure that is 0: the
    direct path's proxy CPU)."""
    if min(xs) <= 0:
        return float("nan"), float("nan"), float("nan")
    logs = [math.log(x) for x in xs]
    m = st.mean(logs)
    if len(logs) < 2:
        return math.exp(m), float("nan"), float("nan")
    hw = T975[min(len(logs) - 1, 30) - 1] * st.stdev(logs) / math.sqrt(len(logs))
    return math.exp(m), math.exp(m - hw), math.exp(m + hw)


def main():
    base = sys.argv[-1]
    by = {}
    for n, path in enumerate(sys.argv[1:-1]):
        for r in json.load(open(path)):
            load = r["loads"][0]
            by.setdefault(r["variant"], {})[(n, r["round"])] = dict(
                rate=load["per_second"],
                machine=r["machine_cpu_s"] / r["operations"] * 1000,
                proxy=r["proxy_cpu_s"] / r["operations"] * 1000,
                p99=load["latency"]["p99_ms"],
                errors=sum(load["errors"].values()) if load["errors"] else 0,
            )
    print("| variant | req/s | machine ms/req | proxy ms/req | p99 ms | errors "
          f"| req/s ×{base} | machine CPU/req ×{base} | proxy CPU/req ×{base} "
          "| rounds at or above |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for v, rs in by.items():
        rounds = sorted(i for i in rs if i in by[base])
        med = lambda k: st.median(rs[i][k] for i in rounds)
        cells = []
        for k in ("rate", "machine", "proxy"):
            ratios = [rs[i][k] / by[base][i][k] for i in rounds]
            g, lo, hi = interval(ratios)
            cells.append(f"{st.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}); "
                         f"mean {g:.3f}, 95% {lo:.3f}–{hi:.3f}")
        above = sum(rs[i]["rate"] >= by[base][i]["rate"] for i in rounds)
        print(f"| {v} | {med('rate'):.0f} | {med('machine'):.4f} | {med('proxy'):.4f} "
              f"| {med('p99'):.2f} | {sum(rs[i]['errors'] for i in rounds)} "
              f"| {' | '.join(cells)} | {above}/{len(rounds)} |")


if __name__ == "__main__":
    main()
