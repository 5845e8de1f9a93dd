#!/usr/bin/env bash
# Yima Figure 4 (linear scale-up), docs/results/fig4.md: N_max of a cluster of 1, 2 and 4
# isochron nodes, each node behind its own 100 Mb/s link (tc tbf on its veth), the 180 s
# 5.57 Mb/s VBR clip of Figure 3, admission off, bipartite delivery, nominal pacing (no MTFC),
# staggered looping clients (every part of the clip played at every instant of a trial).
# Then, for the record, 4 nodes at the 4-node N_max with the old 64 KiB block size.
#
# Usage: scripts/fig4.sh OUT_DIR      (root; etcd, iproute2, ffmpeg; about 35 minutes)
# Environment: BIN (default target/release/isochron), CLIP (default OUT_DIR/fig3.ts, made with
# ffmpeg if missing), TRIAL_S (default 90), BLOCK_KIB (default 16), SEED (default 4),
# DOCS (default docs/results: writes DOCS/fig4/ and DOCS/fig4.md; empty: do not), REPORT_ONLY=1
# (only write the report again from OUT_DIR's runs), ALSO (other OUT_DIRs of this script, run
# with DOCS= : summarised under "Run to run", their summaries copied to DOCS/fig4/also-K/).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: $0 OUT_DIR}
BIN=${BIN:-$PWD/target/release/isochron}
CLIP=${CLIP:-$OUT/fig3.ts}
TRIAL_S=${TRIAL_S:-90}
BLOCK_KIB=${BLOCK_KIB:-16}
SEED=${SEED:-4}
DOCS=${DOCS-docs/results}
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT"
if [ "${REPORT_ONLY:-}" != 1 ]; then
if [ ! -f "$CLIP" ]; then
  log "making the clip (docs/results/fig3.md)"
  made=$(mktemp -d) && scripts/make-clips.sh "$made" fig3 && mv "$made/fig3.ts" "$CLIP"
fi

# The machine's load during the run: every 10 s, and the busiest processes at both ends.
(while :; do echo "$(date +%T) $(cut -d' ' -f1-4 /proc/loadavg)"; sleep 10; done) > "$OUT/load.txt" &
sampler=$!
trap 'kill $sampler 2> /dev/null || true' EXIT
top -b -n 1 -w 200 | head -20 > "$OUT/top-start.txt"
git rev-parse --short HEAD > "$OUT/commit.txt" 2> /dev/null || true

common=(--shape 100mbit --ingest "$CLIP" --block-kib "$BLOCK_KIB" --stagger --no-mtfc
  --buffer-ms 2000 --seed "$SEED")
for k in 1 2 4; do
  cmd=("$BIN" bench --out "$OUT/n$k" --cluster-nodes "$k" "${common[@]}" --find-nmax
    --trial "$TRIAL_S" --nmax-from $((16 * k)) --max-clients $((20 * k)) --duration 3600)
  log "$k node(s): ${cmd[*]}"
  echo "${cmd[*]}" > "$OUT/n$k.cmd"
  "${cmd[@]}" | tee "$OUT/n$k.txt"
done
nmax4=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['n_max'] or 1)" "$OUT/n4/report.json")
cmd=("$BIN" bench --out "$OUT/n4-64k" --cluster-nodes 4 --shape 100mbit --ingest "$CLIP"
  --block-kib 64 --stagger --no-mtfc --buffer-ms 2000 --seed "$SEED" --clients "$nmax4"
  --duration "$TRIAL_S")
log "4 nodes, 64 KiB blocks, N = $nmax4: ${cmd[*]}"
echo "${cmd[*]}" > "$OUT/n4-64k.cmd"
"${cmd[@]}" | tee "$OUT/n4-64k.txt"
"$BIN" bench --scale-up --out "$OUT/scale" "$OUT/n1" "$OUT/n2" "$OUT/n4" | tee "$OUT/scale.txt"
top -b -n 1 -w 200 | head -20 > "$OUT/top-end.txt"
kill $sampler 2> /dev/null || true
trap - EXIT
fi

