#!/usr/bin/env python3
"""The summary of scripts/he-files.sh: a Markdown table and `he-files.svg` (CPU idle, iowait and
the disk's share of the bytes sent, against the number of files) from its runs' samples.

Usage: scripts/he-files-report.py OUT_DIR > OUT_DIR/summary.md
"""
import csv
import glob
import json
import os
import re
import sys

out = sys.argv[1]
runs = {}
for d in glob.glob(os.path.join(out, "*-f*")):
    m = re.fullmatch(r"(\w+)-f(\d+)", os.path.basename(d))
    if not m or not os.path.isdir(d):
        continue
    rows = list(csv.DictReader(open(os.path.join(d, "samples.csv"))))
    steady = [r for r in rows if r["steady"] == "true"] or rows

    def mean(key, rows=steady):
        vals = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
        return sum(vals) / len(vals) if vals else 0.0

    def total(key):
        return sum(float(r[key]) for r in rows if r.get(key) not in (None, ""))

    report = json.load(open(os.path.join(d, "report.json")))
    disk, cache = mean("b_disk_bytes_s"), mean("b_cache_bytes_s")
    runs[(m.group(1), int(m.group(2)))] = {
        "idle": mean("cpu_idle_pct"),
        "iowait": mean("cpu_iowait_pct"),
        "server_cpu": mean("server_cpu_pct"),
        "b_avgnet": mean("b_avgnet_bits_s") / 1e6,
        "disk_util": mean("disk_util_pct"),
        "disk_share": disk / (disk + cache) if disk + cache > 0 else 0.0,
        "b_disk": disk * 8 / 1e6,
        "starvations": int(max((float(r["starvations_total"]) for r in rows), default=0)),
        "missed": int(total("missed_deadlines")),
        "bottleneck": (report.get("verdict") or {}).get("bottleneck", report.get("bottleneck")),
    }

kinds = sorted({k for k, _ in runs})
print("| store | files | CPU idle | iowait | server CPU (of one) | B_avgNet | from disk | disk util "
      "| starvations | missed deadlines | bench's verdict |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for kind in kinds:
    for f in sorted(f for k, f in runs if k == kind):
        r = runs[(kind, f)]
        print(f"| {kind} | {f} | {r['idle']:.0f} % | {r['iowait']:.1f} % | {r['server_cpu']:.0f} % "
              f"| {r['b_avgnet']:.2f} Mb/s | {r['disk_share'] * 100:.0f} % ({r['b_disk']:.0f} Mb/s) "
              f"| {r['disk_util']:.0f} % | {r['starvations']} | {r['missed']} | {r['bottleneck']} |")

# Three panels side by side, one line per store.
W, H, PAD = 300, 220, 40
panels = [("CPU idle, %", "idle", 100), ("iowait, %", "iowait", None),
          ("bytes sent from disk, %", "disk_share", 1)]
colors = {"disk": "#c0392b", "tmpfs": "#2471a3"}
files = sorted({f for _, f in runs}) or [1]
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{3 * W}" height="{H + 30}" '
       'font-family="sans-serif" font-size="11">']
for i, (title, key, top) in enumerate(panels):
    x0 = i * W
    vals = [r[key] for r in runs.values()] or [1]
    ymax = top if top is not None else max(max(vals) * 1.2, 1.0)
    fx = lambda f: x0 + PAD + (f - files[0]) / max(files[-1] - files[0], 1) * (W - 2 * PAD)
    fy = lambda v: H - PAD + 10 - v / ymax * (H - 2 * PAD)
    svg.append(f'<text x="{x0 + W / 2}" y="14" text-anchor="middle">{title}</text>')
    svg.append(f'<line x1="{x0 + PAD}" y1="{fy(0)}" x2="{x0 + W - PAD}" y2="{fy(0)}" stroke="#000"/>')
    svg.append(f'<line x1="{x0 + PAD}" y1="{fy(0)}" x2="{x0 + PAD}" y2="{fy(ymax)}" stroke="#000"/>')
    scale = 100 if key == "disk_share" else 1
    for t in (0, ymax / 2, ymax):
        svg.append(f'<text x="{x0 + PAD - 4}" y="{fy(t) + 4}" text-anchor="end">{t * scale:.0f}</text>')
    for f in files:
        svg.append(f'<text x="{fx(f)}" y="{fy(0) + 14}" text-anchor="middle">{f}</text>')
    svg.append(f'<text x="{x0 + W / 2}" y="{fy(0) + 28}" text-anchor="middle">files (30 clients)</text>')
    for kind in kinds:
        pts = [(fx(f), fy(runs[(kind, f)][key])) for f in files if (kind, f) in runs]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        c = colors.get(kind, "#555")
        svg.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        for x, y in pts:
            svg.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{c}"/>')
for j, kind in enumerate(kinds):
    c = colors.get(kind, "#555")
    svg.append(f'<text x="{10 + j * 80}" y="{H + 25}" fill="{c}">— {kind}</text>')
svg.append("</svg>")
with open(os.path.join(out, "he-files.svg"), "w") as f:
    f.write("\n".join(svg) + "\n")
