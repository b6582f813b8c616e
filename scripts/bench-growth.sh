#!/usr/bin/env bash
# Does icegate stay flat as the catalog grows? Release `icegate serve` on SQLite (or on
# PostgreSQL with ICEGATE_BENCH_DATABASE_URL), auth off:
#   1. 1,000 tables (10 namespaces x 100): load-table and list-tables (page size 100), medians of 3;
#   2. grown to 100,000 tables (10 namespaces x 10,000): the same, and load-table again over
#      1,000 of the tables spread over the catalog (the 1,000-table run's working set);
#   3. icegate's RSS after loading every one of the 100,000 tables;
#   4. start-up time to /ready with the 100,000-table catalog.
#
#   scripts/bench-growth.sh [--seconds 10] [--connections 64]
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
PORT="${ICEGATE_BENCH_PORT:-8384}"
cargo build --release -p icegate -p icegate-bench
work="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

start() {
  local started
  started=$(date +%s%N)
  RUST_LOG=warn ${ICEGATE_BENCH_DATABASE_URL:+ICEGATE__DATABASE__URL="$ICEGATE_BENCH_DATABASE_URL" ICEGATE__CATALOG__CREATE_DEFAULT_WAREHOUSE=true} \
    "$TARGET/release/icegate" serve --listen "127.0.0.1:$PORT" --data-dir "$work/data" 2>>"$work/icegate.err" &
  pid=$!
  until curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null; do sleep 0.005; done
  echo "start-up to ready: $(( ($(date +%s%N) - started) / 1000000 )) ms"
}
rss() { echo "icegate RSS: $(($(awk '/VmRSS/ {print $2}' "/proc/$pid/status") / 1024)) MB ($1)"; }
bench() { "$TARGET/release/icegate-bench" --uri "http://127.0.0.1:$PORT" --width 10 --depth 1 "$@"; }

start
rss "empty catalog"
echo "## 1,000 tables"
bench --tables-per-leaf 100 --workloads create-tree,http-floor,load-table,list-tables --repeat 3 "$@"
rss "after 1,000 tables"
echo "## 100,000 tables"
bench --tables-per-leaf 10000 --create-connections 16 --workloads create-tree,http-floor,load-table,list-tables --repeat 3 "$@"
echo "## 100,000 tables, loads over 1,000 of them"
bench --tables-per-leaf 10000 --workloads load-table --working-set 1000 --repeat 3 "$@"
rss "after loading tables of the 100,000-table catalog at random"
kill "$pid"; wait "$pid" 2>/dev/null || true
echo "## restart with 100,000 tables"
start
bench --tables-per-leaf 10000 --workloads load-table --seconds 30 --connections 64 >/dev/null
rss "after 30 s of loadTable spread over all 100,000 tables"
