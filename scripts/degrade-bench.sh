#!/usr/bin/env bash
# Degrade vs refuse, side by side (issue 27, docs/results/degrade.md): one node behind a link
# shaped to 100 Mb/s (`isochron bench --shape`: the server and the clients in network
# namespaces of their own), its egress for streams set to 95 Mb/s (5 % for RTP, UDP and IP
# headers), a 90 s 720p ladder whose top rendition is 5.66 Mb/s (720p 5.5M, 480p 2M, 240p 700k
# video, 128 kb/s AAC each). Run A, `degrade = false`: N_REFUSE clients (one more than fit at
# the top rendition); run B, `degrade = true`: N_DEGRADE clients. Each client plays from a
# staggered point of the clip, looping, nominal pacing, for 100 s. The rendition mix is read
# from the server's /metrics at 30, 60 and 90 s.
#
# Where packets are lost is recorded at 90 s: the token buckets' drops (`tc -s qdisc` in both
# namespaces) and the clients' UDP receive-buffer overflows (/proc/net/snmp).
#
# Usage: scripts/degrade-bench.sh OUT [N_REFUSE] [N_DEGRADE]   (17 and 40 by default; needs
#        root, iproute2 and ffmpeg; builds the release binary)
# Environment: EGRESS (sched.egress_mbps, default 95), RUNS (default "A B"), WORK.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "$1"); n_refuse=${2:-17}; n_degrade=${3:-40}
egress=${EGRESS:-95}; runs=${RUNS:-A B}
mkdir -p "$out"
cargo build --release --locked --quiet
bin=$PWD/target/release/isochron
work=${WORK:-/tmp/isochron-degrade}
mkdir -p "$work"
if [ ! -e "$work/store/.done" ]; then
  rm -rf "$work/store"
  ffmpeg -nostdin -v error -y -f lavfi -i "testsrc2=size=1280x720:rate=25,noise=alls=12:allf=t" \
    -f lavfi -i sine=frequency=440:sample_rate=48000 -ac 2 -t 90 -c:v libx264 -preset ultrafast \
    -crf 16 -g 50 -pix_fmt yuv420p -c:a aac -b:a 128k -movflags +faststart "$work/src.mp4"
  "$bin" ingest --data "$work/store" --name ladder --ladder 720p:5500k,480p:2000k,240p:700k \
    "$work/src.mp4"
  touch "$work/store/.done"
fi
"$bin" ls --data "$work/store" | tee "$out/ls.txt"
run() { # NAME CLIENTS SERVE_FLAGS
  local name=$1 clients=$2 flags=$3
  rm -rf "${out:?}/$name"
  "$bin" bench rtsp://10.77.0.1:8554/ladder --out "$out/$name" --clients "$clients" --stagger \
    --duration 100 --shape 100mbit --link 100mbit --metrics http://10.77.0.1:8080/metrics \
    --seed 3 --server-cmd "$bin serve --rtsp 10.77.0.1:8554 --http 10.77.0.1:8080 \
      --data $work/store --no-demo --egress-mbps $egress $flags" >"$out/$name.log" 2>&1 &
  local bench=$!
  for t in 30 60 90; do
    sleep 30
    local ns
    ns=$(ip netns list | awk '{print $1}' | grep -- '-clients$' | head -1)
    echo "--- t=${t}s" >>"$out/$name-mix.txt"
    ip netns exec "$ns" curl -s http://10.77.0.1:8080/metrics | grep -E \
      '^isochron_(sessions_playing_by_object|rendition_|admitted_degraded|stepped_down|admission_rejects_total)' \
      >>"$out/$name-mix.txt" || true
  done
  for ns in $(ip netns list | awk '{print $1}' | grep -- "^isochron_bench"); do
    echo "--- $ns at 90 s" >>"$out/$name-drops.txt"
    ip netns exec "$ns" tc -s qdisc show >>"$out/$name-drops.txt" 2>&1 || true
    ip netns exec "$ns" grep '^Udp:' /proc/net/snmp >>"$out/$name-drops.txt" || true
  done
  wait "$bench"
  grep -c 'the stream ends' "$out/$name.log" | sed 's/^/streams ended by a refused switch: /' \
    >>"$out/$name-mix.txt" || true
}
for name in $runs; do
  : >"$out/$name-mix.txt"; : >"$out/$name-drops.txt"
  case $name in
    A) run A "$n_refuse" "" ;;
    B) run B "$n_degrade" "--degrade" ;;
  esac
done
python3 - "$out" $runs <<'PY'
import csv, json, sys
out = sys.argv[1]
for name in sys.argv[2:]:
    r = json.load(open(f"{out}/{name}/report.json"))
    s = r["sessions_summary"]
    rows = [x for x in csv.DictReader(open(f"{out}/{name}/samples.csv")) if float(x["t_s"]) >= 10]
    playing = [int(x["sessions"]) for x in rows]
    avg = [float(x["b_avgnet_bits_s"]) for x in rows if int(x["sessions"]) > 0]
    net = [float(x["b_net_bits_s"]) for x in rows]
    print(f"{name}: sessions played {s['count'] - s['refused']}, "
          f"refused PLAYs {s['refused']}, playing min {min(playing)} max {max(playing)}, "
          f"starvations {s['starvations']}, packets lost {s['lost']}, "
          f"mean delivered per client {sum(avg) / len(avg) / 1e6:.2f} Mb/s, "
          f"B_net mean {sum(net) / len(net) / 1e6:.1f} Mb/s")
PY
for name in $runs; do echo "== $name"; tail -12 "$out/$name-mix.txt"; done
