"""Shared fixtures for the end-to-end suites: a freshly started `icegate serve` on SQLite or on a
fresh PostgreSQL database, on a free loopback port, stopped again after the test.

The binary comes from ICEGATE_BIN (scripts/test.sh builds it). PostgreSQL comes from
ICEGATE_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres, an account that
may create databases); when it cannot be reached the PostgreSQL runs fail and say so.
"""

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

ADMIN_URL = os.environ.get("ICEGATE_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")


def icegate_bin() -> str:
    path = os.environ.get("ICEGATE_BIN")
    if not path or not Path(path).is_file():
        pytest.fail("ICEGATE_BIN must point at a built icegate binary (scripts/test.sh sets it)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(sql: str, url: str = ADMIN_URL) -> None:
    if shutil.which("psql") is None:
        pytest.fail("psql is needed to create test databases (Debian: apt-get install postgresql-client)")
    result = subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(
            f"PostgreSQL at {url} refused `{sql}`: {result.stderr.strip()}\n"
            "Start PostgreSQL or point ICEGATE_TEST_DATABASE_URL at one whose account may create databases."
        )


def database_url(name: str) -> str:
    base, _, query = ADMIN_URL.partition("?")
    scheme, _, rest = base.partition("://")
    host = rest.split("/", 1)[0]
    return f"{scheme}://{host}/{name}" + (f"?{query}" if query else "")


class Server:
    """One `icegate serve` process."""

    def __init__(self, workdir: Path, args: list[str], env: dict[str, str]):
        self.workdir = workdir
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.args = args
        self.env = env
        self.process: subprocess.Popen | None = None
        self.stdout_path = workdir / "icegate.stdout"
        self.stderr_path = workdir / "icegate.stderr"

    def start(self) -> "Server":
        env = {**os.environ, **self.env}
        env.pop("RUST_LOG", None)
        self.process = subprocess.Popen(
            [icegate_bin(), "serve", "--listen", f"127.0.0.1:{self.port}", *self.args],
            cwd=self.workdir,
            env=env,
            stdout=open(self.stdout_path, "a"),
            stderr=open(self.stderr_path, "a"),
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"icegate exited with {self.process.returncode}:\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"{self.uri}/ready", timeout=1) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        pytest.fail(f"icegate did not become ready within 30s:\n{self.logs()}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail("icegate did not stop within 30s of SIGTERM")

    def logs(self) -> str:
        out = self.stdout_path.read_text() if self.stdout_path.exists() else ""
        err = self.stderr_path.read_text() if self.stderr_path.exists() else ""
        return f"--- stdout ---\n{out}\n--- stderr ---\n{err[-4000:]}"


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request):
    """The store a test runs on: the embedded SQLite default, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield {}
        return
    name = f"icegate_e2e_{uuid.uuid4().hex}"
    psql(f"CREATE DATABASE {name}")
    try:
        # On PostgreSQL the default warehouse is made only when asked (a replica's file:// root is no
        # warehouse in production); these tests ask, to run the same steps on both stores.
        yield {"ICEGATE__DATABASE__URL": database_url(name), "ICEGATE__CATALOG__CREATE_DEFAULT_WAREHOUSE": "true"}
    finally:
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def icegate(tmp_path, backend):
    """A running catalog with its default warehouse under tmp_path."""
    server = Server(tmp_path, [], backend).start()
    try:
        yield server
    finally:
        server.stop()
