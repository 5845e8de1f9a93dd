#!/usr/bin/env bash
# Yima Figure 4 (e)–(h), docs/results/fig4.md ("Panels e–h"): 2 and 4 isochron nodes, each
# behind its own 100 Mb/s link, the Fig. 3 clip, clients with MTFC (Yima's clients sent rate
# changes; panels g/h count them), N raised step by step past N_max. Each node's `/metrics`
# is read every second: its B_disk and B_cache, drawn cumulatively per node as in Yima's
# (e)/(f) (`b_disk_cache_nodes.svg`); R_Δr, the rate changes the clients sent to the cluster,
# is (g)/(h) (`r_dr.svg`). The set-up is scripts/fig4.sh's (bipartite, 16 KiB blocks,
# admission off, staggered looping clients, 2 s playout buffer), with MTFC instead of nominal
# pacing and a ramp instead of N_max trials.
#
# Usage: scripts/fig4-disk-cache.sh OUT_DIR      (root; etcd, iproute2, ffmpeg; about 10 minutes)
# Environment: BIN (default target/release/isochron), CLIP (default OUT_DIR/fig3.ts, made with
# ffmpeg if missing), STEP_S (seconds per N, default 10), SEED (default 4), NODES ("2 4").
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
CLIP=${CLIP:-$OUT/fig3.ts}
STEP_S=${STEP_S:-10}
SEED=${SEED:-4}
NODES=${NODES:-2 4}
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT"
if [ ! -f "$CLIP" ]; then
  log "making the clip (docs/results/fig3.md)"
  made=$(mktemp -d) && scripts/make-clips.sh "$made" fig3 && mv "$made/fig3.ts" "$CLIP"
fi
(while :; do echo "$(date +%T) $(cut -d' ' -f1-4 /proc/loadavg)"; sleep 10; done) > "$OUT/load.txt" &
sampler=$!
trap 'kill $sampler 2> /dev/null || true' EXIT
git rev-parse --short HEAD > "$OUT/commit.txt" 2> /dev/null || true
for k in $NODES; do
  # N_max is about 17 per node (docs/results/fig4.md): up to 20 per node, k more at a time.
  cmd=("$BIN" bench --out "$OUT/n$k" --cluster-nodes "$k" --shape 100mbit --ingest "$CLIP"
    --block-kib 16 --stagger --mtfc --buffer-ms 2000 --seed "$SEED" --ramp --ramp-step "$k"
    --ramp-interval "$STEP_S" --max-clients $((20 * k)) --duration $((25 * STEP_S)))
  log "$k nodes: ${cmd[*]}"
  echo "${cmd[*]}" > "$OUT/n$k.cmd"
  "${cmd[@]}" | tee "$OUT/n$k.txt"
done
kill $sampler 2> /dev/null || true
trap - EXIT
python3 - "$OUT" $NODES <<'EOF' > "$OUT/summary.md"
import json, os, sys
out, nodes = sys.argv[1], sys.argv[2:]
print("| nodes | N | B_net (Mb/s) | per node B_disk + B_cache (MB/s) | B_disk + B_cache, all (MB/s) "
      "| B_cache share | R_Δr (1/s) | pass |")
print("|---|---|---|---|---|---|---|---|")
for k in nodes:
    r = json.load(open(os.path.join(out, f"n{k}", "report.json")))
    for p in r["per_n"]:
        per = [(s.get("b_disk_mbyte_s") or 0) + (s.get("b_cache_mbyte_s") or 0)
               for s in p["per_source"].values()]
        cache = sum(s.get("b_cache_mbyte_s") or 0 for s in p["per_source"].values())
        total = sum(per)
        print(f"| {k} | {p['n']} | {p['b_net_bits_s'] / 1e6:.1f} | "
              f"{', '.join(f'{x:.2f}' for x in per)} | {total:.2f} | "
              f"{100 * cache / total if total else 0:.0f} % | {p['r_dr']:.2f} | "
              f"{'✓' if p['pass'] else '✗'} |")
    print(f"\n{k} nodes: N_max {r['n_max']}, first failing N {r['first_failure_n']}\n")
EOF
cat "$OUT/summary.md"
