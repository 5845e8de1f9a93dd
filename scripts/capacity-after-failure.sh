#!/usr/bin/env bash
# Capacity after a failure (issue 13), docs/results/capacity-after-failure.md: N_max of 3 isochron
# nodes with two copies of every block (replication 2), then of the same 3 nodes with n3 SIGKILLed
# after the ingest, the sessions opened on n1 and n2 while n3 is down (its blocks sent from their
# other copies, no re-replication during the run). Each node behind its own 100 Mb/s link, the
# 180 s 5.57 Mb/s VBR clip of Figure 3, admission off, bipartite delivery, nominal pacing (no
# MTFC), staggered looping clients: Figure 4's set-up (docs/results/fig4.md).
#
# Usage: scripts/capacity-after-failure.sh OUT_DIR   (root; etcd, iproute2, ffmpeg; ~25 minutes)
# Environment: BIN (default target/release/isochron), CLIP (default OUT_DIR/fig3.ts, made with
# ffmpeg if missing), TRIAL_S (default 90), SEED (default 4), DOCS (default docs/results: writes
# DOCS/capacity-after-failure/ and DOCS/capacity-after-failure.md; empty: do not), REPORT_ONLY=1
# (only write the report again from OUT_DIR's runs).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
CLIP=${CLIP:-$OUT/fig3.ts}
TRIAL_S=${TRIAL_S:-90}
SEED=${SEED:-4}
DOCS=${DOCS-docs/results}
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT"
if [ "${REPORT_ONLY:-}" != 1 ]; then
if [ ! -f "$CLIP" ]; then
  log "making the clip (docs/results/fig3.md)"
  made=$(mktemp -d) && scripts/make-clips.sh "$made" fig3 && mv "$made/fig3.ts" "$CLIP"
fi
(while :; do echo "$(date +%T) $(cut -d' ' -f1-4 /proc/loadavg)"; sleep 10; done) > "$OUT/load.txt" &
sampler=$!
trap 'kill $sampler 2> /dev/null || true' EXIT
top -b -n 1 -w 200 | head -20 > "$OUT/top-start.txt"
git rev-parse --short HEAD > "$OUT/commit.txt" 2> /dev/null || true

common=(--cluster-nodes 3 --replication 2 --shape 100mbit --ingest "$CLIP" --block-kib 16
  --stagger --no-mtfc --buffer-ms 2000 --seed "$SEED" --find-nmax --trial "$TRIAL_S"
  --duration 3600)
cmd=("$BIN" bench --out "$OUT/all" "${common[@]}" --nmax-from 48 --max-clients 60)
log "3 nodes: ${cmd[*]}"
echo "${cmd[*]}" > "$OUT/all.cmd"
"${cmd[@]}" | tee "$OUT/all.txt"
cmd=("$BIN" bench --out "$OUT/killed" "${common[@]}" --kill-nodes 1 --nmax-from 32
  --max-clients 40)
log "3 nodes, n3 killed: ${cmd[*]}"
echo "${cmd[*]}" > "$OUT/killed.cmd"
"${cmd[@]}" | tee "$OUT/killed.txt"
top -b -n 1 -w 200 | head -20 > "$OUT/top-end.txt"
kill $sampler 2> /dev/null || true
trap - EXIT
fi

python3 - "$OUT" "${DOCS:-}" <<'EOF'
import json, os, shutil, sys
out, docs = sys.argv[1], sys.argv[2]
runs = {k: json.load(open(f"{out}/{k}/report.json")) for k in ("all", "killed")}
cmds = {k: open(f"{out}/{k}.cmd").read().strip() for k in runs}
def rel(c):
    return c.replace(os.path.abspath(out) + "/", "OUT/").replace(out + "/", "OUT/").replace(
        os.getcwd() + "/", "")
n = {k: r["n_max"] for k, r in runs.items()}
ratio = n["killed"] / n["all"] if n["all"] else 0.0
verdict = "PASS" if ratio >= 0.6 else "FAIL"
commit = open(f"{out}/commit.txt").read().strip() if os.path.exists(f"{out}/commit.txt") else "?"
trial_s = runs["all"]["parameters"]["load"]["trial"]["secs"]
loads = [float(l.split()[1]) for l in open(f"{out}/load.txt") if len(l.split()) > 1]
def trials(r):
    return ", ".join(f"{t['n']} {'✓' if t['pass'] else '✗'}" for t in r["trials"])
def at_nmax(r):
    return next((p for p in r["per_n"] if p["n"] == r["n_max"]), None)
L = []
L.append("# Capacity after a failure: N_max of 3 nodes with two copies of every block, and with one of them killed\n")
L.append(f"Made by `scripts/capacity-after-failure.sh` at commit {commit}. **N_max = {n['all']}** with "
         f"3 nodes up, **N_max = {n['killed']}** with n3 SIGKILLed: **{ratio:.2f} × N_max** "
         f"(required ≥ 0.6). Verdict: **{verdict}**.\n")
