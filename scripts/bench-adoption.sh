#!/usr/bin/env bash
# Adoption at scale against a fresh release `icegate serve` (auth off, SQLite or PostgreSQL):
# a Hive-style dataset of 10,000 Parquet files adopted in place, a re-sync with nothing new and
# one after 100 files appear (scripts/bench_adoption.py): elapsed time, footers per second and
# the server's memory.
#
#   scripts/bench-adoption.sh sqlite|postgres [--files N] [--new N]
#
# PYTHON: an interpreter with tests/requirements.txt installed (default: the test venv).
set -euo pipefail
cd "$(dirname "$0")/.."
store="${1:?usage: scripts/bench-adoption.sh sqlite|postgres [--files N] [--new N]}"
shift
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
PORT="${ICEGATE_BENCH_PORT:-8386}"
PYTHON="${PYTHON:-${ICEGATE_VENV:-$HOME/.cache/icegate/venv-tests}/bin/python}"
cargo build --release -p icegate

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

env=(RUST_LOG=warn ICEGATE__ADOPTION__INLINE_FILES=1000000)
case "$store" in
  sqlite) ;;
  postgres)
    database="icegate_bench_$$"
    psql "$pg/postgres" -qc "CREATE DATABASE $database" >/dev/null
    env+=(ICEGATE__DATABASE__URL="$pg/$database" ICEGATE__CATALOG__CREATE_DEFAULT_WAREHOUSE=true)
    ;;
  *) echo "unknown store $store (sqlite or postgres)" >&2; exit 2 ;;
esac
env "${env[@]}" "$TARGET/release/icegate" serve --listen "127.0.0.1:$PORT" --data-dir "$work/data" \
  2>"$work/icegate.err" &
pid=$!
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null && break; sleep 0.05; done
curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null || { cat "$work/icegate.err"; exit 1; }
"$PYTHON" scripts/bench_adoption.py --uri "http://127.0.0.1:$PORT" --pid "$pid" "$@"
