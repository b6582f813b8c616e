#!/usr/bin/env bash
# Runs icegate-bench against a fresh release `icegate serve`, auth off, request logging off:
#
#   scripts/bench.sh sqlite   [icegate-bench options...]
#   scripts/bench.sh postgres [icegate-bench options...]
#
# sqlite: the embedded default in a temporary data directory. postgres: a fresh database
# `icegate_bench_<pid>` on ICEGATE_BENCH_PG (default postgres://postgres@127.0.0.1:5432), dropped
# afterwards; 32 pool connections. Prints icegate's RSS after the run. ICEGATE_BIN: a prebuilt
# icegate to run instead of this tree's release build (A/B of two builds).
# ICEGATE_BENCH_RECORD_READS=false: the default warehouse's reads are not recorded in the audit
# trail (its `audit.record-reads` setting), to measure what recording them costs.
# ICEGATE_BENCH_SETTINGS='{...}': the default warehouse's settings (replacing the above), e.g.
# '{"lifecycle.expire.max-snapshot-age": "3650d"}' puts every table under an expiry policy, so
# every commit runs the after-commit expiry check.
# e.g. scripts/bench.sh postgres --workloads create-tree,http-floor,commit --repeat 3 --seconds 10
set -euo pipefail
cd "$(dirname "$0")/.."
store="${1:?usage: scripts/bench.sh sqlite|postgres [icegate-bench options...]}"
shift
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
PORT="${ICEGATE_BENCH_PORT:-8385}"
cargo build --release -p icegate -p icegate-bench

work="$(mktemp -d)"
pid=""
database=""
pg="${ICEGATE_BENCH_PG:-postgres://postgres@127.0.0.1:5432}"
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  wait 2>/dev/null || true
  [ -n "$database" ] && psql "$pg/postgres" -qc "DROP DATABASE IF EXISTS $database" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

env=(RUST_LOG=warn)
case "$store" in
  sqlite) ;;
  postgres)
    database="icegate_bench_$$"
    psql "$pg/postgres" -qc "CREATE DATABASE $database" >/dev/null
    env+=(ICEGATE__DATABASE__URL="$pg/$database" ICEGATE__DATABASE__MAX_CONNECTIONS=32 ICEGATE__CATALOG__CREATE_DEFAULT_WAREHOUSE=true)
    ;;
  *) echo "unknown store $store (sqlite or postgres)" >&2; exit 2 ;;
esac
env "${env[@]}" "${ICEGATE_BIN:-$TARGET/release/icegate}" serve --listen "127.0.0.1:$PORT" --data-dir "$work/data" \
  2>"$work/icegate.err" &
pid=$!
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null && break; sleep 0.05; done
curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null || { cat "$work/icegate.err"; exit 1; }
if [ -n "${ICEGATE_BENCH_RECORD_READS:-}" ]; then
  curl -sf -o /dev/null -X PUT "http://127.0.0.1:$PORT/management/v1/warehouses/default/settings" \
    -H 'content-type: application/json' -d "{\"audit.record-reads\": $ICEGATE_BENCH_RECORD_READS}"
fi

if [ -n "${ICEGATE_BENCH_SETTINGS:-}" ]; then
  curl -sf -o /dev/null -X PUT "http://127.0.0.1:$PORT/management/v1/warehouses/default/settings" \
    -H 'content-type: application/json' -d "$ICEGATE_BENCH_SETTINGS"
fi

"$TARGET/release/icegate-bench" --uri "http://127.0.0.1:$PORT" "$@"
echo "icegate RSS after the run: $(($(awk '/VmRSS/ {print $2}' "/proc/$pid/status") / 1024)) MB ($store)"
