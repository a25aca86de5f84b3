#!/bin/bash
cd "$(git rev-parse --show-toplevel)"
rm -rf /tmp/c1t; mkdir -p /tmp/c1t
target/release/splicer-lab run docs/results/forward-ring-count-2026-12-05.toml --out /tmp/c1t > /tmp/c1t.log 2>&1 &
G=$!
last=""
for k in 1 2; do
  for i in $(seq 1 400); do P=$(pgrep -f "splicer run --config" | tail -1); [ -n "$P" ] && [ "$P" != "$last" ] && break; sleep 0.25; done
  last=$P
  V=$(grep -o "round 1 of 1: [a-z0-9-]*" /tmp/c1t.log | tail -1)
  sleep 8
  echo "== $V pid $P"
  perf stat -e syscalls:sys_enter_io_uring_enter,context-switches,task-clock -p $P -- sleep 5 2>&1 | grep -E "sys_enter|context|task-clock"
done
wait $G
