"""Legal holds through a real client: while a hold stands, PyIceberg cannot drop, purge or move
the held table out of its namespace (its files stay on disk), a namespace hold covers the tables
below it and the namespace itself, a warehouse hold keeps the warehouse; a principal who may drop
the table neither places nor lifts holds; lifting with `governance.hold.two_person` takes a
second admin; and every step is in the audit trail."""

import os
import urllib.parse
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from conftest import Server
from test_access_reviews import principal
from test_audit import search, status_of
from test_auth_clients import ADMIN_ID, ADMIN_SECRET, SCHEMA, admin_call, admin_token, secured_env


def serve(tmp_path, backend, **extra):
    return Server(tmp_path, [], secured_env(backend, **extra)).start()


@pytest.fixture
def held(tmp_path, backend):
    server = serve(tmp_path, backend)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def two_person(tmp_path, backend):
    server = serve(tmp_path, backend, ICEGATE__GOVERNANCE__HOLD__TWO_PERSON="true")
    try:
        yield server
    finally:
        server.stop()


def place(server, token, securable, reason="matter 2026-117"):
    return admin_call(server, token, "POST", "/management/v1/legal-holds", {"securable": securable, "reason": reason})


def table_ref(namespace, name):
    return {"type": "table", "warehouse": "default", "namespace": namespace, "name": name}


def test_a_held_table_is_not_dropped_purged_or_moved_and_its_files_stay(held):
    admin = load_catalog("admin", type="rest", uri=held.uri, warehouse="default", credential=f"{ADMIN_ID}:{ADMIN_SECRET}")
    admin.create_namespace("db")
    admin.create_namespace("elsewhere")
    table = admin.create_table("db.evidence", schema=SCHEMA)
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    metadata = Path(urllib.parse.urlparse(admin.load_table("db.evidence").metadata_location).path)
    token = admin_token(held)
    # A principal who may drop and write the table, but holds no admin.
    dropper_token, dropper = principal(held, token, "dropper", "droppers", "drop", table_ref(["db"], "evidence"))
    admin_call(held, token, "POST", "/management/v1/grants", {"role": "droppers", "privilege": "write", "securable": table_ref(["db"], "evidence")})
    assert status_of(held, dropper_token, "POST", "/management/v1/legal-holds",
                     {"securable": table_ref(["db"], "evidence"), "reason": "mine"}) == 403

    hold = place(held, token, table_ref(["db"], "evidence"))
    assert (hold["placed-by"], hold["securable"]["name"]) == ("admin", "evidence")
    dropper_catalog = load_catalog(
        "dropper", type="rest", uri=held.uri, warehouse="default",
        credential=f"{dropper['client-id']}:{dropper['client-secret']}",
    )
    for attempt in (lambda: dropper_catalog.purge_table("db.evidence"), lambda: admin.drop_table("db.evidence"),
                    lambda: admin.rename_table("db.evidence", "elsewhere.evidence")):
        with pytest.raises(Exception):
            attempt()
    # Nothing happened: the table is there, where it was, with its files and rows.
    assert admin.load_table("db.evidence").scan().to_arrow().num_rows == 3
    assert metadata.exists() and not admin.table_exists("elsewhere.evidence")
    # Status as a client sees it: 409 with the hold named.
    prefix = admin_call(held, token, "GET", "/v1/config?warehouse=default")["overrides"]["prefix"]
    assert status_of(held, token, "DELETE", f"/v1/{prefix}/namespaces/db/tables/evidence?purgeRequested=true") == 409
    # Renamed within its namespace: allowed, and the hold follows the table.
    admin.rename_table("db.evidence", "db.evidence_2026")
    listed = admin_call(held, token, "GET", "/management/v1/legal-holds?warehouse=default")["holds"]
    assert [(h["id"], h["securable"]["name"]) for h in listed] == [(hold["id"], "evidence_2026")]
    with pytest.raises(Exception):
        admin.drop_table("db.evidence_2026")
    # The dropper cannot lift it either.
    assert status_of(held, dropper_token, "DELETE", f"/management/v1/legal-holds/{hold['id']}") == 403

    assert status_of(held, token, "DELETE", f"/management/v1/legal-holds/{hold['id']}") == 200
    dropper_catalog.purge_table("db.evidence_2026")
    assert not admin.table_exists("db.evidence_2026")
    trail = [(r["record"]["operation"], r["record"]["actor"]["name"], r["record"]["outcome"])
             for action in ("placeLegalHold", "liftLegalHold") for r in search(held, token, action=action)]
    assert trail == [
        ("placeLegalHold", "dropper", "refused"), ("placeLegalHold", "admin", "applied"),
        ("liftLegalHold", "dropper", "refused"), ("liftLegalHold", "admin", "applied"),
    ], trail
    refused = [r["record"] for r in search(held, token, action="dropTable") if r["record"]["outcome"] == "failed"]
    assert refused and all(r["status"] == 409 for r in refused), refused


