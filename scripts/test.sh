#!/usr/bin/env bash
# Installs what the tests need (Debian packages, only when missing) and runs every gate and test:
# formatting, clippy, rustdoc, the architecture checks, the fuzz targets' check, and
# `cargo test --workspace --release` (unit tests, virtual-time harnesses, the integration
# tests that drive ffmpeg, GStreamer and VLC against a real server on loopback, and the etcd
# client's tests against real etcd members).
#
# Usage: scripts/test.sh            (from anywhere; CI runs exactly this via .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  ffmpeg
  gstreamer1.0-tools gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-bad gstreamer1.0-libav
  vlc-bin vlc-plugin-base
  gstreamer1.0-rtsp gir1.2-gst-rtsp-server-1.0 python3-gi
  util-linux curl
  etcd-server
  chromium
  iproute2 nftables iperf3 iputils-ping
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# Players under test read UDP while decoding on a loaded machine: let them ask for large socket
# buffers (best effort: a container may not allow it, and the tests then run with the default).
if [ "$(id -u)" -eq 0 ] && [ "$(sysctl -n net.core.rmem_max 2>/dev/null || echo 0)" -lt 16777216 ]; then
  sysctl -qw net.core.rmem_max=16777216 2>/dev/null || echo "== note: could not raise net.core.rmem_max"
fi
# Tests on a loaded machine send bursts over loopback and veth pairs, and every packet passes a
# per-CPU backlog of netdev_max_backlog (1000 by default): a full one drops datagrams of every
# test at once, which no tc statistic shows (/proc/net/softnet_stat, second column).
if [ "$(id -u)" -eq 0 ] && [ "$(sysctl -n net.core.netdev_max_backlog 2>/dev/null || echo 0)" -lt 10000 ]; then
  sysctl -qw net.core.netdev_max_backlog=10000 2>/dev/null || echo "== note: could not raise net.core.netdev_max_backlog"
fi
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
done

# Incremental compilation state is 0.8 GB on a fresh machine and is never reused there.
export CARGO_INCREMENTAL=0
echo "== fmt";    cargo fmt --all --check
echo "== clippy"; cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== doc";    RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --locked --quiet
echo "== arch";   scripts/check-arch.sh
# The fuzz targets type-check against today's parsers (building them for fuzzing needs nightly
# and cargo-fuzz; checking is what can break here).
echo "== fuzz targets check"; cargo check --manifest-path fuzz/Cargo.toml --locked --quiet

# `cargo test --workspace --release`, its binaries run in three groups rather than one after
# another (as cargo runs them). The integration tests (crates/isochron/tests/it, most of the
# time) start together and wait for their share of the machine (tests/common `load`); beside
# them run the test binaries that measure nothing in real time (unit tests, virtual-time
# harnesses, etcd's catalog and watch) and the doctests. Then, one at a time on a quiet machine,
# those that measure: the isochron crate's others (the pacing alone, `isochron bench`, admission
# on an emulated disk, CineGrid's 300 Mb/s), the testbed's shaping (iperf3) and etcd's lease
# expiry. Many test threads: a waiting test holds no core.
echo "== test build"
tests=$(mktemp -d)
trap 'rm -rf "$tests"' EXIT
cargo test --workspace --release --locked --no-run --message-format=json-render-diagnostics \
  >"$tests/build.json"
# Each test binary: its package's directory relative to here (cargo runs it there), its
# target's name, its path.
python3 - "$tests/build.json" "$PWD" >"$tests/list" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        package = os.path.relpath(os.path.dirname(m["manifest_path"]), sys.argv[2])
        print(package, m["target"]["name"], m["executable"], sep="\t")
PY
measures() { # PACKAGE NAME: whether the binary measures in real time (runs alone)
  case "$1/$2" in
    crates/isochron/it) return 1 ;;
    crates/isochron/* | crates/loadgen/testbed | crates/etcd/lease) return 0 ;;
    *) return 1 ;;
  esac
}
failed=0
run_binary() { # PACKAGE NAME EXE
  echo "     Running $1 $2 ($3)"
  if ! (cd "$1" && "$3" --test-threads 64 </dev/null); then
    echo "== FAILED: $1 $2 ($3)"
    failed=1
  fi
}
it=$(awk -F'\t' '$1 == "crates/isochron" && $2 == "it" { print $3 }' "$tests/list")
[ -n "$it" ] || { echo "== no integration test binary in the build"; exit 1; }
echo "== test: the integration tests, beside the binaries that measure nothing"
(cd crates/isochron && "$it" --test-threads 64 </dev/null) >"$tests/it.log" 2>&1 &
it_pid=$!
while IFS=$'\t' read -r package name exe; do
  [ "$name" = it ] || measures "$package" "$name" || run_binary "$package" "$name" "$exe"
done <"$tests/list"
cargo test --workspace --release --locked --doc || failed=1
it_status=0
wait "$it_pid" || it_status=$?
echo "     Running crates/isochron it ($it)"
cat "$tests/it.log"
[ "$it_status" -eq 0 ] || { echo "== FAILED: crates/isochron it ($it)"; failed=1; }
echo "== test: the binaries that measure, one at a time"
while IFS=$'\t' read -r package name exe; do
  ! measures "$package" "$name" || run_binary "$package" "$name" "$exe"
done <"$tests/list"
[ "$failed" -eq 0 ] || { echo "== some tests failed"; exit 101; }
echo "== all checks passed"
