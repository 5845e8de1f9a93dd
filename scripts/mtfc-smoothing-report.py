#!/usr/bin/env python3
"""The summary of scripts/mtfc-smoothing.sh: a Markdown table of the standard deviation of the
received rate, per client (pooled) and aggregate, for every clip, load and pacing, with the cut
against nominal pacing; and per clip `CLIP.svg`, one client's per-second received rate over
the run under the three pacings.

Usage: scripts/mtfc-smoothing-report.py OUT_DIR "CLIP …" > OUT_DIR/summary.md
"""
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lineplot import line_plot  # noqa: E402

out, clips = sys.argv[1], sys.argv[2].split()
MODES = [("content", "content (nominal pacing)"), ("mtfc", "MTFC, content-paced"),
         ("rate", "MTFC, rate-paced")]


def load(clip, n, mode):
    d = os.path.join(out, f"{clip}-n{n}-{mode}")
    r = json.load(open(os.path.join(d, "report.json")))
    rows = list(csv.DictReader(open(os.path.join(d, "samples.csv"))))
    return r, rows


print("| clip | clients | pacing | mean per client (Mb/s) | sd per client (Mb/s) | cut | "
      "sd aggregate (Mb/s) | cut | rate changes | starvations | lost |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for clip in clips:
    for n in (1, 10):
        base = None
        for mode, label in MODES:
            try:
                r, _ = load(clip, n, mode)
            except FileNotFoundError:
                continue
            v, s = r["rate_variation"], r["sessions_summary"]
            sd, agg = v["client_sd_bits_s"], v["aggregate_sd_bits_s"]
            if mode == "content":
                base = (sd, agg)

            def cut(x, b):
                return f"{100 * (1 - x / b):+.0f} %" if b and mode != "content" else ""

            print(f"| {clip} | {n} | {label} | {v['client_mean_bits_s'] / 1e6:.3f} | "
                  f"{sd / 1e6:.3f} | {cut(sd, base and base[0])} | {agg / 1e6:.3f} | "
                  f"{cut(agg, base and base[1])} | {s['rate_changes']} | {s['starvations']} | "
                  f"{s['lost']} |")
    curves, ymax, xmax = {}, 1.0, 10.0
    for mode, label in MODES:
        try:
            _, rows = load(clip, 1, mode)
        except FileNotFoundError:
            continue
        pts = [(float(r["t_s"]), float(r["b_net_bits_s"]) / 1e6) for r in rows
               if r["steady"] == "true"]
        if pts:
            curves[label] = pts
            ymax = max(ymax, max(y for _, y in pts))
            xmax = max(xmax, max(x for x, _ in pts))
    if curves:
        line_plot(os.path.join(out, f"{clip}.svg"),
                  f"{clip}: one client's received rate, per second", "time (s)", "Mb/s",
                  curves, xmax=round(xmax + 5, -1), ymax=round(ymax * 1.2 + 0.5),
                  xstep=10)
