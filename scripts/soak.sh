#!/usr/bin/env bash
# Endurance (issue 30, docs/results/soak.md): one isochron node on loopback for an hour at 90 % of
# its N_max, as the CineGrid report's future work asks ("a server that holds for an hour").
#
#   1. Two objects: vbr60.ts (MPEG-TS, 5.6 Mb/s VBR, sent as MP2T) and native60.mp4 (H.264 + AAC,
#      5.2 Mb/s, sent as native RTP, two tracks), made by scripts/make-clips.sh and ingested into
#      a fresh store.
#   2. N_max of that workload, unless NMAX is given: `isochron bench --find-nmax`, whole-clip
#      trials, nominal pacing, clients alternating UDP and TCP-interleaved and the two objects.
#   3. The soak: N = SHARE × N_max clients arriving over the first RAMP_MIN minutes, each playing
#      whole clips, one session after another (every session is a new RTSP connection: DESCRIBE,
#      SETUP, PLAY, TEARDOWN), so sessions start and end all hour at staggered times; half the
#      clients over TCP; a quarter of the clients seek about every SEEK_S seconds and pause about
#      every PAUSE_S seconds for 2 s. Nominal pacing (no MTFC).
#   4. Every 10 s, from before the first client to 45 s after the last, the server's RSS, open file descriptors and threads (/proc) and its /metrics
#      (packet lateness histogram, sessions, underruns) into soak.csv; the bench samples the
#      clients every second.
#   5. scripts/soak-report.py: report.md, soak.json and the plots, with the issue's verdicts
#      (0 starvations, 0 sequence gaps, RSS growth < 5 % from minute 10 to the end, no fd growth,
#      lateness p99 of the first and last 10 minutes within 20 %).
#
# Usage: scripts/soak.sh OUT_DIR
# Environment: BIN (default target/release/isochron), MINUTES (60), SHARE (0.9), NMAX (skip the
# search), NMAX_FROM (the search's first guess, 300), RAMP_MIN (5), SEEK_S (45), PAUSE_S (60),
# INTERACTIVE (0.25), CLIPS (a directory holding the clips; made if missing).
# Runs as any user; nothing else should load the machine meanwhile (the clients share its CPUs).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
MINUTES=${MINUTES:-60}
SHARE=${SHARE:-0.9}
NMAX=${NMAX:-}
NMAX_FROM=${NMAX_FROM:-300}
RAMP_MIN=${RAMP_MIN:-5}
SEEK_S=${SEEK_S:-45}
PAUSE_S=${PAUSE_S:-60}
INTERACTIVE=${INTERACTIVE:-0.25}
RTSP=127.0.0.1:19654
HTTP=127.0.0.1:19680
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CLIPS=${CLIPS:-$OUT/clips}
for c in vbr60.ts native60.mp4; do
  [ -s "$CLIPS/$c" ] || scripts/make-clips.sh "$CLIPS" "${c%.*}"
done

store=$(mktemp -d)
pid=
sampler=
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2> /dev/null
  [ -n "$pid" ] && kill "$pid" 2> /dev/null && wait "$pid" 2> /dev/null
  rm -rf "$store"
}
trap cleanup EXIT
"$BIN" ingest --data "$store" "$CLIPS/vbr60.ts" "$CLIPS/native60.mp4" > "$OUT/ingest.txt"
"$BIN" serve --data "$store" --rtsp "$RTSP" --http "$HTTP" --rtp-port 0 --no-demo \
  > "$OUT/server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -fsS "http://$HTTP/metrics" > /dev/null 2>&1 && break; sleep 0.2; done
urls=("rtsp://$RTSP/vbr60" "rtsp://$RTSP/native60")
common=(--transport udp,tcp --popularity uniform --buffer-ms 2000 --server-pid "$pid"
  --metrics "http://$HTTP/metrics" --iface lo --seed 30)

if [ -z "$NMAX" ]; then
  log "N_max of the workload (whole-clip trials, from $NMAX_FROM)"
  "$BIN" bench "${urls[@]}" --out "$OUT/nmax" --find-nmax --nmax-from "$NMAX_FROM" \
    --max-clients 1000 --duration 2400 "${common[@]}" | tee "$OUT/nmax.txt"
  NMAX=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['n_max'] or 1)" \
    "$OUT/nmax/report.json")
  # The trials leave nothing behind: the soak starts on a quiet server.
  sleep 15
fi
n=$(python3 -c "import math,sys; print(max(1, math.floor(float(sys.argv[1]) * float(sys.argv[2]))))" \
  "$SHARE" "$NMAX")
rate=$(python3 -c "import sys; print(round(int(sys.argv[1]) / float(sys.argv[2]), 3))" "$n" "$RAMP_MIN")
cat > "$OUT/command.txt" << EOF
scripts/soak.sh $OUT   # MINUTES=$MINUTES SHARE=$SHARE NMAX=$NMAX RAMP_MIN=$RAMP_MIN SEEK_S=$SEEK_S PAUSE_S=$PAUSE_S INTERACTIVE=$INTERACTIVE
N_max=$NMAX, N=$n clients arriving at $rate per minute, $(git rev-parse --short HEAD 2> /dev/null || echo unknown)
EOF

# The server's own view, every 10 s.
sample() {
  local t0 now
  t0=$(date +%s.%N)
  echo "t_s,rss_kib,fds,threads,metrics" > "$OUT/soak.csv"
  while kill -0 "$pid" 2> /dev/null; do
    now=$(date +%s.%N)
    rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2> /dev/null || echo 0)
    thr=$(awk '/^Threads/ {print $2}' "/proc/$pid/status" 2> /dev/null || echo 0)
    fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2> /dev/null | wc -l)
    m=$(curl -fsS --max-time 5 "http://$HTTP/metrics" 2> /dev/null \
      | grep -E '^isochron_(packet_lateness_seconds|sessions|underruns_total|send_errors_total|packets_sent_total|admission_rejects_total)' \
      | tr ' ' '=' | tr '\n' ';' | tr -d '"' || true)
    printf '%.1f,%s,%s,%s,"%s"\n' "$(echo "$now - $t0" | bc)" "$rss" "$fds" "$thr" "$m" \
      >> "$OUT/soak.csv"
    sleep 10
  done
}
sample &
sampler=$!

log "soak: $n clients (90 % of N_max $NMAX by default) for $MINUTES minutes"
"$BIN" bench "${urls[@]}" --out "$OUT/soak" --arrival-rate "$rate" --max-clients "$n" \
  --duration $((MINUTES * 60)) --seek-every "$SEEK_S" --pause-every "$PAUSE_S" \
  --interactive-share "$INTERACTIVE" "${common[@]}" | tee "$OUT/soak.txt"
# At rest again: every session torn down; the last samples are the server idle after the soak,
# to hold against the first (idle before it).
sleep 45
kill "$sampler" 2> /dev/null || true
sampler=
curl -fsS "http://$HTTP/metrics" > "$OUT/metrics-end.txt" || true
python3 scripts/soak-report.py "$OUT"