python3 - "$OUT" "$CLIP" "${DOCS:-}" ${ALSO:-} <<'EOF'
import json, os, shutil, sys
out, clip, docs, also = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
runs = {k: json.load(open(f"{out}/n{k}/report.json")) for k in (1, 2, 4)}
old = json.load(open(f"{out}/n4-64k/report.json"))
cmds = {k: open(f"{out}/n{k}.cmd").read().strip() for k in (1, 2, 4)}
cmds["64k"] = open(f"{out}/n4-64k.cmd").read().strip()
def rel(c):
    return c.replace(os.path.abspath(out) + "/", "OUT/").replace(out + "/", "OUT/").replace(
        os.getcwd() + "/", "")
n = {k: r["n_max"] for k, r in runs.items()}
import subprocess
try:
    clip_s = float(subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration",
                                   "-of", "csv=p=0", clip], capture_output=True, text=True).stdout)
except ValueError:
    clip_s = 0.0
trial_s = runs[1]["parameters"]["load"]["trial"]["secs"]
ratio = n[4] / n[1] if n[1] else 0.0
L = []
p = L.append
def at(r, k):
    return next((q for q in r["per_n"] if q["n"] == k), None)
def losses(r, k):
    # Per-session counts of the trial at N = k (a gap filled later is not a loss).
    t = [t for t in r["trials"] if t["n"] == k]
    return t
shares_ok = True
for k, r in runs.items():
    for node in r["cluster"]["nodes"]:
        if abs(node["share_vs_mean"] - 1) > 0.10:
            shares_ok = False
n2n = max(r["cluster"]["node_to_node_fraction"] for r in runs.values())
ok = ratio >= 3.8 and shares_ok and n2n < 0.01
p("# Yima Figure 4 in shape: N_max of 1, 2 and 4 isochron nodes, each behind its own 100 Mb/s link\n")
p(f"Made by `scripts/fig4.sh` at commit {open(out + '/commit.txt').read().strip() or '?'}. "
  f"**N_max = {n[1]}, {n[2]}, {n[4]}** for 1, 2, 4 nodes: N_max(4) / N_max(1) = **{ratio:.2f}** "
  f"(required ≥ 3.8); each node's share of the bytes within "
  f"**{100 * max(abs(nd['share_vs_mean'] - 1) for r in runs.values() for nd in r['cluster']['nodes']):.1f} %** "
  f"of the mean (required ±10 %); node-to-node bytes **{100 * n2n:.4f} %** of the media bytes "
  f"(required < 1 %). Verdict: **{'PASS' if ok else 'FAIL'}**.\n")
p("## Set-up\n")
p("Every node is an `isochron serve` in a network namespace of its own, joined to a bridge by a "
  "veth pair shaped to 100 Mb/s in both directions (`tc tbf rate 100mbit burst 125000 latency "
  "50ms`), on one etcd member in the root namespace; the clients (one `isochron bench`) in "
  "another namespace, unshaped. Node 1 creates the store, the others join; the clip is "
  "ingested through node 1 and its blocks go to their owners. Admission is off, so the links "
  "are what is measured. The clip is Figure 3's: 180 s of 1280×720 MPEG-2 VBR, "
  f"{at(runs[1], n[1])['content_bits_s'] / 1e6:.2f} Mb/s as the clients measured it.\n")
p("Clients: RTSP over UDP, `?delivery=bipartite` (every node sends its own blocks from its own "
  "address), sessions' RTSP node taken in turn over the nodes, nominal pacing (`--no-mtfc`), "
  "2 s playout buffer. `--stagger`: client k starts at the fraction frac(k × 0.618…) of the "
  "clip and loops it on one session, so at every instant of a trial the N clients play N "
  "parts spread over the whole clip (Yima's clients arrive minutes apart; clients that all "
  "started together would all read the same block, on the same node, at the same time). "
  + (f"The clip lasts {clip_s:.0f} s and a trial {trial_s} s: each client plays "
     f"{min(1.0, trial_s / clip_s):.0%} of the clip in a trial, and the N clients together "
     "play all of it all the time. " if clip_s else "")
  + f"N_max: trials of fixed N, each {runs[1]['parameters']['load']['trial']['secs']} s, "
  "doubling from a guess (16 per node) and bisecting; N passes when no client starved, at most "
  "0.1 % of packets were lost, and B_avgNet stayed within 5 % of the content's rate.\n")
