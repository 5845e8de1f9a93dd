#!/usr/bin/env bash
# He et al. §4.1, experiment case 1 (docs/ARCHITECTURE.md, *References*): 30 connections spread
# over 1 … 30 distinct files, the store on the machine's disk and then on tmpfs; the server's
# CPU idle and iowait, what it delivered, and where the bottleneck is (docs/results/he-files.md).
#
# The paper's clip is 5 Mb/s MPEG-2; here a 40 s MPEG-2 + MPEG-1 layer II transport stream at
# 5 Mb/s made with ffmpeg's test source. Every client plays its file in a loop (`--stagger`:
# each starts at a different part), client k the file k mod F (`--popularity round-robin`).
# Admission is off (the load shows as missed deadlines and starvation, not as 453), and the
# block cache is the default one, as a user runs the server: with one file the cache serves
# most reads, with thirty the disk does.
#
# Usage: scripts/he-files.sh OUT_DIR      (ffmpeg; about 15 minutes)
# Environment: BIN (default target/release/isochron), WORK (default /tmp/isochron-he-files,
# on the machine's disk), SHM (default /dev/shm/isochron-he-files, tmpfs), FILES (default
# "1 5 10 20 30"), CLIENTS (30), DURATION (seconds per run, 60), STORES ("disk tmpfs").
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
WORK=${WORK:-/tmp/isochron-he-files}
SHM=${SHM:-/dev/shm/isochron-he-files}
FILES=${FILES:-1 5 10 20 30}
CLIENTS=${CLIENTS:-30}
DURATION=${DURATION:-60}
STORES=${STORES:-disk tmpfs}
RTSP=127.0.0.1:19754
HTTP=127.0.0.1:19280
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT" "$WORK" "$SHM"
max=0
for f in $FILES; do [ "$f" -gt "$max" ] && max=$f; done

clip=$WORK/clip.ts
if [ ! -s "$clip" ]; then
  log "making the 5 Mb/s MPEG-2 clip"
  ffmpeg -nostdin -loglevel error -y -f lavfi -i "testsrc2=size=1280x720:rate=25,noise=alls=6:allf=t" \
    -f lavfi -i "sine=frequency=440:sample_rate=48000" -t 40 \
    -c:v mpeg2video -b:v 4.8M -minrate 4.8M -maxrate 4.8M -bufsize 2M -g 12 -bf 2 \
    -c:a mp2 -b:a 192k -f mpegts "$clip"
fi
cat > "$WORK/config.toml" <<EOF
[sched]
admission = "off"
EOF
git rev-parse --short HEAD > "$OUT/commit.txt" 2> /dev/null || true
pid=
trap '[ -n "$pid" ] && kill $pid 2> /dev/null || true' EXIT

for store_kind in $STORES; do
  case $store_kind in
    disk) store=$WORK/store ;;
    tmpfs) store=$SHM/store ;;
    *) echo "unknown store kind $store_kind (disk or tmpfs)" >&2; exit 2 ;;
  esac
  if [ ! -e "$store/.done-$max" ]; then
    rm -rf "$store"
    log "$store_kind: ingesting $max copies into $store"
    for i in $(seq -w 1 "$max"); do
      "$BIN" ingest --data "$store" --name "f$i" "$clip" > /dev/null
    done
    touch "$store/.done-$max"
  fi
  "$BIN" serve --config "$WORK/config.toml" --data "$store" --rtsp "$RTSP" --http "$HTTP" \
    --rtp-port 0 --no-demo > "$OUT/server-$store_kind.log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do curl -fsS "http://$HTTP/metrics" > /dev/null 2>&1 && break; sleep 0.2; done
  for f in $FILES; do
    urls=()
    for i in $(seq -w 1 "$max"); do
      [ "$((10#$i))" -le "$f" ] && urls+=("rtsp://$RTSP/f$i")
    done
    # Read from the disk, not from what the last run left in the page cache (O_DIRECT reads
    # skip it, fallbacks do not).
    sync; echo 3 > /proc/sys/vm/drop_caches 2> /dev/null || true
    log "$store_kind: $CLIENTS clients over $f file(s)"
    "$BIN" bench "${urls[@]}" --out "$OUT/$store_kind-f$f" --clients "$CLIENTS" --stagger \
      --popularity round-robin --duration "$DURATION" --buffer-ms 2000 --server-pid "$pid" \
      --metrics "http://$HTTP/metrics" --seed 7 --iface lo > "$OUT/$store_kind-f$f.log" 2>&1
    # The bench's per-session records are large and say little here.
    python3 - "$OUT/$store_kind-f$f/report.json" <<'PY'
import json, sys
p = sys.argv[1]
r = json.load(open(p))
n = len(r.get("sessions", []) or [])
r["sessions"] = f"{n} session records left out of the committed copy"
json.dump(r, open(p, "w"), indent=1)
PY
  done
  kill $pid; wait $pid 2> /dev/null || true
  pid=
done
python3 scripts/he-files-report.py "$OUT" > "$OUT/summary.md"
cat "$OUT/summary.md"
