#!/usr/bin/env python3
"""The soak's report (scripts/soak.sh, issue 30): report.md, soak.json and the plots in OUT_DIR,
from the server's samples every 10 s (soak.csv) and the bench's report (soak/report.json).

The verdicts are the issue's: 0 starvations and 0 sequence gaps over every session; the server's
RSS grows less than 5 % from minute 10 to the end; its open file descriptors at rest after the
soak are what they were at rest before it; its packet lateness p99 (its own histogram) over the
last 10 minutes is within 20 % of the first 10 minutes'.

Usage: scripts/soak-report.py OUT_DIR
"""
import csv
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lineplot import line_plot  # noqa: E402

BUCKETS = re.compile(r"isochron_packet_lateness_seconds_bucket\{le=([^}]+)\}=([0-9.e+]+)")


def metric(text, name):
    m = re.search(rf"(?:^|;){re.escape(name)}=([0-9.e+-]+)", text)
    return float(m.group(1)) if m else 0.0


def histogram(text):
    """(upper bound s, cumulative count) pairs, +Inf last."""
    out = []
    for le, v in BUCKETS.findall(text):
        out.append((float("inf") if le == "+Inf" else float(le), float(v)))
    return out


def quantile(h0, h1, q):
    """The q-quantile of the packets counted between two cumulative histograms, interpolated
    linearly inside its bucket (ms); None without packets."""
    diff = [(le, c1 - c0) for (le, c1), (_, c0) in zip(h1, h0)]
    total = diff[-1][1] if diff else 0
    if total <= 0:
        return None
    want = q * total
    lo, below = 0.0, 0.0
    for le, cum in diff:
        if cum >= want:
            if le == float("inf"):
                return lo * 1e3
            inside = cum - below
            f = (want - below) / inside if inside > 0 else 1.0
            return (lo + f * (le - lo)) * 1e3
        lo, below = le, cum
    return None


