#!/usr/bin/env bash
# Builds and runs splicer; without arguments, with its built-in default configuration
# (SOCKS5 on 127.0.0.1:1080, HTTP on 127.0.0.1:3128). Extra arguments go to `splicer`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release --locked -p splicer
if [ $# -eq 0 ]; then set -- run; fi
exec target/release/splicer "$@"
