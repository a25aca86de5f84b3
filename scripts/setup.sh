#!/usr/bin/env bash
# Installs what Splicer's build and tests need on a Debian machine (run as root).
# Idempotent: installs only what is missing. BENCH=1 also installs the benchmark peers.
set -euo pipefail

need=()
for cmd_pkg in curl:curl ip:iproute2 cc:gcc python3:python3 sysctl:procps iptables:iptables \
               clang:clang bpftool:bpftool ethtool:ethtool ss:iproute2 tc:iproute2 tcpdump:tcpdump \
               nginx:nginx-light systemd-analyze:systemd setpriv:util-linux \
               dpkg-deb:dpkg objdump:binutils gzip:gzip wrk:wrk perf:linux-perf; do
  command -v "${cmd_pkg%%:*}" >/dev/null 2>&1 || need+=("${cmd_pkg#*:}")
done
# The lab captures packets with tcpdump (seed 003's forwarding latency); nginx is the real
# HTTP/2 origin of the edge's h2c tests; systemd-analyze checks the unit file, and setpriv
# runs Splicer unprivileged with the unit's capabilities; dpkg-deb builds the Debian package
# (objdump reads the glibc version it needs), which a test installs; the lab's wrk load is
# tested against nginx serving the lab's objects; perf counts what the proxy asks of the
# kernel during a lab run (`[experiment] proxy_events`). ethtool turns GRO and TSO
# on and off for a lab host whose receive work runs in threads of its own (docs/lab.md).
# splicer-bpf's eBPF programs: clang (above) and libbpf's headers; the lab tests list TC
# programs with bpftool.
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
if [ "${BENCH:-0}" = 1 ]; then
  for cmd_pkg in haproxy:haproxy socat:socat danted:dante-server squid:squid; do
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

# The Rust toolchain: the one on the PATH or in ~/.cargo, else rustup with RUST_PINNED, installed
# from static.rust-lang.org (Debian's rustc is too old). The oldest rustc that builds the
# locked dependencies is the workspace's rust-version.
RUST_MIN=1.88
# What CI builds with: a newer compiler may bring lints that `-D warnings` turns into errors.
RUST_PINNED=1.95.0
if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: installing Rust $RUST_PINNED (minimal profile, with clippy and rustfmt) with rustup"
  # rustup-init acts by its own name: it keeps it.
  dir=$(mktemp -d)
  init="$dir/rustup-init"
  arch=$(uname -m)
  if curl --proto '=https' --tlsv1.2 -sSf -o "$init" \
       "https://static.rust-lang.org/rustup/dist/${arch}-unknown-linux-gnu/rustup-init"; then
    chmod +x "$init"
    "$init" -y --no-modify-path --profile minimal --default-toolchain "$RUST_PINNED" \
      --component clippy,rustfmt >/dev/null || true
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  rm -rf "$dir"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found and rustup could not be installed. Splicer needs a stable Rust toolchain ($RUST_MIN or newer), e.g. from rustup." >&2
  exit 1
fi
have=$(rustc --version | awk '{print $2}')
if [ "$(printf '%s\n%s\n' "$RUST_MIN" "$have" | sort -V | head -1)" != "$RUST_MIN" ]; then
  echo "setup: rustc $have is older than $RUST_MIN, the oldest that builds Splicer's locked dependencies (rustup update stable)" >&2
  exit 1
fi
