"""Every fenced code block in README.md and docs/*.md runs as written, so the documentation cannot
go stale unnoticed.

The line directly above each opening fence says what the block is and how it is checked:

    <!-- snippet: KIND -->

- `pyiceberg`, `python`: run with this interpreter against a freshly started server.
- `duckdb`: each statement run through the duckdb module against a freshly started server;
  `INSTALL`/`LOAD` of the iceberg, httpfs and avro extensions load them from their PyPI packages
  instead (offline, as tests/clients/test_duckdb.py does).
- `shell`: run with `bash -euo pipefail` in an empty directory, `icegate` on the PATH (the binary
  of ICEGATE_BIN), against a freshly started server.
- `shell-serve`: a shell block that starts `icegate serve` itself: run in the background; the
  server must become ready on the block's address (port 8181 replaced by a free one; a block that
  names no address gets it through ICEGATE__SERVER__LISTEN), then it is stopped.
- `toml`: a configuration file, which `icegate check-config --config FILE` must accept.
- `json-body`: a request body; it must parse as JSON.
- `not-run: REASON`: not run (needs what this machine lacks, or is not a command); the reason is
  required.

A KIND may be followed by `warehouse=NAME`: the harness creates that `file://` warehouse on the
server before the block runs. A block without a tag, with an unknown kind or with an empty reason
fails `test_every_block_is_tagged`, naming its file and line.

Before a block runs, the harness replaces `http://127.0.0.1:8181` (and the example production URL
`https://catalog.example.com`) with the test server's URI, port 8181 with the test server's port,
`cargo run -p icegate --` with `icegate` (cargo is never run), PostgreSQL URLs with a fresh
database (created for the block, dropped afterwards), and `file:///var/lib/icegate/` with a
directory under the test's tmp_path. Blocks that use credentials write them as the placeholders
`<client-id>` and `<client-secret>` (shell blocks fetch `$TOKEN` with them themselves); the
harness fills in the bootstrap admin's credentials of a server started with `auth.mode = required`.
Blocks without placeholders get a server without authentication. Where a block creates something
the harness also checks that it exists (see EFFECTS).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pytest

from conftest import Server, database_url, free_port, icegate_bin, psql

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

DOC_URIS = ["http://127.0.0.1:8181", "https://catalog.example.com"]
DOC_STORAGE = "file:///var/lib/icegate/"
# The secret has what `openssl rand -base64 32` gives (`+`, `/`, `=`), which a form must encode.
CLIENT_ID, CLIENT_SECRET = "snippet-admin", "snippet+admin/secret=0123456789"
AUTHENTICATED = {
    "ICEGATE__AUTH__MODE": "required",
    "ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID": CLIENT_ID,
    "ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET": CLIENT_SECRET,
}
KINDS = {"pyiceberg", "python", "duckdb", "shell", "shell-serve", "toml", "json-body", "not-run"}
OPTIONS = {"warehouse"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
TAG = re.compile(r"^\s*<!--\s*snippet:\s*(?P<spec>.*?)\s*-->\s*$")
TIMEOUT = 60


@dataclass
class Block:
    """One fenced code block and the tag above it."""

    path: Path
    line: int  # of the opening fence, 1-based
    info: str
    text: str
    tag: str | None
    kind: str | None = None
    reason: str = ""
    options: dict[str, str] = field(default_factory=dict)
    problem: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def uses_credentials(self) -> bool:
        return "<client-id>" in self.text or "<client-secret>" in self.text


def parse_tag(block: Block) -> None:
    if block.tag is None:
        block.problem = "has no tag: put `<!-- snippet: KIND -->` on the line directly above its opening fence"
        return
    not_run = re.fullmatch(r"not-run\b\s*(:\s*(?P<reason>.*))?", block.tag)
    if not_run:
        block.kind = "not-run"
        block.reason = (not_run["reason"] or "").strip()
        if not block.reason:
            block.problem = "is tagged not-run without a reason: `<!-- snippet: not-run: REASON -->`"
        return
    kind, *options = block.tag.split() or [""]
    if kind == "not-run":
        block.problem = "is tagged not-run without `: REASON` (`<!-- snippet: not-run: REASON -->`)"
        return
    if kind not in KINDS:
        block.problem = f"has an unknown kind `{kind}` (known: {', '.join(sorted(KINDS))})"
        return
    block.kind = kind
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or key not in OPTIONS or not value:
            block.problem = f"has an unknown option `{option}` (known: warehouse=NAME)"
            return
        block.options[key] = value


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), None)
        tag = TAG.match(lines[i - 1]) if i > 0 else None
        body = lines[i + 1 : end if end is not None else len(lines)]
        block = Block(
            path=path,
            line=i + 1,
            info=opening["info"].strip(),
            text="\n".join(line[indent:] if not line[:indent].strip() else line.lstrip() for line in body) + "\n",
            tag=tag["spec"] if tag else None,
        )
        parse_tag(block)
        if end is None:
            block.problem = "is never closed"
        found.append(block)
        i = (end if end is not None else len(lines)) + 1
    return found


BLOCKS = [block for path in DOCUMENTS for block in blocks_of(path)]
RUNNABLE = [block for block in BLOCKS if block.problem is None and block.kind != "not-run"]


def test_every_block_is_tagged():
    assert len(DOCUMENTS) > 1 and len(BLOCKS) > 10, f"found only {len(BLOCKS)} blocks in {DOCUMENTS}"
    problems = [f"{block.where}: the ```{block.info} block {block.problem}" for block in BLOCKS if block.problem]
    assert not problems, "\n" + "\n".join(problems)


@pytest.mark.parametrize("block", RUNNABLE, ids=[f"{block.where}-{block.kind}" for block in RUNNABLE])
def test_snippet_runs_as_written(block, tmp_path):
    RUNNERS[block.kind](block, tmp_path)


# --- what a block runs against -------------------------------------------------------------------


@dataclass
class Target:
    """What a block ran against, for the checks of its effects."""

    uri: str
    token: str | None = None
    output: str = ""


def call(uri: str, method: str, path: str, token: str | None = None, body=None):
    """(status, parsed JSON body or None)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{uri}{path}", data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        text = error.read()
        return error.code, json.loads(text) if text else None