p("## Result\n")
p("| nodes | N_max | first failing N | N_max / N_max(1) | trials (N: pass) | bottleneck |")
p("|---|---|---|---|---|---|")
for k, r in runs.items():
    tr = ", ".join(f"{t['n']} {'✓' if t['pass'] else '✗'}" for t in r["trials"])
    p(f"| {k} | **{r['n_max']}** | {r['first_failure_n']} | {r['n_max'] / n[1]:.2f} | {tr} | {r['bottleneck']} |")
p("")
p("Each node over its whole run (all trials): bytes on its link, its share of the RTP payload "
  "the nodes sent, node-to-node bytes (control out + relayed + blocks to peers), its CPU:\n")
p("| run | node | on its link (Mb/s, mean over the run) | share | vs mean | control out (B) | relayed (B) | blocks to peers (B) | CPU (% of one) |")
p("|---|---|---|---|---|---|---|---|---|")
for k, r in runs.items():
    for nd in r["cluster"]["nodes"]:
        p(f"| {k} node{'s' if k > 1 else ''} | {nd['name']} ({nd['ip']}) | {nd['wire_tx_bits_s'] / 1e6:.1f} | {100 * nd['share']:.1f} % | "
          f"{100 * (nd['share_vs_mean'] - 1):+.1f} % | {nd['control_bytes_out']:.0f} | {nd['relay_bytes']:.0f} | "
          f"{nd['block_bytes_out']:.0f} | {nd['cpu_pct']:.1f} |")
p("")
p("| run | media bytes | node-to-node bytes | fraction |")
p("|---|---|---|---|")
for k, r in runs.items():
    c = r["cluster"]
    p(f"| {k} node{'s' if k > 1 else ''} | {c['media_bytes']:.0f} | {c['node_to_node_bytes']:.0f} | {100 * c['node_to_node_fraction']:.4f} % |")
p("")
p("At N_max, per node (the clients' count of what came from each node's address, steady samples):\n")
p("| nodes | N | B_net (Mb/s) | per node (Mb/s) | B_avgNet (Mb/s) | content (Mb/s) | lost packets | machine CPU idle | bench CPU |")
p("|---|---|---|---|---|---|---|---|---|")
for k, r in runs.items():
    q = at(r, r["n_max"])
    if q:
        per = ", ".join(f"{v['b_net_mbit_s']:.1f}" for v in q["per_source"].values())
        p(f"| {k} | {q['n']} | {q['b_net_bits_s'] / 1e6:.1f} | {per} | {q['b_avgnet_bits_s'] / 1e6:.2f} | "
          f"{q['content_bits_s'] / 1e6:.2f} | {q['lost']} | {q['cpu_idle_pct']:.0f} % | {q['bench_cpu_pct']:.0f} % |")
p("")
q = at(old, old["per_n"][-1]["n"]) if old["per_n"] else None
ss = old["sessions_summary"]
p("## The block size\n")
p(f"The same 4 nodes with the store's former smallest block, 64 KiB, at N = {old['parameters']['load']['clients']} "
  f"for {old['parameters']['duration_s']} s: "
  f"{ss['lost']} packets lost of {ss['lost'] + sum(s['packets'] for s in old['sessions'])} "
  f"({100 * ss['lost'] / max(1, ss['lost'] + sum(s['packets'] for s in old['sessions'])):.3f} %), "
  f"{ss['starvations']} starvations, pass: {'yes' if (q and q['pass']) else 'no'}; shares "
  + ", ".join(f"{nd['name']} {100 * nd['share']:.1f} %" for nd in old["cluster"]["nodes"]) + ".\n")
