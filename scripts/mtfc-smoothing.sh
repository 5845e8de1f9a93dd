#!/usr/bin/env bash
# Yima §2.5: MTFC "reduces the variability of the transmission rate", its standard deviation by
# up to 81 %. The same clips and loads three ways (docs/results/mtfc-smoothing.md):
#   content  each packet at its own send time, no rate requests: how standard players load a
#            server (nominal pacing);
#   mtfc     MTFC rate requests steering a pace that multiplies the content's own times;
#   rate     MTFC steering rate pacing (`x-isochron-pacing: rate`, docs/design/mtfc.md): bytes
#            at the object's mean rate times the pace, within 500 ms of the packets' own times.
# Each at 1 client and at 10 staggered clients (each starts at another part of the clip and
# loops it), on loopback; the bench reports the standard deviation of each client's per-second
# received rate (pooled over the clients) and of the aggregate (`rate_variation`).
#
# Clips: the Yima Fig. 3 clip (180 s 1280x720 MPEG-2, 15-frame GOPs; docs/results/fig3.md),
# a 60 s 640x360 MPEG-2 clip in GOPs of 1.52 s (the CI test's, longer), and 60 s of 640x360
# H.264 + AAC with film grain in an MP4 (served as native RTP, one stream per track).
#
# Usage: scripts/mtfc-smoothing.sh OUT_DIR      (ffmpeg; about 20 minutes)
# Environment: BIN (default target/release/isochron), WORK (default /tmp/isochron-mtfc),
# FIG3 (the Fig. 3 clip if made already), DURATION (seconds per run, 60), CLIPS.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
WORK=${WORK:-/tmp/isochron-mtfc}
DURATION=${DURATION:-60}
CLIPS=${CLIPS:-fig3 gop38 grain}
RTSP=127.0.0.1:19854
HTTP=127.0.0.1:19380
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT" "$WORK/media"
media=$WORK/media

if [ ! -s "$media/fig3.ts" ]; then
  if [ -n "${FIG3:-}" ]; then
    cp "$FIG3" "$media/fig3.ts"
  else
    log "making the Fig. 3 clip (180 s 1280x720 MPEG-2)"
    scripts/make-clips.sh "$media" fig3
  fi
fi
if [ ! -s "$media/gop38.ts" ]; then
  log "making the 1.52 s-GOP MPEG-2 clip"
  ffmpeg -nostdin -loglevel error -y -f lavfi -i "testsrc2=size=640x360:rate=25,noise=alls=6:allf=t" \
    -f lavfi -i "sine=frequency=370:sample_rate=48000" -t 60 \
    -c:v mpeg2video -b:v 2M -maxrate 5M -bufsize 2M -g 38 -bf 2 -c:a mp2 -b:a 128k \
    -f mpegts "$media/gop38.ts"
fi
if [ ! -s "$media/grain.mp4" ]; then
  log "making the H.264 film-grain MP4"
  ffmpeg -nostdin -loglevel error -y -f lavfi -i "testsrc2=size=640x360:rate=25" \
    -f lavfi -i "sine=frequency=500:sample_rate=48000" -ac 2 -t 60 \
    -vf noise=alls=20:allf=t -c:v libx264 -preset ultrafast -g 50 -b:v 3M -maxrate 6M \
    -bufsize 3M -pix_fmt yuv420p -c:a aac -b:a 128k -movflags +faststart "$media/grain.mp4"
fi
git rev-parse --short HEAD > "$OUT/commit.txt" 2> /dev/null || true
pid=
trap '[ -n "$pid" ] && kill $pid 2> /dev/null || true' EXIT
rm -rf "$WORK/store"
"$BIN" serve --data "$WORK/store" --media "$media" --rtsp "$RTSP" --http "$HTTP" --rtp-port 0 \
  --no-demo > "$OUT/server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  n=$(curl -fsS "http://$HTTP/api/v1/objects" 2> /dev/null | grep -o '"name"' | wc -l || true)
  [ "${n:-0}" -ge 3 ] && break
  sleep 0.5
done

for clip in $CLIPS; do
  for clients in 1 10; do
    for mode in content mtfc rate; do
      case $mode in
        content) flags=() ;;
        mtfc) flags=(--mtfc) ;;
        rate) flags=(--mtfc --rate-paced) ;;
      esac
      load=(--clients "$clients")
      [ "$clients" -gt 1 ] && load+=(--stagger)
      run=$OUT/$clip-n$clients-$mode
      log "$clip: $clients client(s), $mode"
      "$BIN" bench "rtsp://$RTSP/$clip" --out "$run" "${load[@]}" "${flags[@]}" \
        --duration "$DURATION" --buffer-ms 2000 --server-pid "$pid" \
        --metrics "http://$HTTP/metrics" --seed 7 > "$run.log" 2>&1
      # The per-session records are large and say little here.
      python3 - "$run/report.json" <<'EOF'
import json, sys
p = sys.argv[1]
r = json.load(open(p))
r.pop("sessions", None)
json.dump(r, open(p, "w"), indent=1)
EOF
    done
  done
done
python3 scripts/mtfc-smoothing-report.py "$OUT" "$CLIPS" > "$OUT/summary.md"
cat "$OUT/summary.md"
