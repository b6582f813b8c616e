#!/usr/bin/env bash
# icegate's memory with a large catalog and a working set of big tables: release `icegate serve`
# on SQLite with default settings (local file syncs off: they cost time, not memory), auth off.
#   1. 100,000 tables (10 namespaces x 10,000);
#   2. 100 more tables of 2,000 snapshots each (metadata of ~0.8 MB);
#   3. commits to all 100 big tables at once, and loads (gzip and plain) spread over them;
#   4. loads spread over all 100,000 small tables;
# printing icegate's RSS after each step. The caches are bounded in bytes
# (catalog.metadata_cache_bytes, parsed forms included), so RSS stays bounded however large the
# working set; docs/benchmarks.md has the figures.
#
#   scripts/bench-memory.sh [--seconds 10]
#
# ICEGATE_BENCH_ENV: extra environment for icegate (e.g. ICEGATE__CATALOG__METADATA_CACHE_BYTES=...).
# ICEGATE_BENCH_DETAIL=1: also print what RSS is made of (anonymous memory vs mapped files, i.e.
# the heap vs the binary) after each step and at its highest (sampled every 50 ms).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=10
[ "${1:-}" = "--seconds" ] && seconds="$2"
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
PORT="${ICEGATE_BENCH_PORT:-8387}"
cargo build --release -p icegate -p icegate-bench
work="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

env RUST_LOG=warn ICEGATE__STORAGE__SYNC_LOCAL_FILES=false ${ICEGATE_BENCH_ENV:-} "$TARGET/release/icegate" serve \
  --listen "127.0.0.1:$PORT" --data-dir "$work/data" 2>"$work/icegate.err" &
pid=$!
until curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null; do sleep 0.05; done
# RSS two seconds after a step (freed memory goes back to the system a second after it fell
# free: crates/icegate/src/memory.rs), and the peak so far.
rss() {
  sleep 2
  local status="/proc/$pid/status"
  echo "icegate RSS: $(($(awk '/VmRSS/ {print $2}' "$status") / 1024)) MB, peak $(($(awk '/VmHWM/ {print $2}' "$status") / 1024)) MB ($1)"
  [ -n "${ICEGATE_BENCH_DETAIL:-}" ] && grep -E "RssAnon|RssFile|Threads" "$status" | tr -s ' \t' ' ' | tr '\n' ' ' && echo
  true
}
bench() { "$TARGET/release/icegate-bench" --uri "http://127.0.0.1:$PORT" --seconds "$seconds" "$@" | tail -n +3; }

if [ -n "${ICEGATE_BENCH_DETAIL:-}" ]; then
  # The composition of RSS at its highest: sampled every 50 ms.
  ( best=0; while kill -0 "$pid" 2>/dev/null; do
      line=$(grep -E "VmRSS|RssAnon|RssFile" "/proc/$pid/status" 2>/dev/null | awk '{printf "%s %s ", $1, $2}')
      now=$(echo "$line" | awk '{print $2}')
      if [ -n "$now" ] && [ "$now" -gt "$best" ]; then best=$now; echo "$line" >"$work/peak"; fi
      sleep 0.05; done ) &
fi
rss "empty catalog"
bench --width 10 --depth 1 --tables-per-leaf 10000 --create-connections 16 --workloads create-tree
rss "after creating 100,000 tables"
big=(--width 1 --depth 2 --tables-per-leaf 100 --snapshots 2000 --keep-snapshots 2000 --snapshots-per-commit 100)
bench "${big[@]}" --create-connections 4 --workloads create-tree
rss "after 100 tables of 2,000 snapshots"
bench "${big[@]}" --connections 100 --workloads commit
rss "after commits to all 100 big tables at once"
bench "${big[@]}" --connections 16 --workloads load-table-gzip,load-table
rss "after loads spread over the 100 big tables"
bench --width 10 --depth 1 --tables-per-leaf 10000 --connections 64 --workloads load-table
rss "after loads spread over the 100,000 small tables"
[ -f "$work/peak" ] && echo "at the peak: $(cat "$work/peak")"
true
