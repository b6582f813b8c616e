# Sourced by the benchmarks that drive one fresh release `icegate serve` (auth off):
#
#   serve_release sqlite|postgres [NAME=VALUE ...]
#
# builds the release binary, starts it on $PORT (ICEGATE_BENCH_PORT, default 8386) with its data
# under a fresh directory ($work) and, for postgres, a fresh database (ICEGATE_BENCH_PG, default
# postgres://postgres@127.0.0.1:5432), the NAME=VALUE pairs in its environment; sets $pid and
# waits until it is ready. Everything is removed when the calling script exits.
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
PORT="${ICEGATE_BENCH_PORT:-8386}"
PYTHON="${PYTHON:-${ICEGATE_VENV:-$HOME/.cache/icegate/venv-tests}/bin/python}"
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

serve_release() {
  local store="$1"
  shift
  cargo build --release -p icegate
  local env=(RUST_LOG=warn "$@")
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
}
