#!/usr/bin/python3
"""Publishes a file to an RTSP URL with GStreamer's rtspclientsink.

Usage: gst_publish.py FILE URL TRANSPORT

A Matroska file of H.264 and Opus (`matroskademux`, `opusparse`) or an MP4 of H.264 and AAC
(`qtdemux`, `aacparse`: rtspclientsink sends the AAC as MP4A-LATM, RFC 6416), each stream
parsed into `rtspclientsink protocols=TRANSPORT`, in real time; or an MPEG-TS file whole, as
one MP2T stream (RFC 2250), timed by its PCR (`tsparse set-timestamps=true`). Exits 0 once every stream has been handed to the sink and the session torn down, 1 on an
error or after 120 s.

Not gst-launch: rtspclientsink (GStreamer 1.22) often never posts EOS once its streams have
ended, with any server (6 of 12 runs against gst-rtsp-server's own RECORD mount), so waiting
for the pipeline's EOS hangs. Here each of the sink's pads is watched for its EOS event; once
every pad has had one, and a moment for the last packets to leave, the pipeline is stopped,
which sends TEARDOWN.
"""
import sys

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GLib, Gst  # noqa: E402

path, url, transport = sys.argv[1], sys.argv[2], sys.argv[3]
Gst.init(None)
demux, audio = ("qtdemux", "aacparse") if path.endswith(".mp4") else ("matroskademux", "opusparse")
sink_desc = f'rtspclientsink name=s location="{url}" protocols={transport}'
if path.endswith(".ts"):
    pads = ("sink_0",)
    pipeline = Gst.parse_launch(
        f'filesrc location="{path}" ! tsparse set-timestamps=true alignment=7 ! clocksync '
        f"! s.sink_0 {sink_desc}"
    )
else:
    pads = ("sink_0", "sink_1")
    pipeline = Gst.parse_launch(
        f'filesrc location="{path}" ! {demux} name=d '
        "d.video_0 ! queue ! h264parse ! s.sink_0 "
        f"d.audio_0 ! queue ! {audio} ! s.sink_1 {sink_desc}"
    )
sink = pipeline.get_by_name("s")
loop = GLib.MainLoop()
status = {"code": 1, "ended": set()}


def stop(code):
    status["code"] = code
    pipeline.set_state(Gst.State.NULL)
    loop.quit()
    return False


# Looked up here, once: the probe runs on the sink pads' streaming threads at once, and
# PyGObject's lazy loading of an enum's attributes is not thread-safe ("type object 'EventType'
# has no attribute 'EOS'" when two threads ask first together).
EOS, PROBE_OK = Gst.EventType.EOS, Gst.PadProbeReturn.OK


def on_event(pad, info):
    if info.get_event().type == EOS:
        status["ended"].add(pad.get_name())
        if len(status["ended"]) == len(pads):
            GLib.idle_add(lambda: GLib.timeout_add(500, stop, 0) and False)
    return PROBE_OK


for name in pads:
    sink.get_static_pad(name).add_probe(Gst.PadProbeType.EVENT_DOWNSTREAM, on_event)


def on_message(_bus, msg):
    if msg.type == Gst.MessageType.EOS:
        stop(0)
    elif msg.type == Gst.MessageType.ERROR:
        err, dbg = msg.parse_error()
        print(f"error: {err.message} ({dbg})", file=sys.stderr)
        stop(1)


bus = pipeline.get_bus()
bus.add_signal_watch()
bus.connect("message", on_message)
GLib.timeout_add_seconds(120, stop, 1)
pipeline.set_state(Gst.State.PLAYING)
loop.run()
sys.exit(status["code"])
