"""Soft delete, undrop and purges through real clients (docs/lifecycle.md): a dropped table is
gone from loads and listings at once and its name free, it is listed as deleted and undropped
with its data and its grants (under a new name when the old one is taken); a purge deletes the
table's files within seconds, as a task, and nothing of a neighbour's; a purge delay keeps the
files and lets undrop bring the table back; registering the dropped table's metadata again ends
its entry's undrop; lifecycle policy on a namespace is for its admins; and two replicas on one
PostgreSQL database purge many tables, each exactly once."""

import json
import os
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError

from conftest import Server
from test_access_reviews import principal
from test_audit import search, status_of
from test_auth_clients import ADMIN_ID, ADMIN_SECRET, SCHEMA, admin_call, admin_token, secured_env


@pytest.fixture
def lifecycle(tmp_path, backend):
    server = Server(tmp_path, [], secured_env(backend)).start()
    try:
        yield server
    finally:
        server.stop()


def admin_catalog(server):
    return load_catalog("admin", type="rest", uri=server.uri, warehouse="default", credential=f"{ADMIN_ID}:{ADMIN_SECRET}")


def rows(ids):
    return pa.table({"id": pa.array(ids, pa.int64())})


def local(uri):
    return Path(urllib.parse.urlsplit(uri).path)


def deleted(server, token, **query):
    path = f"/management/v1/warehouses/default/deleted?{urllib.parse.urlencode(query)}"
    return admin_call(server, token, "GET", path)["deleted"]


def undrop(server, token, body):
    return admin_call(server, token, "POST", "/management/v1/warehouses/default/undrop", body)


