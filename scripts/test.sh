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
# and cargo-fuzz; checking is what can break here). In the workspace's target directory: the
# crates clippy has just checked are not checked again (about half a minute on two cores).
echo "== fuzz targets check"; cargo check --manifest-path fuzz/Cargo.toml --locked --quiet --target-dir target
# Many test threads: the integration tests (crates/isochron/tests/it) start together and wait
# for their share of the machine (tests/common `load`), so a waiting test holds no core.
echo "== test";   cargo test --workspace --release --locked --no-fail-fast -- --test-threads 64
echo "== all checks passed"
