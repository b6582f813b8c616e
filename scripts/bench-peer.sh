#!/usr/bin/env bash
# icegate beside a peer Iceberg REST catalog (Rustberg 0.3) on the same machine, in one run:
#
#   scripts/bench-peer.sh [--snapshots "100 2000"] [--seconds 5] [--repeat 3] [--out DIR] [--no-postgres]
#                         [--no-sync] [--cache-bytes N] [--commit-bytes N] [--no-peer] [--postgres-first]
#
# For each snapshot count, each catalog starts empty (icegate on SQLite, icegate on PostgreSQL,
# then Rustberg), gets four tables of that many snapshots (`icegate-bench --preset big-tables`
# with --snapshots N, built 100 snapshots per commit), and runs commit, load-table,
# load-table-gzip and load-table-refs at four connections, --repeat times each (the median run
# is reported). The catalogs take turns per snapshot count, so a drift of the machine's speed
# shows in all of them. Writes DIR/<catalog>-<N>.json, DIR/table.md and DIR/growth.svg
# (throughput and p99 against snapshot count; scripts/bench_report.py).
#
# --no-peer: icegate alone (SQLite beside PostgreSQL), without Rustberg. --postgres-first:
# icegate on PostgreSQL runs before icegate on SQLite (the order can matter: see
# docs/benchmarks.md, "Fifth pass").
# Rustberg: RUSTBERG_BIN, or `rustberg` on PATH or in ~/.cargo/bin; install it with
#   cargo install rustberg --version 0.3.0 --locked
# It runs as its README's development mode: --dev --no-auth --insecure-http, its catalog and
# warehouse under a temporary directory (file://); its warehouse name is the warehouse URL.
# icegate runs with its defaults but for --no-sync (storage.sync_local_files = false: its metadata
# files are then not synced to disk before a commit is acknowledged, as the peer's are not) and
# --cache-bytes (catalog.metadata_cache_bytes, for working sets larger than the default 48 MiB)
# and --commit-bytes (catalog.commit_memory_bytes, the memory commits in flight share: 16 MiB by
# default, which four commits of documents of 2 MB or more do not fit at once).
# ICEGATE_BIN: a prebuilt icegate to run instead of this tree's release build (A/B of two builds).
# PostgreSQL: ICEGATE_BENCH_PG (default postgres://postgres@127.0.0.1:5432), a fresh database
# per run, dropped afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
counts="100 2000"
seconds=5
repeat=3
out="bench-results/peer-$(date +%Y%m%d-%H%M%S)"
postgres=1
peer=1
postgres_first=0
icegate_env=(RUST_LOG=warn)
while [ $# -gt 0 ]; do
  case "$1" in
    --snapshots) counts="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-postgres) postgres=0; shift ;;
    --no-peer) peer=0; shift ;;
    --postgres-first) postgres_first=1; shift ;;
    --no-sync) icegate_env+=(ICEGATE__STORAGE__SYNC_LOCAL_FILES=false); shift ;;
    --cache-bytes) icegate_env+=(ICEGATE__CATALOG__METADATA_CACHE_BYTES="$2"); shift 2 ;;
    --commit-bytes) icegate_env+=(ICEGATE__CATALOG__COMMIT_MEMORY_BYTES="$2"); shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

rustberg="${RUSTBERG_BIN:-$(command -v rustberg || echo "$HOME/.cargo/bin/rustberg")}"
if [ "$peer" = 1 ] && [ ! -x "$rustberg" ]; then
  echo "Rustberg not found: cargo install rustberg --version 0.3.0 --locked (or set RUSTBERG_BIN)" >&2
  exit 1
