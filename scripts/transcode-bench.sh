#!/usr/bin/env bash
# Transcoding never starves playback (issue 27, docs/results/transcode.md), in one run:
#   1. a 60 s 1080p25 source (x264 of ffmpeg's testsrc2 with grain, AAC);
#   2. idle: the server makes the ladder 1080p,720p,480p,240p of an upload (a job:
#      `isochron ingest --server … --ladder`); the job's ffmpeg command line is read from /proc
#      while it runs, the job's time from the CLI (the server's /api/v1/transcode);
#   3. idle: that same ffmpeg command alone (its outputs to the same paths, removed after), timed;
#      steps 2 and 3 PAIRS times in turn (default 3), the medians compared;
#   4. loaded: `isochron bench` plays vbr60 (scripts/make-clips.sh) to CLIENTS sessions (default
#      298: 80 % of the 2-thread N_max 372 of docs/results/hot-path.md), nominal pacing, a 2 s
#      playout buffer, for 360 s; 20 s in, the same ladder of a second upload; the bench's
#      starvations and lateness, and the job's time.
#
# Usage: scripts/transcode-bench.sh OUT [CLIENTS]     (about 10 minutes; builds the release binary)
# Environment: CLIPS (where vbr60.ts is or is made; default OUT/clips), LADDER.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:?usage: $0 OUT [CLIENTS]}")
CLIENTS=${2:-298}
LADDER=${LADDER:-1080p,720p,480p,240p}
CLIPS=${CLIPS:-$OUT/clips}
mkdir -p "$OUT"
cargo build --release --locked --quiet
BIN=$PWD/target/release/isochron
STORE=$OUT/store
RTSP=127.0.0.1:19754
HTTP=127.0.0.1:19780
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt" >&2; }

[ -s "$CLIPS/vbr60.ts" ] || scripts/make-clips.sh "$CLIPS" vbr60
[ -s "$OUT/src1080.mp4" ] || { log "the 60 s 1080p source"; scripts/make-clips.sh "$OUT" src1080; }
rm -rf "$STORE"
"$BIN" ingest --data "$STORE" "$CLIPS/vbr60.ts" > /dev/null

"$BIN" serve --data "$STORE" --rtsp "$RTSP" --http "$HTTP" --rtp-port 0 --no-demo \
  > "$OUT/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2> /dev/null || true' EXIT
for _ in $(seq 50); do curl -fsS "http://$HTTP/healthz" > /dev/null 2>&1 && break; sleep 0.2; done

upload() { # NAME: the server makes the ladder of an upload; the CLI's words in OUT/NAME.txt
  local name=$1
  "$BIN" ingest --server "http://$HTTP" --name "$name" --ladder "$LADDER" "$OUT/src1080.mp4" \
    > "$OUT/$name.txt" 2>&1 &
  local cli=$!
  # The job's ffmpeg command line, NUL-separated, as it runs.
  while kill -0 "$cli" 2> /dev/null; do
    local f
    f=$(pgrep -x ffmpeg | head -1 || true)
    if [ -n "$f" ] && [ ! -s "$OUT/$name.cmdline" ]; then
      cat "/proc/$f/cmdline" > "$OUT/$name.cmdline" 2> /dev/null || true
    fi
    sleep 0.2
  done
  wait "$cli"
  cat "$OUT/$name.txt" >&2
}
job_seconds() { grep -o 'in [0-9.]* s (ladder job' "$OUT/$1.txt" | awk '{print $2}'; }

PAIRS=${PAIRS:-3}
jobs=()
alones=()
for i in $(seq "$PAIRS"); do
  log "idle: the server's ladder job ($i of $PAIRS)"
  upload "idle$i"
  log "idle: the same ffmpeg alone ($i of $PAIRS)"
  # Its input is the upload (the job's spooled copy is gone: the same file), its outputs go
  # where the job's did (the work directory, removed after).
  python3 - "$OUT/idle$i.cmdline" "$OUT/src1080.mp4" > "$OUT/alone.cmdline" <<'EOF'
import sys
args = open(sys.argv[1], "rb").read().split(b"\0")[:-1]
args[args.index(b"-i") + 1] = sys.argv[2].encode()
sys.stdout.buffer.write(b"\0".join(args) + b"\0")
EOF
  work=$(tr '\0' '\n' < "$OUT/alone.cmdline" | grep -m1 '/\.transcode-' | xargs dirname)
  mkdir -p "$work"
  t0=$(date +%s.%N)
  xargs -0 -a "$OUT/alone.cmdline" sh -c 'exec "$@" > /dev/null' ffmpeg
  t1=$(date +%s.%N)
  rm -rf "$work"
  alones+=("$(echo "$t1 - $t0" | bc)")
  jobs+=("$(job_seconds "idle$i")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
alone=$(median "${alones[@]}")
job=$(median "${jobs[@]}")
log "idle: jobs ${jobs[*]} s, ffmpeg alone ${alones[*]} s"

log "loaded: $CLIENTS players of vbr60 for 360 s, the ladder of a second upload 20 s in"
"$BIN" bench "rtsp://$RTSP/vbr60" --out "$OUT/loaded" --clients "$CLIENTS" --duration 360 \
  --threads 2 --buffer-ms 2000 --seed 5 --iface lo --server-pid "$pid" \
  --metrics "http://$HTTP/metrics" > "$OUT/bench.txt" 2>&1 &
bench=$!
sleep 20
upload loaded
wait "$bench" || true
loaded=$(job_seconds loaded)
python3 - "$OUT" "$alone" "$job" "$loaded" "$CLIENTS" <<'EOF' | tee "$OUT/summary.md"
import json, sys
out, alone, job, loaded, clients = sys.argv[1:]
r = json.load(open(f"{out}/loaded/report.json"))
s = r["sessions_summary"]
print(f"- idle, medians of the pairs: the server's job {float(job):.1f} s, the same ffmpeg alone "
      f"{float(alone):.1f} s: "
      f"**{float(job) / float(alone):.3f}x**")
print(f"- loaded, {clients} players of vbr60 for 360 s: the job {float(loaded):.1f} s; the players: "
      f"{s['count']} sessions, **{s['starvations']} starvations**, {s['lost']} packets lost, "
      f"{s['sessions_later_than_buffer']} sessions later than their buffer, lateness p99 "
      f"{s['lateness_max_ms']['p99_ms']:.0f} ms, max {s['lateness_max_ms']['max_ms']:.0f} ms")
EOF
