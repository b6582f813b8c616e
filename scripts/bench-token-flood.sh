#!/usr/bin/env bash
# Authenticated requests while strangers flood the open token endpoint (issue 29): a release
# `icegate serve` with authentication on, `icegate-bench --workloads config` (authenticated
# GET /v1/config) with no flood, then with 32 and 96 connections sending token requests with
# random client ids throughout.
#
#   scripts/bench-token-flood.sh [icegate-bench options...]    e.g. --seconds 10 --connections 8
#
# ICEGATE_BIN runs a prebuilt icegate instead (A/B against another build); the load generator
# is always this checkout's. The flood is not shed by the in-flight bound (it is set to 0), so
# that it reaches the endpoint.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
PORT="${ICEGATE_BENCH_PORT:-8384}"
ADMIN_ID=bench-admin
ADMIN_SECRET=bench-secret-0123456789

cargo build --release -p icegate -p icegate-bench
BIN="${ICEGATE_BIN:-$TARGET/release/icegate}"

work="$(mktemp -d)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

RUST_LOG=warn ICEGATE__AUTH__MODE=required ICEGATE__SERVER__MAX_IN_FLIGHT_REQUESTS=0 \
  ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID="$ADMIN_ID" ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET="$ADMIN_SECRET" \
  "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$work/data" 2>"$work/icegate.err" &
pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null && break; sleep 0.1; done

for flood in 0 32 96; do
  echo "== token flood: $flood connections"
  "$TARGET/release/icegate-bench" --uri "http://127.0.0.1:$PORT" --credential "$ADMIN_ID:$ADMIN_SECRET" \
    --workloads config --connections 8 --seconds 10 --token-flood "$flood" "$@"
done
echo "icegate CPU time: $(awk '{print ($14 + $15) / 100 " s"}' "/proc/$pid/stat")"
