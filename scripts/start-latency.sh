#!/usr/bin/env bash
# Start latency against load on the server (issue 4, docs/results/xtream-table1.md): PLAY sent →
# first RTP packet, measured by `isochron bench` clients, at 1, MaxN/2 and MaxN streams on an
# emulated disk — the same disk (seek 10 ms, 4 MiB/s), block size (256 KiB) and kind of clip
# (x264 VBR at 1 Mb/s) as Table 1's emulated VBR 1 Mb/s cell, where MaxN = 29.
#
# Two ways to load the server, each a bench run per N:
#   probe: N - 1 background clients play 120 s clips (arriving one a second, as in Table 1), and
#          one probe client plays 5 s clips over and over; each of its starts is a sample, taken
#          while N - 1 streams play (Table 1's bench-disk --probe-every, end to end).
#   churn: all N clients play 10 s clips over and over, so starts also queue behind each other
#          (about N / 12 starts a second); every start after the N-th arrival is a sample.
# Clips are picked uniformly from many copies (distinct objects: no start is served from
# another stream's blocks); the block cache keeps no unpinned blocks (cache_mib = 0); admission
# is off, so N is exactly the load asked for. The server's missed deadlines come from /metrics.
# Every object's first block is kept in memory (sched.resident_mib, RESIDENT_MIB here; 0 keeps
# none, as before that setting): each run starts once the server has read them all.
#
# DISK=real puts the store on the machine's own disk instead (O_DIRECT reads, as always), read
# through a blkio throttle of REAL_READ_MIB_S (cgroup v1, root; the server runs inside it, the
# clients do not): unthrottled, this VM's virtio disk reads 1.5-2.2 GiB/s from the host's cache,
# and MaxN would be thousands of streams, more than the bench can play over loopback on 2 cores
# (docs/results/xtream-table1.md (b) throttles it for the same reason). With the defaults below
# (32 MiB/s, 1 MiB blocks, clips at 8 Mb/s) MaxN is a few dozen streams.
#
# Usage: scripts/start-latency.sh [N…]   (default: 1 14 29)
# Environment: BIN (default target/release/isochron), WORK (default /tmp/isochron-start-latency),
# PROBE_S (probe run, default 200), CHURN_S (churn run, default 180), COPIES (objects of each
# length, default 60; real 20), MODES (default "probe churn"), RESIDENT_MIB (default 64; real
# 128), TAG (a suffix of the runs' directories, default none), DISK (emu or real, default emu),
# REAL_READ_MIB_S (default 32), CLIP_BITS (the clips' video rate, default 1M; real 8M),
# BLOCK_KIB (default 256; real 1024).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/target/release/isochron}
WORK=${WORK:-/tmp/isochron-start-latency}
PROBE_S=${PROBE_S:-200}
CHURN_S=${CHURN_S:-180}
DISK=${DISK:-emu}
MODES=${MODES:-probe churn}
TAG=${TAG:-}
case "$DISK" in
  emu) COPIES=${COPIES:-60} RESIDENT_MIB=${RESIDENT_MIB:-64} CLIP_BITS=${CLIP_BITS:-1M}
    BLOCK_KIB=${BLOCK_KIB:-256} ;;
  real) COPIES=${COPIES:-20} RESIDENT_MIB=${RESIDENT_MIB:-128} CLIP_BITS=${CLIP_BITS:-8M}
    BLOCK_KIB=${BLOCK_KIB:-1024} REAL_READ_MIB_S=${REAL_READ_MIB_S:-32} ;;
  *) echo "DISK=$DISK: expected emu or real" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || set -- 1 14 29
NS=("$@")
RTSP=127.0.0.1:18554
HTTP=127.0.0.1:18080
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$WORK"

# Table 1's VBR clip settings (scripts/xtream-table1.sh), at three lengths; at 1 Mb/s the
# emulated cell's own clip. Faster clips are 720p with grain, so that x264 reaches the rate.
if [ "$CLIP_BITS" = 1M ]; then
  src=testsrc2=size=640x360:rate=25 suffix=""
else
  src="testsrc2=size=1280x720:rate=25,noise=alls=6:allf=t" suffix=-$CLIP_BITS
fi
for len in 5 10 120; do
  [ -s "$WORK/clip$len$suffix.ts" ] || ffmpeg -loglevel error -y -f lavfi -i "$src" -t "$len" \
    -c:v libx264 -preset ultrafast -b:v "$CLIP_BITS" -maxrate "$(( ${CLIP_BITS%M} * 2 ))M" \
    -bufsize "$CLIP_BITS" -f mpegts "$WORK/clip$len$suffix.ts"
done
# throttle_self: puts this (sub)shell, and what it execs, inside the real disk's read
# throttle (DISK=real).
throttle_self() {
  [ "$DISK" = real ] || return 0
  local cg=/sys/fs/cgroup/blkio/isochron-start-latency
  local dev; dev=$(lsblk -no MAJ:MIN "$(df --output=source "$WORK" | tail -1)" | head -1 | tr -d ' ')
  mkdir -p "$cg"
  echo "$dev $((REAL_READ_MIB_S << 20))" > "$cg/blkio.throttle.read_bps_device"
  echo "$BASHPID" > "$cg/tasks"
}
if [ "$DISK" = emu ]; then
  store=$WORK/store disk="$WORK/store/d0,seek_ms=10,rate_mib_s=4"
