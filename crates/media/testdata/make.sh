#!/bin/sh
# Regenerates the container-demuxer fixtures in this directory (crates/media/src/container).
#
# Each file is a couple of seconds of 160x120 testsrc at 15 fps and/or a 440 Hz sine, small
# enough to commit (< 60 KB). Next to each, FILE.packets.csv holds what ffprobe reads from it
# (every packet's stream, pts, dts, duration, size, file position and flags); the tests compare
# the demuxer's index with those lists. A few numbers are also written into the tests (sample
# counts, parameter-set bytes): an ffmpeg, x264 or x265 version change alters the files, so
# after regenerating, check the tests still describe them.
#
# Made with ffmpeg 5.1 (Debian 12), libx264, libx265, libopus, libvpx, the native aac/ac3/mjpeg
# encoders and libmp3lame, and mkvmerge 74 (Debian package mkvtoolnix).
set -eu
cd "$(dirname "$0")"

ff() { ffmpeg -hide_banner -loglevel error -y "$@"; }
VIDEO="-f lavfi -i testsrc=size=160x120:rate=15:duration=2"
AUDIO="-f lavfi -i sine=frequency=440:sample_rate=48000:duration=2"

# H.264 (x264 defaults: 3 B-frames, so PTS != DTS and the muxer writes an edit list) + AAC-LC
# 48 kHz stereo. moov after mdat (ffmpeg's default). The other H.264 MP4s are `-c copy` remuxes
# of this one, so they carry the same samples.
# shellcheck disable=SC2086
ff $VIDEO $AUDIO -map 0:v -map 1:a -c:v libx264 -pix_fmt yuv420p -g 10 \
    -c:a aac -b:a 32k -ac 2 -fflags +bitexact h264_aac_moov_last.mp4

# The same, moov first.
ff -i h264_aac_moov_last.mp4 -c copy -movflags +faststart -fflags +bitexact \
    h264_aac_faststart.mp4

# The same, fragmented: empty moov with mvex/trex, then a moof/mdat pair per keyframe. With
# empty_moov the muxer cannot write an edit list, so it shifts each track to start at 0 instead
# (and stretches the first audio sample to 6400 ticks).
ff -i h264_aac_moov_last.mp4 -c copy -movflags +frag_keyframe+empty_moov+default_base_moof \
    -fflags +bitexact h264_aac_fragmented.mp4

# Fragmented again, but with delay_moov: the moov is written with the first fragment, so it
# carries the edit lists, and every sample's time equals the progressive file's.
ff -i h264_aac_moov_last.mp4 -c copy -movflags +frag_keyframe+delay_moov+default_base_moof \
    -fflags +bitexact h264_aac_fragmented_edts.mp4

# The same with version-1 ctts: negative composition offsets instead of a B-frame delay in the
# edit list (ffmpeg then shifts the decode times down, as we do).
ff -i h264_aac_moov_last.mp4 -c copy -movflags +negative_cts_offsets -fflags +bitexact \
    h264_aac_negative_cts.mp4

# H.265 (x265 defaults, B-frames) + AAC, tagged hvc1 (parameter sets in hvcC).
# shellcheck disable=SC2086
ff $VIDEO $AUDIO -map 0:v -map 1:a -c:v libx265 -x265-params log-level=error -pix_fmt yuv420p \
    -g 10 -tag:v hvc1 -c:a aac -b:a 32k -ac 2 -fflags +bitexact hevc_aac.mp4

# Matroska: H.264 (B-frames, so block timestamps are not monotonic) + Opus.
# shellcheck disable=SC2086
ff $VIDEO $AUDIO -map 0:v -map 1:a -c:v libx264 -pix_fmt yuv420p -g 10 \
    -c:a libopus -b:a 24k -ac 2 -fflags +bitexact h264_opus.mkv

# Matroska as mkvmerge (MKVToolNix) writes it from the H.264 + AAC encode: AAC laced 8 frames
# to a block (EBML lacing), DefaultDuration on both tracks. mkvmerge writes a random segment UID
# and the date, so this file is not bit-for-bit reproducible.
mkvmerge -q -o h264_aac_mkvmerge.mkv h264_aac_moov_last.mp4

# WebM: VP9 (not supported: skipped) + Opus (supported), so the index has one track and one
# skipped track.
# shellcheck disable=SC2086
ff $VIDEO $AUDIO -map 0:v -map 1:a -c:v libvpx-vp9 -deadline realtime -cpu-used 8 -b:v 50k \
    -c:a libopus -b:a 24k -ac 2 -fflags +bitexact vp9_opus.webm

# MJPEG only (no supported track: an error naming the codec). Half a second keeps it small.
ff -f lavfi -i testsrc=size=160x120:rate=15:duration=0.5 -c:v mjpeg -q:v 31 \
    -fflags +bitexact mjpeg.mp4

# Audio only: MP3 and AC-3 tracks, in MP4 (mp4a with objectTypeIndication 0x6B, ac-3) and in
# Matroska (A_MPEG/L3, A_AC3).
for ext in mp4 mkv; do
    ff -f lavfi -i sine=frequency=440:sample_rate=48000:duration=1 \
        -f lavfi -i sine=frequency=880:sample_rate=48000:duration=1 \
        -map 0:a -map 1:a -c:a:0 libmp3lame -b:a:0 32k -c:a:1 ac3 -b:a:1 64k -ac 1 \
        -fflags +bitexact "mp3_ac3.$ext"
done

# 192-byte M2TS (4-byte TP_extra_header before each 188-byte TS packet) of the H.264 encode.
ff -i h264_aac_moov_last.mp4 -c copy -f mpegts -mpegts_m2ts_mode 1 -fflags +bitexact \
    h264_aac.m2ts

# What ffprobe sees in each file, for the tests to compare against: one line per packet,
# stream_index,pts,dts,duration,size,pos,flags, in file order.
for f in *.mp4 *.mkv *.webm; do
    ffprobe -v error -show_entries packet=stream_index,pts,dts,duration,size,pos,flags -of csv=p=0 \
        "$f" | grep -v '^$' | cut -d, -f1-7 > "$f.packets.csv"
done

ls -l
