#!/usr/bin/env bash
# Benchmarks loadTable with vended credentials and authentication on (issue: the operation every
# query engine does first). Starts moto_server (S3 + STS + IAM, enforcement on; see
# tests/s3/moto_enforcing.py) and a release `icegate serve` with auth required, creates an S3
# warehouse `lake` with STS vending, and runs icegate-bench against it.
#
#   scripts/bench-s3.sh [icegate-bench options...]     e.g. --connections 64 --seconds 10
#
# ICEGATE_BIN: a prebuilt icegate to run instead of this tree's release build (A/B of two
# builds). ICEGATE_BENCH_RECORD_READS=false: the warehouse's reads are not recorded in the audit
# trail (its `audit.record-reads` setting; vends are recorded whatever it says).
# ICEGATE_BENCH_STORE=postgres: the catalog on a fresh database `icegate_bench_s3_<pid>` on
# ICEGATE_BENCH_PG (default postgres://postgres@127.0.0.1:5432), 32 pool connections, dropped
# afterwards (default: the embedded SQLite).
#
# Needs what scripts/test.sh needs (Rust, Python 3.11); the virtualenv is ICEGATE_VENV
# (default ./.venv-tests), created from tests/requirements.txt when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${ICEGATE_VENV:-$PWD/.venv-tests}"
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
PORT="${ICEGATE_BENCH_PORT:-8383}"
ADMIN_ID=bench-admin
ADMIN_SECRET=bench-secret-0123456789

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -r tests/requirements.txt
fi
cargo build --release -p icegate -p icegate-bench

work="$(mktemp -d)"
pids=()
database=""
pg="${ICEGATE_BENCH_PG:-postgres://postgres@127.0.0.1:5432}"
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "$database" ] && psql "$pg/postgres" -qc "DROP DATABASE IF EXISTS $database WITH (FORCE)" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
store_env=()
if [ "${ICEGATE_BENCH_STORE:-sqlite}" = postgres ]; then
  database="icegate_bench_s3_$$"
  psql "$pg/postgres" -qc "CREATE DATABASE $database" >/dev/null
  store_env=(ICEGATE__DATABASE__URL="$pg/$database" ICEGATE__DATABASE__MAX_CONNECTIONS=32)
fi

PYTHONPATH=tests "$VENV/bin/python" tests/s3/harness.py >"$work/moto.json" 2>"$work/moto.err" &
pids+=($!)
for _ in $(seq 1 150); do [ -s "$work/moto.json" ] && break; sleep 0.2; done
[ -s "$work/moto.json" ] || { cat "$work/moto.err"; echo "moto_server did not start" >&2; exit 1; }
profile="$("$VENV/bin/python" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["profile"]))' "$work/moto.json")"

env "${store_env[@]}" RUST_LOG=warn ICEGATE__AUTH__MODE=required \
  ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID="$ADMIN_ID" ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET="$ADMIN_SECRET" \
  ICEGATE__SECRETS__ENCRYPTION_KEY="$("$VENV/bin/python" -c 'import base64,os; print(base64.b64encode(os.urandom(32)).decode())')" \
  "${ICEGATE_BIN:-$TARGET/release/icegate}" serve --listen "127.0.0.1:$PORT" --data-dir "$work/data" 2>"$work/icegate.err" &
icegate_pid=$!
pids+=($icegate_pid)
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null && break; sleep 0.1; done

token="$(curl -sf -d grant_type=client_credentials -d client_id="$ADMIN_ID" -d client_secret="$ADMIN_SECRET" \
  "http://127.0.0.1:$PORT/v1/oauth/tokens" | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["access_token"])')"
curl -sf -o /dev/null -X POST "http://127.0.0.1:$PORT/management/v1/warehouses" \
  -H "authorization: Bearer $token" -H 'content-type: application/json' \
  -d "{\"name\": \"lake\", \"storage-root\": \"s3://lake/bench\", \"storage-profile\": $profile}"
if [ -n "${ICEGATE_BENCH_RECORD_READS:-}" ]; then
  curl -sf -o /dev/null -X PUT "http://127.0.0.1:$PORT/management/v1/warehouses/lake/settings" \
    -H "authorization: Bearer $token" -H 'content-type: application/json' \
    -d "{\"audit.record-reads\": $ICEGATE_BENCH_RECORD_READS}"
fi

"$TARGET/release/icegate-bench" --uri "http://127.0.0.1:$PORT" --warehouse lake \
  --credential "$ADMIN_ID:$ADMIN_SECRET" \
  --workloads "${ICEGATE_BENCH_WORKLOADS:-create-tree,http-floor,load-table,load-table-vended}" "$@"
echo "icegate RSS after the run: $(($(awk '/VmRSS/ {print $2}' "/proc/$icegate_pid/status") / 1024)) MB"
