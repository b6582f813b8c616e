"""`governance.strict`: the catalog refuses to run unauthenticated, refuses storage profiles that
vend `static` keys or share a storage identity (an STS role, a static access key) with another
warehouse, and refuses to start over a database that already holds such a warehouse, naming it.
Against moto (S3 + STS + IAM, enforcement on)."""

import base64
import os
import subprocess

from conftest import Server, icegate_bin
from harness import ADMIN_ID, ADMIN_SECRET, BUCKET, call, moto, s3_profile, token_for  # noqa: F401

KEY = base64.b64encode(os.urandom(32)).decode()


def env(strict: bool) -> dict:
    return {
        "ICEGATE__AUTH__MODE": "required",
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID": ADMIN_ID,
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET": ADMIN_SECRET,
        "ICEGATE__SECRETS__ENCRYPTION_KEY": KEY,
        "ICEGATE__GOVERNANCE__STRICT": "true" if strict else "false",
    }


def warehouse(server, token, name, profile):
    return call(
        server, token, "POST", "/management/v1/warehouses",
        {"name": name, "storage-root": f"s3://{BUCKET}/{name}", "storage-profile": profile},
    )


def test_strict_refuses_unauthenticated_mode(tmp_path):
    done = subprocess.run(
        [icegate_bin(), "check-config"],
        cwd=tmp_path,
        env={**os.environ, "ICEGATE__GOVERNANCE__STRICT": "true"},
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "governance.strict" in done.stderr and "auth.mode" in done.stderr, done.stderr


def test_strict_refuses_static_keys_and_shared_identities(tmp_path, moto):
    server = Server(tmp_path, [], env(strict=True)).start()
    try:
        token = token_for(server, ADMIN_ID, ADMIN_SECRET)
        status, body = warehouse(server, token, "static", s3_profile(moto, "static"))
        assert status == 400 and "static" in body["error"]["message"], body
        status, body = warehouse(server, token, "first", s3_profile(moto))
        assert status == 201, body
        # The same role for another warehouse: its clients' credentials could reach the first's.
        status, body = warehouse(server, token, "second", s3_profile(moto))
        assert status == 400 and "first" in body["error"]["message"], body
        # Nor can the first turn static.
        status, body = call(server, token, "PUT", "/management/v1/warehouses/first/storage-profile", s3_profile(moto, "static"))
        assert status == 400, body
        status, listed = call(server, token, "GET", "/management/v1/warehouses")
        assert sorted(w["name"] for w in listed["warehouses"]) == ["default", "first"], listed
    finally:
        server.stop()


def test_strict_does_not_start_over_a_warehouse_that_breaks_it(tmp_path, moto):
    server = Server(tmp_path, [], env(strict=False)).start()
    try:
        token = token_for(server, ADMIN_ID, ADMIN_SECRET)
        status, body = warehouse(server, token, "loose", s3_profile(moto, "static"))
        assert status == 201, body
    finally:
        server.stop()
    done = subprocess.run(
        [icegate_bin(), "serve", "--listen", "127.0.0.1:0"],
        cwd=tmp_path, env={**os.environ, **env(strict=True)}, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "governance.strict refuses to start" in done.stderr and "warehouse loose" in done.stderr, done.stderr
