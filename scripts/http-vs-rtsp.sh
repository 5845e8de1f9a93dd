#!/usr/bin/env bash
# He et al. §5, "the difference between HTTP and RTSP": the same clip delivered to the
# same N clients over RTSP/RTP (isochron's emulation clients, `isochron bench`) and over HTTP
# (`curl` fetching /objects/NAME at the clip's own rate, as a progressive-download player does),
# one after the other against one `isochron serve`; the server's CPU time over each phase, from
# /proc/PID/stat, divided by the clients: CPU per stream.
#
# Usage: scripts/http-vs-rtsp.sh CLIP.ts [N=20] [SECONDS=30] [OUT=docs/results/http-vs-rtsp]
# Needs: a release build (built here), curl, ffprobe.
set -euo pipefail
cd "$(dirname "$0")/.."
clip=${1:?usage: scripts/http-vs-rtsp.sh CLIP.ts [N] [SECONDS] [OUT]}
n=${2:-20}
secs=${3:-30}
out=${4:-docs/results/http-vs-rtsp}
cargo build --release --locked -q
target=${CARGO_TARGET_DIR:-target}
bin="$target/release/isochron"
work=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
name=$(basename "$clip" .ts)
"$bin" ingest --data "$work/data" "$clip" >/dev/null
"$bin" serve --data "$work/data" --rtsp 127.0.0.1:18654 --http 127.0.0.1:18680 \
  >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18680/healthz >/dev/null && break; sleep 0.1; done
mkdir -p "$out"

bytes=$(stat -c %s "$clip")
duration=$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$clip")
rate=$(awk -v b="$bytes" -v d="$duration" 'BEGIN { printf "%d", b / d }') # bytes per second
hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server/stat"; }
net_bytes() { awk '/^ *lo:/ { print $10 }' /proc/net/dev; } # loopback bytes sent

phase() { # phase NAME COMMAND... : runs COMMAND, prints "ticks seconds bytes"
  local t0 b0 s0 t1 b1 s1
  t0=$(cpu_ticks); b0=$(net_bytes); s0=$(date +%s.%N)
  "$@"
  t1=$(cpu_ticks); b1=$(net_bytes); s1=$(date +%s.%N)
  echo "$((t1 - t0)) $(awk -v a="$s0" -v b="$s1" 'BEGIN { print b - a }') $((b1 - b0))"
}

rtsp() {
  "$bin" bench "rtsp://127.0.0.1:18654/$name" --clients "$n" --duration "$secs" \
    --buffer-ms 1000 --no-mtfc --seed 1 --out "$work/rtsp-bench" >"$work/bench.log" 2>&1
}
http() {
  for _ in $(seq "$n"); do
    timeout -k 2 "$secs" curl -s --limit-rate "$rate" -o /dev/null \
      "http://127.0.0.1:18680/objects/$name" &
  done
  wait
}
read -r rt rs rb < <(phase rtsp)
read -r ht hs hb < <(phase http)

row() { # row TRANSPORT TICKS SECONDS BYTES
  awk -v t="$1" -v ticks="$2" -v s="$3" -v b="$4" -v hz="$hz" -v n="$n" 'BEGIN {
    cpu = ticks / hz / s * 100; mbs = b * 8 / s / 1e6
    printf "| %s | %d | %.1f | %.1f | %.2f | %.1f |\n", t, n, mbs, cpu, cpu / n, cpu / (mbs / 1000)
  }'
}
{
  echo "# HTTP vs RTSP: server CPU per stream (He et al. §5)"
  echo
  echo "\`scripts/http-vs-rtsp.sh $clip $n $secs\` on $(date -u +%Y-%m-%d), $(nproc) CPUs;"
  echo "clip $(basename "$clip"): $bytes bytes, $duration s, $((rate * 8 / 1000)) kb/s."
  echo "Loopback bytes count both directions' packets once (client traffic is tiny)."
  echo
  echo "| transport | clients | delivered (Mb/s) | server CPU (% of one CPU) | CPU per stream (%) | CPU per Gb/s (%) |"
  echo "|---|---|---|---|---|---|"
  row "RTSP/RTP over UDP (isochron bench)" "$rt" "$rs" "$rb"
  row "HTTP progressive (curl --limit-rate)" "$ht" "$hs" "$hb"
} >"$out/report.md"
cat "$out/report.md"
