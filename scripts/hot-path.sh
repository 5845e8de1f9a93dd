#!/usr/bin/env bash
# The hot path on every core (issue 16, docs/results/hot-path.md), one run on one machine:
#   1. N_max of each clip with 1 and with 2 sender threads (`isochron bench --find-nmax`: nominal
#      pacing as standard players, trials that play the whole clip, 2 s playout buffer);
#   2. iperf3 -u -l 1328 -b 0, one stream and two, on the same loopback, in the same run;
#   3. the first clip at the 2-thread N_max checked by tools/rtsp-probe.c (an independent client:
#      no session more than 2 s late over the whole clip), with 1 and with 2 threads;
#   4. server CPU per delivered Gb/s at one N both pass (the 1-thread N_max), 1 and 2 threads;
#   5. a perf profile of the 2-thread server at its N_max;
# then summary.md. The clips come from scripts/make-clips.sh.
#
# Usage: scripts/hot-path.sh OUT_DIR      (root: perf; about 45 minutes)
# Environment: BIN (default target/release/isochron), CLIPS (directory of the clips, made if
# missing; default OUT_DIR/clips), OBJECTS (default "vbr60 hdtv40 uhd400"), THREADS ("1 2").
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CLIPS=${CLIPS:-$OUT/clips}
OBJECTS=${OBJECTS:-vbr60 hdtv40 uhd400}
THREADS=${THREADS:-1 2}
STORE=$OUT/store
RTSP=127.0.0.1:19654
HTTP=127.0.0.1:19680
log() { echo "[$(date +%T)] $*" >&2; }
# The first N_max trial and the largest N tried, per clip (near the answer: fewer trials).
declare -A FROM=([vbr60]=340 [hdtv40]=64 [uhd400]=4) MAX=([vbr60]=440 [hdtv40]=96 [uhd400]=16)

for o in $OBJECTS; do
  [ -s "$CLIPS/$o.ts" ] || scripts/make-clips.sh "$CLIPS" "$o"
done
if [ ! -d "$STORE" ]; then
  for o in $OBJECTS; do "$BIN" ingest --data "$STORE" "$CLIPS/$o.ts"; done
fi
cc -O2 -o "$OUT/rtsp-probe" tools/rtsp-probe.c

pid=
serve() { # serve K: a fresh server with K sender threads
  "$BIN" serve --data "$STORE" --rtsp "$RTSP" --http "$HTTP" --rtp-port 0 --no-demo \
    --sender-threads "$1" > "$OUT/server-k$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do curl -fsS "http://$HTTP/metrics" > /dev/null 2>&1 && break; sleep 0.2; done
}
stop() { kill "$pid" 2> /dev/null || true; wait "$pid" 2> /dev/null || true; sleep 5; }
trap stop EXIT
bench() { # bench K OBJECT DIR ARGS…
  local k=$1 o=$2 dir=$3
  shift 3
  serve "$k"
  "$BIN" bench "rtsp://$RTSP/$o" --out "$dir" --threads 2 --buffer-ms 2000 --seed 5 --iface lo \
    --server-pid "$pid" --metrics "http://$HTTP/metrics" "$@" | tail -1
  stop
}
nmax() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['n_max'] or 1)" "$1"; }

for o in $OBJECTS; do
  for k in $THREADS; do
    log "$o: N_max with $k sender thread(s), trials from ${FROM[$o]} up to ${MAX[$o]}"
    bench "$k" "$o" "$OUT/$o-k$k" --find-nmax --nmax-from "${FROM[$o]}" \
      --max-clients "${MAX[$o]}" --duration 3000
  done
done

for p in 1 2; do
  log "iperf3 -u, 1328-byte datagrams, unlimited rate, -P $p, 20 s"
  iperf3 -s -1 -p 19201 > /dev/null 2>&1 &
  sleep 0.5
  iperf3 -c 127.0.0.1 -p 19201 -u -b 0 -l 1328 -P "$p" -t 20 -J > "$OUT/iperf3-P$p.json"
  wait
done

first=${OBJECTS%% *}
n1=$(nmax "$OUT/$first-k1/report.json")
n2=$(nmax "$OUT/$first-k2/report.json")
# The whole clip and its last packets (the probe), and the bench's 3 s more to start and end.
len=$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$CLIPS/$first.ts" \
  | python3 -c "import math,sys; print(math.ceil(float(sys.stdin.read())) + 2)")
for k in $THREADS; do
  log "$first: rtsp-probe, $n2 sessions for ${len} s, $k sender thread(s)"
  serve "$k"
  "$OUT/rtsp-probe" "rtsp://$RTSP/$first" "$n2" "$len" > "$OUT/probe-k$k-n$n2.txt" 2>&1 || true
  stop
done
for k in $THREADS; do
  log "$first: CPU per Gb/s at N = $n1, $k sender thread(s)"
  bench "$k" "$first" "$OUT/cpu-k$k-n$n1" --clients "$n1" --duration "$((len + 3))"
done

log "$first: N = $n2 with 2 sender threads, the server profiled for 20 s"
serve 2
"$BIN" bench "rtsp://$RTSP/$first" --out "$OUT/perf-k2-n$n2" --threads 2 --clients "$n2" \
  --duration "$((len + 3))" --seed 5 --iface lo --server-pid "$pid" > /dev/null &
b=$!
sleep 30
perf record -F 499 -g -p "$pid" -o "$OUT/perf.data" -- sleep 20 2> "$OUT/perf-record.txt" || true
wait "$b" || true
stop
if [ -s "$OUT/perf.data" ]; then
  perf report -i "$OUT/perf.data" --no-children --sort dso,symbol --stdio --percent-limit 0.7 \
    -g none 2> /dev/null > "$OUT/perf-server.txt"
  perf report -i "$OUT/perf.data" --no-children --sort comm --stdio -g none 2> /dev/null \
    > "$OUT/perf-threads.txt"
  rm -f "$OUT/perf.data" "$OUT/perf.data.old"
fi
trap - EXIT
CLIPS=$CLIPS OBJECTS=$OBJECTS THREADS=$THREADS python3 scripts/hot-path-report.py "$OUT" \
  | tee "$OUT/summary.md"
