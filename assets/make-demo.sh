#!/bin/sh
# Regenerates assets/demo.ts, the clip `isochron serve` seeds a new store with.
# 12 s of H.264 (640x360, 25 fps, 1 s GOP) + AAC (48 kHz stereo) in MPEG-TS, about 1.6 MB.
# Made entirely from ffmpeg's synthetic sources (testsrc2, sine), so it carries no third-party media.
set -eu
cd "$(dirname "$0")"
ffmpeg -nostdin -v error -y \
  -f lavfi -i "testsrc2=size=640x360:rate=25,drawtext=text='isochron demo %{pts\:hms}':fontsize=28:x=20:y=20:fontcolor=white:box=1:boxcolor=black@0.5" \
  -f lavfi -i "sine=frequency=440:sample_rate=48000,aformat=channel_layouts=stereo" \
  -t 12 -c:v libx264 -preset medium -profile:v main -g 25 -keyint_min 25 -sc_threshold 0 \
  -b:v 900k -maxrate 1200k -bufsize 1200k -pix_fmt yuv420p \
  -c:a aac -b:a 96k -metadata title="isochron demo" -f mpegts demo.ts
