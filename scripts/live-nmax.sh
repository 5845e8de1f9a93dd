#!/usr/bin/env bash
# N_max of live viewers of one feed against N_max of VOD viewers of the same content, one
# server, one run (issue 28's bench; docs/results/live-nmax.md):
#   1. VOD: vbr60.ts (60 s, 5.6 Mb/s mean MPEG-TS, scripts/make-clips.sh) ingested, then
#      `isochron bench --find-nmax` (nominal pacing as standard players, whole-clip trials);
#   2. live: each trial publishes vbr60.ts in real time over SRT (ffmpeg -re) as a feed of its
#      own (`live{trial}`, recorded as it arrives), its N viewers join when it is described
#      and watch it to its BYE (`isochron bench --publish`);
# then summary.md with both N_max, their ratio and each run's verdict.
#
# Usage: scripts/live-nmax.sh OUT_DIR      (about 35 minutes; nothing else should run meanwhile)
# Environment: BIN (default target/release/isochron), CLIPS (default OUT_DIR/clips), FROM (the
# first trial's N, default 340), MAX (the largest N tried, default 480), ORDER ("vod live").
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CLIPS=${CLIPS:-$OUT/clips}
FROM=${FROM:-340}
MAX=${MAX:-480}
ORDER=${ORDER:-vod live}
STORE=$OUT/store
RTSP=127.0.0.1:19754
HTTP=127.0.0.1:19780
SRT=127.0.0.1:19790
log() { echo "[$(date +%T)] $*" >&2; }

[ -s "$CLIPS/vbr60.ts" ] || scripts/make-clips.sh "$CLIPS" vbr60
rm -rf "$STORE"
"$BIN" ingest --data "$STORE" "$CLIPS/vbr60.ts"
"$BIN" serve --data "$STORE" --rtsp "$RTSP" --http "$HTTP" --srt "$SRT" --rtp-port 0 \
  --no-demo > "$OUT/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2> /dev/null || true' EXIT
for _ in $(seq 50); do curl -fsS "http://$HTTP/metrics" > /dev/null 2>&1 && break; sleep 0.2; done

common=(--find-nmax --nmax-from "$FROM" --max-clients "$MAX" --duration 3000 --threads 2
  --buffer-ms 2000 --seed 5 --iface lo --server-pid "$pid" --metrics "http://$HTTP/metrics")
publish="ffmpeg -nostdin -v error -re -i $CLIPS/vbr60.ts -map 0 -c copy -f mpegts \
'srt://$SRT?streamid=publish:live{trial}&pkt_size=1316'"
for what in $ORDER; do
  log "$what: N_max from $FROM up to $MAX"
  case $what in
    vod) "$BIN" bench "rtsp://$RTSP/vbr60" --out "$OUT/vod" --trial 65 "${common[@]}" \
           | tee "$OUT/vod.txt" ;;
    live) "$BIN" bench "rtsp://$RTSP/live{trial}" --out "$OUT/live" --trial 75 \
            --publish "$publish" "${common[@]}" | tee "$OUT/live.txt" ;;
  esac
done

python3 - "$OUT" "$(git rev-parse --short HEAD)" << 'EOF'
import json, sys
out, commit = sys.argv[1], sys.argv[2]
r = {w: json.load(open(f"{out}/{w}/report.json")) for w in ("vod", "live")}
def row(w):
    x = r[w]
    n = x["n_max"] or 0
    at = next((p for p in x["per_n"] if p["n"] == n), None)
    trials = " ".join(f"{t['n']}{'✓' if t['pass'] else '✗'}" for t in x["trials"])
    cpu = f"{at['server_cpu_pct']:.0f}" if at else "–"
    net = f"{at['b_net_bits_s'] / 1e6:.0f}" if at else "–"
    return f"| {w} | **{n}** | {x['first_failure_n']} | {net} | {cpu} | {trials} |"
vod, live = r["vod"]["n_max"] or 0, r["live"]["n_max"] or 0
lines = [
    f"# live N_max against VOD N_max, commit {commit}", "",
    "| viewers | N_max | first failure | B_net at N_max (Mb/s) | server CPU at N_max (% of one) | trials |",
    "|---|---|---|---|---|---|", row("vod"), row("live"), "",
    f"live / VOD = {live} / {vod} = {live / vod:.3f}" if vod else "VOD N_max is 0", "",
]
for w in ("vod", "live"):
    lines += [f"## {w} verdict", "", "```", open(f"{out}/{w}/verdict.txt").read().strip(), "```", ""]
open(f"{out}/summary.md", "w").write("\n".join(lines))
print("\n".join(lines[:8]))
EOF
