#!/usr/bin/env bash
# The whole test suite: unit, property and end-to-end tests (real curl, real splicer
# processes, a network namespace when run as root). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
# Each end-to-end test holds up to ~2,000 sockets; allow them.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
cargo test --workspace --locked
