#!/usr/bin/env bash
# The clips of docs/results/hot-path.md (issue 16), MPEG-TS with MPEG-2 video and MPEG-1 layer II
# audio, made from ffmpeg's test sources (deterministic):
#   vbr60.ts   60 s 1280×720, VBR: mean ≈ 5.6 Mb/s, ≈ 8.65 Mb/s over its heaviest 20 s (35–55 s),
#              so an N_max trial that stops at 20 s never meets the part that decides it;
#   hdtv40.ts  30 s 1920×1080, ≈ 40 Mb/s (HDTV contribution class);
#   uhd400.ts  20 s 3840×2160 intra-only, ≈ 400 Mb/s or more (CineGrid class);
#   src1080.mp4 60 s 1920×1080 H.264 with grain and AAC, 10 Mb/s: the transcoding benches' source;
#   native60.mp4 60 s 1280×720 H.264 and AAC, ≈ 5 Mb/s: streamed as native RTP (the soak's second
#              object, scripts/soak.sh);
#   fig3.ts    180 s 1280×720 VBR, 15-frame GOPs, mean ≈ 5.57 Mb/s: Yima Fig. 3's clip
#              (docs/results/fig3.md; fig4.sh, fig4-disk-cache.sh, mtfc-smoothing.sh …).
# Usage: scripts/make-clips.sh OUT_DIR [NAME…]   (needs ffmpeg; a few minutes on two cores)
set -euo pipefail
out=${1:?usage: $0 OUT_DIR [vbr60|native60|hdtv40|uhd400|src1080|fig3 …]}
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(vbr60 hdtv40 uhd400)
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
audio=(-f lavfi -i "sine=frequency=440:sample_rate=48000")
seg() { # seg FILE START_S LENGTH_S VIDEO_RATE NOISE: a constant-rate 720p part starting at START_S
  ffmpeg -loglevel error -y -f lavfi -i "testsrc2=size=1280x720:rate=30,noise=alls=$5:allf=t" \
    "${audio[@]}" -ss "$2" -t "$3" -output_ts_offset "$2" \
    -c:v mpeg2video -b:v "$4" -minrate "$4" -maxrate "$4" -bufsize 2M -g 15 -bf 2 \
    -c:a mp2 -b:a 192k -f mpegts "$1"
}
for name in "${names[@]}"; do
  case $name in
    vbr60)
      seg "$tmp/a.ts" 0 35 3.72M 4
      seg "$tmp/b.ts" 35 20 8.2M 12
      seg "$tmp/c.ts" 55 5 3.72M 4
      printf "file '%s'\n" "$tmp/a.ts" "$tmp/b.ts" "$tmp/c.ts" > "$tmp/list"
      ffmpeg -loglevel error -y -f concat -safe 0 -i "$tmp/list" -c copy -f mpegts "$out/vbr60.ts"
      ;;
    src1080)
      ffmpeg -nostdin -v error -y -f lavfi -i "testsrc2=size=1920x1080:rate=25,noise=alls=8:allf=t" \
        -f lavfi -i sine=frequency=440:sample_rate=48000 -ac 2 -t 60 -c:v libx264 \
        -preset ultrafast -b:v 10M -maxrate 12M -bufsize 20M -g 50 -pix_fmt yuv420p -c:a aac \
        -b:a 128k -movflags +faststart "$out/src1080.mp4"
      ;;
    native60)
      ffmpeg -nostdin -v error -y -f lavfi -i "testsrc2=size=1280x720:rate=30,noise=alls=6:allf=t" \
        "${audio[@]}" -ac 2 -t 60 -c:v libx264 -preset veryfast -b:v 5M -maxrate 5M -bufsize 5M \
        -g 60 -pix_fmt yuv420p -c:a aac -b:a 128k -movflags +faststart "$out/native60.mp4"
      ;;
    hdtv40)
      ffmpeg -loglevel error -y -f lavfi -i "testsrc2=size=1920x1080:rate=30,noise=alls=10:allf=t" \
        "${audio[@]}" -t 30 -c:v mpeg2video -b:v 39M -minrate 39M -maxrate 39M -bufsize 8M \
        -g 15 -bf 2 -c:a mp2 -b:a 192k -f mpegts "$out/hdtv40.ts"
      ;;
    uhd400)
      ffmpeg -loglevel error -y -f lavfi -i "testsrc2=size=3840x2160:rate=30,noise=alls=20:allf=t" \
        "${audio[@]}" -t 20 -c:v mpeg2video -g 1 -q:v 2 -qmin 2 -maxrate 480M -bufsize 64M \
        -c:a mp2 -b:a 192k -f mpegts "$out/uhd400.ts"
      ;;
    fig3)
      ffmpeg -nostdin -v error -y -f lavfi -i "testsrc2=size=1280x720:rate=30,noise=alls=6:allf=t" \
        "${audio[@]}" -t 180 -c:v mpeg2video -b:v 5.2M -maxrate 8M -bufsize 3M -g 15 -bf 2 \
        -c:a mp2 -b:a 192k -f mpegts "$out/fig3.ts"
      ;;
    *) echo "$0: unknown clip $name (vbr60, native60, src1080, hdtv40, uhd400, fig3)" >&2; exit 2 ;;
  esac
done
