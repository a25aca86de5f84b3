#!/usr/bin/env bash
# Builds the Debian package of Splicer from this checkout: the binary, the systemd unit,
# the man page (generated from the command line), an example configuration (a conffile),
# the Grafana dashboard and the operator's docs.
#
#   bash packaging/deb.sh [--binary PATH] [--out DIR]
#
# Without --binary it builds the release binary first (cargo build --release -p splicer).
# Prints the path of the .deb. Needs dpkg-deb (package dpkg) and gzip; no root (the files
# are owned by root in the package through --root-owner-group).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
binary=""
out="$repo/target/debian"
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        *) echo "usage: $0 [--binary PATH] [--out DIR]" >&2; exit 2 ;;
    esac
done
if [ -z "$binary" ]; then
    (cd "$repo" && cargo build --release -p splicer >&2)
    binary="$repo/target/release/splicer"
fi
[ -x "$binary" ] || { echo "$binary: not an executable" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n1)
arch=$(dpkg --print-architecture)
# The newest glibc symbol version the binary needs (libbpf is linked in statically).
glibc=$(objdump -T "$binary" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -n1 || true)
glibc=${glibc:-2.34}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -Dm755 "$binary" "$stage/usr/bin/splicer"
# Debug information stays out of the package, as Debian's own packages do (dh_strip).
if command -v strip >/dev/null; then
    strip --strip-debug "$stage/usr/bin/splicer"
fi
install -Dm644 "$here/splicer.service" "$stage/lib/systemd/system/splicer.service"
install -Dm644 "$here/splicer.toml" "$stage/etc/splicer/splicer.toml"
install -Dm644 "$here/grafana/splicer.json" "$stage/usr/share/splicer/grafana/splicer.json"
mkdir -p "$stage/usr/share/man/man1" "$stage/usr/share/doc/splicer"
"$binary" man | gzip -9n > "$stage/usr/share/man/man1/splicer.1.gz"
for doc in README.md docs/operations.md docs/configuration.md docs/engines.md; do
    gzip -9nc "$repo/$doc" > "$stage/usr/share/doc/splicer/$(basename "$doc").gz"
done
cat > "$stage/usr/share/doc/splicer/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: splicer
Files: *
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.
EOF

mkdir -p "$stage/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<EOF
Package: splicer
Version: $version
Architecture: $arch
Maintainer: Splicer developers <splicer@localhost>
Installed-Size: $size
Depends: libc6 (>= $glibc), libgcc-s1
Section: net
Priority: optional
Description: split-connection TCP proxy that splices in the kernel
 Splicer accepts client connections (SOCKS5, an HTTP forward proxy with a cache, a
 reverse proxy near clients), opens its own connections upstream, and moves the bytes
 between the two inside the kernel (splice, sockmap or a TC program).
EOF
echo /etc/splicer/splicer.toml > "$stage/DEBIAN/conffiles"

cat > "$stage/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    if ! getent passwd splicer >/dev/null; then
        useradd --system --user-group --home-dir /var/lib/splicer --no-create-home \
            --shell /usr/sbin/nologin --comment "Splicer proxy" splicer
    fi
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
        systemctl enable splicer.service || true
        systemctl restart splicer.service || true
    fi
fi
exit 0
EOF
cat > "$stage/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    systemctl stop splicer.service || true
    systemctl disable splicer.service || true
fi
exit 0
EOF
cat > "$stage/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
if [ "$1" = purge ]; then
    rm -rf /var/log/splicer /var/lib/splicer
fi
exit 0
EOF
chmod 755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"

mkdir -p "$out"
deb="$out/splicer_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >&2
echo "$deb"