def main():
    out = sys.argv[1]
    rows = list(csv.DictReader(open(os.path.join(out, "soak.csv"))))
    report = json.load(open(os.path.join(out, "soak", "report.json")))
    command = open(os.path.join(out, "command.txt")).read().strip()
    run_s = report["elapsed_s"]
    samples = []
    for r in rows:
        m = r["metrics"]
        samples.append({
            "t": float(r["t_s"]), "rss": int(r["rss_kib"] or 0), "fds": int(r["fds"] or 0),
            "threads": int(r["threads"] or 0), "sessions": metric(m, "isochron_sessions"),
            "hist": histogram(m), "sum": metric(m, "isochron_packet_lateness_seconds_sum"),
            "count": metric(m, "isochron_packet_lateness_seconds_count"),
            "underruns": metric(m, "isochron_underruns_total"),
            "send_errors": metric(m, "isochron_send_errors_total"),
        })
    during = [s for s in samples if s["t"] <= run_s and s["hist"]]

    def at(t):
        return min(during, key=lambda s: abs(s["t"] - t))

    # RSS and fds: minute 10 against the end of the run; fds at rest before and after.
    m10, end = at(600), at(run_s)
    rss_growth = (end["rss"] - m10["rss"]) / m10["rss"] * 100 if m10["rss"] else None
    rss_max_after_10 = max(s["rss"] for s in during if s["t"] >= 600) if run_s > 600 else None
    rest_before, rest_after = samples[0], samples[-1]
    # Lateness: the first and the last 10 minutes.
    span = min(600.0, run_s / 2)
    first = (at(0), at(span))
    last = (at(run_s - span), end)
    p99_first = quantile(first[0]["hist"], first[1]["hist"], 0.99)
    p99_last = quantile(last[0]["hist"], last[1]["hist"], 0.99)

    def above(a, b, ms):
        """The share of packets (%) sent more than `ms` late between two samples."""
        h0, h1 = dict(a["hist"]), dict(b["hist"])
        total = h1[float("inf")] - h0[float("inf")]
        le = ms / 1e3
        if total <= 0 or le not in h1:
            return None
        return 100.0 * (total - (h1[le] - h0[le])) / total

    def mean_ms(a, b):
        n = b["count"] - a["count"]
        return (b["sum"] - a["sum"]) / n * 1e3 if n > 0 else None

    sessions = report["sessions"]
    by = {}
    for s in sessions:
        k = (s["url"].rsplit("/", 1)[-1], s["transport"])
        d = by.setdefault(k, {"sessions": 0, "complete": 0, "stopped": 0, "refused": 0,
                              "error": 0, "starvations": 0, "lost": 0, "seeks": 0, "pauses": 0,
                              "bytes": 0})
        d["sessions"] += 1
        d[s["outcome"]] += 1
        for f in ("starvations", "lost", "seeks", "pauses", "bytes"):
            d[f] += s[f]
    total = {f: sum(d[f] for d in by.values()) for f in
             ("sessions", "complete", "stopped", "refused", "error", "starvations", "lost",
              "seeks", "pauses", "bytes")}
    errors = sorted({s["error"] for s in sessions if s["error"]})[:10]
    n_target = report["parameters"]["load"].get("max")
    verdicts = {
        "no starvation": total["starvations"] == 0,
        "no sequence gap": total["lost"] == 0,
        "no session refused or failed": total["refused"] == 0 and total["error"] == 0,
        "RSS growth from minute 10 < 5 %": rss_growth is not None and rss_growth < 5,
        "fds at rest after = before": rest_after["fds"] <= rest_before["fds"],
        "lateness p99 last 10 min within 20 % of first 10 min":
            p99_first is not None and p99_last is not None
            and abs(p99_last - p99_first) <= 0.2 * p99_first,
    }
    summary = {
        "command": command, "run_s": run_s, "clients": n_target, "sessions": total,
        "by_object_and_transport": {f"{o} {t}": d for (o, t), d in sorted(by.items())},
        "rss_kib": {"minute_10": m10["rss"], "end": end["rss"], "max_after_10": rss_max_after_10,
                    "growth_pct": rss_growth},
        "fds": {"rest_before": rest_before["fds"], "rest_after": rest_after["fds"],
                "minute_10": m10["fds"], "end": end["fds"],
                "max": max(s["fds"] for s in samples)},
        "threads": {"rest_before": rest_before["threads"], "rest_after": rest_after["threads"]},
        "late_share_pct": {f"above_{ms}ms": {"first": above(*first, ms), "last": above(*last, ms)}
                           for ms in (1, 5, 10, 50)},
        "lateness_ms": {"p99_first": p99_first, "p99_last": p99_last,
                        "mean_first": mean_ms(*first), "mean_last": mean_ms(*last),
                        "window_s": span},
        "underruns": end["underruns"], "send_errors": end["send_errors"],
        "errors": errors, "verdicts": verdicts,
    }
    json.dump(summary, open(os.path.join(out, "soak.json"), "w"), indent=1)

    # Plots: memory and fds; sessions; lateness p99 per minute.
    xmax = max(60, int(samples[-1]["t"] / 60) + 1)
    xstep = 10 if xmax > 20 else 2
    rss = [(s["t"] / 60, s["rss"] / 1024) for s in samples]
    fds = [(s["t"] / 60, s["fds"]) for s in samples]
    top = max(max(y for _, y in rss), max(y for _, y in fds)) * 1.15
    line_plot(os.path.join(out, "rss-fds.svg"), "server RSS and open file descriptors",
              "minutes", "MiB / fds", {"RSS, MiB": rss, "open fds": fds}, xmax, top, xstep)
    sess = [(s["t"] / 60, s["sessions"]) for s in samples]
    line_plot(os.path.join(out, "sessions.svg"), "sessions in the server's table", "minutes",
              "sessions", {"sessions": sess}, xmax, max(y for _, y in sess) * 1.15 + 1, xstep)
    p99 = []
    for a, b in zip(during, during[6:]):
        q = quantile(a["hist"], b["hist"], 0.99)
        if q is not None:
            p99.append((b["t"] / 60, q))
    if p99:
        line_plot(os.path.join(out, "lateness.svg"),
                  "server packet lateness p99 over each minute (its histogram, interpolated)",
                  "minutes", "ms", {"p99": p99}, xmax, max(y for _, y in p99) * 1.3, xstep)

    def f(v, fmt="{:.2f}"):
        return "n/a" if v is None else fmt.format(v)

    md = [f"# Soak: {run_s / 60:.0f} minutes, {n_target} clients", "", "```", command, "```", "",
          "| check | value | pass |", "|---|---|---|",
          f"| starvations (all sessions) | {total['starvations']} | "
          f"{verdicts['no starvation']} |",
          f"| packets lost, sequence gaps (all sessions) | {total['lost']} | "
          f"{verdicts['no sequence gap']} |",
          f"| sessions refused / failed | {total['refused']} / {total['error']} | "
          f"{verdicts['no session refused or failed']} |",
          f"| RSS minute 10 → end (max after minute 10) | {m10['rss'] / 1024:.1f} → "
          f"{end['rss'] / 1024:.1f} MiB ({f(rss_max_after_10 and rss_max_after_10 / 1024, '{:.1f}')})"
          f", {f(rss_growth)} % | {verdicts['RSS growth from minute 10 < 5 %']} |",
          f"| open fds at rest, before → after | {rest_before['fds']} → {rest_after['fds']} "
          f"(max {summary['fds']['max']}) | {verdicts['fds at rest after = before']} |",
          f"| lateness p99, first → last {span / 60:.0f} min | {f(p99_first, '{:.3f}')} → "
          f"{f(p99_last, '{:.3f}')} ms (mean {f(mean_ms(*first), '{:.3f}')} → "
          f"{f(mean_ms(*last), '{:.3f}')} ms) | "
          f"{verdicts['lateness p99 last 10 min within 20 % of first 10 min']} |",
          f"| packets sent > 1 / 5 / 10 / 50 ms late, first → last {span / 60:.0f} min | "
          + ", ".join(f"{f(above(*first, ms), '{:.3f}')} → {f(above(*last, ms), '{:.3f}')} %"
                      for ms in (1, 5, 10, 50)) + " | |",
          "", "| object, transport | sessions | played to the end | stopped by the run's end | "
          "refused | failed | starvations | lost | seeks | pauses | GB |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (o, t), d in sorted(by.items()):
        md.append(f"| {o} {t} | {d['sessions']} | {d['complete']} | {d['stopped']} | "
                  f"{d['refused']} | {d['error']} | {d['starvations']} | {d['lost']} | "
                  f"{d['seeks']} | {d['pauses']} | {d['bytes'] / 1e9:.1f} |")
    md += ["", f"Server underruns {end['underruns']:.0f}, send errors {end['send_errors']:.0f}; "
           f"threads at rest {rest_before['threads']} → {rest_after['threads']}.", ""]
    if errors:
        md += ["Errors:", ""] + [f"- `{e}`" for e in errors] + [""]
    md += ["![RSS and fds](rss-fds.svg)", "![sessions](sessions.svg)",
           "![lateness](lateness.svg)", ""]
    open(os.path.join(out, "report.md"), "w").write("\n".join(md))
    print("\n".join(md[:14]))
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
