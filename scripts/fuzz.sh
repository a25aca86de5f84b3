#!/usr/bin/env bash
# Fuzzes every parser target in fuzz/ with libFuzzer (cargo-fuzz), one after the other, and
# keeps what they learn: each target's corpus lives in fuzz/corpus/TARGET (committed), is
# minimised after the run, and seeds the next one. A crash stops the script with the input
# in fuzz/artifacts/TARGET.
#
#   scripts/fuzz.sh                 # every target, 60 s each
#   scripts/fuzz.sh 600             # every target, 10 minutes each
#   RUNS=10000000 scripts/fuzz.sh   # every target, 10^7 executions each
#   scripts/fuzz.sh 60 chunked      # some targets only
#
# cargo-fuzz needs a nightly compiler for its sanitizer flags; with the stable toolchain
# RUSTC_BOOTSTRAP=1 lets it run. Prints executions and time per target at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
if ! command -v cargo-fuzz >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo-fuzz" ]; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
export PATH="$HOME/.cargo/bin:$PATH" RUSTC_BOOTSTRAP=1
cd fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi
limit=(-max_total_time="$seconds")
if [ -n "${RUNS:-}" ]; then limit=(-runs="$RUNS"); fi
summary=()
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  log="target/fuzz-$t.log"
  mkdir -p target
  start=$(date +%s)
  echo "fuzz: $t (${limit[*]})"
  rc=0
  cargo fuzz run "$t" "corpus/$t" -- "${limit[@]}" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -40 "$log" >&2
    echo "fuzz: $t FAILED; the input is in fuzz/artifacts/$t (log: fuzz/$log)" >&2
    exit 1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
  # Keep the corpus small in the repository: only inputs that add coverage.
  cargo fuzz cmin "$t" "corpus/$t" >/dev/null 2>&1 || true
  summary+=("$t: ${execs:-?} executions in $(( $(date +%s) - start )) s, corpus $(ls "corpus/$t" | wc -l) files")
done
printf '%s\n' "${summary[@]}"
