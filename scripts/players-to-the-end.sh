#!/usr/bin/env bash
# GStreamer, ffmpeg and VLC each play a ≥ 90 s stream over UDP to its end, N times each, and
# must exit 0 with every byte (issue 26: a player that reports an error at the end of a long UDP
# stream is a defect). Three players run at once, each against the same server.
#
# Usage: scripts/players-to-the-end.sh OUT [N]      (N = 20 by default; needs root for VLC's
#        runuser, and ffmpeg, gst-launch-1.0, cvlc; builds the release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "$1"); n=${2:-20}
mkdir -p "$out"
cargo build --release --locked --quiet
bin=target/release/isochron
clip="$out/long92.ts"
if [ ! -s "$clip" ]; then
  ffmpeg -nostdin -v error -y -f lavfi -i testsrc2=size=1280x720:rate=25 \
    -f lavfi -i sine=frequency=440:sample_rate=48000 -t 92 \
    -c:v libx264 -preset ultrafast -g 50 -b:v 4M -maxrate 6M -bufsize 4M \
    -pix_fmt yuv420p -c:a aac -b:a 128k -f mpegts "$clip"
fi
rm -rf "$out/store"
"$bin" ingest --data "$out/store" "$clip" >/dev/null
"$bin" serve --data "$out/store" --rtsp 127.0.0.1:18554 --http 127.0.0.1:18080 --rtp-port 18970 \
  >"$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
sleep 2
url=rtsp://127.0.0.1:18554/long92
home=$(mktemp -d); chmod 777 "$home"
: >"$out/results.txt"
for i in $(seq 1 "$n"); do
  (
    # `|| rc=$?`: under `set -e` a failing player would end the subshell before its line.
    rc=0
    timeout -k 5 150 gst-launch-1.0 -e rtspsrc location=$url protocols=udp latency=2000 \
      ! rtpmp2tdepay ! filesink location="$out/gst-$i.ts" >"$out/gst-$i.log" 2>&1 || rc=$?
    cmp -s "$clip" "$out/gst-$i.ts" && same=exact || same=differs
    # GStreamer 1.22's own race while it shuts down after EOS (tests/common gst_ended_cleanly):
    # counted apart, with its log kept.
    if [ $rc -ne 0 ] && grep -q "Got EOS from element" "$out/gst-$i.log" \
       && grep -q "Could not send message. (Received end-of-file)" "$out/gst-$i.log"; then
      same="$same shutdown-race"
    fi
    echo "gstreamer $i rc=$rc $same" >>"$out/results.txt"
  ) &
  players=($!)
  (
    rc=0
    timeout -k 5 150 ffmpeg -nostdin -v error -rtsp_transport udp -i $url -map 0 -c copy \
      -f mpegts -y "$out/ffmpeg-$i.ts" >"$out/ffmpeg-$i.log" 2>&1 || rc=$?
    echo "ffmpeg $i rc=$rc $(wc -c <"$out/ffmpeg-$i.ts") bytes" >>"$out/results.txt"
  ) &
  players+=($!)
  (
    rc=0
    timeout -k 5 150 runuser -u nobody -- env HOME="$home" cvlc -I dummy --play-and-exit \
      --demux dump --demuxdump-file "$home/vlc-$i.ts" $url >"$out/vlc-$i.log" 2>&1 || rc=$?
    cmp -s "$clip" "$home/vlc-$i.ts" && same=exact || same=differs
    echo "vlc $i rc=$rc $same" >>"$out/results.txt"
  ) &
  players+=($!)
  # The three players only: a bare `wait` would wait for the server too, for ever.
  wait "${players[@]}"
done
sort "$out/results.txt" >"$out/results.sorted"
for p in gstreamer ffmpeg vlc; do
  ok=$(grep -c "^$p .* rc=0" "$out/results.sorted" || true)
  echo "$p: $ok of $n exited 0"
done | tee "$out/summary.txt"
grep -v "rc=0" "$out/results.sorted" || true
