#!/usr/bin/python3
"""The peer the results in docs/results/ are measured against: GStreamer's RTSP server.

Usage: scripts/gst-rtsp-peer.py PORT DIR

Serves each DIR/NAME.ts as rtsp://127.0.0.1:PORT/NAME: MPEG-TS over RTP (RFC 2250, payload
type 33), sent at the pace of the file's PCR (tsparse set-timestamps), with PAUSE, seeks, UDP
and RTSP/TCP interleaving as gst-rtsp-server offers them. Media are not shared between clients:
each PLAY runs its own pipeline, as a VOD server's sessions each read their own position.

Needs the Debian packages gstreamer1.0-rtsp, gir1.2-gst-rtsp-server-1.0 and python3-gi (which
scripts/test.sh installs). Stop it with Ctrl-C or SIGTERM.
"""
import os
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    port, media = sys.argv[1], sys.argv[2]
    if not os.path.isdir(media):
        print(f"gst-rtsp-peer: {media}: not a directory", file=sys.stderr)
        return 2
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(port)
    mounts = server.get_mount_points()
    names = sorted(n for n in os.listdir(media) if n.endswith(".ts"))
    if not names:
        print(f"gst-rtsp-peer: no .ts file in {media}", file=sys.stderr)
        return 2
    for name in names:
        location = os.path.join(media, name).replace('"', '\\"')
        factory = GstRtspServer.RTSPMediaFactory()
        factory.set_launch(
            f'( filesrc location="{location}" ! tsparse set-timestamps=true '
            "! rtpmp2tpay name=pay0 pt=33 )"
        )
        factory.set_shared(False)
        mounts.add_factory("/" + name[: -len(".ts")], factory)
    if server.attach(None) == 0:
        print(f"gst-rtsp-peer: cannot listen on port {port}", file=sys.stderr)
        return 1
    print(f"gst-rtsp-server on rtsp://127.0.0.1:{port}/ ({len(names)} files)", flush=True)
    GLib.MainLoop().run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
