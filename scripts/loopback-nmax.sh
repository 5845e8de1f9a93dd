#!/usr/bin/env bash
# Unshaped loopback (issue 5, docs/results/loopback.md): isochron's N_max for one ≈ 5.6 Mb/s
# object with a hot cache — the CPU-bound set-up of the verdict — then, in the same run:
#   1. a CPU profile of the server at N_max (perf, call graphs), and the bench's own CPU;
#   2. iperf3 -u on the same loopback with the same datagram size as isochron's RTP packets
#      (12-byte RTP header + 7 × 188-byte TS packets = 1328 bytes of UDP payload), unlimited
#      rate, one stream and two: the ratio is isochron's delivered rate at N_max over the best.
#
# Usage: scripts/loopback-nmax.sh OUT_DIR
# Environment: BIN (default target/release/isochron), STORE (a store holding the object, default
# /work/bench-media/D), OBJECT (default fig3), MAX_CLIENTS (default 800), TRIAL_S (default: the
# object's length + the buffer + 3 s, so every trial plays the whole clip).
# Needs perf and iperf3 (Debian: linux-perf, iperf3) and root for perf on another process.
# For source lines in perf's report, build with `cargo build --profile profiling` and set
# BIN=target/profiling/isochron (release code with line tables; plain release has none).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
STORE=${STORE:-/work/bench-media/D}
OBJECT=${OBJECT:-fig3}
MAX_CLIENTS=${MAX_CLIENTS:-800}
TRIAL_S=${TRIAL_S:-}
RTSP=127.0.0.1:19554
HTTP=127.0.0.1:19080
DGRAM=1328
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT"

"$BIN" serve --data "$STORE" --rtsp "$RTSP" --http "$HTTP" --rtp-port 0 --no-demo \
  > "$OUT/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2> /dev/null || true' EXIT
for _ in $(seq 50); do curl -fsS "http://$HTTP/metrics" > /dev/null 2>&1 && break; sleep 0.2; done
url=rtsp://$RTSP/$OBJECT
common=(--buffer-ms 2000 --server-pid "$pid" --metrics "http://$HTTP/metrics" --seed 5 --iface lo)

trial=()
[ -n "$TRIAL_S" ] && trial=(--trial "$TRIAL_S")
log "N_max search (doubling, then bisection; whole-clip trials, up to $MAX_CLIENTS clients)"
"$BIN" bench "$url" --out "$OUT/nmax" --find-nmax "${trial[@]}" --max-clients "$MAX_CLIENTS" \
  --duration 2400 "${common[@]}" | tee "$OUT/nmax.txt"
nmax=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['n_max'] or 1)" "$OUT/nmax/report.json")

log "N = $nmax again for 60 s, the server profiled for 20 s of it"
"$BIN" bench "$url" --out "$OUT/at-nmax" --clients "$nmax" --duration 60 "${common[@]}" \
  > "$OUT/at-nmax.txt" &
bench=$!
sleep 25
perf record -F 499 -g -p "$pid" -o "$OUT/perf.data" -- sleep 20 2> "$OUT/perf-record.txt"
wait "$bench"
perf report -i "$OUT/perf.data" --no-children --sort dso,symbol --stdio --percent-limit 0.7 \
  -g none 2> /dev/null > "$OUT/perf-server.txt"
perf report -i "$OUT/perf.data" --no-children --sort comm --stdio -g none 2> /dev/null \
  > "$OUT/perf-threads.txt"
perf report -i "$OUT/perf.data" --no-children --sort dso --stdio -g none 2> /dev/null \
  > "$OUT/perf-dso.txt"
rm -f "$OUT/perf.data" "$OUT/perf.data.old"
kill "$pid"; wait "$pid" 2> /dev/null || true
trap - EXIT

for p in 1 2; do
  log "iperf3 -u, $DGRAM-byte datagrams, unlimited rate, -P $p, 20 s"
  iperf3 -s -1 -p 19201 > /dev/null 2>&1 &
  sleep 0.5
  iperf3 -c 127.0.0.1 -p 19201 -u -b 0 -l "$DGRAM" -P "$p" -t 20 -J > "$OUT/iperf3-P$p.json"
  wait
done

python3 - "$OUT" <<'EOF' | tee "$OUT/summary.md"
import csv, json, sys
out = sys.argv[1]
r = json.load(open(f"{out}/nmax/report.json"))
at = json.load(open(f"{out}/at-nmax/report.json"))
nmax = r["n_max"]
per = {p["n"]: p for p in at["per_n"]}
p = per.get(nmax) or max(at["per_n"], key=lambda p: p["samples"])
# B_net counts TS bytes; iperf3 counts UDP payload: add the 12-byte RTP header of every packet
# received in the same steady samples.
steady = [row for row in csv.DictReader(open(f"{out}/at-nmax/samples.csv"))
          if row["steady"] == "true" and int(row["sessions"]) == p["n"]]
ts = sum(float(row["rx_bytes"]) for row in steady)
hdr = 12 * sum(float(row["rx_packets"]) for row in steady)
iso = p["b_net_bits_s"] * (ts + hdr) / ts
best = 0
rows = []
for P in (1, 2):
    j = json.load(open(f"{out}/iperf3-P{P}.json"))["end"]["sum"]
    # UDP: the receiver's count (what arrived), as reported back to the client.
    rx = j["bits_per_second"] * (1 - j["lost_percent"] / 100)
    rows.append((P, j["bits_per_second"], j["lost_percent"], rx))
    best = max(best, rx)
print(f"- N_max = {nmax} (first failure {r['first_failure_n']}), bottleneck: {r['bottleneck']}")
print(f"- at N = {p['n']} for 60 s: B_net {p['b_net_bits_s']/1e6:.0f} Mb/s of TS, {iso/1e6:.0f} Mb/s of UDP payload, server CPU {p['server_cpu_pct']:.0f} % of one CPU, "
      f"bench {p['bench_cpu_pct']:.0f} %, machine idle {p['cpu_idle_pct']:.0f} %, starvations {p['starvations']}, lost {p['lost']}")
for P, tx, loss, rx in rows:
    print(f"- iperf3 -u -l 1328 -b 0 -P {P}: sent {tx/1e6:.0f} Mb/s, lost {loss:.1f} %, delivered {rx/1e6:.0f} Mb/s")
print(f"- isochron / iperf3 (best delivered): {iso/best:.1%}")
EOF
