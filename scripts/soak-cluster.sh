#!/usr/bin/env bash
# Endurance of a cluster (issue 30, docs/results/soak.md): 3 isochron nodes for an hour at 80 % of
# the N_max the cluster keeps through a node's failure, one node SIGKILLed and restarted every
# 10 minutes, one etcd member restarted every 15.
#
# The set-up is Figure 4's and capacity-after-failure's (docs/results/capacity-after-failure.md):
# every node in a network namespace of its own behind a 100 Mb/s link (tc tbf), two copies of
# every block (store.replication = 2), 16 KiB blocks, admission off, three etcd members; the
# clients (one `isochron bench`, RTSP over UDP, bipartite delivery, nominal pacing, 2 s playout
# buffer) in another namespace. The load: N clients arriving over the first RAMP_MIN minutes,
# each playing the 180 s clip to its end, session after session (new RTSP sessions all hour),
# spread over the three nodes in turn.
#
# Why the N_max with a node down: with two copies on three nodes, while one node is down the two
# others send its blocks, 1.5 times their own share. At 80 % of the N_max of three nodes up (50)
# that is 120 % of their links for as long as the node is away, which no scheduler can send in
# time. The cluster's N_max with one node killed (33) is the capacity it keeps through the
# failure; 80 % of it is the load it must carry through every kill without a starvation.
#
# The bench's `--chaos-*` flags kill, restart and check (`isochron fsck --server`) the nodes and
# restart etcd members, and audit every session afterwards (crates/isochron/src/cmds/
# bench_chaos.rs): a session whose RTSP node was killed is excused (its client's only
# connection broke); every other must play to its end (or to the run's end) with no sequence
# gap and no starvation, and one that played to the end must have received exactly its file's
# TS packets (a digest of every distinct packet against the file's).
#
# Usage: scripts/soak-cluster.sh OUT_DIR      (root: namespaces and tc; needs etcd-server)
# Environment: BIN (default target/release/isochron), CLIP (default OUT_DIR/fig3.ts, made as in
# docs/results/fig3.md if missing), MINUTES (60), NMAX (33: capacity-after-failure.md's N_max with
# one of three nodes killed; MEASURE=1 measures it first, about 25 minutes), SHARE (0.8),
# RAMP_MIN (3), KILL_S (600), DOWN_S (5), ETCD_S (900).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
MINUTES=${MINUTES:-60}
NMAX=${NMAX:-33}
SHARE=${SHARE:-0.8}
RAMP_MIN=${RAMP_MIN:-3}
KILL_S=${KILL_S:-600}
DOWN_S=${DOWN_S:-5}
ETCD_S=${ETCD_S:-900}
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CLIP=${CLIP:-$OUT/fig3.ts}
if [ ! -s "$CLIP" ]; then
  log "making the 180 s clip of docs/results/fig3.md"
  ffmpeg -nostdin -v error -y -f lavfi -i "testsrc2=size=1280x720:rate=30,noise=alls=6:allf=t" \
    -f lavfi -i "sine=frequency=440:sample_rate=48000" -t 180 -c:v mpeg2video -b:v 5.2M \
    -maxrate 8M -bufsize 3M -g 15 -bf 2 -c:a mp2 -b:a 192k -f mpegts "$CLIP"
fi
cluster=(--cluster-nodes 3 --replication 2 --shape 100mbit --ingest "$CLIP" --block-kib 16
  --buffer-ms 2000 --no-mtfc --etcd-members 3)
if [ "${MEASURE:-0}" = 1 ]; then
  log "N_max with one of the three nodes killed (whole-clip trials)"
  "$BIN" bench --out "$OUT/nmax-killed" "${cluster[@]}" --kill-nodes 1 --stagger --seed 4 \
    --find-nmax --trial 190 --duration 3600 --nmax-from 32 --max-clients 40 | tee "$OUT/nmax.txt"
  NMAX=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['n_max'] or 1)" \
    "$OUT/nmax-killed/report.json")
fi
n=$(python3 -c "import math,sys; print(max(1, math.floor(float(sys.argv[1]) * float(sys.argv[2]))))" \
  "$SHARE" "$NMAX")
rate=$(python3 -c "import sys; print(round(int(sys.argv[1]) / float(sys.argv[2]), 3))" "$n" "$RAMP_MIN")
cat > "$OUT/command.txt" << EOF
scripts/soak-cluster.sh $OUT   # MINUTES=$MINUTES NMAX=$NMAX SHARE=$SHARE RAMP_MIN=$RAMP_MIN KILL_S=$KILL_S DOWN_S=$DOWN_S ETCD_S=$ETCD_S
$BIN bench --out $OUT/soak ${cluster[*]} --seed 31 --arrival-rate $rate --max-clients $n --duration $((MINUTES * 60)) --chaos-kill-every $KILL_S --chaos-down $DOWN_S --chaos-etcd-every $ETCD_S
N_max=$NMAX (one node down), N=$n clients, $(git rev-parse --short HEAD 2> /dev/null || echo unknown)
EOF
log "cluster soak: $n clients for $MINUTES minutes, a node killed every $KILL_S s, etcd every $ETCD_S s"
# The load average every 10 s: what else the machine did meanwhile.
(while :; do echo "$(date +%s) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 10; done) > "$OUT/load.txt" &
loadlog=$!
trap 'kill $loadlog 2> /dev/null || true' EXIT
"$BIN" bench --out "$OUT/soak" "${cluster[@]}" --seed 31 --arrival-rate "$rate" --max-clients "$n" \
  --duration $((MINUTES * 60)) --chaos-kill-every "$KILL_S" --chaos-down "$DOWN_S" \
  --chaos-etcd-every "$ETCD_S" | tee "$OUT/soak.txt"
python3 scripts/soak-cluster-report.py "$OUT"