def test_namespace_and_warehouse_holds_cover_what_is_inside(held, tmp_path):
    admin = load_catalog("admin", type="rest", uri=held.uri, warehouse="default", credential=f"{ADMIN_ID}:{ADMIN_SECRET}")
    admin.create_namespace("legal")
    admin.create_namespace(("legal", "q4"))
    admin.create_table("legal.q4.ledger", schema=SCHEMA)
    token = admin_token(held)
    hold = place(held, token, {"type": "namespace", "warehouse": "default", "namespace": ["legal"]})
    with pytest.raises(Exception):
        admin.drop_table("legal.q4.ledger")
    admin.create_namespace("free")
    with pytest.raises(Exception):
        admin.rename_table("legal.q4.ledger", "free.ledger")
    admin.create_namespace(("legal", "empty"))
    with pytest.raises(Exception):
        admin.drop_namespace(("legal", "empty"))
    assert admin.table_exists("legal.q4.ledger") and ("legal", "empty") in admin.list_namespaces("legal")
    # Outside the held namespace: as ever.
    admin.create_table("free.scratch", schema=SCHEMA)
    admin.drop_table("free.scratch")
    admin_call(held, token, "DELETE", f"/management/v1/legal-holds/{hold['id']}")
    admin.drop_namespace(("legal", "empty"))

    # A warehouse hold keeps the (empty) warehouse itself.
    root = tmp_path / "archive"
    root.mkdir()
    admin_call(held, token, "POST", "/management/v1/warehouses", {"name": "archive", "storage-root": f"file://{root}"})
    wh = place(held, token, {"type": "warehouse", "warehouse": "archive"})
    assert status_of(held, token, "DELETE", "/management/v1/warehouses/archive") == 409
    assert [h["id"] for h in admin_call(held, token, "GET", "/management/v1/legal-holds")["holds"]] == [wh["id"]]
    admin_call(held, token, "DELETE", f"/management/v1/legal-holds/{wh['id']}")
    assert status_of(held, token, "DELETE", "/management/v1/warehouses/archive") == 200


def test_two_person_lifting_takes_a_second_admin(two_person):
    admin = load_catalog("admin", type="rest", uri=two_person.uri, warehouse="default", credential=f"{ADMIN_ID}:{ADMIN_SECRET}")
    admin.create_namespace("db")
    admin.create_table("db.t", schema=SCHEMA)
    token = admin_token(two_person)
    second, _ = principal(two_person, token, "second-admin", "admins2", "admin", {"type": "server"})
    hold = place(two_person, token, table_ref(["db"], "t"))
    path = f"/management/v1/legal-holds/{hold['id']}"
    asked = admin_call(two_person, token, "DELETE", path)
    assert asked["lift-requested-by"] == "admin"
    assert status_of(two_person, token, "DELETE", path) == 409  # not the same admin twice
    with pytest.raises(Exception):
        admin.drop_table("db.t")  # still held while asked for
    assert status_of(two_person, second, "DELETE", path) == 200
    admin.drop_table("db.t")
    changes = [r["record"]["change"] for r in search(two_person, token, action="liftLegalHold") if r["record"]["outcome"] == "applied"]
    admin_id = admin_call(two_person, token, "GET", "/management/v1/principals/admin")["id"]
    assert [(c.get("lift-requested"), c.get("lifted"), c.get("requested-by-id")) for c in changes] == [
        (True, None, None), (None, True, admin_id)
    ]


