#!/usr/bin/env bash
# XTREAM Figure 4 on this machine (docs/results/xtream-fig4.md): the percentage of missed cycle
# deadlines against the total bit rate of the streams served, one curve per stream rate, every
# stream of a run at the same rate (CBR), cycles of one second, admission off (so that the load
# asked for is the load served).
#
# As in XTREAM, a stream reads one IO per cycle, of its rate × the cycle: the block size of each
# curve is its rate × 1 s (32, 124, 244 and 488 KiB for 250 kb/s, 1, 2 and 4 Mb/s), so a faster
# stream makes larger IOs and spends less of the disk on seeks. Each point is an
# `isochron bench-disk` run (the server's cycle scheduler over its real IO thread) on an emulated
# disk of its own with Table 1's model (seek 10 ms, 4 MiB/s: docs/results/xtream-table1.md); the
# points of one curve run side by side (the emulated disks sleep; they share no device).
#
# Usage: scripts/xtream-fig4.sh [OUT]   (default /tmp/isochron-xtream-fig4; about 5 minutes)
# Environment: BIN (default target/release/isochron), RATES (default "250k 1M 2M 4M"), TOTALS (the
# total bit rates, Mb/s, default "4 8 12 16 20 24 28 32 36"), DURATION_S (seconds each run lasts
# after its last arrival, default 60), SPACING_MS (between arrivals, default 100).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-$PWD/target/release/isochron}
OUT=${1:-/tmp/isochron-xtream-fig4}
RATES=${RATES:-250k 1M 2M 4M}
TOTALS=${TOTALS:-4 8 12 16 20 24 28 32 36}
DURATION_S=${DURATION_S:-60}
SPACING_MS=${SPACING_MS:-100}
log() { echo "[$(date +%T)] $*" >&2; }
mkdir -p "$OUT"

bits() { # bits RATE: bits/s of 250k, 1M, 4M …
  case $1 in
    *k) echo $(( ${1%k} * 1000 )) ;;
    *M) echo $(( ${1%M} * 1000000 )) ;;
    *) echo "$1" ;;
  esac
}

start=$(date +%s)
for rate in $RATES; do
  bps=$(bits "$rate")
  # One cycle's worth, in whole 4 KiB pages (O_DIRECT).
  kib=$(( (bps / 8192 + 2) / 4 * 4 ))
  log "$rate streams, $kib KiB blocks: totals $TOTALS Mb/s"
  for total in $TOTALS; do
    n=$(( (total * 1000000 + bps / 2) / bps ))
    s=$OUT/store-$rate-$total
    rm -rf "$s"
    "$BIN" bench-disk --store "$s" --prepare --disk "$s/d0,seek_ms=10,rate_mib_s=4" \
      --blocks-kib "$kib" --pool-blocks 128 > /dev/null
    nice "$BIN" bench-disk --store "$s" --kind cbr --rate "$rate" --streams "$n" \
      --admission off --cycle-ms 1000 --spacing-ms "$SPACING_MS" --duration "$DURATION_S" \
      --json "$OUT/run-$rate-$total.json" > "$OUT/run-$rate-$total.txt" &
  done
  wait
  for total in $TOTALS; do rm -rf "$OUT/store-$rate-$total"; done
done
python3 scripts/xtream-fig4-report.py "$OUT" > "$OUT/summary.md"
log "wrote $OUT/summary.md and $OUT/fig4.svg; wall time $(( ($(date +%s) - start) / 60 )) min"
