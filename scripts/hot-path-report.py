#!/usr/bin/env python3
"""summary.md of scripts/hot-path.sh: N_max per clip and sender threads against iperf3 in the
same run, the independent client's check, CPU per Gb/s. Usage: hot-path-report.py OUT_DIR
(environment: CLIPS, OBJECTS, THREADS as the script sets them)."""
import glob
import json
import math
import os
import re
import subprocess
import sys

out = sys.argv[1]
clips = os.environ.get("CLIPS", f"{out}/clips")
objects = os.environ.get("OBJECTS", "vbr60 hdtv40 uhd400").split()
threads = os.environ.get("THREADS", "1 2").split()
# isochron's UDP payload per 1316 bytes of TS (7 packets): a 12-byte RTP header more.
RTP = 1328 / 1316


def heaviest_20s(path):
    """The clip's mean rate and its heaviest 20 s, bits/s of TS (packet sizes scaled to the
    file's, so the TS overhead counts)."""
    rows = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "packet=dts_time,size", "-of", "csv=p=0", path],
        capture_output=True, text=True, check=True).stdout.split()
    pk = [(float(t), int(s)) for t, s in (r.split(",")[:2] for r in rows) if t != "N/A"]
    scale = os.path.getsize(path) / sum(s for _, s in pk)
    t0 = min(t for t, _ in pk)
    dur = max(t for t, _ in pk) - t0
    sec = [0.0] * (int(dur) + 2)
    for t, s in pk:
        sec[int(t - t0)] += s * scale
    w = min(20, len(sec))
    best = max(sum(sec[i:i + w]) for i in range(len(sec) - w + 1)) * 8 / w
    return os.path.getsize(path) * 8 / dur, best, dur


def load(p):
    return json.load(open(p)) if os.path.exists(p) else None


def at_n(r, n):
    """The trial at N: its per-N figures and its sessions' worst lateness."""
    per = next((p for p in r["per_n"] if p["n"] == n), None)
    first = 0
    late = []
    for t in r.get("trials") or []:
        if t["n"] == n:
            late = [s["lateness_max_ms"] for s in r["sessions"]
                    if first <= s["client"] < first + n and s.get("lateness_max_ms") is not None]
        first += t["n"]
    return per, late


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, math.ceil(q * len(v)) - 1)] if v else float("nan")


iperf = {}
for P in (1, 2):
    j = load(f"{out}/iperf3-P{P}.json")
    if j:
        e = j["end"]["sum"]
        iperf[P] = (e["bits_per_second"], e["lost_percent"],
                    e["bits_per_second"] * (1 - e["lost_percent"] / 100))
for P, (tx, loss, rx) in iperf.items():
    print(f"- iperf3 -u -l 1328 -b 0 -P {P}: sent {tx/1e6:.0f} Mb/s, lost {loss:.1f} %, "
          f"delivered **{rx/1e6:.0f} Mb/s**")
ref = iperf.get(2, iperf.get(1, (0, 0, 0)))[2]
print()
print("| clip | sender threads | N_max | first failure | N_max × heaviest 20 s (UDP) | / iperf3 -P 2 | "
      "B_net at N_max (Mb/s) | server CPU (% of one) | CPU per Gb/s | bench CPU | "
      "session lateness p99 / max (ms) | server: packets > 50 ms late |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for o in objects:
    mean, heavy, dur = heaviest_20s(f"{clips}/{o}.ts")
    for k in threads:
        r = load(f"{out}/{o}-k{k}/report.json")
        if not r:
            continue
        n = r["n_max"] or 0
        per, late = at_n(r, n)
        cap = n * heavy * RTP
        if per:
            gbs = per["b_net_bits_s"] * RTP / 1e9
            print(f"| {o} ({mean/1e6:.2f} Mb/s mean, {heavy/1e6:.2f} heaviest 20 s, {dur:.0f} s) | {k} | **{n}** | "
                  f"{r['first_failure_n']} | {cap/1e6:.0f} Mb/s | **{cap/ref:.1%}** | "
                  f"{per['b_net_bits_s']/1e6:.0f} | {per['server_cpu_pct']:.0f} | "
                  f"{per['server_cpu_pct']/gbs:.1f} | {per['bench_cpu_pct']:.0f} | "
                  f"{pct(late, 0.99):.0f} / {max(late, default=float('nan')):.0f} | "
                  f"{per.get('server_late_packets') or 0:.0f} |")
        else:
            print(f"| {o} | {k} | {n} | {r['first_failure_n']} | | | | | | | | |")
print()
for f in sorted(glob.glob(f"{out}/probe-k*-n*.txt")):
    k, n = re.search(r"probe-k(\d+)-n(\d+)", f).groups()
    last = open(f).read().strip().splitlines()[-1:]
    print(f"- rtsp-probe, {n} sessions, {k} sender thread(s): {last[0] if last else '(no output)'}")
print()
for f in sorted(glob.glob(f"{out}/cpu-k*-n*/report.json")):
    k, n = re.search(r"cpu-k(\d+)-n(\d+)", f).groups()
    r = json.load(open(f))
    p = max(r["per_n"], key=lambda p: p["samples"])
    gbs = p["b_net_bits_s"] * RTP / 1e9
    late = [s["lateness_max_ms"] for s in r["sessions"] if s.get("lateness_max_ms") is not None]
    print(f"- N = {n}, {k} sender thread(s): {gbs*1e3:.0f} Mb/s of UDP payload, server "
          f"{p['server_cpu_pct']:.0f} % of one CPU = **{p['server_cpu_pct']/gbs:.1f} % per Gb/s**, "
          f"bench {p['bench_cpu_pct']:.0f} %, machine idle {p['cpu_idle_pct']:.0f} %, "
          f"session lateness max {max(late, default=float('nan')):.0f} ms, pass {p['pass']}")
