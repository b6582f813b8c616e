"""The background task queue as operators see it (`/management/v1/tasks`): the tasks a running
catalog works (the audit trail's checkpoints, the expiry jobs) with their state, progress and
results, filtered and paged; one read by id; a queued task cancelled (and not cancelled twice);
warehouse admins kept to their warehouse's tasks; and the cancellation in the audit trail
(strangers are refused every endpoint: crates/icegate-api/tests/http/auth.rs)."""

import time
import urllib.parse
import urllib.request

import pytest

from conftest import Server
from test_access_reviews import principal
from test_audit import search, status_of
from test_auth_clients import admin_call, admin_token, secured_env


@pytest.fixture
def working(tmp_path, backend):
    env = secured_env(
        backend,
        ICEGATE__AUDIT__CHECKPOINT__LOCATION=f"file://{tmp_path / 'audit-archive'}",
        ICEGATE__AUDIT__CHECKPOINT__INTERVAL="1s",
    )
    server = Server(tmp_path, [], env).start()
    try:
        yield server
    finally:
        server.stop()


def tasks(server, token, **query):
    return admin_call(server, token, "GET", f"/management/v1/tasks?{urllib.parse.urlencode(query)}")


def test_operators_see_page_and_cancel_the_catalogs_tasks(working):
    token = admin_token(working)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done = tasks(working, token, kind="audit-checkpoint", state="done")["tasks"]
        if done:
            break
        time.sleep(0.2)
    # The checkpoint task ran as the system, for its reason, with a result.
    checkpoint = done[0]
    assert checkpoint["state"] == "done" and checkpoint["result"]["checkpointed"] >= 1, checkpoint
    assert "checkpointed" in checkpoint["reason"] and checkpoint["finished-at-ms"] >= checkpoint["created-at-ms"]
    assert admin_call(working, token, "GET", f"/management/v1/tasks/{checkpoint['id']}") == checkpoint
    # Every kind the server runs is there; the expiry jobs wait queued for their period.
    listed = tasks(working, token, pageSize=1000)["tasks"]
    kinds = {t["kind"] for t in listed}
    assert {"audit-checkpoint", "idempotency-key-expiry", "location-hold-expiry", "task-expiry"} <= kinds, kinds
    ids = [t["id"] for t in listed]
    assert ids == sorted(ids, reverse=True), "newest first"
    # Pages of one follow each other without repeats.
    first = tasks(working, token, pageSize=1)
    second = tasks(working, token, pageSize=1, pageToken=first["next-page-token"])
    assert first["tasks"][0]["id"] > second["tasks"][0]["id"]
    assert status_of(working, token, "GET", "/management/v1/tasks?state=sleeping") == 400

    queued = next(t for t in tasks(working, token, state="queued")["tasks"] if t["kind"] == "idempotency-key-expiry")
    cancelled = admin_call(working, token, "POST", f"/management/v1/tasks/{queued['id']}/cancel")
    assert cancelled["state"] == "cancelled" and cancelled["finished-at-ms"] is not None
    assert status_of(working, token, "POST", f"/management/v1/tasks/{queued['id']}/cancel") == 409
    assert admin_call(working, token, "GET", f"/management/v1/tasks/{queued['id']}")["state"] == "cancelled"
    (record,) = [r["record"] for r in search(working, token, action="cancelTask") if r["record"]["outcome"] == "allowed"]
    assert record["actor"]["name"] == "admin"
    # The queue in /metrics: tasks by kind and state.
    with urllib.request.urlopen(f"{working.uri}/metrics", timeout=10) as r:
        exposition = r.read().decode()
    gauges = dict(
        line.rsplit(" ", 1) for line in exposition.splitlines() if line.startswith("icegate_tasks{")
    )
    assert int(gauges['icegate_tasks{kind="idempotency-key-expiry",state="cancelled"}']) == 1, gauges
    assert int(gauges['icegate_tasks{kind="audit-checkpoint",state="done"}']) >= 1, gauges

    # A warehouse's admin sees its warehouse's tasks only; the server's are not there for it.
    wadmin, _ = principal(working, token, "wadmin", "wadmins", "admin", {"type": "warehouse", "warehouse": "default"})
    assert status_of(working, wadmin, "GET", "/management/v1/tasks") == 403
    assert tasks(working, wadmin, warehouse="default")["tasks"] == []
    assert status_of(working, wadmin, "GET", f"/management/v1/tasks/{checkpoint['id']}") == 404
    assert status_of(working, wadmin, "POST", f"/management/v1/tasks/{checkpoint['id']}/cancel") == 404