else
  store=$WORK/store-real-$BLOCK_KIB$suffix disk=$store/d0
fi
if [ ! -e "$store/.done" ]; then
  rm -rf "$store"
  log "ingesting $COPIES copies of each clip on disk $disk"
  new=(--disk "$disk" --block-size-kib "$BLOCK_KIB")
  for i in $(seq -w 1 "$COPIES"); do
    for len in 5 10 120; do
      "$BIN" ingest --data "$store" "${new[@]}" --name "c$len-$i" "$WORK/clip$len$suffix.ts" > /dev/null
      new=()
    done
  done
  touch "$store/.done"
fi
cat > "$WORK/config.toml" <<EOF
[sched]
admission = "off"
cache_mib = 0
resident_mib = $RESIDENT_MIB
nrt_share_percent = 10
EOF
urls() { for i in $(seq -w 1 "$COPIES"); do echo "rtsp://$RTSP/c$1-$i"; done; }
mapfile -t U5 < <(urls 5)
mapfile -t U10 < <(urls 10)
mapfile -t U120 < <(urls 120)

for mode in $MODES; do
  for n in "${NS[@]}"; do
    out=$WORK/$mode$TAG-n$n
    rm -rf "$out" "$out-bg"
    (throttle_self; exec "$BIN" serve --config "$WORK/config.toml" --data "$store" --rtsp "$RTSP" \
      --http "$HTTP" --rtp-port 0 --no-demo) > "$WORK/server-$mode$TAG-$n.log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do curl -fsS "http://$HTTP/metrics" > /dev/null 2>&1 && break; sleep 0.2; done
    kill -0 "$pid" 2> /dev/null || { echo "the server for N = $n did not start:" >&2; tail -n 3 "$WORK/server-$mode$TAG-$n.log" >&2; exit 1; }
    if [ "$RESIDENT_MIB" != 0 ]; then
      # The objects' first blocks, read in the disk's idle time: measured once they are in.
      want=$((3 * COPIES)) reads=0
      for _ in $(seq 600); do
        reads=$(curl -fsS "http://$HTTP/metrics" | awk '/^isochron_resident_reads_total /{print int($2)}')
        [ "${reads:-0}" -ge "$want" ] && break
        sleep 0.2
      done
      sleep 0.5
      log "$reads of $want first blocks read into memory"
    fi
    common=(--buffer-ms 2000 --no-mtfc --server-pid "$pid" --metrics "http://$HTTP/metrics")
    log "$mode, N = $n"
    if [ "$mode" = probe ]; then
      bg=""
      if [ "$n" -gt 1 ]; then
        "$BIN" bench "${U120[@]}" --out "$out-bg" --arrival-rate 60 --max-clients $((n - 1)) \
          --duration $((PROBE_S + n + 10)) --seed 2 "${common[@]}" > "$WORK/bench-$mode$TAG-$n-bg.txt" &
        bg=$!
        sleep $((n + 5))
      fi
      "$BIN" bench "${U5[@]}" --out "$out" --clients 1 --duration "$PROBE_S" --seed 1 "${common[@]}" \
        | tee "$WORK/bench-$mode$TAG-$n.txt"
      [ -z "$bg" ] || wait "$bg"
    else
      "$BIN" bench "${U10[@]}" --out "$out" --arrival-rate 60 --max-clients "$n" \
        --duration "$CHURN_S" --seed 1 "${common[@]}" | tee "$WORK/bench-$mode$TAG-$n.txt"
    fi
    curl -fsS "http://$HTTP/metrics" | grep -E '^isochron_(missed_deadlines|cycles_with_misses)' \
      > "$out/server-misses.txt" || true
    kill "$pid" 2> /dev/null || { echo "the server for N = $n had stopped:" >&2; tail -n 3 "$WORK/server-$mode$TAG-$n.log" >&2; }
    wait "$pid" 2> /dev/null || true
  done
done

python3 - "$WORK" "$MODES" "$TAG" "${NS[@]}" <<'EOF'
import json, math, os, sys
work, modes, tag, ns = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4:]
print("| load | streams | starts sampled | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) | server missed deadlines | client starvations |")
print("|---|---|---|---|---|---|---|---|---|")
for mode in modes:
    for n in ns:
        d = f"{work}/{mode}{tag}-n{n}"
        r = json.load(open(f"{d}/report.json"))
        # churn: the starts once all N clients have arrived (one a second); probe: every start.
        after = int(n) + 2 if mode == "churn" else 0
        v = sorted(x["start_latency_ms"] for x in r["sessions"]
                   if x["start_latency_ms"] is not None and x["start_s"] >= after)
        q = lambda f: v[max(1, math.ceil(len(v) * f)) - 1] if v else float("nan")
        starv = r["sessions_summary"]["starvations"]
        if os.path.exists(f"{d}-bg/report.json"):
            starv += json.load(open(f"{d}-bg/report.json"))["sessions_summary"]["starvations"]
        misses = "?"
        for line in open(f"{d}/server-misses.txt"):
            if line.startswith("isochron_missed_deadlines_total"):
                misses = line.split()[-1]
        print(f"| {mode} | {n} | {len(v)} | {q(0.5):.1f} | {q(0.9):.1f} | {q(0.99):.1f} | {v[-1] if v else float('nan'):.1f} | {misses} | {starv} |")
EOF
