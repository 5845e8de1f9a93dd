#!/usr/bin/env python3
"""Markdown tables from the JSON reports scripts/xtream-table1.sh leaves in its results folder.

Usage: scripts/xtream-table1-report.py RESULTS_DIR > tables.md
"""
import glob
import json
import os
import sys

RATES = {"emu": ["250k", "1M", "2M"], "real": ["25M", "100M", "200M"]}
KINDS = [("cbr", "CBR"), ("vbr", "VBR"), ("het", "het.")]
POLICIES = ["conservative", "aggressive", "aggressive-avg"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def table1(out, disk_set):
    rows = ["| rate | type | MaxN | conservative | aggressive | aggressive-avg | aggr-avg / MaxN |",
            "|---|---|---|---|---|---|---|"]
    for kind, label in KINDS:
        for rate in RATES[disk_set]:
            base = os.path.join(out, f"{disk_set}-{kind}-{rate}")
            m = load(base + "-maxn.json")
            if m is None:
                continue
            cells = []
            for p in POLICIES:
                n = m["admits"].get(p)
                r = load(f"{base}-run-{n}.json")
                missed = "?" if r is None else r["run"]["missed_deadlines"]
                cells.append(f"{n} ({missed})")
            ratio = m["admits"].get("aggressive-avg", 0) / m["max_n"] if m["max_n"] else 0
            runs = ", ".join(f"{r['n']}{'c' if r['confirm'] else ''}:{r['missed']}" for r in m["runs"])
            rows.append(f"| {rate}b/s | {label} | {m['max_n']} | " + " | ".join(cells)
                        + f" | {ratio:.0%} |")
            rows[-1] += ""
            search_log.append(f"- {disk_set} {label} {rate}b/s: {runs}")
    return "\n".join(rows)


def latency(out, disk_set):
    rows = ["| streams | starts sampled | p50 (ms) | p99 (ms) | max (ms) | missed |",
            "|---|---|---|---|---|---|"]
    files = sorted(glob.glob(os.path.join(out, f"lat-{disk_set}-*.json")),
                   key=lambda f: int(f.rsplit("-", 1)[1].split(".")[0]))
    for f in files:
        r = load(f)["run"]
        l = r["probe_latency"] if r["probe_latency"]["count"] else r["initial_latency"]
        rows.append(f"| {r['streams_admitted']} | {l['count']} | {l['p50_ms']:.1f} | "
                    f"{l['p99_ms']:.1f} | {l['max_ms']:.1f} | {r['missed_deadlines']} |")
    return "\n".join(rows)


def overload(out, disk_set):
    rows = ["| streams (admission off) | load | missed deadlines | most in one cycle | "
            "cycles with misses | streams with misses |", "|---|---|---|---|---|---|"]
    files = sorted(glob.glob(os.path.join(out, f"over-{disk_set}-*.json")),
                   key=lambda f: int(f.rsplit("-", 1)[1].split(".")[0]))
    for f in files:
        r = load(f)["run"]
        load_pct = f.rsplit("-", 1)[1].split(".")[0]
        rows.append(f"| {r['streams_admitted']} | {load_pct} % of MaxN | {r['missed_deadlines']} | "
                    f"{r['max_missed_per_cycle']} | {r['cycles_with_misses']} of {r['cycles']} | "
                    f"{r['streams_with_misses']} |")
    return "\n".join(rows)


def efficiency(out):
    rows = ["| workload | MaxN | scheduler MiB/s | fio MiB/s | ratio | disk busy |",
            "|---|---|---|---|---|---|"]
    for rate in RATES["real"]:
        m = load(os.path.join(out, f"real-cbr-{rate}-maxn.json"))
        if not m or not m.get("at_max_n") or not m.get("fio_bytes_per_s"):
            continue
        r = m["at_max_n"]
        rows.append(f"| CBR {rate}b/s | {m['max_n']} | {r['bytes_per_s'] / 2**20:.0f} | "
                    f"{m['fio_bytes_per_s'] / 2**20:.0f} | {m['efficiency']:.1%} | "
                    f"{r['disks'][0]['utilisation']:.1%} |")
    return "\n".join(rows)


if __name__ == "__main__":
    out = sys.argv[1]
    search_log = []
    print("## (a) Emulated disk (seek 10 ms, 4 MiB/s), 256 KiB blocks\n")
    print(table1(out, "emu"))
    print("\n## (b) Real disk through a 400 MiB/s blkio throttle, 1 MiB blocks, rates scaled up\n")
    print(table1(out, "real"))
    print("\n## Search runs (streams[c = confirmation]:missed)\n")
    print("\n".join(search_log))
    for s in ["emu", "real"]:
        print(f"\n## Initial latency ({s})\n")
        print(latency(out, s))
        print(f"\n## Overload ({s})\n")
        print(overload(out, s))
    print("\n## Efficiency (real disk)\n")
    print(efficiency(out))
