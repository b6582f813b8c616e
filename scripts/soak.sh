#!/usr/bin/env bash
# On-demand soak test (not part of scripts/test.sh): mixed load against a release build of
# icegate for MINUTES (default 10), failing if any request fails or RSS / open descriptors keep
# growing. Extra arguments go to tests/soak.py (e.g. --database-url postgres://...).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-10}"
shift || true
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release -p icegate --locked
export ICEGATE_BIN="$CARGO_TARGET_DIR/release/icegate"
VENV="${ICEGATE_VENV:-$PWD/.venv-tests}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
exec "$VENV/bin/python" tests/soak.py --minutes "$minutes" "$@"