def wait_for(check, what, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def purge_tasks(server, token):
    path = "/management/v1/tasks?kind=purge&pageSize=1000"
    return admin_call(server, token, "GET", path)["tasks"]


def test_a_dropped_table_is_undropped_with_its_data_and_grants(lifecycle):
    token = admin_token(lifecycle)
    catalog = admin_catalog(lifecycle)
    catalog.create_namespace("db")
    table = catalog.create_table("db.orders", schema=SCHEMA)
    table.append(rows([1, 2, 3]))
    reader_token, reader = principal(
        lifecycle, token, "reader", "readers", "read",
        {"type": "table", "warehouse": "default", "namespace": ["db"], "name": "orders"},
    )
    table_dir = local(table.metadata.location)
    catalog.drop_table("db.orders")

    # Gone from loads and listings at once; its files stay (a drop without purge).
    with pytest.raises(NoSuchTableError):
        catalog.load_table("db.orders")
    assert catalog.list_tables("db") == []
    assert any(table_dir.rglob("*.parquet"))
    (entry,) = deleted(lifecycle, token)
    assert (entry["namespace"], entry["name"], entry["kind"], entry["state"]) == (["db"], "orders", "table", "deleted")
    assert entry["restorable"] and entry["purge-due-ms"] is None and entry["dropped-by"] == "admin", entry
    hold = entry["restorable-until-ms"] - entry["dropped-at-ms"]
    assert abs(hold - 7 * 86_400_000) < 5_000, "the default hold is 7 days"

    # The name is free at once: a new table of that name, at a location of its own.
    again = catalog.create_table("db.orders", schema=SCHEMA)
    again.append(rows([9]))
    assert again.metadata.location != table.metadata.location
    # Undrop into the taken name is refused and changes nothing; under a new name it works.
    body = {"namespace": ["db"], "name": "orders"}
    assert status_of(lifecycle, token, "POST", "/management/v1/warehouses/default/undrop", body) == 409
    restored = undrop(lifecycle, token, {**body, "new-name": "orders_restored"})
    assert restored["id"] == entry["id"] and restored["name"] == "orders_restored", restored
    back = catalog.load_table("db.orders_restored")
    assert sorted(back.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert back.metadata.location == table.metadata.location
    assert catalog.load_table("db.orders").scan().to_arrow()["id"].to_pylist() == [9]
    assert deleted(lifecycle, token) == []
    # Its grant came back with it: the reader reads the restored table, not the new one.
    reader_catalog = load_catalog(
        "reader", type="rest", uri=lifecycle.uri, warehouse="default",
        credential=f"{reader['client-id']}:{reader['client-secret']}",
    )
    assert reader_catalog.load_table("db.orders_restored").scan().to_arrow().num_rows == 3
    with pytest.raises(NoSuchTableError):
        reader_catalog.load_table("db.orders")
    # Undrop is the warehouse admins': the reader is refused, and both are in the audit trail.
    catalog.drop_table("db.orders")
    assert status_of(lifecycle, reader_token, "GET", "/management/v1/warehouses/default/deleted") in (403, 404)
    assert status_of(lifecycle, reader_token, "POST", "/management/v1/warehouses/default/undrop", body) in (403, 404)
    assert catalog.list_tables("db") == [("db", "orders_restored")]
    outcomes = sorted((r["record"]["actor"]["name"], r["record"]["outcome"]) for r in search(lifecycle, token, action="undrop"))
    assert ("admin", "applied") in outcomes and ("reader", "refused") in outcomes, outcomes


def test_a_purge_deletes_the_tables_files_as_a_task_and_nothing_else(lifecycle):
    token = admin_token(lifecycle)
    catalog = admin_catalog(lifecycle)
    catalog.create_namespace("db")
    doomed = catalog.create_table("db.doomed", schema=SCHEMA)
    for batch in range(3):
        doomed.append(rows([batch]))
    # A neighbour whose directory shares the doomed one's name as a prefix.
    neighbour = catalog.create_table("db.doomed_2", schema=SCHEMA)
    neighbour.append(rows([7]))
    doomed_dir, neighbour_dir = local(doomed.metadata.location), local(neighbour.metadata.location)
    files = [p for p in doomed_dir.rglob("*") if p.is_file()]
    assert len(files) >= 9
    size = sum(p.stat().st_size for p in files)

    catalog.purge_table("db.doomed")
    assert not catalog.table_exists("db.doomed")
    wait_for(lambda: not doomed_dir.exists(), "the purge to delete the table's directory")
    (task,) = wait_for(lambda: [t for t in purge_tasks(lifecycle, token) if t["state"] == "done"], "the purge task")
    assert task["result"]["files"] == len(files) and task["progress"]["done"] == len(files), task
    assert task["result"]["bytes"] == size and task["progress"]["bytes"] == size, task
    assert task["attempts"] == 1 and task["reason"] == "the table was dropped with purgeRequested"
    assert deleted(lifecycle, token) == [], "a purged table is no longer kept"
    assert catalog.load_table("db.doomed_2").scan().to_arrow()["id"].to_pylist() == [7]
    assert any(neighbour_dir.rglob("*.parquet"))
    with urllib.request.urlopen(f"{lifecycle.uri}/metrics", timeout=10) as r:
        exposition = r.read().decode()
    counters = dict(line.rsplit(" ", 1) for line in exposition.splitlines() if line.startswith("icegate_reclaimed_"))
    assert int(counters["icegate_reclaimed_files_total"]) == len(files), counters
    assert int(counters["icegate_reclaimed_bytes_total"]) == task["result"]["bytes"], counters


def test_a_purge_delay_keeps_the_files_and_undrop_brings_the_table_back(lifecycle):
    token = admin_token(lifecycle)
    catalog = admin_catalog(lifecycle)
    settings = {"lifecycle.purge.delay": "1h", "lifecycle.soft-delete.hold": "2d"}
    warehouse = admin_call(lifecycle, token, "PUT", "/management/v1/warehouses/default/settings", settings)
    assert warehouse["settings"]["lifecycle.purge.delay"] == "1h", warehouse
    bad = {"lifecycle.purge.delay": "soon"}
    assert status_of(lifecycle, token, "PUT", "/management/v1/warehouses/default/settings", bad) == 400
    catalog.create_namespace("db")
    table = catalog.create_table("db.kept", schema=SCHEMA)
    table.append(rows([1, 2]))
    table_dir = local(table.metadata.location)
    catalog.purge_table("db.kept")
    (entry,) = deleted(lifecycle, token)
    assert abs(entry["purge-due-ms"] - entry["dropped-at-ms"] - 3_600_000) < 5_000 and entry["restorable"], entry
    (task,) = purge_tasks(lifecycle, token)
    assert task["state"] == "queued" and task["not-before-ms"] == entry["purge-due-ms"], task
    time.sleep(2)
    assert any(table_dir.rglob("*.parquet")), "nothing is deleted before the purge is due"
    undrop(lifecycle, token, {"namespace": ["db"], "name": "kept"})
    assert catalog.load_table("db.kept").scan().to_arrow().num_rows == 2
    # The purge that was queued is called off; a second drop with purge waits its own delay.
    assert admin_call(lifecycle, token, "GET", f"/management/v1/tasks/{task['id']}")["state"] == "cancelled"
    catalog.purge_table("db.kept")
    (second,) = deleted(lifecycle, token)
    (queued,) = [t for t in purge_tasks(lifecycle, token) if t["state"] == "queued"]
    assert queued["not-before-ms"] == second["purge-due-ms"] > entry["purge-due-ms"], (queued, second, entry)
    undrop(lifecycle, token, {"namespace": ["db"], "name": "kept"})
    assert any(table_dir.rglob("*.parquet"))

    # Moving a table out from under its namespace's longer purge delay takes admin there.
    catalog.create_namespace("scratch")
    mover_token, _ = principal(
        lifecycle, token, "mover", "movers", "create", {"type": "namespace", "warehouse": "default", "namespace": ["scratch"]},
    )
    admin_call(lifecycle, token, "POST", "/management/v1/grants", {
        "role": "movers", "privilege": "drop",
        "securable": {"type": "table", "warehouse": "default", "namespace": ["db"], "name": "kept"}})
    admin_call(lifecycle, token, "POST", "/management/v1/grants", {
        "role": "movers", "privilege": "read",
        "securable": {"type": "table", "warehouse": "default", "namespace": ["db"], "name": "kept"}})
    prefix = admin_call(lifecycle, token, "GET", "/v1/config?warehouse=default")["overrides"]["prefix"]
    scratch = f"/v1/{prefix}/namespaces/scratch/properties"
    admin_call(lifecycle, token, "POST", scratch, {"updates": {"lifecycle.purge.delay": "0s"}})
    move = {"source": {"namespace": ["db"], "name": "kept"}, "destination": {"namespace": ["scratch"], "name": "kept"}}
    assert status_of(lifecycle, mover_token, "POST", f"/v1/{prefix}/tables/rename", move) == 403
    assert catalog.list_tables("scratch") == []
    # The same move under the same delay is the mover's to make.
    admin_call(lifecycle, token, "POST", scratch, {"removals": ["lifecycle.purge.delay"]})
    assert status_of(lifecycle, mover_token, "POST", f"/v1/{prefix}/tables/rename", move) == 200
    move = {"source": move["destination"], "destination": move["source"]}
    admin_call(lifecycle, token, "POST", f"/v1/{prefix}/tables/rename", move)
    # A table's uuid is not another's: assign-uuid to a new one is refused.
    commit = {"requirements": [], "updates": [{"action": "assign-uuid", "uuid": "00000000-0000-4000-8000-000000000001"}]}
    assert status_of(lifecycle, token, "POST", f"/v1/{prefix}/namespaces/db/tables/kept", commit) == 400

    # A namespace's own hold of zero makes its drops final; setting it takes admin there.
    writer_token, _ = principal(
        lifecycle, token, "writer", "writers", "write", {"type": "namespace", "warehouse": "default", "namespace": ["db"]},
    )
    update = {"updates": {"lifecycle.soft-delete.hold": "0s"}}
    path = f"/v1/{prefix}/namespaces/db/properties"
    assert status_of(lifecycle, writer_token, "POST", path, update) == 403
    assert status_of(lifecycle, token, "POST", path, {"updates": {"lifecycle.soft-delete.hold": "forever"}}) == 400
    assert status_of(lifecycle, token, "POST", path, {"updates": {"lifecycle.typo": "1d"}}) == 400
    admin_call(lifecycle, token, "POST", path, update)
    catalog.create_table("db.scratch", schema=SCHEMA)
    catalog.drop_table("db.scratch")
    assert [e["name"] for e in deleted(lifecycle, token)] == [], "a hold of zero keeps nothing"


def test_registering_a_dropped_tables_metadata_again_ends_its_undrop(lifecycle):
    token = admin_token(lifecycle)
    catalog = admin_catalog(lifecycle)
    catalog.create_namespace("db")
    table = catalog.create_table("db.source", schema=SCHEMA)
    table.append(rows([1]))
    metadata_location = catalog.load_table("db.source").metadata_location
    catalog.drop_table("db.source")
    registered = catalog.register_table("db.adopted", metadata_location)
    assert registered.scan().to_arrow().num_rows == 1
    (entry,) = deleted(lifecycle, token)
    assert not entry["restorable"] and "registered again as db.adopted" in entry["not-restorable"], entry
    body = {"namespace": ["db"], "name": "source"}
    assert status_of(lifecycle, token, "POST", "/management/v1/warehouses/default/undrop", body) == 409
    assert catalog.list_tables("db") == [("db", "adopted")]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_two_replicas_purge_many_tables_each_exactly_once(tmp_path, backend):
    env = secured_env(backend, ICEGATE__CATALOG__DEFAULT_WAREHOUSE_ROOT=f"file://{tmp_path / 'warehouse'}")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = Server(tmp_path / "a", [], env).start()
    second = Server(tmp_path / "b", [], env).start()
    try:
        token = admin_token(first)
        catalog = admin_catalog(first)
        catalog.create_namespace("db")
        dirs = []
        for i in range(24):
            table = catalog.create_table(f"db.t{i}", schema=SCHEMA)
            table.append(rows([i]))
            dirs.append(local(table.metadata.location))
        # Drops through both replicas: both work the one queue.
        other = admin_catalog(second)
        for i in range(24):
            (catalog if i % 2 else other).purge_table(f"db.t{i}")
        wait_for(lambda: not any(d.exists() for d in dirs), "every table's files to be purged", seconds=60)
        tasks = wait_for(
            lambda: (lambda ts: ts if len(ts) == 24 and all(t["state"] == "done" for t in ts) else None)(
                purge_tasks(first, token)
            ),
            "24 purge tasks done",
        )
        assert all(t["attempts"] == 1 for t in tasks), [t["attempts"] for t in tasks]
        assert len({t["tabular-id"] for t in tasks}) == 24
        # Each table's purge is in the audit trail once, as the system, with its task.
        purged = [
            r["record"] for r in search(first, token, pageSize=1000) if (r["record"].get("change") or {}).get("purged")
        ]
        assert sorted(r["change"]["tabular-id"] for r in purged) == sorted(t["tabular-id"] for t in tasks)
        assert all("purge" in str(r["actor"]) for r in purged), purged[0]["actor"]
    finally:
        first.stop()
        second.stop()


def files_under(directory):
    return {str(p) for p in Path(directory).rglob("*") if p.is_file() and not p.name.endswith(".metadata.json")}


def needed_by(table):
    """Every file the table's snapshots reach: manifest lists, manifests, every entry's file."""
    needed = set()
    for snapshot in table.snapshots():
        needed.add(str(local(snapshot.manifest_list)))
        for manifest in snapshot.manifests(table.io):
            needed.add(str(local(manifest.manifest_path)))
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                needed.add(str(local(entry.data_file.file_path)))
    return needed


def expiry_tasks(server, token, state="done"):
    path = f"/management/v1/tasks?kind=expire-snapshots&state={state}&pageSize=1000"
    return admin_call(server, token, "GET", path)["tasks"]


def test_the_catalog_expires_snapshots_by_the_tables_policy(lifecycle):
    token = admin_token(lifecycle)
    catalog = admin_catalog(lifecycle)
    catalog.create_namespace("db")
    policy = {"history.expire.max-snapshot-age-ms": "1000", "history.expire.min-snapshots-to-keep": "3"}
    table = catalog.create_table("db.events", schema=SCHEMA, properties=policy)
    sibling = catalog.create_table("db.events_2", schema=SCHEMA)
    sibling.append(rows([100]))
    sibling_files = files_under(local(sibling.metadata.location))
    for i in range(6):
        table.append(rows([i]))
    table.overwrite(rows([42, 43]))
    history = [s.snapshot_id for s in table.snapshots()]
    assert len(history) == 8, "six appends, and an overwrite's delete and append"
    table_dir = local(table.metadata.location)

    # The commits queued the expiry; it runs once the snapshots are a second old, without a client.
    (task,) = wait_for(lambda: expiry_tasks(lifecycle, token), "the catalog's snapshot expiry", seconds=60)
    assert task["result"]["expired-snapshots"] == 5 and task["result"]["files"] > 0, task
    table = catalog.load_table("db.events")
    kept = [s.snapshot_id for s in table.snapshots()]
    assert kept == history[-3:], (kept, history)
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [42, 43]
    assert sorted(table.scan(snapshot_id=kept[0]).to_arrow()["id"].to_pylist()) == [0, 1, 2, 3, 4, 5]
    assert table.snapshot_by_id(history[0]) is None, "time travel to an expired snapshot finds none"
    # Exactly the files the retained snapshots need are left; the sibling's are all there.
    assert files_under(table_dir) == needed_by(table)
    assert files_under(local(sibling.metadata.location)) == sibling_files
    assert task["result"]["kept-foreign-files"] == 0
    # Every file it deleted is in the audit trail, batch by batch, as the system doing the task.
    records = [r["record"] for r in search(lifecycle, token, namespace="db", name="events", outcome="applied")]
    batches = [r["change"] for r in records if "expired-files-deleted" in r["change"]]
    assert sum(len(b["locations"]) for b in batches) == task["result"]["files"], batches
    actors = [r["actor"] for r in records if "expired-files-deleted" in r["change"]]
    assert actors and all(a["kind"] == "system" and "expire-snapshots" in json.dumps(a) for a in actors), actors

    # Appends keep coming while expiries run: none is lost, and the expiry keeps up.
    for i in range(8):
        catalog.load_table("db.events").append(rows([100 + i]))
        time.sleep(0.3)
    wait_for(
        lambda: len(catalog.load_table("db.events").snapshots()) == 3
        and not expiry_tasks(lifecycle, token, "queued") and not expiry_tasks(lifecycle, token, "running"),
        "the expiry to catch up", seconds=90,
    )
    table = catalog.load_table("db.events")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [42, 43] + list(range(100, 108))
    present, needed = files_under(table_dir), needed_by(table)
    assert present == needed, (sorted(present - needed), sorted(needed - present))
    # gc.enabled=false: nothing is expired, whatever the age.
    table.transaction().set_properties({"gc.enabled": "false"}).commit_transaction()
    for i in range(3):
        catalog.load_table("db.events").append(rows([200 + i]))
    time.sleep(3)
    assert len(catalog.load_table("db.events").snapshots()) == 6, "three kept, three new"


def test_expiry_never_deletes_a_file_another_table_owns(lifecycle):
    token = admin_token(lifecycle)
    catalog = admin_catalog(lifecycle)
    catalog.create_namespace("db")
    victim = catalog.create_table("db.victim", schema=SCHEMA)
    victim.append(rows([1, 2, 3]))
    victim_files = [task.file.file_path for task in victim.scan().plan_files()]
    policy = {"history.expire.max-snapshot-age-ms": "1000", "history.expire.min-snapshots-to-keep": "1"}
    borrower = catalog.create_table("db.borrower", schema=SCHEMA, properties=policy)
    borrower.add_files(victim_files)
    assert borrower.scan().to_arrow().num_rows == 3, "the borrower's manifest lists the victim's file"
    borrower.overwrite(rows([9]))
    (task,) = wait_for(lambda: expiry_tasks(lifecycle, token), "the borrower's expiry", seconds=60)
    assert task["result"]["expired-snapshots"] >= 1 and task["result"]["kept-foreign-files"] >= 1, task
    for path in victim_files:
        assert local(path).exists(), path
    assert catalog.load_table("db.victim").scan().to_arrow().num_rows == 3
    assert catalog.load_table("db.borrower").scan().to_arrow()["id"].to_pylist() == [9]
