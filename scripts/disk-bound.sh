#!/usr/bin/env bash
# The disk-bound set-up of the bench's verdict (issue 5, docs/results/verdicts.md): many distinct
# objects on two emulated slow disks (seek 10 ms, 8 MiB/s each, 1 MiB blocks), a small block
# cache, admission off (so that load past the disks' capacity shows as missed deadlines and
# starvation rather than as 453 refusals), clients spread uniformly over the objects.
#
# Usage: scripts/disk-bound.sh OUT_DIR
# Environment: BIN (default target/release/isochron), WORK (default /tmp/isochron-disk-bound),
# CLIP (an MPEG-TS clip, default: the first 40 s of /work/bench-media/fig3.ts), COPIES (24).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
WORK=${WORK:-/tmp/isochron-disk-bound}
COPIES=${COPIES:-24}
RTSP=127.0.0.1:19654
HTTP=127.0.0.1:19180
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT" "$WORK"

clip=${CLIP:-$WORK/clip.ts}
[ -s "$clip" ] || ffmpeg -loglevel error -y -i /work/bench-media/fig3.ts -t 40 -c copy -f mpegts "$clip"
store=$WORK/store
if [ ! -e "$store/.done" ]; then
  rm -rf "$store"
  log "ingesting $COPIES copies onto two emulated disks"
  new=(--disk "$store/d0,seek_ms=10,rate_mib_s=8" --disk "$store/d1,seek_ms=10,rate_mib_s=8")
  for i in $(seq -w 1 "$COPIES"); do
    "$BIN" ingest --data "$store" "${new[@]}" --name "o$i" "$clip" > /dev/null
    new=()
  done
  touch "$store/.done"
fi
cat > "$WORK/config.toml" <<EOF
[sched]
admission = "off"
cache_mib = 16
EOF
"$BIN" serve --config "$WORK/config.toml" --data "$store" --rtsp "$RTSP" --http "$HTTP" --rtp-port 0 \
  --no-demo > "$OUT/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2> /dev/null || true' EXIT
for _ in $(seq 50); do curl -fsS "http://$HTTP/metrics" > /dev/null 2>&1 && break; sleep 0.2; done
urls=()
for i in $(seq -w 1 "$COPIES"); do urls+=("rtsp://$RTSP/o$i"); done
log "N_max search over $COPIES objects"
"$BIN" bench "${urls[@]}" --out "$OUT" --find-nmax --trial 30 --max-clients 64 --duration 900 \
  --buffer-ms 2000 --server-pid "$pid" --metrics "http://$HTTP/metrics" --seed 7 --iface lo
cat "$OUT/verdict.txt"