rate = at(runs[1], n[1])["content_bits_s"]
big, small = 64 * 1024 * 8 / rate * 1e3, runs[4]["cluster"]["block_size_kib"] * 1024 * 8 / rate * 1e3
spread = 100 * ((1 - 1 / 4) / (n[4] / 4)) ** 0.5
p(f"Why: a node sends a stream's packets only while the stream plays one of *its* blocks. At "
  f"{rate / 1e6:.2f} Mb/s a 64 KiB block lasts {big:.0f} ms, so a node's load is the number of "
  f"the N streams whose current block it holds — a binomial count redrawn every ~{big:.0f} ms, "
  f"±{spread:.0f} % (one standard deviation) around its mean at N = {n[4]} on 4 nodes — and "
  f"the 50 ms queue of the token bucket cannot absorb a {big:.0f} ms excess: packets drop "
  "while the node's mean is still below its link. A "
  f"{runs[4]['cluster']['block_size_kib']} KiB block lasts {small:.0f} ms, which the queue "
  "averages out, and four times the blocks also bring each node's share of the object "
  "(random placement, Yima §2.2) closer to 1/N. So the cluster's stripe unit must be small "
  "against the links' queues; `store.block_size_kib` now goes down to 16.\n")
also_runs = []
if also:
    p("## Run to run\n")
    for i, d in enumerate(also, 1):
        rr = {k: json.load(open(f"{d}/n{k}/report.json")) for k in (1, 2, 4)}
        nn = {k: r["n_max"] for k, r in rr.items()}
        dev = max(abs(nd["share_vs_mean"] - 1) for r in rr.values() for nd in r["cluster"]["nodes"])
        frac = max(r["cluster"]["node_to_node_fraction"] for r in rr.values())
        ld = [float(l.split()[1]) for l in open(f"{d}/load.txt") if len(l.split()) > 1]
        commit = open(f"{d}/commit.txt").read().strip() if os.path.exists(f"{d}/commit.txt") else "?"
        tr = "; ".join(f"{k}: " + ", ".join(f"{t['n']} {'✓' if t['pass'] else '✗'}" for t in r["trials"])
                       for k, r in rr.items())
        t_s = rr[1]["parameters"]["load"]["trial"]["secs"]
        p(f"The same script again ({t_s} s trials, commit {commit}, load average {min(ld):.2f}–{max(ld):.2f}, mean "
          f"{sum(ld) / len(ld):.2f}): N_max = {nn[1]}, {nn[2]}, {nn[4]}, N_max(4) / N_max(1) = "
          f"**{nn[4] / nn[1]:.2f}**, shares within {100 * dev:.1f} % of the mean, node-to-node "
          f"{100 * frac:.4f} % of the media bytes; trials {tr}"
          + (lambda o: f"; 64 KiB blocks at N = {o['parameters']['load']['clients']}: "
             f"{100 * o['sessions_summary']['lost'] / max(1, o['sessions_summary']['lost'] + sum(x['packets'] for x in o['sessions'])):.2f} % "
             "of the packets lost"
             )(json.load(open(f"{d}/n4-64k/report.json")))
          + f" (`fig4/also-{i}/`).\n")
        also_runs.append((i, d, rr))
p("## Commands\n")
p("```sh\ncargo build --release -p isochron\nscripts/fig4.sh OUT        # root; about 35 minutes\n```\n")
p("which ran:\n")
p("```sh")
for k in (1, 2, 4):
    p(rel(cmds[k]))
p(rel(cmds["64k"]))
p("isochron bench --scale-up --out OUT/scale OUT/n1 OUT/n2 OUT/n4")
p("```\n")
p("## The machine during the run\n")
loads = [l.split() for l in open(f"{out}/load.txt") if l.strip()]
one = [float(l[1]) for l in loads if len(l) > 1]
if one:
    p(f"A 2-core VM. Load average (1 min) sampled every 10 s: min {min(one):.2f}, mean "
      f"{sum(one) / len(one):.2f}, max {max(one):.2f} over {len(one)} samples "
      "(`fig4/load.txt`; the busiest processes at the start and the end: `fig4/top-start.txt`, "
      "`fig4/top-end.txt`).\n")
