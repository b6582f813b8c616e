"""The audit trail through real clients: a PyIceberg session's changes are recorded in order,
`icegate audit verify` (run beside the server, with its configuration) says the chain holds, and
after a record is edited behind the catalog's back it names that record and exits 1. With
authentication on, every request of a principal is recorded with who it was (tokens issued and
refused, reads, refusals), `GET /management/v1/audit` finds them by its filters and pages, only
auditors read it, and a warehouse can stop recording reads but never refusals."""

import hashlib
import os
import sqlite3
import subprocess
import urllib.parse

import json
import urllib.error
import urllib.request

import pyarrow as pa
import pytest
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from conftest import icegate_bin
from test_auth_clients import ADMIN_ID, ADMIN_SECRET, SCHEMA, admin_call, admin_token, reader_of, secured  # noqa: F401


def verify(cwd, env):
    return subprocess.run(
        [icegate_bin(), "audit", "verify"],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_pyiceberg_session_is_recorded_and_verified(icegate, backend, tmp_path):
    catalog = load_catalog("icegate", type="rest", uri=icegate.uri, warehouse="default")
    catalog.create_namespace("shop")
    table = catalog.create_table("shop.orders", schema=Schema(NestedField(1, "id", LongType(), required=False)))
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    table.append(pa.table({"id": pa.array([3], pa.int64())}))

    done = verify(tmp_path, backend)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the chain holds" in done.stdout, done.stdout
    # Exported as JSON Lines, the chain checks outside the server: every hash is SHA-256 of the
    # one before, a newline and the record's text.
    exported = tmp_path / "audit.jsonl"
    done = subprocess.run(
        [icegate_bin(), "audit", "export", "--out", str(exported)],
        cwd=tmp_path, env={**os.environ, **backend}, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    previous = "0" * 64
    for number, line in enumerate(lines, start=1):
        assert line["seq"] == number
        assert line["hash"] == hashlib.sha256(f"{previous}\n{line['text']}".encode()).hexdigest(), line
        assert json.loads(line["text"]) == line["record"]
        previous = line["hash"]
    assert [l["record"]["operation"] for l in lines if l["record"]["outcome"] == "applied"][-4:] == [
        "createNamespace", "createTable", "updateTable", "updateTable"
    ]
    assert any(l["record"]["operation"] == "startUp" for l in lines)
    if backend:
        return  # PostgreSQL: the records are read by the store tests; the chain holds here too
    database = tmp_path / "icegate-data" / "catalog.db"
    with sqlite3.connect(database) as db:
        operations = [
            row[0] for row in db.execute("SELECT operation FROM audit_log WHERE outcome = 'applied' ORDER BY seq")
        ]
    assert operations[-4:] == ["createNamespace", "createTable", "updateTable", "updateTable"], operations

    # Behind the catalog's back (the database file's owner): the guard removed, a record edited.
    icegate.stop()
    with sqlite3.connect(database) as db:
        db.execute("DROP TRIGGER audit_log_no_update")
        seq = db.execute("SELECT seq FROM audit_log WHERE operation = 'createTable'").fetchone()[0]
        db.execute("UPDATE audit_log SET record = replace(record, 'applied', 'refused') WHERE seq = ?", (seq,))
    done = verify(tmp_path, backend)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"breaks at record {seq}" in done.stderr, done.stderr


def search(server, token, **filters):
    """Every record matching `filters`, following the pages (`pageSize` small to page)."""
    records, query = [], {"pageSize": 3, **filters}
    while True:
        page = admin_call(server, token, "GET", f"/management/v1/audit?{urllib.parse.urlencode(query)}")
        records += page["records"]
        if "next-page-token" not in page:
            return records
        query["pageToken"] = page["next-page-token"]


def status_of(server, token, method, path, body=None):
    try:
        admin_call(server, token, method, path, body)
        return 200
    except urllib.error.HTTPError as e:
        return e.code


def test_a_principals_session_is_recorded_and_read_by_auditors_only(secured):
    admin = load_catalog("admin", type="rest", uri=secured.uri, warehouse="default", credential=f"{ADMIN_ID}:{ADMIN_SECRET}")
    admin.create_namespace("db")
    admin.create_table("db.shared", schema=SCHEMA).append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    admin.create_table("db.private", schema=SCHEMA)
    token = admin_token(secured)
    client_id, secret = reader_of(secured, token, "shared")

    # The start-up: its configuration's digest, and its settings without the secrets.
    (startup,) = search(secured, token, action="startUp")
    event = startup["record"]["events"][0]
    assert event["kind"] == "startup" and len(event["config-digest"]) == 64
    assert event["settings"]["auth"]["mode"] == "required"
    assert ADMIN_SECRET not in startup["text"]

    # The reader's session: a token, a listing, a load, a table it cannot see.
    reader = load_catalog("reader", type="rest", uri=secured.uri, warehouse="default", credential=f"{client_id}:{secret}")
    assert reader.list_tables("db") == [("db", "shared")]
    assert reader.load_table("db.shared").scan().to_arrow().num_rows == 2
    with pytest.raises(NoSuchTableError):
        reader.load_table("db.private")
    # A wrong secret: refused, recorded with the client id presented (never the secret).
    data = f"grant_type=client_credentials&client_id={client_id}&client_secret=wrong-{secret}".encode()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(f"{secured.uri}/v1/oauth/tokens", data=data), timeout=10)
    assert refused.value.code == 401
    # A bearer token that is no token: refused, recorded as unauthenticated.
    assert status_of(secured, "not-a-token", "GET", "/management/v1/warehouses") == 401

    records = search(secured, token, principal="reader")
    operations = [(r["record"]["operation"], r["record"]["outcome"]) for r in records]
    assert operations[0] == ("getToken", "allowed"), operations
    assert ("listTables", "allowed") in operations
    loads = [r["record"] for r in records if r["record"]["operation"] == "loadTable"]
    assert [(l["subject"]["namespace"], l["subject"]["name"], l["outcome"]) for l in loads] == [
        (["db"], "shared", "allowed"),
        (["db"], "private", "refused"),
    ]
    assert loads[1]["decisions"][0]["outcome"] == "hidden"
    # The grant that decided: the reader's role's grant of read on the table.
    decided = loads[0]["decisions"][-1]
    assert (decided["outcome"], decided["granted-by"]) == ("granted", "read"), decided
    assert (decided["grant"]["role"], decided["grant"]["privilege"], decided["grant"]["on"]) == ("readers", "read", "table")
    assert loads[1]["decisions"][0]["grant"] is None
    assert all(r["record"]["actor"]["kind"] == "principal" for r in records)
    assert all(r["record"]["actor"]["authenticated"]["kind"] == "icegate-token" for r in records)
    seqs = [r["seq"] for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    (bad_secret,) = search(secured, token, action="getToken", outcome="refused")
    assert bad_secret["record"]["events"][0]["client-id"] == client_id
    assert secret not in bad_secret["text"]
    strangers = search(secured, token, principal="unauthenticated")
    assert [r["record"]["operation"] for r in strangers] == ["getToken", "listWarehouses"]
    assert strangers[1]["record"]["events"][0]["kind"] == "unauthenticated"
    assert "not-a-token" not in strangers[1]["text"]
    # Filters: the table's records, by namespace and name.
    about_shared = search(secured, token, warehouse="default", namespace="db", name="shared")
    assert about_shared and all(
        (r["record"]["subject"]["namespace"], r["record"]["subject"]["name"]) == (["db"], "shared") for r in about_shared
    )
    # A grant's record says what was granted, to which role, on what.
    (granted,) = [r["record"]["change"] for r in about_shared if r["record"]["operation"] == "grant"]
    assert (granted["granted"], granted["role"], granted["securable"]["name"]) == ("read", "readers", "shared")
    # By name alone: the table, never a namespace of that name.
    admin.create_namespace(("db", "shared"))
    by_name = search(secured, token, name="shared")
    assert {r["record"]["subject"]["kind"] for r in by_name} == {"table"}, by_name
    (nested,) = search(secured, token, namespace="db.shared")
    assert nested["record"]["subject"] == {"warehouse-id": nested["record"]["subject"]["warehouse-id"],
                                           "kind": "namespace", "namespace": ["db", "shared"], "name": None}
    assert {"createTable", "updateTable", "loadTable"} <= {r["record"]["operation"] for r in about_shared}

    # Only auditors read the trail: the reader may not; an auditor of the warehouse reads it
    # when it names the warehouse, and not the whole trail.
    reader_token = urllib.request.urlopen(
        urllib.request.Request(
            f"{secured.uri}/v1/oauth/tokens",
            data=f"grant_type=client_credentials&client_id={client_id}&client_secret={secret}".encode(),
        ),
        timeout=10,
    )
    reader_token = json.load(reader_token)["access_token"]
    assert status_of(secured, reader_token, "GET", "/management/v1/audit") == 403
    auditor = admin_call(secured, token, "POST", "/management/v1/principals", {"name": "auditor"})
    admin_call(secured, token, "POST", "/management/v1/roles", {"name": "auditors"})
    admin_call(secured, token, "PUT", "/management/v1/roles/auditors/principals/auditor")
    admin_call(
        secured, token, "POST", "/management/v1/grants",
        {"role": "auditors", "privilege": "audit", "securable": {"type": "warehouse", "warehouse": "default"}},
    )
    data = f"grant_type=client_credentials&client_id={auditor['client-id']}&client_secret={auditor['client-secret']}"
    with urllib.request.urlopen(urllib.request.Request(f"{secured.uri}/v1/oauth/tokens", data=data.encode()), timeout=10) as r:
        auditor_token = json.load(r)["access_token"]
    assert status_of(secured, auditor_token, "GET", "/management/v1/audit") == 403
    seen = search(secured, auditor_token, warehouse="default")
    assert seen and all(r["record"]["subject"]["warehouse-id"] for r in seen)
    assert not any(r["record"]["operation"] in ("startUp", "getToken") for r in seen)
    # Auditing is not administering: the auditor changes nothing.
    assert status_of(secured, auditor_token, "POST", "/management/v1/grants",
                     {"role": "auditors", "privilege": "read", "securable": {"type": "warehouse", "warehouse": "default"}}) == 403

    # Administering a warehouse is not auditing it: its admin neither reads the trail nor grants
    # `audit`; `audit` is granted on the server or a warehouse only, by server admins.
    keeper = admin_call(secured, token, "POST", "/management/v1/principals", {"name": "keeper"})
    admin_call(secured, token, "POST", "/management/v1/roles", {"name": "keepers"})
    admin_call(secured, token, "PUT", "/management/v1/roles/keepers/principals/keeper")
    admin_call(secured, token, "POST", "/management/v1/grants",
               {"role": "keepers", "privilege": "admin", "securable": {"type": "warehouse", "warehouse": "default"}})
    data = f"grant_type=client_credentials&client_id={keeper['client-id']}&client_secret={keeper['client-secret']}"
    with urllib.request.urlopen(urllib.request.Request(f"{secured.uri}/v1/oauth/tokens", data=data.encode()), timeout=10) as r:
        keeper_token = json.load(r)["access_token"]
    assert status_of(secured, keeper_token, "GET", "/management/v1/audit?warehouse=default") == 403
    audit_grant = {"role": "keepers", "privilege": "audit", "securable": {"type": "warehouse", "warehouse": "default"}}
    assert status_of(secured, keeper_token, "POST", "/management/v1/grants", audit_grant) == 403
    assert status_of(secured, token, "POST", "/management/v1/grants", {
        "role": "keepers", "privilege": "audit", "securable": {"type": "namespace", "warehouse": "default", "namespace": ["db"]}
    }) == 400
    assert status_of(secured, token, "GET", "/management/v1/audit?warehous=default") == 400
    # What a caller sends is bounded in its record; a request's Idempotency-Key is in it.
    request = urllib.request.Request(
        f"{secured.uri}/v1/config?warehouse=default",
        headers={"Authorization": f"Bearer {reader_token}", "x-request-id": "r" * 5000},
    )
    urllib.request.urlopen(request, timeout=10).read()
    (config,) = search(secured, token, principal="reader", action="getConfig")[-1:]
    assert config["record"]["request-id"] == "r" * 128
    prefix = json.loads(urllib.request.urlopen(request, timeout=10).read())["overrides"]["prefix"]
    again = urllib.request.Request(
        f"{secured.uri}/v1/{prefix}/namespaces", data=json.dumps({"namespace": ["db"]}).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                 "Idempotency-Key": "0193a7a1-2b3c-7d4e-8f90-123456789abc"},
    )
    with pytest.raises(urllib.error.HTTPError) as conflict:
        urllib.request.urlopen(again, timeout=10)
    assert conflict.value.code == 409
    (failed,) = search(secured, token, action="createNamespace", outcome="failed")
    assert failed["record"]["idempotency-key"] == "0193a7a1-2b3c-7d4e-8f90-123456789abc"
    assert failed["record"]["status"] == 409

    # Reads can be turned off per warehouse (server admins only); refusals are still recorded.
    settings = {"audit.record-reads": False}
    assert status_of(secured, auditor_token, "PUT", "/management/v1/warehouses/default/settings", settings) == 403
    changed = admin_call(secured, token, "PUT", "/management/v1/warehouses/default/settings", settings)
    assert changed["settings"] == {"audit.record-reads": False}
    assert status_of(secured, token, "PUT", "/management/v1/warehouses/default/settings", {"audit.reads": False}) == 400
    before = len(search(secured, token, principal="reader"))
    assert reader.load_table("db.shared").scan().to_arrow().num_rows == 2
    with pytest.raises(NoSuchTableError):
        reader.load_table("db.private")
    after = search(secured, token, principal="reader")[before:]
    assert [(r["record"]["operation"], r["record"]["outcome"]) for r in after] == [("loadTable", "refused")], after