L.append("## Set-up\n")
L.append("Figure 4's (`docs/results/fig4.md`): every node an `isochron serve` in a network namespace "
         "of its own behind a veth pair shaped to 100 Mb/s both ways (`tc tbf`), one etcd member, "
         "the clients (one `isochron bench`) in another namespace, unshaped; the 180 s 5.57 Mb/s "
         "VBR clip of Figure 3 in 16 KiB blocks, **two copies of every block** "
         "(`store.replication = 2`: copy 0 by SCADDAR placement, copy 1 on another node by the "
         "seeded rendezvous ranking, `docs/design/replication.md`), admission off so the links "
         "are what is measured; RTSP over UDP, bipartite delivery, nominal pacing (`--no-mtfc`), "
         f"2 s playout buffer, staggered looping clients, {trial_s} s trials. N passes when no "
         "client starved, at most 0.1 % of packets were lost, and B_avgNet stayed within 5 % of "
         "the content's rate.\n")
L.append("The failure: after the ingest the bench SIGKILLs n3 and waits until n1 and n2 both list "
         "it `down` (its etcd lease lapsed); then every trial's sessions open on n1 and n2 "
         "(taken in turn) **while n3 is down**: the origin names n3 lost in its reserve, and "
         "each survivor plans its share without n3, sending each of n3's blocks from its other "
         "copy (`docs/design/takeover.md`, \"New sessions while a node is down\"). The dead "
         "node's copies are not re-created during the run (`cluster.dead_after_s` raised): what "
         "is measured is the cluster between a failure and its repair, every block read from "
         "the one copy left on a live node. After the repair the cluster is an ordinary 2-node "
         "one (Figure 4 measured N_max = 33 for 2 nodes with one copy).\n")
L.append("## Result\n")
L.append("| run | nodes sending | N_max | first failing N | trials (N: pass) | bottleneck |")
L.append("|---|---|---|---|---|---|")
for k, label in (("all", "3 nodes up"), ("killed", "n3 killed")):
    r = runs[k]
    names = ", ".join(x["name"] for x in r["cluster"]["nodes"])
    L.append(f"| {label} | {names} | **{r['n_max']}** | {r['first_failure_n']} | {trials(r)} | {r['bottleneck']} |")
L.append("")
L.append("At N_max (the clients' count of what came from each node's address, steady samples):\n")
L.append("| run | N | B_net (Mb/s) | per node (Mb/s) | B_avgNet (Mb/s) | content (Mb/s) | lost packets | starvations | machine CPU idle |")
L.append("|---|---|---|---|---|---|---|---|---|")
for k, label in (("all", "3 nodes up"), ("killed", "n3 killed")):
    p = at_nmax(runs[k])
    if not p:
        continue
    per = ", ".join(f"{v['b_net_mbit_s']:.1f}" for _, v in sorted((p.get("per_source") or {}).items()))
    L.append(f"| {label} | {p['n']} | {p['b_net_bits_s'] / 1e6:.1f} | {per} | "
             f"{p['b_avgnet_bits_s'] / 1e6:.2f} | {p['content_bits_s'] / 1e6:.2f} | {p['lost']} | "
             f"{p['starvations']} | {p['cpu_idle_pct']:.0f} % |")
L.append("")
L.append("Each node over its whole run (all trials):\n")
L.append("| run | node | on its link (Mb/s, mean over the run) | share | vs mean | CPU (% of one) |")
L.append("|---|---|---|---|---|---|")
for k, label in (("all", "3 nodes up"), ("killed", "n3 killed")):
    for x in runs[k]["cluster"]["nodes"]:
        L.append(f"| {label} | {x['name']} | {x['wire_tx_bits_s'] / 1e6:.1f} | {100 * x['share']:.1f} % | "
                 f"{100 * (x['share_vs_mean'] - 1):+.1f} % | {x['cpu_pct']:.1f} |")
L.append("")
s = runs["killed"]["sessions_summary"]
L.append(f"Sessions of the killed run: {s['count']} opened while n3 was down, {s['refused']} refused, "
         f"{s['error']} failed, {s['starvations']} starvations over all trials.\n")
L.append("## Commands\n")
L.append("```sh\ncargo build --release -p isochron\nscripts/capacity-after-failure.sh OUT    # root; about 25 minutes\n```\n")
L.append("which ran:\n\n```sh")
for k in ("all", "killed"):
    L.append(rel(cmds[k]))
L.append("```\n")
L.append("## The machine during the run\n")
if loads:
    L.append(f"A 2-core VM. Load average (1 min) sampled every 10 s: min {min(loads):.2f}, mean "
             f"{sum(loads) / len(loads):.2f}, max {max(loads):.2f} over {len(loads)} samples "
             "(`capacity-after-failure/load.txt`; the busiest processes at the start and the end: "
             "`top-start.txt`, `top-end.txt`). The nodes, the clients, etcd and the shaping share "
             "the two cores; a busy machine delays the senders' wake-ups, which shows as loss at "
             "the edge, so an N_max may move by one from run to run.\n")
L.append("## Files\n")
L.append("`capacity-after-failure/all/` and `capacity-after-failure/killed/`: `report.json` (with "
         "`cluster`: per node, `replication`, `killed`), `samples.csv`, `node_bytes.svg`, "
         "`b_net_nodes.svg`, the Figure 3 panels and `verdict.txt`.\n")
text = "\n".join(L)
print(text)
if docs:
    dst = f"{docs}/capacity-after-failure"
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for k in runs:
        shutil.copytree(f"{out}/{k}", f"{dst}/{k}", ignore=shutil.ignore_patterns("logs"))
    for f in ("load.txt", "top-start.txt", "top-end.txt"):
        if os.path.exists(f"{out}/{f}"):
            shutil.copy(f"{out}/{f}", dst)
    open(f"{docs}/capacity-after-failure.md", "w").write(text)
EOF
