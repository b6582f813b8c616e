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
# shellcheck source=scripts/serve-release.sh
source scripts/serve-release.sh
serve_release "$store" ICEGATE__LIFECYCLE__ORPHAN__MIN_OLDER_THAN=0s ICEGATE__LIFECYCLE__ORPHAN__MIN_QUARANTINE=0s
"$PYTHON" scripts/bench_lifecycle.py --uri "http://127.0.0.1:$PORT" --pid "$pid" "$@"
