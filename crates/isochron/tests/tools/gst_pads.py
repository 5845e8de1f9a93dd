"""Links rtspsrc's pads by their media, in the application's own pad-added handler.

Why not gst-launch's delayed links (`s. ! caps ! …` once per track): they race when rtspsrc adds
its pads from two streaming threads at once (each track's first packet arriving together).
While one thread tries a pad against the other branch (a caps filter linked to that branch's
sink pad, then removed), that branch's own pad fails to link; the branch stays unlinked and gets
nothing. Seen about once in twenty runs on a busy machine: an empty file, a video branch that
never produces a frame ("flushing not-linked" in rtpjitterbuffer's log), or a seek that fails or
never completes because an unlinked branch's sink cannot preroll. An application links its pads
itself, one at a time, as [`MediaLinks`] does.
"""
import sys
import threading

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402


class MediaLinks:
    """Links each pad rtspsrc `src` adds to the sink pad named for its `media` in `sinks`."""

    def __init__(self, src, sinks):
        self.sinks = sinks
        self.linked = set()
        self.lock = threading.Lock()
        src.connect("pad-added", self.on_pad)

    def on_pad(self, _src, pad):
        caps = pad.get_current_caps() or pad.query_caps(None)
        media = caps.get_structure(0).get_string("media")
        with self.lock:
            if media in self.linked or media not in self.sinks:
                print(f"pad {pad.get_name()} ({media}) left unlinked", file=sys.stderr)
                return
            res = pad.link(self.sinks[media])
            print(f"pad {pad.get_name()} ({media}): {res.value_nick}", file=sys.stderr)
            if res == Gst.PadLinkReturn.OK:
                self.linked.add(media)

    def complete(self):
        """Whether every media named in `sinks` got its pad."""
        with self.lock:
            return self.linked == set(self.sinks)
