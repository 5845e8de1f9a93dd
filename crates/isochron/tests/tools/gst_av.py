#!/usr/bin/python3
"""Plays an RTSP URL of an audio+video object with GStreamer and writes its H.264 video.

Usage: gst_av.py URL TRANSPORT OUT_FILE [LATENCY_MS [rtx]]

`rtspsrc protocols=TRANSPORT latency=LATENCY_MS ! rtph264depay ! h264parse` (3000 ms by default)
into OUT_FILE (byte-stream,
one access unit per buffer); the audio pad goes to a fakesink. Exits 0 on EOS, 1 on an error or
after 180 s. With `rtx`, `do-retransmission=true`: lost packets are asked for again (RFC 4585
generic NACKs).

On exit it prints each RTP jitter buffer's statistics to stderr (`jitterbuffer: pushed=… lost=…
late=… duplicates=…`): a frame missing from OUT_FILE was either never received (lost) or
received after its playout time (late), and a test's failure can tell which.

Not gst-launch: its delayed links race when rtspsrc adds two pads at once; the pads are linked
by media in this script (`gst_pads.MediaLinks`, which says why).
"""
import sys

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GLib, Gst  # noqa: E402

from gst_pads import MediaLinks  # noqa: E402

url, transport, out = sys.argv[1], sys.argv[2], sys.argv[3]
latency = int(sys.argv[4]) if len(sys.argv) > 4 else 3000
retransmit = len(sys.argv) > 5 and sys.argv[5] == "rtx"
Gst.init(None)
pipeline = Gst.Pipeline.new("av")
src = Gst.ElementFactory.make("rtspsrc", "s")
src.set_property("location", url)
src.set_property("protocols", transport)
src.set_property("latency", latency)
src.set_property("do-retransmission", retransmit)
src.set_property("udp-buffer-size", 16 * 1024 * 1024)
video = Gst.parse_bin_from_description(
    "rtph264depay ! h264parse ! video/x-h264,stream-format=byte-stream,alignment=au ! "
    f"filesink location={out}",
    True,
)
audio = Gst.ElementFactory.make("fakesink", "a")
for e in (src, video, audio):
    pipeline.add(e)
jitterbuffers = []


def on_new_manager(_src, manager):
    manager.connect("new-jitterbuffer", lambda _m, jb, _session, _ssrc: jitterbuffers.append(jb))


src.connect("new-manager", on_new_manager)
sinks = {"video": video.get_static_pad("sink"), "audio": audio.get_static_pad("sink")}
links = MediaLinks(src, sinks)
loop = GLib.MainLoop()
status = {"code": 1}


def on_message(_bus, msg):
    if msg.type == Gst.MessageType.EOS:
        status["code"] = 0 if links.complete() else 1
        loop.quit()
    elif msg.type == Gst.MessageType.ERROR:
        err, dbg = msg.parse_error()
        print(f"ERROR: {err} {dbg}", file=sys.stderr)
        loop.quit()
    elif msg.type == Gst.MessageType.WARNING:
        err, dbg = msg.parse_warning()
        print(f"WARNING: {err} {dbg}", file=sys.stderr)


bus = pipeline.get_bus()
bus.add_signal_watch()
bus.connect("message", on_message)
pipeline.set_state(Gst.State.PLAYING)
GLib.timeout_add(180_000, loop.quit)
loop.run()
for jb in jitterbuffers:
    st = jb.get_property("stats")
    fields = ("num-pushed", "num-lost", "num-late", "num-duplicates")
    pushed, lost, late, dups = (st.get_value(f) for f in fields)
    print(f"jitterbuffer: pushed={pushed} lost={lost} late={late} duplicates={dups}", file=sys.stderr)
pipeline.set_state(Gst.State.NULL)
if status["code"]:
    print(f"ended without EOS or with pads unlinked (linked: {sorted(links.linked)})", file=sys.stderr)
sys.exit(status["code"])
