#!/usr/bin/env bash
# A ladder made by a cluster (issue 27, docs/results/transcode.md, "On three nodes"), in one run:
#   1. a 60 s 1080p25 source (as scripts/transcode-bench.sh makes it);
#   2. one server alone makes the ladder 1080p,720p,480p,240p of an upload (`isochron ingest
#      --server … --ladder`): the job's time, the CPU time of its ffmpeg (the server's reaped
#      children, /proc/PID/stat cutime + cstime);
#   3. three nodes of a cluster on one etcd (loopback, two copies of every block) make the same
#      ladder of an upload through n1: each node's CPU time in ffmpeg, the time to the ladder;
#   4. again, with the node (other than n1) running a rung SIGKILLed 15 s in: the time to the
#      ladder, who made the dead node's rung.
#
# Usage: scripts/transcode-cluster-bench.sh OUT      (about 10 minutes; builds the release binary)
# Environment: LADDER.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:?usage: $0 OUT}")
LADDER=${LADDER:-1080p,720p,480p,240p}
mkdir -p "$OUT"
cargo build --release --locked --quiet
BIN=$PWD/target/release/isochron
ETCD=http://127.0.0.1:23791
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/log.txt" >&2; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2> /dev/null || true; done; }
trap cleanup EXIT

[ -s "$OUT/src1080.mp4" ] || { log "the 60 s 1080p source"; scripts/make-clips.sh "$OUT" src1080; }

children_cpu() { # PID: CPU seconds of its reaped children (cutime + cstime)
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($14 + $15) / hz }' "/proc/$1/stat"
}
wait_http() { for _ in $(seq 100); do curl -fsS "$1/healthz" > /dev/null 2>&1 && return; sleep 0.2; done; echo "$1 never up" >&2; exit 1; }
ladder() { # URL NAME: the ladder of an upload through URL; seconds to its end on stdout
  local t0 t1
  t0=$(date +%s.%N)
  "$BIN" ingest --server "$1" --name "$2" --ladder "$LADDER" "$OUT/src1080.mp4" > "$OUT/$2.txt" 2>&1
  t1=$(date +%s.%N)
  cat "$OUT/$2.txt" >&2
  echo "$t1 - $t0" | bc
}

log "one server alone"
rm -rf "$OUT/single"
"$BIN" serve --data "$OUT/single" --rtsp 127.0.0.1:19854 --http 127.0.0.1:19880 --rtp-port 0 \
  --no-demo > "$OUT/single.log" 2>&1 &
single=$!
pids+=("$single")
wait_http http://127.0.0.1:19880
single_s=$(ladder http://127.0.0.1:19880 film)
single_cpu=$(children_cpu "$single")
kill "$single"; wait "$single" 2> /dev/null || true

log "etcd and three nodes"
rm -rf "$OUT/etcd" "$OUT"/n[123]
etcd --data-dir "$OUT/etcd" --listen-client-urls "$ETCD" --advertise-client-urls "$ETCD" \
  --listen-peer-urls http://127.0.0.1:23792 --initial-advertise-peer-urls http://127.0.0.1:23792 \
  --initial-cluster default=http://127.0.0.1:23792 > "$OUT/etcd.log" 2>&1 &
pids+=("$!")
for _ in $(seq 50); do curl -fsS "$ETCD/health" > /dev/null 2>&1 && break; sleep 0.2; done
printf '[store]\nreplication = 2\nseed_demo = false\n[cluster]\nlease_ttl_s = 2\ndead_after_s = 4\n' \
  > "$OUT/cluster.toml"
declare -A node_pid
start_node() { # NAME I
  "$BIN" serve --config "$OUT/cluster.toml" --data "$OUT/$1" --disk d0 --rtsp "127.0.0.1:1995$2" \
    --http "127.0.0.1:1998$2" --rtp-port 0 --etcd "$ETCD" --node "$1" --advertise 127.0.0.1 \
    --control-port "1996$2" > "$OUT/$1.log" 2>&1 &
  node_pid[$1]=$!
  pids+=("$!")
  wait_http "http://127.0.0.1:1998$2"
}
start_node n1 1
start_node n2 2
start_node n3 3
for _ in $(seq 50); do
  [ "$(curl -fsS http://127.0.0.1:19981/api/v1/nodes | grep -o '"state":"up"' | wc -l)" = 3 ] && break
  sleep 0.2
done

log "three nodes: the ladder of an upload through n1"
declare -A cpu0
for n in n1 n2 n3; do cpu0[$n]=$(children_cpu "${node_pid[$n]}"); done
cluster_s=$(ladder http://127.0.0.1:19981 film)
cpu_line=""
for n in n1 n2 n3; do
  c=$(echo "$(children_cpu "${node_pid[$n]}") - ${cpu0[$n]}" | bc)
  cpu_line="$cpu_line $n=$c"
done

log "three nodes: the ladder of a second upload, a node running a rung SIGKILLed 15 s in"
t0=$(date +%s.%N)
"$BIN" ingest --server http://127.0.0.1:19981 --name film2 --ladder "$LADDER" "$OUT/src1080.mp4" \
  > "$OUT/film2.txt" 2>&1 &
cli=$!
sleep 15
curl -fsS http://127.0.0.1:19981/api/v1/transcode > "$OUT/tasks-at-kill.json"
victim=$(python3 -c '
import json, sys
t = [t for t in json.load(open(sys.argv[1]))["tasks"] if t["state"] == "running" and t["node"] != "n1"]
print(t[0]["node"] + " " + t[0]["name"] if t else "")' "$OUT/tasks-at-kill.json")
[ -n "$victim" ] || { echo "no rung running on n2 or n3 15 s in" >&2; exit 1; }
read -r vnode vtask <<< "$victim"
kill -9 "${node_pid[$vnode]}"
log "SIGKILLed $vnode (making $vtask)"
wait "$cli"
t1=$(date +%s.%N)
kill_s=$(echo "$t1 - $t0" | bc)
cat "$OUT/film2.txt" >&2
taker=$(grep -l "claimed a rung to make.*task=$vtask\|task=$vtask.*claimed a rung" "$OUT"/n[123].log \
  | xargs -n1 basename | sed 's/\.log//' | grep -v "^$vnode$" | tr '\n' ' ')
curl -fsS http://127.0.0.1:19981/api/v1/objects > "$OUT/objects.json"
python3 - "$OUT" "$single_s" "$single_cpu" "$cluster_s" "$cpu_line" "$kill_s" "$vnode" "$vtask" "$taker" <<'EOF' | tee "$OUT/summary.md"
import json, sys
out, single_s, single_cpu, cluster_s, cpu_line, kill_s, vnode, vtask, taker = sys.argv[1:]
cpu = dict(kv.split("=") for kv in cpu_line.split())
names = sorted(o["name"] for o in json.load(open(f"{out}/objects.json")))
print(f"- one server: the ladder in {float(single_s):.1f} s, its ffmpeg {float(single_cpu):.1f} CPU s")
print(f"- three nodes: the ladder in {float(cluster_s):.1f} s; CPU s in ffmpeg by node: "
      + ", ".join(f"{n} {float(c):.1f}" for n, c in cpu.items())
      + f" (sum {sum(float(c) for c in cpu.values()):.1f})")
print(f"- three nodes, {vnode} SIGKILLed 15 s in while making {vtask}: the ladder in "
      f"{float(kill_s):.1f} s, {vtask} made again by {taker.strip() or '?'}; listed: {', '.join(names)}")
EOF
