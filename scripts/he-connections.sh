#!/usr/bin/env bash
# He et al. §4.2 (experiment case 2) against isochron (docs/results/he-connections.md): one file,
# 1 to 30 concurrent connections, the server's CPU as the connections grow; at 2, 5 and 10 Mb/s,
# MPEG-2 and H.264 (the paper: one 5 Mb/s MPEG-2 file, LIVE555, CPU at about 80 % at 30).
#
# Six clips of 60 s (1280×720, 25 fps, ffmpeg's test source, with MPEG-1 layer II audio), one
# object each in one store on this machine's disk; one `isochron serve` (admission off, the
# default block cache) serves them all; for each object and each N of NS an `isochron bench` run
# of N clients for RUN_S seconds (nominal pacing, RTSP over UDP, `--stagger`: each client loops
# the file from its own starting point), sampling every second, the server's CPU among it
# (`--server-pid`). Each N is judged on its steady samples (`report.json` `per_n`).
#
# Usage: scripts/he-connections.sh [OUT]   (default /tmp/isochron-he-connections; about 10 min)
# Environment: BIN (default target/release/isochron), NS (default "1 5 10 15 20 25 30"), RUN_S
# (default 12), RATES (default "2M 5M 10M"), CODECS (default "mpeg2video libx264").
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/target/release/isochron}
OUT=${1:-/tmp/isochron-he-connections}
NS=${NS:-1 5 10 15 20 25 30}
RUN_S=${RUN_S:-12}
RATES=${RATES:-2M 5M 10M}
CODECS=${CODECS:-mpeg2video libx264}
RTSP=127.0.0.1:18654
HTTP=127.0.0.1:18680
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT"

name() { echo "${1/video/}-$2"; } # name CODEC RATE: mpeg2-5M, libx264-5M
store=$OUT/store
rm -rf "$store"
for codec in $CODECS; do
  for rate in $RATES; do
    clip=$OUT/$(name "$codec" "$rate").ts
    if [ ! -s "$clip" ]; then
      log "making $clip"
      ffmpeg -loglevel error -y -f lavfi -i testsrc2=size=1280x720:rate=25 \
        -f lavfi -i sine=frequency=440:sample_rate=48000 -t 60 \
        -c:v "$codec" -b:v "$rate" -maxrate "$rate" -bufsize "$rate" -g 25 \
        -c:a mp2 -b:a 128k -f mpegts "$clip"
    fi
    "$BIN" ingest --data "$store" "$clip" > /dev/null
  done
done
cat > "$OUT/config.toml" <<EOF
[sched]
admission = "off"
EOF
"$BIN" serve --config "$OUT/config.toml" --data "$store" --rtsp "$RTSP" --http "$HTTP" \
  --rtp-port 0 --no-demo > "$OUT/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2> /dev/null || true' EXIT
for _ in $(seq 50); do curl -fsS "http://$HTTP/metrics" > /dev/null 2>&1 && break; sleep 0.2; done
start=$(date +%s)
for codec in $CODECS; do
  for rate in $RATES; do
    obj=$(name "$codec" "$rate")
    log "$obj: $NS connections, $RUN_S s each"
    rm -rf "${OUT:?}/$obj"; mkdir -p "$OUT/$obj"
    for n in $NS; do
      "$BIN" bench "rtsp://$RTSP/$obj" --out "$OUT/$obj/n$n" --clients "$n" --stagger \
        --duration "$RUN_S" --server-pid "$pid" --metrics "http://$HTTP/metrics" --seed 3 \
        > "$OUT/$obj/n$n.txt"
    done
  done
done
python3 scripts/he-connections-report.py "$OUT" > "$OUT/summary.md"
log "wrote $OUT/summary.md and $OUT/he-connections.svg; $(( ($(date +%s) - start) / 60 )) min of runs"