def busy(f):
    names = []
    for line in open(f"{out}/{f}").read().splitlines()[7:]:
        w = line.split()
        if len(w) >= 12 and float(w[8]) >= 5 and w[11] not in names:
            names.append(w[11])
    return names
others = [x for x in busy("top-start.txt") + busy("top-end.txt") if x not in ("isochron", "top")]
idle = {k: at(r, r["n_max"])["cpu_idle_pct"] for k, r in runs.items() if at(r, r["n_max"])}
nodes_cpu = [nd["cpu_pct"] for r in runs.values() for nd in r["cluster"]["nodes"]]
bench_cpu = [at(r, r["n_max"])["bench_cpu_pct"] for r in runs.values() if at(r, r["n_max"])]
links = [nd["wire_tx_bits_s"] / 1e6 for r in runs.values() for nd in r["cluster"]["nodes"]]
p("The machine was not quiet: "
  + (f"besides this run, other processes were busy at its start or end ({', '.join(sorted(set(others)))}: "
     "another developer's builds and tests share the two cores); " if others else "")
  + "the machine's CPUs were "
  + ", ".join(f"{v:.0f} % idle at the {k}-node N_max" for k, v in idle.items())
  + f". The nodes used {min(nodes_cpu):.0f}–{max(nodes_cpu):.0f} % of one CPU each and the bench "
  f"{min(bench_cpu):.0f}–{max(bench_cpu):.0f} % at N_max: the links, not the nodes' CPUs, were "
  f"full (each node's link carried {min(links):.0f}–{max(links):.0f} Mb/s on average over its "
  "run), but a busy machine delays the senders' wake-ups, which shows as loss at the edge; a "
  "quiet rerun may move an N_max by one.\n")
p("## Files\n")
p("`fig4/scale_up.svg` (N_max against nodes, with the linear ideal), `fig4/scale_up.json`; per "
  "run `fig4/nK/`: `report.json` (with `cluster`: per node), `samples.csv` (a "
  "`b_net_bits_s[IP]` column per node), `node_bytes.svg` (each node's bytes over the run "
  "against the mean), `b_net_nodes.svg` and `b_avgnet_nodes.svg` (Yima Fig. 4's cumulative "
  "per-node panels against N), the Figure 3 panels and `verdict.txt`.\n")
text = "\n".join(L)
open(f"{out}/fig4.md", "w").write(text)
print(text)
if docs:
    dst = os.path.join(docs, "fig4")
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for k in ("n1", "n2", "n4", "n4-64k"):
        shutil.copytree(f"{out}/{k}", f"{dst}/{k}", ignore=shutil.ignore_patterns("logs"))
    for f in ("scale_up.svg", "scale_up.json"):
        shutil.copy(f"{out}/scale/{f}", dst)
    for f in ("load.txt", "top-start.txt", "top-end.txt"):
        shutil.copy(f"{out}/{f}", dst)
    for i, d, rr in also_runs:
        dst = os.path.join(docs, "fig4", f"also-{i}")
        os.makedirs(dst, exist_ok=True)
        for k in (1, 2, 4):
            os.makedirs(f"{dst}/n{k}", exist_ok=True)
            for f in ("verdict.txt", "node_bytes.svg"):
                if os.path.exists(f"{d}/n{k}/{f}"):
                    shutil.copy(f"{d}/n{k}/{f}", f"{dst}/n{k}/")
            r = dict(rr[k])
            r.pop("sessions", None)
            json.dump(r, open(f"{dst}/n{k}/report.json", "w"), indent=1)
        for f in ("load.txt", "top-start.txt", "top-end.txt"):
            if os.path.exists(f"{d}/{f}"):
                shutil.copy(f"{d}/{f}", dst)
    open(os.path.join(docs, "fig4.md"), "w").write(text)
EOF
