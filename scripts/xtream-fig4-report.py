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

from lineplot import line_plot

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

xmax = max(a for pts in curves.values() for a, _ in pts) * 1.05
ymax = max(10.0, max(p for pts in curves.values() for _, p in pts) * 1.1)
line_plot(os.path.join(out, "fig4.svg"),
          "Missed deadlines against total bit rate (emulated disk, 1 s cycles)",
          "total bit rate (Mb/s)", "missed deadlines (%)",
          {f"{name}b/s streams": sorted(curves[name]) for name in order},
          xmax, ymax, 5 if xmax > 20 else 2, dots=True)
