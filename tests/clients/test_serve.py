"""The `icegate serve` process as a user runs it: the embedded default with no configuration,
restarts that keep everything, clean shutdown, and start-up errors that name the bad key."""

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request

from conftest import Server, icegate_bin


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def post_json(url: str, body) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status


def test_embedded_default_prints_a_snippet_and_survives_a_restart(tmp_path):
    server = Server(tmp_path, [], {}).start()
    banner = server.stdout_path.read_text()
    assert server.uri in banner
    assert "load_catalog(" in banner and 'warehouse="default"' in banner
    assert (tmp_path / "icegate-data" / "catalog.db").is_file()
    assert (tmp_path / "icegate-data" / "warehouse").is_dir()

    prefix = get_json(f"{server.uri}/v1/config")["overrides"]["prefix"]
    assert post_json(f"{server.uri}/v1/{prefix}/namespaces", {"namespace": ["kept"], "properties": {"a": "1"}}) == 200
    assert server.stop(signal.SIGTERM) == 0
    assert "stopped" in server.stderr_path.read_text()

    restarted = Server(tmp_path, [], {}).start()
    try:
        assert get_json(f"{restarted.uri}/v1/config")["overrides"]["prefix"] == prefix
        assert get_json(f"{restarted.uri}/v1/{prefix}/namespaces/kept")["properties"] == {"a": "1"}
    finally:
        assert restarted.stop(signal.SIGINT) == 0


def test_a_second_server_on_the_same_sqlite_file_is_refused(tmp_path):
    """SQLite has one server: the first owns the file (it keeps table heads in memory), a second
    one on the same data directory stops at start-up and says why; once the first is gone the
    file can be served again."""
    first = Server(tmp_path, [], {}).start()
    try:
        second = run_serve(tmp_path, "--listen", "127.0.0.1:0")
        assert second.returncode != 0
        assert "another icegate serve is using the SQLite database" in second.stderr
        assert "PostgreSQL" in second.stderr
        assert get_json(f"{first.uri}/ready")["status"] == "ready", "the first server is unaffected"
    finally:
        assert first.stop(signal.SIGTERM) == 0
    again = Server(tmp_path, [], {}).start()
    assert again.stop(signal.SIGTERM) == 0


def run_serve(tmp_path, *args, env=None):
    return subprocess.run(
        [icegate_bin(), "serve", *args],
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_an_unknown_config_key_stops_start_up_and_is_named(tmp_path):
    (tmp_path / "icegate.toml").write_text('[server]\nlisten = "127.0.0.1:0"\nrequest_timout = "5s"\n')
    result = run_serve(tmp_path, "--config", "icegate.toml")
    assert result.returncode != 0
    assert "request_timout" in result.stderr
    assert "icegate.toml" in result.stderr


def test_a_bad_environment_value_stops_start_up_and_is_named(tmp_path):
    result = run_serve(tmp_path, env={"ICEGATE__DATABASE__MAX_CONNECTIONS": "lots"})
    assert result.returncode != 0
    assert "ICEGATE__DATABASE__MAX_CONNECTIONS" in result.stderr


def test_migrate_applies_the_schema_and_exits(tmp_path):
    result = subprocess.run(
        [icegate_bin(), "migrate", "--data-dir", str(tmp_path / "data")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "data" / "catalog.db").is_file()


def test_json_logs_carry_the_request_id_of_the_response(tmp_path):
    server = Server(tmp_path, ["--log-format", "json"], {}).start()
    try:
        request = urllib.request.Request(f"{server.uri}/v1/config", headers={"x-request-id": "trace-me-123"})
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.headers["x-request-id"] == "trace-me-123"
        with urllib.request.urlopen(f"{server.uri}/health", timeout=5) as response:
            generated = response.headers["x-request-id"]
    finally:
        assert server.stop() == 0
    lines = [json.loads(line) for line in server.stderr_path.read_text().splitlines() if line.strip()]
    assert lines, "no log lines"

    def request_ids(line):
        return [span.get("request_id") for span in line.get("spans", [])] + [line.get("span", {}).get("request_id")]

    assert any("trace-me-123" in request_ids(line) for line in lines), lines
    assert any(generated in request_ids(line) for line in lines), lines


def test_bootstrap_prints_admin_credentials_once_and_required_mode_uses_them(tmp_path):
    first = subprocess.run([icegate_bin(), "bootstrap"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    lines = dict(line.strip().split(":", 1) for line in first.stdout.splitlines() if line.strip().startswith("client"))
    client_id, secret = lines["client id"].strip(), lines["client secret"].strip()
    again = subprocess.run([icegate_bin(), "bootstrap"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "exists already" in again.stderr
    assert secret not in again.stdout + again.stderr

    server = Server(tmp_path, [], {"ICEGATE__AUTH__MODE": "required"}).start()
    try:
        try:
            urllib.request.urlopen(f"{server.uri}/v1/config", timeout=5)
            raise AssertionError("an anonymous request was served")
        except urllib.error.HTTPError as refused:
            assert refused.code == 401
        data = f"grant_type=client_credentials&client_id={client_id}&client_secret={secret}".encode()
        with urllib.request.urlopen(urllib.request.Request(f"{server.uri}/v1/oauth/tokens", data=data), timeout=10) as r:
            token = json.load(r)["access_token"]
        request = urllib.request.Request(f"{server.uri}/management/v1/whoami", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=5) as r:
            assert json.load(r)["principal"] == "admin"
    finally:
        server.stop()
    assert secret not in server.stderr_path.read_text(), "the secret never reaches a log line"


def test_an_unauthenticated_routable_listener_is_refused(tmp_path):
    result = run_serve(tmp_path, "--listen", "0.0.0.0:0")
    assert result.returncode != 0
    assert "refusing to serve without authentication" in result.stderr
