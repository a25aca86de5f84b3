#!/usr/bin/env bash
# Installs what Splicer's build and tests need on a Debian machine (run as root).
# Idempotent: installs only what is missing. BENCH=1 also installs the benchmark peers.
set -euo pipefail

need=()
for cmd_pkg in curl:curl ip:iproute2 cc:gcc python3:python3 sysctl:procps iptables:iptables \
               clang:clang bpftool:bpftool ss:iproute2 tc:iproute2 tcpdump:tcpdump \
               nginx:nginx-light; do
  command -v "${cmd_pkg%%:*}" >/dev/null 2>&1 || need+=("${cmd_pkg#*:}")
done
# The lab captures packets with tcpdump (seed 003's forwarding latency); nginx is the real
# HTTP/2 origin of the edge's h2c tests.
# splicer-bpf's eBPF programs: clang (above) and libbpf's headers; the lab tests list TC
# programs with bpftool.
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
if [ "${BENCH:-0}" = 1 ]; then
  for cmd_pkg in wrk:wrk haproxy:haproxy socat:socat danted:dante-server squid:squid; do
    command -v "${cmd_pkg%%:*}" >/dev/null 2>&1 || need+=("${cmd_pkg#*:}")
  done
  # nginx's stream module (the relay benchmark's nginx stream) is a package of its own.
  [ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || need+=(libnginx-mod-stream)
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found. Splicer needs a stable Rust toolchain (1.80 or newer), e.g. from rustup." >&2
  exit 1
fi