def token_for(uri: str, client_id: str, secret: str) -> str:
    form = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret})
    with urllib.request.urlopen(urllib.request.Request(f"{uri}/v1/oauth/tokens", data=form.encode()), timeout=10) as r:
        return json.load(r)["access_token"]


@contextmanager
def fresh_database(text: str):
    """A fresh PostgreSQL database when the block names one (its URL, else None), dropped afterwards."""
    if "postgres://" not in text:
        yield None
        return
    name = f"icegate_snippet_{uuid.uuid4().hex}"
    psql(f"CREATE DATABASE {name}")
    try:
        yield database_url(name)
    finally:
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def server_for(block: Block, tmp_path: Path):
    """A freshly started server on SQLite, requiring authentication when the block uses
    credentials, with the warehouses the block's tag asks for."""
    server_dir = tmp_path / "server"
    server_dir.mkdir()
    server = Server(server_dir, [], AUTHENTICATED if block.uses_credentials else {}).start()
    try:
        token = token_for(server.uri, CLIENT_ID, CLIENT_SECRET) if block.uses_credentials else None
        if "warehouse" in block.options:
            name = block.options["warehouse"]
            root = tmp_path / "warehouses" / name
            root.mkdir(parents=True)
            status, body = call(
                server.uri, "POST", "/management/v1/warehouses", token, {"name": name, "storage-root": f"file://{root}"}
            )
            assert status == 201, f"creating warehouse {name} for {block.where}: {status} {body}"
        yield Target(server.uri, token)
    except BaseException:
        print(server.logs())
        raise
    finally:
        server.stop()


