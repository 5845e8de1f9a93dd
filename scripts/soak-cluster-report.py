#!/usr/bin/env python3
"""The cluster soak's report (scripts/soak-cluster.sh, issue 30): OUT_DIR/report.md and
soak-cluster.json from the bench's report (OUT_DIR/soak/report.json, its `cluster.chaos`: every
injected failure and the audit of every session).

The verdicts are the issue's: every session not on a killed node's RTSP connection ended
byte-exact (or was cut by the run's end with nothing missing); fsck clean after every kill; and
the counts of sessions started, ended, taken over and refused.

Usage: scripts/soak-cluster-report.py OUT_DIR
"""
import json
import os
import sys


def main():
    out = sys.argv[1]
    report = json.load(open(os.path.join(out, "soak", "report.json")))
    command = open(os.path.join(out, "command.txt")).read().strip()
    cluster = report.get("cluster") or {}
    chaos = cluster.get("chaos") or {}
    events = chaos.get("events", [])
    audit = chaos.get("sessions", {})
    kills = [e for e in events if e["what"] == "kill"]
    etcd = [e for e in events if e["what"] == "etcd-restart"]
    verdicts = {
        "no session broken": audit.get("started", 0) > 0 and not audit.get("broken"),
        "every killed node back": all(e.get("back_after_s") is not None for e in kills),
        "fsck clean after every kill": all(e.get("fsck_clean") for e in kills),
        "every etcd member back": all(e.get("back_after_s") is not None for e in etcd),
    }
    summary = {"command": command, "run_s": report.get("elapsed_s"), "events": events,
               "audit": audit, "nodes": cluster.get("nodes"), "verdicts": verdicts}
    json.dump(summary, open(os.path.join(out, "soak-cluster.json"), "w"), indent=1)

    def s(v, fmt="{:.1f}"):
        return "never" if v is None else fmt.format(v)

    md = [f"# Cluster soak: {report.get('elapsed_s', 0) / 60:.0f} minutes", "", "```", command,
          "```", "", "| check | pass |", "|---|---|"]
    md += [f"| {k} | {v} |" for k, v in verdicts.items()]
    md += ["", "## Sessions", "",
           "| started | byte-exact to the end | of them checked against the file | cut by the "
           "run's end, nothing missing | on a killed node's RTSP connection | refused | broken |",
           "|---|---|---|---|---|---|---|",
           f"| {audit.get('started')} | {audit.get('byte_exact')} | "
           f"{audit.get('digest_checked')} | {audit.get('cut_by_the_end')} | "
           f"{audit.get('on_a_killed_node')} | {audit.get('refused')} | "
           f"{len(audit.get('broken', []))} |", "",
           "Parts of sessions taken over by the nodes (`isochron_takeovers_total`, summed over "
           "every node's lives): " + ", ".join(
               f"{k} {v:.0f}" for k, v in sorted(audit.get("takeovers", {}).items())), ""]
    if audit.get("broken"):
        md += ["Broken:", ""] + [f"- {b}" for b in audit["broken"][:30]] + [""]
    md += ["## Failures injected", "",
           "| at (s) | what | target | back after (s) | fsck |", "|---|---|---|---|---|"]
    for e in events:
        fsck = {True: "clean", False: "NOT clean", None: "–"}[e.get("fsck_clean")]
        err = f" ({e['error']})" if e.get("error") else ""
        md.append(f"| {e['at_s']:.0f} | {e['what']} | {e['target']} | "
                  f"{s(e.get('back_after_s'))} | {fsck}{err} |")
    md += ["", "## Nodes over the run", "",
           "A node's share and CPU are those of its last life (a killed node's process starts "
           "its counters again); its link's bytes and drops (the shaper's queue full: sent "
           "faster than the link carries) cover the whole run.", "",
           "| node | on its link (Mb/s, mean) | share | CPU (% of one) | packets its link dropped |",
           "|---|---|---|---|---|"]
    for n in cluster.get("nodes") or []:
        md.append(f"| {n['name']} | {n['wire_tx_bits_s'] / 1e6:.1f} | "
                  f"{100 * n['share']:.1f} % | {n['cpu_pct']:.1f} | {n.get('link_drops', '–')} |")
    md.append("")
    open(os.path.join(out, "report.md"), "w").write("\n".join(md))
    print("\n".join(md))
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
