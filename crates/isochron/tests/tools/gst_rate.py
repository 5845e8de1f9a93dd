#!/usr/bin/python3
"""Plays an RTSP URL with GStreamer and, once playing, seeks to 0 at a rate; prints JSON.

Usage: gst_rate.py URL RATE trick|speed

A seek with a rate makes rtspsrc send PLAY with `Speed: RATE`, or with the TRICKMODE flags
`Scale: RATE` (RFC 2326 §12.34, §12.35). Prints one line of JSON: the video frames that came out
of `rtph264depay ! h264parse` after the seek, how many were key frames, their timestamps, and the
wall-clock seconds from the seek to end of stream. Exits 0 on EOS, 1 on error or timeout.

The seek is sent half a second after the first video frame, not at a fixed time after start:
rtspsrc refuses a seek (returns False) until its session is set up, and on a loaded machine
DESCRIBE and SETUP can take longer than any fixed delay. The pads are linked by media here, not
by gst-launch's delayed links (`gst_pads.MediaLinks` says why).
"""
import json
import sys
import time

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GLib, Gst  # noqa: E402

from gst_pads import MediaLinks  # noqa: E402

url, rate, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
Gst.init(None)
pipeline = Gst.Pipeline.new("rate")
src = Gst.ElementFactory.make("rtspsrc", "s")
src.set_property("location", url)
src.set_property("protocols", "tcp")
src.set_property("latency", 500)
video = Gst.parse_bin_from_description(
    "rtph264depay ! h264parse ! video/x-h264,stream-format=byte-stream,alignment=au "
    "! identity name=count ! fakesink sync=true",
    True,
)
audio = Gst.ElementFactory.make("fakesink", "a")
audio.set_property("sync", False)
for e in (src, video, audio):
    pipeline.add(e)
sinks = {"video": video.get_static_pad("sink"), "audio": audio.get_static_pad("sink")}
links = MediaLinks(src, sinks)
loop = GLib.MainLoop()
state = {"code": 1, "frames": 0, "keys": 0, "pts": [], "start": None, "eos_after": None}
state["seek_planned"] = False
state["before"] = 0
t0 = time.time()


def on_buffer(_element, buf):
    if state["start"] is None:
        state["before"] += 1
        if not state["seek_planned"]:
            print(f"first video frame after {time.time() - t0:.2f} s", file=sys.stderr)
            state["seek_planned"] = True
            GLib.timeout_add(500, seek)
        return
    state["frames"] += 1
    if not buf.has_flags(Gst.BufferFlags.DELTA_UNIT):
        state["keys"] += 1
    state["pts"].append(buf.pts / Gst.SECOND if buf.pts != Gst.CLOCK_TIME_NONE else None)


def on_message(_bus, msg):
    if msg.type == Gst.MessageType.EOS:
        if state["start"] is not None:
            state["eos_after"] = time.time() - state["start"]
            state["code"] = 0
        else:
            print(f"end of stream before the seek ({state['before']} frames)", file=sys.stderr)
        loop.quit()
    elif msg.type == Gst.MessageType.ERROR:
        err, dbg = msg.parse_error()
        print(f"error: {err} {dbg}", file=sys.stderr)
        loop.quit()


def seek():
    flags = Gst.SeekFlags.FLUSH | Gst.SeekFlags.KEY_UNIT
    if mode == "trick":
        flags |= Gst.SeekFlags.TRICKMODE | Gst.SeekFlags.TRICKMODE_KEY_UNITS
    ok = pipeline.seek(rate, Gst.Format.TIME, flags, Gst.SeekType.SET, 0, Gst.SeekType.NONE, 0)
    print(f"seek at rate {rate} ({mode}): {ok}", file=sys.stderr)
    if not ok:
        loop.quit()
        return False
    state["start"] = time.time()
    return False


video.get_by_name("count").connect("handoff", on_buffer)
bus = pipeline.get_bus()
bus.add_signal_watch()
bus.connect("message", on_message)
pipeline.set_state(Gst.State.PLAYING)


def give_up():
    print(
        f"no end of stream after 60 s: {state['before']} frames before the seek, "
        f"{state['frames']} after, seek sent: {state['start'] is not None}, "
        f"pads linked: {sorted(links.linked)}",
        file=sys.stderr,
    )
    loop.quit()


GLib.timeout_add(60_000, give_up)
loop.run()
pipeline.set_state(Gst.State.NULL)
print(json.dumps({k: state[k] for k in ("frames", "keys", "pts", "eos_after")}))
sys.exit(state["code"])
