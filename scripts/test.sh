#!/usr/bin/env bash
# The whole test suite: unit, property and end-to-end tests (real curl, real splicer
# processes, a network namespace when run as root). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
# Each end-to-end test holds up to ~2,000 sockets; allow them.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
# Lints as code: formatting and clippy (lint levels in Cargo.toml's [workspace.lints]).
for tool in rustfmt clippy; do
  if ! cargo "${tool/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "test: installing the $tool component"
    rustup component add "$tool" || { echo "test: cargo $tool is missing and could not be installed" >&2; exit 1; }
  fi
done
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Dependencies no code of their crate uses, tests and benches included (the compiler's
# unused_crate_dependencies lint sees only the library and binary targets).
MACHETE=0.9.2
if [ "$(cargo machete --version 2>/dev/null)" != "$MACHETE" ]; then
  echo "test: installing cargo-machete $MACHETE"
  cargo install cargo-machete --version "$MACHETE" --locked --quiet
fi
cargo machete --with-metadata
# The proxy builds without the kernel engines, and so without clang (no CLANG to be found).
CLANG=/nonexistent/clang cargo clippy -p splicer --no-default-features --locked -- -D warnings
# Tests that skip (outside CI, for want of root or a package) are counted and named.
export SPLICER_SKIPS="$PWD/target/skipped-tests.txt"
mkdir -p target
rm -f "$SPLICER_SKIPS"
cargo test --workspace --locked
if [ -s "$SPLICER_SKIPS" ]; then
  echo "test: $(wc -l < "$SPLICER_SKIPS") tests skipped:"
  sort "$SPLICER_SKIPS" | sed 's/^/  /'
  case "${CI:-}" in
    ""|false|0) ;;
    *) echo "test: under CI no test may skip" >&2; exit 1 ;;
  esac
else
  echo "test: no test skipped"
fi
