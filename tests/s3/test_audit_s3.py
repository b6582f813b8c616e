"""What the audit trail records of storage access, judged at the trail and at the store: a
vend names the prefixes, the level, the expiry and the access key id of exactly the credentials
handed out (never a secret); a refresh and a signature are recorded as such; and when the trail
cannot be written, no credentials are handed out (503), and the trail resumes intact. A revoked
grant gets no refresh; a warehouse's cap on credentials' lifetime is what STS is asked for."""

import sqlite3
import time
import urllib.parse

import pytest

from harness import ADMIN_ID, ADMIN_SECRET, BUCKET, call, catalog, moto, s3_profile, token_for  # noqa: F401
from test_vending import ROWS, SCHEMA, principal_with, pyiceberg


@pytest.fixture(scope="module")
def lake(catalog, moto):
    server, token = catalog
    admin = pyiceberg(server, f"{ADMIN_ID}:{ADMIN_SECRET}")
    admin.create_namespace("db")
    admin.create_table("db.a", schema=SCHEMA).append(ROWS)
    prefix = call(server, token, "GET", "/v1/config?warehouse=lake")[1]["overrides"]["prefix"]
    return server, token, prefix


def audit(server, token, **filters):
    query = urllib.parse.urlencode({"pageSize": 1000, **filters})
    status, body = call(server, token, "GET", f"/management/v1/audit?{query}")
    assert status == 200, body
    return body["records"]


def vend(server, token, prefix, table="a"):
    return call(
        server,
        token,
        "GET",
        f"/v1/{prefix}/namespaces/db/tables/{table}",
        headers={"X-Iceberg-Access-Delegation": "vended-credentials"},
    )


def test_a_vend_and_a_refresh_are_recorded_with_the_credentials_key_id_and_no_secret(lake, moto):
    server, token, prefix = lake
    reader = principal_with(server, token, "audited-reader", "read", "a")
    status, loaded = vend(server, reader, prefix)
    assert status == 200, loaded
    handed = loaded["storage-credentials"][0]
    records = audit(server, token, principal="audited-reader", action="loadTable")
    assert len(records) == 1, records
    record = records[0]["record"]
    assert record["outcome"] == "allowed" and record["status"] == 200
    assert (record["subject"]["namespace"], record["subject"]["name"]) == (["db"], "a")
    (event,) = record["events"]
    assert event["kind"] == "credentials-vended"
    assert event["prefix"] == handed["prefix"]
    assert event["access"] == "read"
    assert event["access-key-id"] == handed["config"]["s3.access-key-id"]
    assert event["expires-at-ms"] == int(handed["config"]["s3.session-token-expires-at-ms"])
    text = records[0]["text"]
    assert handed["config"]["s3.secret-access-key"] not in text
    assert handed["config"]["s3.session-token"] not in text
    # The refresh endpoint: recorded as a refresh, with the new credentials' key id.
    status, refreshed = call(server, reader, "GET", f"/v1/{prefix}/namespaces/db/tables/a/credentials")
    assert status == 200, refreshed
    (record,) = [r["record"] for r in audit(server, token, principal="audited-reader", action="loadCredentials")]
    assert record["events"][0]["kind"] == "credentials-refreshed"
    assert record["events"][0]["access-key-id"] == refreshed["storage-credentials"][0]["config"]["s3.access-key-id"]
    # Its grant revoked, the refresh is decided again: refused, recorded, nothing handed out.
    grant = {"role": "audited-reader-role", "privilege": "read",
             "securable": {"type": "table", "warehouse": "lake", "namespace": ["db"], "name": "a"}}
    status, body = call(server, token, "DELETE", "/management/v1/grants", grant)
    assert status == 204, body
    status, body = call(server, reader, "GET", f"/v1/{prefix}/namespaces/db/tables/a/credentials")
    assert status in (403, 404) and "storage-credentials" not in (body or {}), body
    (record,) = [r["record"] for r in audit(server, token, principal="audited-reader", action="loadCredentials",
                                            outcome="refused")]
    assert "events" not in record
    status, body = call(server, token, "POST", "/management/v1/grants", grant)
    assert status in (200, 201), body
    # A table it may not read: refused, recorded, nothing vended.
    status, _ = vend(server, reader, prefix, "missing-or-hidden")
    assert status == 404
    refused = audit(server, token, principal="audited-reader", outcome="refused", action="loadTable")
    assert [r["record"]["subject"]["name"] for r in refused] == ["missing-or-hidden"]
    assert "events" not in refused[0]["record"]


def test_a_signature_is_recorded_with_its_operation_bucket_and_key(lake, moto):
    server, token, _ = lake
    status, body = call(
        server,
        token,
        "POST",
        "/management/v1/warehouses",
        {"name": "signed-audit", "storage-root": f"s3://{BUCKET}/signed-audit", "storage-profile": s3_profile(moto, "remote-signing")},
    )
    assert status == 201, body
    prefix = body["id"]
    status, _ = call(server, token, "POST", f"/v1/{prefix}/namespaces", {"namespace": ["db"]})
    assert status == 200
    status, created = call(
        server, token, "POST", f"/v1/{prefix}/namespaces/db/tables", {"name": "t", "schema": SCHEMA.model_dump(by_alias=True)}
    )
    assert status == 200, created
    key = created["metadata-location"].split(f"s3://{BUCKET}/", 1)[1]
    request = {"region": "us-east-1", "uri": f"{moto.endpoint}/{BUCKET}/{key}", "method": "GET", "headers": {}}
    status, signed = call(server, token, "POST", f"/v1/{prefix}/namespaces/db/tables/t/sign", request)
    assert status == 200, signed
    (record,) = [r["record"] for r in audit(server, token, action="signRequest", warehouse="signed-audit")]
    assert record["events"] == [
        {"kind": "request-signed", "tabular-id": record["events"][0]["tabular-id"], "operation": "GetObject",
         "bucket": BUCKET, "key": key, "access": "read-write"}
    ]
    # A signature refused (outside the table): recorded as refused, with nothing signed.
    request["uri"] = f"{moto.endpoint}/{BUCKET}/signed-audit/elsewhere/x"
    status, _ = call(server, token, "POST", f"/v1/{prefix}/namespaces/db/tables/t/sign", request)
    assert status == 403
    last = audit(server, token, action="signRequest", warehouse="signed-audit")[-1]["record"]
    assert last["outcome"] == "refused" and "events" not in last


