#!/usr/bin/env python3
"""The summary of scripts/he-connections.sh: Markdown tables (stdout) and `he-connections.svg`
in OUT: the server's CPU (% of one CPU) against the number of connections, one line per clip,
and the machine's idle and iowait.

Usage: scripts/he-connections-report.py OUT
"""
import json
import os
import sys

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

W, H, PAD = 640, 400, 50
xmax = 31
ymax = max(5.0, max(c for pts in curves.values() for _, c in pts) * 1.1)


def fx(x):
    return PAD + x / xmax * (W - 2 * PAD)


def fy(y):
    return H - PAD - y / ymax * (H - 2 * PAD)


colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
       f'font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="#fff"/>',
       f'<text x="{W / 2}" y="18" text-anchor="middle">isochron serve: CPU against '
       f'connections to one file</text>',
       f'<line x1="{PAD}" y1="{fy(0)}" x2="{W - PAD}" y2="{fy(0)}" stroke="#000"/>',
       f'<line x1="{PAD}" y1="{fy(0)}" x2="{PAD}" y2="{fy(ymax)}" stroke="#000"/>']
for x in range(0, 31, 5):
    svg.append(f'<text x="{fx(x):.1f}" y="{fy(0) + 16}" text-anchor="middle">{x}</text>')
ystep = 10 if ymax > 40 else 5 if ymax > 15 else 2
y = 0
while y <= ymax:
    svg.append(f'<text x="{PAD - 6}" y="{fy(y) + 4:.1f}" text-anchor="end">{y}</text>')
    y += ystep
svg.append(f'<text x="{W / 2}" y="{H - 12}" text-anchor="middle">connections</text>')
svg.append(f'<text x="14" y="{H / 2}" transform="rotate(-90 14 {H / 2})" '
           f'text-anchor="middle">server CPU (% of one CPU)</text>')
for i, (name, pts) in enumerate(curves.items()):
    c = colours[i % len(colours)]
    path = " ".join(f"{fx(n):.1f},{fy(v):.1f}" for n, v in pts)
    svg.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
    svg.append(f'<text x="{PAD + 10}" y="{40 + 16 * i}" fill="{c}">— {name}</text>')
svg.append("</svg>")
with open(os.path.join(out, "he-connections.svg"), "w") as f:
    f.write("\n".join(svg) + "\n")
