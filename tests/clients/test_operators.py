"""The binary as an operator meets it: snippets that work as printed, the way back from an admin
lockout, help texts that list only what each subcommand uses, PostgreSQL start-up without a
stray `file://` warehouse, and errors that name their cause (database, URI length, settings)."""

import json
import re
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from conftest import Server, database_url, icegate_bin, psql


def run(*args, cwd=None, env=None, timeout=60):
    import os

    return subprocess.run(
        [icegate_bin(), *args], cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout
    )


def credentials(stdout: str) -> tuple[str, str]:
    lines = dict(line.strip().split(":", 1) for line in stdout.splitlines() if line.strip().startswith("client"))
    return lines["client id"].strip(), lines["client secret"].strip()


def snippet(stdout: str) -> str:
    """The PyIceberg lines a command printed, as a program."""
    lines = [line.strip() for line in stdout.splitlines() if line.startswith("    ")]
    assert lines and lines[0].startswith("from pyiceberg"), stdout
    return "\n".join(lines)


def token(uri: str, client_id: str, secret: str) -> str:
    data = urllib.parse.urlencode(
        {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    ).encode()
    with urllib.request.urlopen(urllib.request.Request(f"{uri}/v1/oauth/tokens", data=data), timeout=10) as r:
        return json.load(r)["access_token"]


def token_status(uri: str, client_id: str, secret: str) -> int:
    try:
        token(uri, client_id, secret)
        return 200
    except urllib.error.HTTPError as refused:
        return refused.code


def get(uri: str, path: str, bearer: str | None = None):
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    with urllib.request.urlopen(urllib.request.Request(f"{uri}{path}", headers=headers), timeout=10) as r:
        return json.load(r)


def test_bootstrap_prints_a_snippet_that_works_as_pasted(tmp_path):
    """The printed program, run as is against the server started with authentication, creates a
    namespace: the URI, the credential and the warehouse are all filled in."""
    server = Server(tmp_path, [], {"ICEGATE__AUTH__MODE": "required"})
    result = run("bootstrap", cwd=tmp_path, env={"ICEGATE__SERVER__LISTEN": f"127.0.0.1:{server.port}"})
    assert result.returncode == 0, result.stderr
    program = snippet(result.stdout)
    assert f'uri="{server.uri}"' in program and "<" not in program, program
    server.start()
    try:
        banner = server.stdout_path.read_text()
        assert 'credential="<client-id>:<client-secret>"' in banner, banner
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        bearer = token(server.uri, *credentials(result.stdout))
        namespaces = get(server.uri, f"/v1/{prefix_of(server.uri, bearer)}/namespaces", bearer)
        assert ["demo"] in namespaces["namespaces"], namespaces
    finally:
        server.stop()


def prefix_of(uri: str, bearer: str) -> str:
    return get(uri, "/v1/config", bearer)["overrides"]["prefix"]


def test_a_locked_out_catalog_is_recovered_by_whoever_runs_the_server(tmp_path):
    """A catalog left with no server admin (as an older version allowed, or by hand in the
    database): `bootstrap` says how to recover; `bootstrap --recover` gives `admin` a new secret
    and admin on the server, and the old secret stops working."""
    first = run("bootstrap", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    old_id, old_secret = credentials(first.stdout)
    with sqlite3.connect(tmp_path / "icegate-data" / "catalog.db") as db:
        db.execute("DELETE FROM role_members")
    again = run("bootstrap", cwd=tmp_path)
    assert again.returncode == 1
    assert "bootstrap --recover" in again.stderr and "no principal holds admin" in again.stderr, again.stderr

    server = Server(tmp_path, [], {"ICEGATE__AUTH__MODE": "required"}).start()
    try:
        locked = token(server.uri, old_id, old_secret)
        assert get(server.uri, "/management/v1/whoami", locked)["server-privileges"] == []
        recovered = run("bootstrap", "--recover", cwd=tmp_path, env={"ICEGATE__SERVER__LISTEN": f"127.0.0.1:{server.port}"})
        assert recovered.returncode == 0, recovered.stderr
        assert "bootstrap --recover" in recovered.stderr, "the recovery is logged"
        new_id, new_secret = credentials(recovered.stdout)
        assert new_id == old_id and new_secret != old_secret
        assert new_secret not in recovered.stderr
        assert token_status(server.uri, old_id, old_secret) == 401
        # A change made outside the server is seen once its authorization cache lapses
        # (auth.authorization_cache_ttl, 2 s), as a change by another replica is.
        time.sleep(2.5)
        me = get(server.uri, "/management/v1/whoami", token(server.uri, new_id, new_secret))
        assert me["server-privileges"] == ["admin"] and me["roles"] == ["admin"], me
    finally:
        server.stop()


def test_each_subcommand_lists_only_the_flags_it_uses():
    def flags(subcommand):
        result = run(subcommand, "--help")
        assert result.returncode == 0, result.stderr
        return set(re.findall(r"--[a-z][a-z-]+", result.stdout))

    serve_only = {"--listen", "--insecure-no-auth", "--no-migrate"}
    common = {"--config", "--data-dir", "--database-url", "--log-format"}
    assert serve_only | common <= flags("serve")
    for subcommand in ["migrate", "check-config"]:
        assert common <= flags(subcommand) and not (serve_only & flags(subcommand)), subcommand
    bootstrap = flags("bootstrap")
    assert "--recover" in bootstrap and not (serve_only & bootstrap)


def test_configuration_errors_read_like_the_others(tmp_path):
    bad_format = run("serve", "--log-format", "yaml", cwd=tmp_path)
    assert bad_format.returncode == 2
    assert "yaml" in bad_format.stderr and "text" in bad_format.stderr and "json" in bad_format.stderr
    assert "&str" not in bad_format.stderr
    bad_mode = run("check-config", cwd=tmp_path, env={"ICEGATE__AUTH__MODE": "maybe"})
    assert bad_mode.returncode == 1
    assert "`none` or `required`" in bad_mode.stderr and "``" not in bad_mode.stderr, bad_mode.stderr
    assert "ICEGATE__AUTH__MODE" in bad_mode.stderr
    (tmp_path / "ok.toml").write_text('[server]\nlisten = "127.0.0.1:9999"\n[auth]\nmode = "required"\n')
    valid = run("check-config", "--config", "ok.toml", cwd=tmp_path)
    assert valid.returncode == 0, valid.stderr
    assert not (tmp_path / "icegate-data").exists(), "checking touches nothing"


@pytest.mark.parametrize("case", ["unreachable", "missing-database"])
def test_a_database_that_cannot_be_reached_is_named_with_the_cause(tmp_path, case):
    if case == "unreachable":
        url, expected = "postgres://postgres@127.0.0.1:1/somewhere", ["127.0.0.1:1", "`somewhere`", "refused"]
    else:
        name = f"icegate_missing_{uuid.uuid4().hex[:8]}"
        url, expected = database_url(name), [f"`{name}`", "does not exist"]
    for subcommand in ["serve", "migrate", "bootstrap"]:
        result = run(subcommand, "--database-url", url, cwd=tmp_path, env={"ICEGATE__DATABASE__ACQUIRE_TIMEOUT": "1s"})
        assert result.returncode == 1, (subcommand, result.stderr)
        for part in expected:
            assert part in result.stderr, (subcommand, part, result.stderr)
        assert "pool timed out" not in result.stderr, result.stderr


def test_postgresql_makes_no_file_warehouse_unless_asked(tmp_path):
    name = f"icegate_e2e_{uuid.uuid4().hex}"
    psql(f"CREATE DATABASE {name}")
    try:
        env = {"ICEGATE__DATABASE__URL": database_url(name)}
        server = Server(tmp_path, [], env).start()
        try:
            banner = server.stdout_path.read_text()
            assert "not created on PostgreSQL" in banner, banner
            assert get(server.uri, "/management/v1/warehouses")["warehouses"] == []
            assert not (tmp_path / "icegate-data").exists(), "nothing under the working directory"
        finally:
            server.stop()
        assert "_sqlx_migrations" not in server.stderr_path.read_text(), "no notice at every start"
        asked = Server(tmp_path, [], {**env, "ICEGATE__CATALOG__CREATE_DEFAULT_WAREHOUSE": "true"}).start()
        try:
            names = [w["name"] for w in get(asked.uri, "/management/v1/warehouses")["warehouses"]]
            assert names == ["default"]
        finally:
            asked.stop()
    finally:
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_every_refusal_carries_an_iceberg_body_even_before_the_app(tmp_path):
    """hyper answers a URI over 64 KiB itself; the answer still has the Iceberg error body."""
    server = Server(tmp_path, [], {}).start()
    try:
        try:
            urllib.request.urlopen(f"{server.uri}/v1/config?warehouse={'x' * 70_000}", timeout=10)
            raise AssertionError("a 70 kB URI was served")
        except urllib.error.HTTPError as refused:
            assert refused.code == 414
            assert refused.headers["content-type"] == "application/json"
            body = json.load(refused)
            assert body["error"]["code"] == 414 and "65,534" in body["error"]["message"], body
        assert get(server.uri, "/health")["status"] == "ok", "the server is unaffected"
    finally:
        server.stop()


def call(uri: str, bearer: str, method: str, path: str, body=None) -> int:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{uri}{path}", data, headers, method=method), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_two_last_admins_removing_each_other_leave_one_even_under_repeatable_read(tmp_path):
    """The lockout guard counts admins after taking its lock; a database whose default isolation
    is repeatable read would let both removals count the other as still there. Each round two
    admins, the only ones, revoke each other's grant at the same moment: one wins, one is refused,
    and an admin always remains."""
    import threading

    name = f"icegate_e2e_{uuid.uuid4().hex}"
    psql(f"CREATE DATABASE {name}")
    psql(f"ALTER DATABASE {name} SET default_transaction_isolation = 'repeatable read'")
    env = {
        "ICEGATE__DATABASE__URL": database_url(name),
        "ICEGATE__AUTH__MODE": "required",
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID": "race-admin",
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET": "race-admin-secret-0123456789",
    }
    server = Server(tmp_path, [], env).start()
    uri = server.uri
    try:
        survivor = token(uri, "race-admin", "race-admin-secret-0123456789")
        leaving = ("DELETE", "/management/v1/roles/admin/principals/admin", None)
        for round_ in range(6):
            pair = []
            for side in ("a", "b"):
                principal = f"p{round_}{side}"
                with urllib.request.urlopen(
                    urllib.request.Request(
                        f"{uri}/management/v1/principals",
                        json.dumps({"name": principal}).encode(),
                        {"Authorization": f"Bearer {survivor}", "Content-Type": "application/json"},
                    ),
                    timeout=30,
                ) as r:
                    created = json.load(r)
                role = f"r{round_}{side}"
                assert call(uri, survivor, "POST", "/management/v1/roles", {"name": role}) == 201
                assert call(uri, survivor, "PUT", f"/management/v1/roles/{role}/principals/{principal}") == 204
                grant = {"role": role, "privilege": "admin", "securable": {"type": "server"}}
                assert call(uri, survivor, "POST", "/management/v1/grants", grant) == 201
                pair.append((role, token(uri, created["client-id"], created["client-secret"])))
            # The previous admins step down: the pair are now the only server admins.
            if round_ == 0:
                assert call(uri, survivor, *leaving) == 204
            else:
                assert call(uri, survivor, "DELETE", "/management/v1/grants", previous_grant) == 204
            barrier, answers = threading.Barrier(2), {}

            def revoke(mine, theirs):
                barrier.wait()
                grant = {"role": theirs[0], "privilege": "admin", "securable": {"type": "server"}}
                answers[mine[0]] = call(uri, mine[1], "DELETE", "/management/v1/grants", grant)

            threads = [
                threading.Thread(target=revoke, args=(pair[0], pair[1])),
                threading.Thread(target=revoke, args=(pair[1], pair[0])),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(answers.values()) in ([204, 403], [204, 409]), answers
            winner = next(side for side in pair if answers[side[0]] == 204)
            survivor = winner[1]
            assert get(uri, "/management/v1/whoami", survivor)["server-privileges"] == ["admin"], round_
            previous_grant = {"role": winner[0], "privilege": "admin", "securable": {"type": "server"}}
    finally:
        server.stop()
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_the_server_works_its_task_queue_and_stops_it_cleanly(tmp_path):
    """`serve` starts the background workers: the recurring idempotency-key expiry runs once at
    start-up and queues its next run; on SIGTERM the workers stop with the server."""
    server = Server(tmp_path, [], {}).start()
    database = tmp_path / "icegate-data" / "catalog.db"
    try:
        deadline = time.monotonic() + 20
        rows = []
        while time.monotonic() < deadline:
            with sqlite3.connect(database) as db:
                rows = db.execute("SELECT state, reason, result FROM tasks WHERE kind = 'idempotency-key-expiry'").fetchall()
            if any(state == "done" for state, _, _ in rows):
                break
            time.sleep(0.2)
        states = sorted(state for state, _, _ in rows)
        assert states == ["done", "queued"], rows
        done = next(row for row in rows if row[0] == "done")
        assert "idempotency keys" in done[1] and json.loads(done[2])["removed"] == 0, done
    finally:
        assert server.stop() == 0
    assert "background jobs did not stop" not in server.stderr_path.read_text()
