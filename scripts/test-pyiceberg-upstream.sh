#!/usr/bin/env bash
# PyIceberg's own integration suites, unmodified, against icegate: `tests/integration/test_catalog.py`
# (its REST catalog cases) and `tests/integration/test_rest_schema.py`, from the pyiceberg 0.12.0
# source distribution on PyPI.
#
#   scripts/test-pyiceberg-upstream.sh [pytest options...]
#
# The suites expect a REST catalog at http://localhost:8181 whose default warehouse holds a
# namespace `default` and which joins namespace levels with `.` (as the upstream test setup
# provisions and configures its catalog). This starts `icegate serve`
# there on a fresh SQLite catalog and a `file://` warehouse in a temporary directory (port 8181
# must be free), creates `default`, and runs the suites in a virtualenv of their own
# (ICEGATE_UPSTREAM_VENV, default ~/.cache/icegate/venv-pyiceberg-upstream). The other catalogs
# of test_catalog.py (in-memory, SQL, Hive, a catalog named by PYICEBERG_TEST_CATALOG) are not
# icegate and are deselected.
#
# Not part of scripts/test.sh: it takes a few minutes and needs PyPI for its first run. The
# end-to-end suites of tests/ cover the same ground with icegate's own assertions.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
VENV="${ICEGATE_UPSTREAM_VENV:-$HOME/.cache/icegate/venv-pyiceberg-upstream}"
PYICEBERG_VERSION=0.12.0

cargo build -p icegate --locked
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  "pyiceberg[pyarrow,pyiceberg-core,hive,sql-sqlite]==$PYICEBERG_VERSION" \
  pytest==9.1.1 pytest-lazy-fixtures==1.4.1 pytest-mock==3.15.1 "moto[server]==5.2.5" boto3

work="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# The suites' own tests, from the source distribution of the same version.
(cd "$work" && "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
  --no-binary :all: "pyiceberg==$PYICEBERG_VERSION" && tar xzf "pyiceberg-$PYICEBERG_VERSION.tar.gz")
suite="$work/pyiceberg-$PYICEBERG_VERSION"

# The suites expect the catalog to join namespace levels with `.` (test_rest_custom_namespace_separator).
RUST_LOG=warn ICEGATE__CATALOG__NAMESPACE_SEPARATOR=. "$TARGET/debug/icegate" serve --listen 127.0.0.1:8181 --data-dir "$work/data" 2>"$work/icegate.err" &
pid=$!
for _ in $(seq 1 200); do curl -sf http://127.0.0.1:8181/ready >/dev/null && break; sleep 0.05; done
curl -sf http://127.0.0.1:8181/ready >/dev/null || { cat "$work/icegate.err"; exit 1; }
prefix=$(curl -sf http://127.0.0.1:8181/v1/config | "$VENV/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["overrides"]["prefix"])')
curl -sf -X POST "http://127.0.0.1:8181/v1/$prefix/namespaces" -H 'content-type: application/json' \
  -d '{"namespace": ["default"]}' >/dev/null

# The suites import their fixtures from `tests.conftest`, so they run from the distribution's root
# (where its pyproject.toml sets the markers); PyIceberg itself comes from the virtualenv.
cd "$suite"
rm -rf pyiceberg
"$VENV/bin/python" -m pytest -p no:cacheprovider -m integration \
  tests/integration/test_rest_schema.py tests/integration/test_catalog.py \
  -k "not (memory_catalog or sqlite_catalog or hive_catalog or rest_test_catalog)" "$@"