def substitute(block: Block, tmp_path: Path, *, uri: str | None = None, port: int | None = None, db: str | None = None):
    text = block.text.replace("cargo run -p icegate --", "icegate")
    if uri is not None:
        for documented in DOC_URIS:
            text = text.replace(documented, uri)
    if port is not None:
        text = re.sub(r"(?<=:)8181\b", str(port), text)
    if db is not None:
        text = re.sub(r"postgres://[^\s'\"]+", db, text)
    if block.uses_credentials:
        text = text.replace("<client-id>", CLIENT_ID).replace("<client-secret>", CLIENT_SECRET)
    text = text.replace(DOC_STORAGE, f"file://{tmp_path}/var/lib/icegate/")
    if re.search(r"\bcargo\b", text):
        pytest.fail(f"{block.where} runs cargo, which the harness never does: tag it `not-run: REASON`")
    for tool in ("curl", "jq"):
        if re.search(rf"\b{tool}\b", text) and shutil.which(tool) is None:
            pytest.fail(f"{block.where} needs {tool}, which is not installed (Debian: apt-get install {tool})")
    return text


def snippet_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "snippet"
    directory.mkdir()
    return directory


def shell_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without icegate's variables, `icegate` first on the PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "icegate"
    if not link.exists():
        link.symlink_to(Path(icegate_bin()).resolve())
    env = {k: v for k, v in os.environ.items() if not k.startswith("ICEGATE_") and k != "RUST_LOG"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def failed(block: Block, what: str, code: str, output: str) -> str:
    return f"{block.where} ({block.kind}) {what}.\n--- as run ---\n{code}\n--- output ---\n{output[-6000:]}"


# --- runners ----------------------------------------------------------------------------------------


def run_python(block: Block, tmp_path: Path) -> None:
    with server_for(block, tmp_path) as target:
        code = substitute(block, tmp_path, uri=target.uri)
        workdir = snippet_dir(tmp_path)
        (workdir / "snippet.py").write_text(code)
        result = subprocess.run(
            [sys.executable, "snippet.py"], cwd=workdir, capture_output=True, text=True, timeout=TIMEOUT
        )
        assert result.returncode == 0, failed(block, f"exited with {result.returncode}", code, result.stdout + result.stderr)
        target.output = result.stdout
        check_effects(block, target)


def run_duckdb(block: Block, tmp_path: Path) -> None:
    from clients.test_duckdb import duckdb_with_iceberg

    with server_for(block, tmp_path) as target:
        code = substitute(block, tmp_path, uri=target.uri)
        connection = duckdb_with_iceberg()
        for statement in duckdb.extract_statements(code):
            sql = statement.query.strip().rstrip(";").strip()
            if re.fullmatch(r"(?i)(INSTALL|LOAD)\s+(iceberg|httpfs|avro)", sql):
                continue  # loaded from the PyPI packages by duckdb_with_iceberg
            try:
                result = connection.execute(sql)
                rows = result.fetchall() if result.description else []
            except duckdb.Error as error:
                pytest.fail(failed(block, f"failed at `{sql}`", code, str(error)))
            target.output += f"{sql}\n{rows}\n"
        check_effects(block, target)


def run_shell(block: Block, tmp_path: Path) -> None:
    with server_for(block, tmp_path) as target:
        port = urllib.parse.urlsplit(target.uri).port
        code = substitute(block, tmp_path, uri=target.uri, port=port)
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", code],
            cwd=snippet_dir(tmp_path),
            env=shell_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert result.returncode == 0, failed(block, f"exited with {result.returncode}", code, result.stdout + result.stderr)
        target.output = result.stdout
        check_effects(block, target)


def run_serving_shell(block: Block, tmp_path: Path) -> None:
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    with fresh_database(block.text) as db:
        code = substitute(block, tmp_path, port=port, db=db)
        stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
        with open(stdout, "w") as out, open(stderr, "w") as err:
            process = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", code],
                cwd=snippet_dir(tmp_path),
                env=shell_env(tmp_path, ICEGATE__SERVER__LISTEN=f"127.0.0.1:{port}"),
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group: the shell and the server it started
            )

        def output() -> str:
            return stdout.read_text() + stderr.read_text()

        try:
            deadline = time.monotonic() + TIMEOUT
            while True:
                if process.poll() is not None:
                    pytest.fail(failed(block, f"exited with {process.returncode} before serving on {uri}", code, output()))
                try:
                    with urllib.request.urlopen(f"{uri}/ready", timeout=1) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(failed(block, f"did not become ready on {uri} within {TIMEOUT}s", code, output()))
                time.sleep(0.1)
            check_effects(block, Target(uri, output=stdout.read_text()))
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def run_toml(block: Block, tmp_path: Path) -> None:
    helped = subprocess.run([icegate_bin(), "--help"], capture_output=True, text=True, timeout=TIMEOUT)
    if "check-config" not in helped.stdout:
        pytest.fail(
            f"{block.where}: this icegate ({icegate_bin()}) has no `check-config` subcommand, so the TOML "
            "example cannot be checked; build one that has it (issue 30)"
        )
    path = tmp_path / "icegate.toml"
    path.write_text(block.text)
    result = subprocess.run(
        [icegate_bin(), "check-config", "--config", str(path)],
        cwd=tmp_path,
        env=shell_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, failed(block, f"was refused by check-config ({result.returncode})", block.text, result.stdout + result.stderr)


def run_json_body(block: Block, tmp_path: Path) -> None:
    try:
        body = json.loads(block.text)
    except json.JSONDecodeError as error:
        pytest.fail(f"{block.where}: not JSON: {error}")
    assert isinstance(body, dict), f"{block.where}: a request body is a JSON object"


RUNNERS = {
    "pyiceberg": run_python,
    "python": run_python,
    "duckdb": run_duckdb,
    "shell": run_shell,
    "shell-serve": run_serving_shell,
    "toml": run_toml,
    "json-body": run_json_body,
}


# --- effects: what a block that creates something must have created ----------------------------


def prefix_of(target: Target, warehouse: str) -> str:
    status, config = call(target.uri, "GET", f"/v1/config?warehouse={warehouse}", target.token)
    assert status == 200, config
    return config["overrides"]["prefix"]


def namespace_exists(*levels: str):
    def check(block: Block, target: Target) -> None:
        path = "%1F".join(urllib.parse.quote(level, safe="") for level in levels)
        status, body = call(target.uri, "GET", f"/v1/{prefix_of(target, 'default')}/namespaces/{path}", target.token)
        assert status == 200, f"{block.where}: namespace {levels} should exist: {status} {body}"

    return check


def warehouse_exists(name: str):
    def check(block: Block, target: Target) -> None:
        status, body = call(target.uri, "GET", f"/management/v1/warehouses/{name}", target.token)
        assert status == 200, f"{block.where}: warehouse {name} should exist: {status} {body}"

    return check


def prints_the_url_and_a_pyiceberg_snippet(block: Block, target: Target) -> None:
    assert target.uri in target.output and "load_catalog(" in target.output, f"{block.where}: banner:\n{target.output}"


def bootstrapped_admin_signs_in_and_anonymous_is_refused(block: Block, target: Target) -> None:
    printed = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition(":") for line in target.output.splitlines())
        if key.strip() in ("client id", "client secret")
    )
    assert set(printed) == {"client id", "client secret"}, f"{block.where}: bootstrap printed:\n{target.output}"
    token = token_for(target.uri, printed["client id"], printed["client secret"])
    status, whoami = call(target.uri, "GET", "/management/v1/whoami", token)
    assert status == 200 and whoami["principal"] == "admin", whoami
    assert call(target.uri, "GET", "/v1/config")[0] == 401, f"{block.where}: an anonymous request was served"


def anonymous_is_refused(block: Block, target: Target) -> None:
    assert call(target.uri, "GET", "/v1/config")[0] == 401, f"{block.where}: an anonymous request was served"


# (fragment of the block's text, check); every check whose fragment the block contains runs.
EFFECTS = [
    ('create_namespace(("sales", "emea"))', namespace_exists("sales", "emea")),
    ('"name": "lake", "storage-root"', warehouse_exists("lake")),
    ("cargo run -p icegate -- serve", prints_the_url_and_a_pyiceberg_snippet),
    ("icegate bootstrap", bootstrapped_admin_signs_in_and_anonymous_is_refused),
    ("ICEGATE__AUTH__MODE=required", anonymous_is_refused),
]


def check_effects(block: Block, target: Target) -> None:
    for fragment, check in EFFECTS:
        if fragment in block.text:
            check(block, target)

