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
# shellcheck source=scripts/serve-release.sh
source scripts/serve-release.sh
serve_release "$store" ICEGATE__ADOPTION__INLINE_FILES=1000000
"$PYTHON" scripts/bench_adoption.py --uri "http://127.0.0.1:$PORT" --pid "$pid" "$@"
