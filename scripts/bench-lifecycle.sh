#!/usr/bin/env bash
# Lifecycle at scale against a fresh release `icegate serve` (auth off, SQLite or PostgreSQL):
# snapshot expiry whose removed snapshots reach 10,000 data files, and the orphan scan,
# quarantine and deletion of a table of 10,000 data files with 1,000 orphans beside them
# (scripts/bench_lifecycle.py, through PyIceberg). The floors under the orphan policy are
# lowered so files are "old" within a second.
#
#   scripts/bench-lifecycle.sh sqlite|postgres [--files N] [--orphans N]
#
# PYTHON: an interpreter with tests/requirements.txt installed (default: the test venv).
set -euo pipefail
cd "$(dirname "$0")/.."
store="${1:?usage: scripts/bench-lifecycle.sh sqlite|postgres [--files N] [--orphans N]}"
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

env=(RUST_LOG=warn ICEGATE__LIFECYCLE__ORPHAN__MIN_OLDER_THAN=0s ICEGATE__LIFECYCLE__ORPHAN__MIN_QUARANTINE=0s)
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
"$PYTHON" scripts/bench_lifecycle.py --uri "http://127.0.0.1:$PORT" --pid "$pid" "$@"
