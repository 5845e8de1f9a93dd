#!/usr/bin/env bash
# Mechanical checks of the architecture invariants in docs/ARCHITECTURE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
cores=(isochron-base isochron-auth isochron-media isochron-rtp isochron-rtsp isochron-store isochron-sched isochron-sim isochron-cluster isochron-pacing isochron-live isochron-node)

# 1. The sans-IO cores never depend on an async runtime or on platform IO crates.
for c in "${cores[@]}"; do
  bad=$(cargo tree -p "$c" -e normal --prefix none --locked 2>/dev/null \
        | grep -E '^(tokio|mio|socket2|libc|nix|redb|axum|hyper) ' | sort -u || true)
  if [ -n "$bad" ]; then
    echo "invariant broken: core crate $c depends on: $bad"; fail=1
  fi
done

# 2. Only diskio (storage) and dataplane/loadgen (network) touch libc directly.
for c in "${cores[@]}" isochron; do
  if cargo tree -p "$c" -e normal --depth 1 --prefix none --locked 2>/dev/null | grep -q '^libc '; then
    echo "invariant broken: $c depends on libc directly"; fail=1
  fi
done

# 3. Every core crate has a clippy.toml that forbids clocks, sleeping, threads, files and sockets
#    (clippy enforces it in the clippy gate).
for dir in base auth media rtp rtsp store sched sim cluster pacing live node; do
  f="crates/$dir/clippy.toml"
  if ! grep -q 'std::time::Instant::now' "$f" 2>/dev/null; then
    echo "invariant broken: $f missing or does not forbid the clock"; fail=1
  fi
done

# 4. Only the runtime crates (dataplane, server, http), loadgen and the binary name tokio in their
#    manifests.
for m in crates/*/Cargo.toml; do
  case "$m" in
    crates/dataplane/*|crates/server/*|crates/http/*|crates/loadgen/*|crates/isochron/*) continue ;;
  esac
  if grep -qE '^tokio' "$m"; then echo "invariant broken: $m depends on tokio"; fail=1; fi
done

# 5. One owner per piece of mutable state: the cores' state machines (the session manager's
#    NodeCore in server, with its ServerCore and ClusterCore; the scheduler thread's
#    CycleScheduler and BlockCache and the sender thread's Pacer in dataplane) are never shared
#    behind a lock, in any crate; they live on one thread or task and are fed commands.
if grep -rnE '(Mutex|RwLock)<[^>]*(NodeCore|ServerCore|ClusterCore|Scheduler|Pacer|BlockCache)' crates/ --include=*.rs; then
  echo "invariant broken: a core state machine is shared behind a lock"; fail=1
fi

# 6. Comments and docs cite only what a reader can open: the repository's own files, papers and
#    their sections, RFCs, public trackers. Never the team's private notes kept outside the
#    repository (the design draft, the research notes, the seed files): a newcomer cannot follow
#    them. Cite the paper, the RFC or the repository's doc instead, or say in the comment what the
#    player does. (The brackets keep these patterns from matching this file.)
notes='research[/]|algorithms\.md|\bDESIGN\b|interop[ ]§|[(]interop\b|interop[ ]notes'
notes+='|rtsp[-]interop|shared[/]seeds|seeds/0[0-9]{2}|seed 00[0-9]|next[-]round|round3\.md'
notes+='|aesthetics\.md|peers\.md'
cites=$(git ls-files -z -- '*.rs' '*.md' '*.toml' '*.sh' '*.py' '*.dialog' \
          ':!scripts/check-arch.sh' | xargs -0 -r grep -sHnE -e "$notes" -- || true)
if [ -n "$cites" ]; then
  echo "$cites"
  echo "invariant broken: the lines above cite notes that are not in the repository"; fail=1
fi

# 7. No module cycles: a crate's top-level modules depend downward only (its owners' command
#    enums where both sides can see them). The checker tests itself first on a crate with a cycle.
if ! python3 scripts/module-cycles.py --self-test >/dev/null; then
  echo "invariant check broken: scripts/module-cycles.py misses a cycle"; fail=1
fi
if ! python3 scripts/module-cycles.py; then
  echo "invariant broken: the modules above import each other in a loop"; fail=1
fi

[ $fail -eq 0 ] && echo "architecture invariants hold"
exit $fail
