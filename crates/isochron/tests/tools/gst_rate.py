#!/usr/bin/python3
"""Plays an RTSP URL with GStreamer and, once playing, seeks to 0 at a rate; prints JSON.

Usage: gst_rate.py URL RATE trick|speed

A seek with a rate makes rtspsrc send PLAY with `Speed: RATE`, or with the TRICKMODE flags
`Scale: RATE` (RFC 2326 §12.34, §12.35). Prints one line of JSON: the video frames that came out
of `rtph264depay ! h264parse` after the seek, how many were key frames, their timestamps, and the
wall-clock seconds from the seek to end of stream. Exits 0 on EOS, 1 on error or timeout.

The seek is sent half a second after the first video frame, not at a fixed time after start:
rtspsrc refuses a seek (returns False) until its session is set up, and on a loaded machine
DESCRIBE and SETUP can take longer than any fixed delay.
"""
import json
import sys
import time

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GLib, Gst  # noqa: E402

url, rate, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
Gst.init(None)
pipeline = Gst.parse_launch(
    f"rtspsrc location={url} protocols=tcp latency=500 name=s "
    "s. ! application/x-rtp,media=video ! rtph264depay ! h264parse "
    "! video/x-h264,stream-format=byte-stream,alignment=au ! identity name=count "
    "! fakesink sync=true "
    "s. ! application/x-rtp,media=audio ! fakesink sync=false"
)
loop = GLib.MainLoop()
state = {"code": 1, "frames": 0, "keys": 0, "pts": [], "start": None, "eos_after": None}
state["seek_planned"] = False


def on_buffer(_element, buf):
    if state["start"] is None:
        if not state["seek_planned"]:
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


pipeline.get_by_name("count").connect("handoff", on_buffer)
bus = pipeline.get_bus()
bus.add_signal_watch()
bus.connect("message", on_message)
pipeline.set_state(Gst.State.PLAYING)
GLib.timeout_add(60_000, loop.quit)
loop.run()
pipeline.set_state(Gst.State.NULL)
print(json.dumps({k: state[k] for k in ("frames", "keys", "pts", "eos_after")}))
sys.exit(state["code"])
