#!/usr/bin/env python3
"""The summary of scripts/xtream-fig4.sh: a Markdown table (stdout) and `fig4.svg` in OUT, the
percentage of missed deadlines against the total bit rate, one curve per stream rate (XTREAM
Figure 4).

Usage: scripts/xtream-fig4-report.py OUT
"""
import glob
import json
import os
import re
import sys

out = sys.argv[1]
runs = {}
for path in glob.glob(os.path.join(out, "run-*.json")):
    m = re.match(r"run-(\w+)-(\d+)\.json$", os.path.basename(path))
    if not m:
        continue
    r = json.load(open(path))["run"]
    runs.setdefault(m.group(1), []).append((int(m.group(2)), r))


def rate_bps(name):
    unit = {"k": 1e3, "M": 1e6}.get(name[-1], 1)
    return float(name.rstrip("kM")) * unit


order = sorted(runs, key=rate_bps)
print("| stream rate | block | streams | total asked (Mb/s) | read (Mb/s) | deadlines | missed | "
      "missed % | cycles with a miss |")
print("|---|---|---|---|---|---|---|---|---|")
curves = {}
for name in order:
    for total, r in sorted(runs[name]):
        missed, blocks = r["missed_deadlines"], r["deadlines"]
        pct = 100.0 * missed / blocks if blocks else 0.0
        asked = r["demand_bytes_per_s"] * 8 / 1e6
        curves.setdefault(name, []).append((asked, pct))
        print(f"| {name}b/s | {r['block_bytes'] // 1024} KiB | {r['streams_admitted']} | "
              f"{asked:.1f} | {r['bytes_per_s'] * 8 / 1e6:.1f} | {blocks} | {missed} | "
              f"{pct:.2f} % | {r['cycles_with_misses']} of {r['cycles']} |")
print()


def model_mbit_s(r):
    """The emulated disk's throughput at this run's IO size (its model: seek, then transfer)."""
    m = dict(kv.split("=") for kv in r["disks"][0]["model"].split(","))
    b = r["block_bytes"]
    return b * 8 / (float(m["seek_ms"]) / 1e3 + b / (float(m["rate_mib_s"]) * 1048576)) / 1e6


print("| stream rate | IO size | the disk's throughput at that IO size (model, Mb/s) | "
      "most total bit rate with no missed deadline (Mb/s) | of the model | first total with misses |")
print("|---|---|---|---|---|---|")
for name in order:
    pts = sorted(curves[name])
    r0 = runs[name][0][1]
    cap = model_mbit_s(r0)
    clean = [a for a, p in pts if p == 0.0]
    first_bad = next((a for a, p in pts if p > 0.0), None)
    best = f"{max(clean):.1f}" if clean else "none"
    share = f"{100 * max(clean) / cap:.0f} %" if clean else "-"
    bad = f"{first_bad:.1f}" if first_bad is not None else "none tried"
    print(f"| {name}b/s | {r0['block_bytes'] // 1024} KiB | {cap:.1f} | {best} | {share} | {bad} |")

W, H, PAD = 640, 400, 50
xmax = max(a for pts in curves.values() for a, _ in pts) * 1.05
ymax = max(10.0, max(p for pts in curves.values() for _, p in pts) * 1.1)


def fx(x):
    return PAD + x / xmax * (W - 2 * PAD)


def fy(y):
    return H - PAD - y / ymax * (H - 2 * PAD)


colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
       f'font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="#fff"/>',
       f'<text x="{W / 2}" y="18" text-anchor="middle">Missed deadlines against total bit rate '
       f'(emulated disk, 1 s cycles)</text>',
       f'<line x1="{PAD}" y1="{fy(0)}" x2="{W - PAD}" y2="{fy(0)}" stroke="#000"/>',
       f'<line x1="{PAD}" y1="{fy(0)}" x2="{PAD}" y2="{fy(ymax)}" stroke="#000"/>']
step = 5 if xmax > 20 else 2
x = 0
while x <= xmax:
    svg.append(f'<text x="{fx(x):.1f}" y="{fy(0) + 16}" text-anchor="middle">{x}</text>')
    x += step
ystep = 10 if ymax > 40 else 5 if ymax > 15 else 2
y = 0
while y <= ymax:
    svg.append(f'<text x="{PAD - 6}" y="{fy(y) + 4:.1f}" text-anchor="end">{y}</text>')
    y += ystep
svg.append(f'<text x="{W / 2}" y="{H - 12}" text-anchor="middle">total bit rate (Mb/s)</text>')
svg.append(f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" '
           f'text-anchor="middle">missed deadlines (%)</text>')
for i, name in enumerate(order):
    c = colours[i % len(colours)]
    pts = sorted(curves[name])
    path = " ".join(f"{fx(a):.1f},{fy(p):.1f}" for a, p in pts)
    svg.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
    for a, p in pts:
        svg.append(f'<circle cx="{fx(a):.1f}" cy="{fy(p):.1f}" r="3" fill="{c}"/>')
    svg.append(f'<text x="{PAD + 10}" y="{40 + 16 * i}" fill="{c}">— {name}b/s streams</text>')
svg.append("</svg>")
with open(os.path.join(out, "fig4.svg"), "w") as f:
    f.write("\n".join(svg) + "\n")
