#!/usr/bin/env python3
"""The summary of scripts/he-connections.sh: Markdown tables (stdout) and `he-connections.svg`
in OUT: the server's CPU (% of one CPU) against the number of connections, one line per clip,
and the machine's idle and iowait.

Usage: scripts/he-connections-report.py OUT
"""
import json
import os
import sys

from lineplot import line_plot

out = sys.argv[1]
# runs[clip] = {"per_n": [the N's aggregate of each run], "content_mean_bits_s": …}
runs = {}
def order(clip):
    """MPEG-2 first (the paper's format), then by rate."""
    codec, _, rate = clip.rpartition("-")
    try:
        return (codec != "mpeg2", float(rate.rstrip("M")))
    except ValueError:
        return (True, float("inf"))


for clip in sorted((c for c in os.listdir(out) if os.path.isdir(os.path.join(out, c))), key=order):
    d = os.path.join(out, clip)
    if not os.path.isdir(d):
        continue
    for run in sorted(os.listdir(d)):
        path = os.path.join(d, run, "report.json")
        if not os.path.isfile(path):
            continue
        r = json.load(open(path))
        entry = runs.setdefault(clip, {"per_n": [], "content_mean_bits_s": r.get("content_mean_bits_s"),
                                       "bottleneck": {}, "lost": 0})
        entry["per_n"] += r["per_n"]
        entry["bottleneck"][len(r["sessions"])] = r.get("bottleneck")
        entry["lost"] += r["sessions_summary"]["lost"]

SHOWN = [1, 5, 10, 15, 20, 25, 30]
print("Server CPU (% of one CPU, steady samples) at N connections:")
print()
print("| clip | content (Mb/s) | " + " | ".join(f"N = {n}" for n in SHOWN)
      + " | CPU per connection at the last N | last N passed | machine idle there | iowait there |")
print("|---|---|" + "---|" * len(SHOWN) + "---|---|---|---|")
curves = {}
for name, r in runs.items():
    per_n = {p["n"]: p for p in r["per_n"]}
    curves[name] = sorted((n, p["server_cpu_pct"]) for n, p in per_n.items())
    passed = [n for n, p in per_n.items() if p["pass"]]
    last = max(passed) if passed else None
    cells = [f"{per_n[n]['server_cpu_pct']:.1f}" if n in per_n else "–" for n in SHOWN]
    content = r["content_mean_bits_s"] / 1e6 if r.get("content_mean_bits_s") else float("nan")
    if last is not None:
        p = per_n[last]
        per_conn = f"{p['server_cpu_pct'] / last:.2f}"
        idle, iowait = f"{p['cpu_idle_pct']:.0f} %", f"{p['cpu_iowait_pct']:.1f} %"
    else:
        per_conn = idle = iowait = "–"
    print(f"| {name} | {content:.2f} | " + " | ".join(cells)
          + f" | {per_conn} | {last} | {idle} | {iowait} |")
print()
print("Each N's run as the bench judged it (pass: no starvation, at most 0.1 % lost, B_avgNet within")
print("5 % of the content's rate), and the packets lost in all the clip's runs:")
print()
print("| clip | " + " | ".join(f"N = {n}" for n in SHOWN) + " | packets lost |")
print("|---|" + "---|" * len(SHOWN) + "---|")
for name, r in runs.items():
    per_n = {p["n"]: p for p in r["per_n"]}
    cells = [("pass" if per_n[n]["pass"] else "fail") if n in per_n else "–" for n in SHOWN]
    print(f"| {name} | " + " | ".join(cells) + f" | {r['lost']} |")

ymax = max(5.0, max(c for pts in curves.values() for _, c in pts) * 1.1)
line_plot(os.path.join(out, "he-connections.svg"),
          "isochron serve: CPU against connections to one file", "connections",
          "server CPU (% of one CPU)", curves, 31, ymax, 5)
