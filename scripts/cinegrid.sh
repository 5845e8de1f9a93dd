#!/usr/bin/env bash
# CineGrid's striped read (docs/results/cinegrid.md): one MPEG-TS stream of 300 Mb/s, more than
# a node behind a 100 Mb/s link can send, played by one client
#   1. from 1 node behind 100 Mb/s (it cannot),
#   2. from 4 nodes behind 100 Mb/s each, bipartite (it plays clean),
#   3. from the same 4 nodes with the client's own link at 200 Mb/s (the client's link limits),
# each with `isochron bench --cluster-nodes N --shape 100mbit --clients 1`, nominal pacing.
#
# Usage: scripts/cinegrid.sh OUT_DIR      (root; etcd, iproute2, ffmpeg; about 3 minutes)
# Environment: BIN (default target/release/isochron), DURATION (default 30 s per run),
# SEED (default 7), BLOCK_KIB (default 16), REPORT_ONLY=1 (only print the table again).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
DURATION=${DURATION:-30}
SEED=${SEED:-7}
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT"
CLIP=$OUT/cg300.ts
if [ ! -f "$CLIP" ]; then
  log "making a 6 s, 300 Mb/s clip"
  ffmpeg -nostdin -v error -y -f lavfi -i "testsrc2=size=1920x1080:rate=25,noise=alls=40:allf=t" \
    -t 6 -c:v mpeg2video -g 12 -bf 0 -b:v 290M -minrate 290M -maxrate 290M -bufsize 20M \
    -muxrate 300M -f mpegts "$CLIP"
fi
if [ "${REPORT_ONLY:-}" != 1 ]; then
git rev-parse --short HEAD > "$OUT/commit.txt" 2> /dev/null || true
(while :; do echo "$(date +%T) $(cut -d' ' -f1-4 /proc/loadavg)"; sleep 5; done) > "$OUT/load.txt" &
sampler=$!
trap 'kill $sampler 2> /dev/null || true' EXIT
common=(--shape 100mbit --block-kib "${BLOCK_KIB:-16}" --ingest "$CLIP" --clients 1 --no-mtfc --buffer-ms 2000
  --duration "$DURATION" --seed "$SEED")
for run in "one:1" "four:4" "four-client200:4:200mbit"; do
  IFS=: read -r name nodes client <<< "$run"
  cmd=("$BIN" bench --out "$OUT/$name" --cluster-nodes "$nodes" "${common[@]}")
  [ -n "${client:-}" ] && cmd+=(--client-shape "$client")
  log "${cmd[*]}"
  echo "${cmd[*]}" > "$OUT/$name.cmd"
  "${cmd[@]}" | tee "$OUT/$name.txt" || true
done
kill $sampler 2> /dev/null || true
trap - EXIT
fi
python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
print("| run | nodes | client link | sessions played to the end | their starvations | their lost packets (of) | the session cut by the run's end: lost | received (Mb/s, mean per session) | per node (share of the payload bytes) |")
print("|---|---|---|---|---|---|---|---|---|")
for name in ("one", "four", "four-client200"):
    r = json.load(open(f"{out}/{name}/report.json"))
    c, s = r["cluster"], r["sessions_summary"]
    ss = r["sessions"]
    done = [x for x in ss if x["outcome"] == "complete"]
    cut = sum(x["lost"] for x in ss if x["outcome"] != "complete")
    rx = sum(x["received_bits_s"] for x in ss) / max(1, len(ss))
    lost = sum(x["lost"] for x in done)
    sent = sum(x["lost"] + x["packets"] for x in done)
    shares = ", ".join(f"{n['name']} {100 * n['share']:.1f} %" for n in c["nodes"])
    link = c["client_link_bits_s"]
    print(f"| {name} | {c['node_count']} | {link / 1e6:.0f} Mb/s |" if link else f"| {name} | {c['node_count']} | unshaped |",
          f"{len(done)} | {sum(x['starvations'] for x in done)} | {lost} ({sent}) | {cut} | {rx / 1e6:.1f} | {shares} |")
EOF