def test_a_held_table_is_not_replaced_by_registration_nor_are_its_files_expired(held):
    admin = load_catalog("admin", type="rest", uri=held.uri, warehouse="default", credential=f"{ADMIN_ID}:{ADMIN_SECRET}")
    admin.create_namespace("db")
    table = admin.create_table("db.kept", schema=SCHEMA)
    first_metadata = table.metadata_location
    table.append(pa.table({"id": pa.array([1], pa.int64())}))
    token = admin_token(held)
    place(held, token, table_ref(["db"], "kept"))
    prefix = admin_call(held, token, "GET", "/v1/config?warehouse=default")["overrides"]["prefix"]
    # Registering its first metadata over it would roll it back: refused, nothing changed.
    status = status_of(held, token, "POST", f"/v1/{prefix}/namespaces/db/register",
                       {"name": "kept", "metadata-location": first_metadata, "overwrite": True})
    assert status == 409
    assert len(admin.load_table("db.kept").snapshots()) == 1
    # Commits that would have icegate expire old metadata files keep them while the hold stands
    # (through the REST API: PyIceberg would delete them itself, with the client's own access).
    metadata_dir = Path(urllib.parse.urlparse(first_metadata).path).parent
    commit = f"/v1/{prefix}/namespaces/db/tables/kept"

    def set_properties(properties):
        admin_call(held, token, "POST", commit, {"requirements": [], "updates": [{"action": "set-properties", "updates": properties}]})

    set_properties({"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "1"})
    before = sorted(p.name for p in metadata_dir.glob("*.metadata.json"))
    for i in range(3):
        set_properties({"n": str(i)})
    after = sorted(p.name for p in metadata_dir.glob("*.metadata.json"))
    assert set(before) <= set(after) and len(after) == len(before) + 3, (before, after)
    # Lifted, the next commit expires the file that falls out of the log as the table asks (a
    # new file written, one deleted; those that fell out while held are left to orphan cleanup).
    (listed,) = admin_call(held, token, "GET", "/management/v1/legal-holds?warehouse=default")["holds"]
    admin_call(held, token, "DELETE", f"/management/v1/legal-holds/{listed['id']}")
    set_properties({"n": "last"})
    assert len(list(metadata_dir.glob("*.metadata.json"))) == len(after)


def test_a_lapsed_lift_request_does_not_stand_for_its_asker(two_person):
    admin = load_catalog("admin", type="rest", uri=two_person.uri, warehouse="default", credential=f"{ADMIN_ID}:{ADMIN_SECRET}")
    admin.create_namespace("db")
    admin.create_table("db.t", schema=SCHEMA)
    token = admin_token(two_person)
    table_admin, _ = principal(two_person, token, "table-admin", "table-admins", "admin", table_ref(["db"], "t"))
    hold = place(two_person, token, table_ref(["db"], "t"))
    path = f"/management/v1/legal-holds/{hold['id']}"
    assert admin_call(two_person, table_admin, "DELETE", path)["lift-requested-by"] == "table-admin"
    # The asker loses admin there: its request no longer counts, and the next admin's DELETE is
    # a request of its own, not the second half of a lift.
    admin_call(two_person, token, "DELETE", "/management/v1/grants",
               {"role": "table-admins", "privilege": "admin", "securable": table_ref(["db"], "t")})
    assert admin_call(two_person, token, "DELETE", path)["lift-requested-by"] == "admin"
    with pytest.raises(Exception):
        admin.drop_table("db.t")
    # Bounded, printable reasons only.
    assert status_of(two_person, token, "POST", "/management/v1/legal-holds",
                     {"securable": table_ref(["db"], "t"), "reason": "x\u202eevil"}) == 400
    assert status_of(two_person, token, "POST", "/management/v1/legal-holds",
                     {"securable": table_ref(["db"], "t"), "reason": "x" * 1001}) == 400