def test_no_credentials_are_handed_out_while_the_trail_cannot_be_written(lake, moto):
    server, token, prefix = lake
    database = server.workdir / "icegate-data" / "catalog.db"
    with sqlite3.connect(database) as db:
        head = db.execute("SELECT seq, hash FROM audit_head").fetchone()
        db.execute("ALTER TABLE audit_head RENAME TO audit_head_away")
    try:
        status, body = vend(server, token, prefix)
        assert status == 503, body
        assert "storage-credentials" not in (body or {}) and "metadata" not in (body or {}), body
        assert body["error"]["type"] == "ServiceUnavailableException"
        # A change cannot be made either: nothing applied.
        status, body = call(server, token, "POST", f"/v1/{prefix}/namespaces", {"namespace": ["never"]})
        assert status in (500, 503), body
    finally:
        with sqlite3.connect(database) as db:
            db.execute("ALTER TABLE audit_head_away RENAME TO audit_head")
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT seq, hash FROM audit_head").fetchone() == head
        assert db.execute("SELECT COUNT(*) FROM namespaces WHERE name = 'never'").fetchone()[0] == 0
    status, body = vend(server, token, prefix)
    assert status == 200, body


def test_a_warehouse_caps_the_lifetime_of_vended_credentials(lake, moto):
    server, token, prefix = lake
    settings = "/management/v1/warehouses/lake/settings"
    status, body = call(server, token, "PUT", settings, {"credentials.max-lifetime-seconds": 900})
    assert status == 200, body
    assert body["settings"] == {"audit.record-reads": True, "credentials.max-lifetime-seconds": 900}
    try:
        status, loaded = vend(server, token, prefix)
        assert status == 200, loaded
        expires = int(loaded["storage-credentials"][0]["config"]["s3.session-token-expires-at-ms"])
        # The profile's sessions last 3600 s; the warehouse allows 900 (STS minted them so).
        assert expires - time.time() * 1000 <= 900_000 + 5_000, expires
        (record,) = [r["record"] for r in audit(server, token, action="loadTable", warehouse="lake")][-1:]
        assert record["events"][0]["expires-at-ms"] == expires
        # Outside what STS allows, or on a profile whose keys no lifetime bounds: refused.
        for cap in (60, 50_000):
            status, body = call(server, token, "PUT", settings, {"credentials.max-lifetime-seconds": cap})
            assert status == 400, body
        status, body = call(server, token, "PUT", "/management/v1/warehouses/lake/storage-profile", s3_profile(moto, "static"))
        assert status == 400, body
    finally:
        status, body = call(server, token, "PUT", settings, {})
        assert status == 200 and body["settings"] == {"audit.record-reads": True}, body


def test_sts_sessions_name_the_principal_for_the_stores_own_logs(lake, moto):
    server, token, prefix = lake
    alice = principal_with(server, token, "alice-analyst", "read", "a")
    bob = principal_with(server, token, "bob-analyst", "read", "a")
    keys = {}
    for name, who in (("alice-analyst", alice), ("bob-analyst", bob)):
        status, loaded = vend(server, who, prefix)
        assert status == 200, loaded
        config = loaded["storage-credentials"][0]["config"]
        keys[name] = config["s3.access-key-id"]
        # The session name carries the principal: what CloudTrail's userIdentity.arn ends with,
        # and what STS says of the credentials (GetCallerIdentity with them).
        call_made = moto.sts_call_for(keys[name])
        assert call_made["session-name"].startswith(f"icegate-r-{name}-"), call_made
        assert call_made["source-identity"] is None and call_made["tags"] == {}
        sts = moto.client("sts", config["s3.access-key-id"], config["s3.secret-access-key"], config["s3.session-token"])
        assert sts.get_caller_identity()["Arn"].endswith("/" + call_made["session-name"])
    # Each principal gets its own session, never another's cached one.
    assert keys["alice-analyst"] != keys["bob-analyst"]

    # Tags and source identity, where the role's trust policy allows them (the profile says so).
    profile = s3_profile(moto)
    profile["sts"] = {**profile["sts"], "session-tags": True, "source-identity": True}
    status, body = call(server, token, "PUT", "/management/v1/warehouses/lake/storage-profile", profile)
    assert status == 200, body
    assert (body["storage-profile"]["sts-session-tags"], body["storage-profile"]["sts-source-identity"]) == (True, True)
    try:
        status, loaded = vend(server, alice, prefix)
        assert status == 200, loaded
        call_made = moto.sts_call_for(loaded["storage-credentials"][0]["config"]["s3.access-key-id"])
        status, principal = call(server, token, "GET", "/management/v1/principals/alice-analyst")
        assert call_made["source-identity"] == principal["id"]
        assert call_made["tags"] == {
            "icegate-principal": "alice-analyst", "icegate-principal-id": principal["id"], "icegate-warehouse": "lake"
        }, call_made
    finally:
        status, body = call(server, token, "PUT", "/management/v1/warehouses/lake/storage-profile", s3_profile(moto))
        assert status == 200, body
