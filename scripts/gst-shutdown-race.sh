#!/usr/bin/env bash
# GStreamer's shutdown race after EOS, measured against isochron and GStreamer's own RTSP
# server side by side (issue 26): each round, three `gst-launch-1.0 -e rtspsrc protocols=udp`
# play a 20 s MPEG-TS clip from each server at once, to its end; the script counts the players
# that exit 0, that received every byte, and that failed only with rtspsrc's own error while
# it shuts down ("Could not send message. (Received end-of-file)" from gst_rtspsrc_pause, the
# PAUSE it sends after EOS cancelled by the connection flush of its own TEARDOWN).
#
# Usage: scripts/gst-shutdown-race.sh OUT [ROUNDS]      (ROUNDS = 20 by default; needs
#        gst-launch-1.0, ffmpeg, python3-gi with GstRtspServer; builds the release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "$1"); rounds=${2:-20}
mkdir -p "$out/peer"
cargo build --release --locked --quiet
bin=$PWD/target/release/isochron
clip="$out/peer/clip20.ts"
if [ ! -s "$clip" ]; then
  ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=1280x720:rate=25 \
    -f lavfi -i sine=frequency=440:sample_rate=48000 -t 20 \
    -c:v libx264 -preset ultrafast -g 50 -b:v 4M -maxrate 6M -bufsize 4M \
    -pix_fmt yuv420p -c:a aac -b:a 128k -f mpegts "$clip"
fi
rm -rf "$out/store"
"$bin" ingest --data "$out/store" "$clip" >/dev/null
"$bin" serve --data "$out/store" --rtsp 127.0.0.1:18654 --http 127.0.0.1:18180 --rtp-port 18990 \
  >"$out/isochron.log" 2>&1 &
ours=$!
/usr/bin/python3 scripts/gst-rtsp-peer.py 18655 "$out/peer" >"$out/peer.log" 2>&1 &
peer=$!
trap 'kill $ours $peer 2>/dev/null' EXIT
sleep 2
: >"$out/results.txt"
for i in $(seq 1 "$rounds"); do
  for server in isochron:18654 gst-rtsp-server:18655; do
    for j in 1 2 3; do
      (
        name=${server%%:*}; port=${server##*:}; f="$out/$name-$i-$j"; rc=0
        timeout -k 5 60 gst-launch-1.0 -e rtspsrc location=rtsp://127.0.0.1:$port/clip20 \
          protocols=udp latency=2000 ! rtpmp2tdepay ! filesink location="$f.ts" >"$f.log" 2>&1 || rc=$?
        cmp -s "$clip" "$f.ts" && same=exact || same=differs
        race=""
        if [ $rc -ne 0 ] && grep -q "Got EOS from element" "$f.log" \
           && grep -q "Could not send message. (Received end-of-file)" "$f.log"; then
          race=shutdown-race
        fi
        echo "$name $i $j rc=$rc $same $race" >>"$out/results.txt"
      ) &
    done
  done
  wait $(jobs -p | grep -v -e "^$ours\$" -e "^$peer\$") 2>/dev/null || true
done
for name in isochron gst-rtsp-server; do
  n=$(grep -c "^$name " "$out/results.txt" || true)
  ok=$(grep -c "^$name .*rc=0" "$out/results.txt" || true)
  exact=$(grep -c "^$name .* exact" "$out/results.txt" || true)
  race=$(grep -c "^$name .*shutdown-race" "$out/results.txt" || true)
  echo "$name: $ok of $n exited 0, $exact received every byte, $race ended in the shutdown race"
done | tee "$out/summary.txt"