fi
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release -p icegate -p icegate-bench
icegate="${ICEGATE_BIN:-$TARGET/release/icegate}"
mkdir -p "$out"
work="$(mktemp -d)"
pg="${ICEGATE_BENCH_PG:-postgres://postgres@127.0.0.1:5432}"
PORT="${ICEGATE_BENCH_PORT:-8386}"
pid=""
database=""
stop() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=""
  if [ -n "$database" ]; then psql "$pg/postgres" -qc "DROP DATABASE IF EXISTS $database" >/dev/null 2>&1 || true; fi
  database=""
  # What a catalog wrote is on disk before the next one starts: otherwise the next one's syncs
  # wait behind the kernel writing back the previous one's metadata files.
  sync
}
trap 'stop; rm -rf "$work"' EXIT

wait_ready() {
  for _ in $(seq 1 400); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "catalog did not come up at $1" >&2
  cat "$work/catalog.err" >&2
  exit 1
}

rss() { echo "$(($(awk '/VmRSS/ {print $2}' "/proc/$pid/status") / 1024)) MB"; }

run() {
  local name="$1" count="$2" warehouse="$3"
  local args=(--uri "http://127.0.0.1:$PORT" --warehouse "$warehouse" --preset big-tables --snapshots "$count"
    --keep-snapshots "$count" --seconds "$seconds" --repeat "$repeat")
  echo "== $name, $count snapshots"
  "$TARGET/release/icegate-bench" "${args[@]}" --workloads create-tree --json "$work/create.json" >/dev/null
  "$TARGET/release/icegate-bench" "${args[@]}" --workloads commit,load-table,load-table-gzip,load-table-refs \
    --json "$out/$name-$count.json" | tail -n +3
  echo "   $name RSS after the run: $(rss)"
}

# Every run gets directories of its own, removed only at the end: on ext4 (without a journal)
# creating files right after many were deleted costs far more (the inode allocator steps over
# recently deleted inodes), which would penalise whichever catalog ran after a clean-up.
run_sqlite() {
  env "${icegate_env[@]}" "$icegate" serve --listen "127.0.0.1:$PORT" --data-dir "$work/sqlite-$1" \
    2>"$work/catalog.err" &
  pid=$!
  wait_ready "http://127.0.0.1:$PORT/ready"
  run icegate-sqlite "$1" default
  stop
}

run_postgres() {
  database="icegate_peer_$$"
  psql "$pg/postgres" -qc "CREATE DATABASE $database" >/dev/null
  env "${icegate_env[@]}" ICEGATE__DATABASE__URL="$pg/$database" ICEGATE__DATABASE__MAX_CONNECTIONS=16 ICEGATE__CATALOG__CREATE_DEFAULT_WAREHOUSE=true \
    "$icegate" serve --listen "127.0.0.1:$PORT" --data-dir "$work/postgres-$1" 2>"$work/catalog.err" &
  pid=$!
  wait_ready "http://127.0.0.1:$PORT/ready"
  run icegate-postgres "$1" default
  stop
}

for count in $counts; do
  if [ "$postgres" = 1 ] && [ "$postgres_first" = 1 ]; then run_postgres "$count"; fi
  run_sqlite "$count"
  if [ "$postgres" = 1 ] && [ "$postgres_first" = 0 ]; then run_postgres "$count"; fi

  if [ "$peer" = 1 ]; then
    peer_dir="$work/rustberg-$count"
    mkdir -p "$peer_dir/warehouse"
    RUST_LOG=warn "$rustberg" --dev --no-auth --insecure-http --host 127.0.0.1 --port "$PORT" \
      --catalog-url "file://$peer_dir/catalog.redb" --warehouse "file://$peer_dir/warehouse" \
      2>"$work/catalog.err" >"$work/catalog.out" &
    pid=$!
    wait_ready "http://127.0.0.1:$PORT/v1/config?warehouse=file://$peer_dir/warehouse"
    run rustberg "$count" "file://$peer_dir/warehouse"
    stop
  fi
done

printf '%s\n' "${icegate_env[@]}" >"$out/icegate-settings.txt"
python3 scripts/bench_report.py "$out"
echo "results in $out (table.md, growth.svg)"
