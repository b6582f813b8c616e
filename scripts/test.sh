#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, the Rust tests on SQLite and
# PostgreSQL, and the end-to-end suites that drive real clients against a started `icegate serve`.
#
# Needs: the Rust toolchain (with rustfmt and clippy), Python 3.11+ with venv, and a PostgreSQL
# server whose account may create databases. Set ICEGATE_TEST_DATABASE_URL to use another one
# than postgres://postgres@127.0.0.1:5432/postgres. Without one at hand (Debian/Ubuntu):
#   apt-get install postgresql && pg_ctlcluster $(ls /etc/postgresql) main start
# and allow local trust auth for user postgres, or `docker compose up -d postgres` (see
# docker-compose.yml) and ICEGATE_TEST_DATABASE_URL=postgres://icegate:icegate@127.0.0.1:5432/icegate.
#
# The Spark test also needs Java 17 and, once, Debian's jarjar/Jackson/httpclient5 packages
# (tests/spark/prepare.sh installs them with apt-get when run as root).
#
# Caches: CARGO_TARGET_DIR (default ./target), ICEGATE_VENV (default ./.venv-tests) and
# ICEGATE_SPARK_JARS (default ~/.cache/icegate/spark-jars).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
export ICEGATE_TEST_DATABASE_URL="${ICEGATE_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
VENV="${ICEGATE_VENV:-$PWD/.venv-tests}"
step() { printf '\n==> %s\n' "$*"; }

step "PostgreSQL at ${ICEGATE_TEST_DATABASE_URL%%\?*}"
if ! command -v psql >/dev/null; then
  echo "psql not found: install the PostgreSQL client (Debian: apt-get install postgresql-client)" >&2
  exit 1
fi
if ! psql "$ICEGATE_TEST_DATABASE_URL" -qAtc 'SELECT 1' >/dev/null; then
  cat >&2 <<MSG
Cannot reach PostgreSQL at $ICEGATE_TEST_DATABASE_URL.
The suite runs every store and client test on PostgreSQL as well as SQLite, so it needs one.
Start it (this machine kind: pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql) main start),
or point ICEGATE_TEST_DATABASE_URL at a server whose account may create databases.
MSG
  exit 1
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test (SQLite and PostgreSQL)"
cargo test --workspace --locked

step "build icegate for the end-to-end suites"
cargo build -p icegate --locked
export ICEGATE_BIN="$CARGO_TARGET_DIR/debug/icegate"

step "Python clients in $VENV"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt

step "a browser for the console's tests (Debian's chromium; playwright-core from npm)"
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }
  else
    echo "the console's tests need Debian's chromium: apt-get install chromium" >&2
    exit 1
  fi
fi
export ICEGATE_CONSOLE_NODE="${ICEGATE_CONSOLE_NODE:-${XDG_CACHE_HOME:-$HOME/.cache}/icegate/console-node}"
mkdir -p "$ICEGATE_CONSOLE_NODE"
cp tests/console/package.json tests/console/package-lock.json "$ICEGATE_CONSOLE_NODE/"
(cd "$ICEGATE_CONSOLE_NODE" && npm ci --silent --no-audit --no-fund)

step "end-to-end suites (tests/)"
cd tests
"$VENV/bin/python" -m pytest -v -p no:cacheprovider .
