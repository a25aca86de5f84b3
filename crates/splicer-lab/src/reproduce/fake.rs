//! Runs made up for the reports' tests: 10 s, Splicer at 5% of a CPU and its receive
//! threads at 10%, s-client loads of 100 requests each.

/// A run with one load of `ms` a request: hits, or plain GETs.
pub fn run(variant: &str, round: usize, hits: bool, ms: f64) -> serde_json::Value {
    run_of(variant, round, &[(if hits { "hit" } else { "get" }, ms)])
}

/// A run with a load of each kind given (`hit`, `get`, `ssl`) and its latency.
pub fn run_of(variant: &str, round: usize, loads: &[(&str, f64)]) -> serde_json::Value {
    let loads: Vec<serde_json::Value> = loads
        .iter()
        .map(|&(kind, ms)| {
            serde_json::json!({
                "generator": "sclient",
                "params": {"cacheable": kind == "hit", "ssl": kind == "ssl"},
                "measured_s": 10.0, "completed": 100, "bytes": 0, "per_second": 0.0,
                "mbit_per_second": 0.0, "errors": {},
                "latency": {"n": 100, "mean_ms": ms, "p50_ms": ms, "p95_ms": ms,
                            "p99_ms": ms, "max_ms": ms, "cv": 0.0},
                "extra": {}, "timeline": [], "cdf": [],
            })
        })
        .collect();
    serde_json::json!({
        "variant": variant, "round": round, "wall_s": 10.0, "proxy_cpu_s": 0.5,
        "proxy_napi_cpu_s": 1.0, "machine_cpu_s": 0.0, "emulator_cpu_s": 0.0,
        "operations": 1, "bytes": 1, "tcp": {}, "loads": loads,
        "load_ids": [], "links": [],
    })
}
