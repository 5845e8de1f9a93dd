#!/usr/bin/python3
"""Plays an RTSP URL with GStreamer, seeks once, and writes the received MPEG-TS to a file.

Usage: gst_seek.py URL SEEK_AFTER_S TARGET_S OUT_FILE

rtspsrc turns the seek into PAUSE + PLAY with `Range: npt=TARGET-`.
The output holds the bytes received before the seek followed by those after it; the test finds
the join and checks where the second part starts. Exits 0 on EOS, 1 on error or timeout.

SEEK_AFTER_S counts from the first received packet, not from start: rtspsrc refuses a seek
until its session is set up, and on a loaded machine that can take longer than any fixed delay.
"""
import sys

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GLib, Gst  # noqa: E402

url, seek_after, target, out = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
Gst.init(None)
pipeline = Gst.parse_launch(
    f"rtspsrc location={url} protocols=tcp ! rtpmp2tdepay name=depay ! filesink location={out}"
)
loop = GLib.MainLoop()
status = {"code": 1, "seeked": False}


def on_message(bus, msg):
    t = msg.type
    if t == Gst.MessageType.EOS:
        status["code"] = 0 if status["seeked"] else 1
        loop.quit()
    elif t == Gst.MessageType.ERROR:
        err, dbg = msg.parse_error()
        print(f"error: {err} {dbg}", file=sys.stderr)
        loop.quit()


def do_seek():
    ok = pipeline.seek_simple(
        Gst.Format.TIME, Gst.SeekFlags.FLUSH | Gst.SeekFlags.KEY_UNIT, int(target * Gst.SECOND)
    )
    print(f"seek to {target}: {ok}", file=sys.stderr)
    status["seeked"] = ok
    if not ok:
        loop.quit()
    return False


# Looked up once, here: the probe runs on a streaming thread, and PyGObject's lazy loading of
# an enum's attributes is not thread-safe.
REMOVE = Gst.PadProbeReturn.REMOVE


def on_first_packet(_pad, _info):
    GLib.timeout_add(int(seek_after * 1000), do_seek)
    return REMOVE


bus = pipeline.get_bus()
bus.add_signal_watch()
bus.connect("message", on_message)
pipeline.get_by_name("depay").get_static_pad("src").add_probe(
    Gst.PadProbeType.BUFFER, on_first_packet
)
pipeline.set_state(Gst.State.PLAYING)
GLib.timeout_add(90_000, loop.quit)
loop.run()
pipeline.set_state(Gst.State.NULL)
sys.exit(status["code"])
