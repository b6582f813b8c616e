"""Maintenance run by the catalog through real clients (docs/lifecycle.md): orphan files a
failed writer left are found by a dry run, quarantined (still there), restorable, and deleted
only once their quarantine has passed, leaving exactly what the table's metadata references
and every file of a sibling table whose name shares the prefix; expiry policies are inherited
from a namespace, planned without changing anything, and run on request; maintenance is for
warehouse admins."""

import shutil
import time

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog

from conftest import Server
from test_access_reviews import principal
from test_audit import search, status_of
from test_auth_clients import SCHEMA, admin_call, admin_token, secured_env
from test_lifecycle import admin_catalog, files_under, local, needed_by, rows, wait_for

WAREHOUSE = "/management/v1/warehouses/default"


@pytest.fixture
def maintained(tmp_path, backend):
    # The floors under `older-than` and `quarantine` are lowered so the test runs in seconds.
    env = secured_env(
        backend,
        ICEGATE__LIFECYCLE__ORPHAN__MIN_OLDER_THAN="0s",
        ICEGATE__LIFECYCLE__ORPHAN__MIN_QUARANTINE="0s",
        ICEGATE__LIFECYCLE__ORPHAN__MIN_INTERVAL="0s",
    )
    server = Server(tmp_path, [], env).start()
    try:
        yield server
    finally:
        server.stop()


def maintenance(server, token, verb, body):
    return admin_call(server, token, "POST", f"{WAREHOUSE}/maintenance/{verb}", body)


def run_to_the_end(server, token, body):
    """Runs maintenance for `body`'s scope and waits for every task it queued; their results."""
    outcome = maintenance(server, token, "run", body)
    ids = [t[kind]["task-id"] for t in outcome["tables"] for kind in ("expire-snapshots", "remove-orphans")
           if t.get(kind, {}).get("task-id")]
    assert ids, outcome

    def done(task_id):
        task = admin_call(server, token, "GET", f"/management/v1/tasks/{task_id}")
        # A task that was queued already ran (now) and may have queued its next run.
        return task if task["state"] in ("done", "failed") else None

    results = [wait_for(lambda i=i: done(i), f"task {i}") for i in ids]
    for task in results:
        assert task["state"] == "done", task
    return [task["result"] for task in results]


def quarantine(server, token):
    return admin_call(server, token, "GET", f"{WAREHOUSE}/maintenance/quarantine?pageSize=1000")["files"]


def test_orphans_are_quarantined_restorable_and_removed_after_the_period(maintained):
    token = admin_token(maintained)
    catalog = admin_catalog(maintained)
    settings = {"lifecycle.orphan.older-than": "1s", "lifecycle.orphan.quarantine": "4s"}
    admin_call(maintained, token, "PUT", f"{WAREHOUSE}/settings", settings)
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=SCHEMA)
    for i in range(3):
        table.append(rows([i]))
    table.overwrite(rows([7, 8]))
    # A sibling whose location has the table's as a prefix (`<table>_2`).
    sibling = catalog.create_table("db.events_2", schema=SCHEMA, location=f"{table.location()}_2")
    sibling.append(rows([100]))
    table_dir, sibling_dir = local(table.metadata.location), local(sibling.metadata.location)
    assert str(sibling_dir) == f"{table_dir}_2", (table_dir, sibling_dir)
    sibling_files = files_under(sibling_dir)
    # A failed writer's leftovers: a data file and a manifest list no metadata references.
    real = next(p for p in (table_dir / "data").rglob("*.parquet"))
    orphan_data = table_dir / "data" / "00000-0-failed-writer.parquet"
    orphan_list = table_dir / "metadata" / "snap-1-failed-writer.avro"
    shutil.copy(real, orphan_data)
    shutil.copy(next((table_dir / "metadata").glob("snap-*.avro")), orphan_list)
    time.sleep(1.5)

    # The dry run finds exactly them, and changes nothing.
    (plan,) = maintenance(maintained, token, "plan", {"namespace": ["db"], "table": "events"})["tables"]
    orphans = plan["remove-orphans"]
    assert orphans["would-quarantine"] == 2 and orphans["would-quarantine-bytes"] > 0, plan
    assert plan["expire-snapshots"] == {"policy": None}, "no expiry policy: nothing planned"
    assert orphan_data.exists() and orphan_list.exists()

    # The first run quarantines them: nothing is deleted yet.
    (first,) = run_to_the_end(maintained, token, {"namespace": ["db"], "table": "events", "actions": ["remove-orphans"]})
    assert (first["quarantined"], first["deleted"]) == (2, 0), first
    held = quarantine(maintained, token)
    assert sorted(local(f["location"]).name for f in held) == sorted([orphan_data.name, orphan_list.name]), held
    assert all(f["state"] == "quarantined" for f in held)
    assert orphan_data.exists() and orphan_list.exists()
    # An admin restores one: it is kept for good.
    restore = {"namespace": ["db"], "table": "events", "locations": [f["location"] for f in held if f["location"].endswith(".avro")]}
    assert admin_call(maintained, token, "POST", f"{WAREHOUSE}/maintenance/quarantine/restore", restore)["restored"] == 1

    # Writers keep committing; after the quarantine, the next run deletes the other one only.
    table = catalog.load_table("db.events")
    table.append(rows([9]))
    time.sleep(4.5)
    run_to_the_end(maintained, token, {"namespace": ["db"], "actions": ["remove-orphans"]})
    # (The first run queued its next for when the quarantine ends: that one or this one deleted it.)
    done = admin_call(maintained, token, "GET", "/management/v1/tasks?kind=remove-orphans&state=done&pageSize=100")
    assert sum(t["result"].get("deleted", 0) for t in done["tasks"]) == 1, done
    assert not orphan_data.exists(), "the orphan is gone after its quarantine"
    assert orphan_list.exists(), "the restored file stays"
    left = quarantine(maintained, token)
    assert [f["state"] for f in left] == ["restored"], left
    # What is left is exactly what the table references (and the restored file), and the
    # sibling's files are all there.
    table = catalog.load_table("db.events")
    assert files_under(table_dir) == needed_by(table) | {str(orphan_list)}
    assert files_under(sibling_dir) == sibling_files
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [7, 8, 9]
    for snapshot in table.snapshots():
        table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
    assert catalog.load_table("db.events_2").scan().to_arrow()["id"].to_pylist() == [100]
    # The quarantine, the restore and the deletion are in the audit trail: the first and last
    # as the system doing the task, naming the files.
    records = [r["text"] for r in search(maintained, token, namespace="db", name="events", outcome="applied")]
    deleted = [t for t in records if "orphans-deleted" in t]
    assert len(deleted) == 1 and orphan_data.name in deleted[0] and "system" in deleted[0], deleted
    assert any("orphans-quarantined" in t for t in records) and any("orphans-restored" in t for t in records)


def test_a_namespace_expiry_policy_is_inherited_planned_and_run(maintained):
    token = admin_token(maintained)
    catalog = admin_catalog(maintained)
    catalog.create_namespace("db")
    table = catalog.create_table("db.logs", schema=SCHEMA)
    for i in range(5):
        table.append(rows([i]))
    history = [s.snapshot_id for s in table.snapshots()]
    table_dir = local(table.metadata.location)
    # The namespace's policy: snapshots older than a second go, two are kept.
    policy = {"lifecycle.expire.max-snapshot-age": "1s", "lifecycle.expire.min-snapshots-to-keep": "2"}
    prefix = admin_call(maintained, token, "GET", "/v1/config?warehouse=default")["overrides"]["prefix"]
    path = f"/v1/{prefix}/namespaces/db/properties"
    bad = {"updates": {"lifecycle.expire.max-snapshot-age": "soon"}}
    assert status_of(maintained, token, "POST", path, bad) == 400
    admin_call(maintained, token, "POST", path, {"updates": policy})
    time.sleep(1.2)
    (plan,) = maintenance(maintained, token, "plan", {"namespace": ["db"], "actions": ["expire-snapshots"]})["tables"]
    expiry = plan["expire-snapshots"]
    assert expiry["policy"]["min-snapshots-to-keep"] == 2 and expiry["policy"]["max-snapshot-age-ms"] == 1000, plan
    assert expiry["would-remove"]["snapshots"] == 3 and expiry["would-remove"]["files"] > 0, plan
    assert [s.snapshot_id for s in catalog.load_table("db.logs").snapshots()] == history, "a plan changes nothing"

    (result,) = run_to_the_end(maintained, token, {"namespace": ["db"], "table": "logs", "actions": ["expire-snapshots"]})
    assert result["expired-snapshots"] == 3, result
    table = catalog.load_table("db.logs")
    assert [s.snapshot_id for s in table.snapshots()] == history[-2:]
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [0, 1, 2, 3, 4]
    assert files_under(table_dir) == needed_by(table)
    # From now on the table's own commits run it (the after-commit check sees the inherited policy).
    for i in range(3):
        catalog.load_table("db.logs").append(rows([10 + i]))
    wait_for(lambda: len(catalog.load_table("db.logs").snapshots()) == 2, "the inherited expiry after commits", 60)
    # A table that says gc.enabled=false keeps everything.
    keep = catalog.create_table("db.keep", schema=SCHEMA, properties={"gc.enabled": "false"})
    for i in range(3):
        keep.append(rows([i]))
    (plan,) = maintenance(maintained, token, "plan", {"namespace": ["db"], "table": "keep"})["tables"]
    assert plan["expire-snapshots"] == {"policy": None}, plan


def test_maintenance_is_for_warehouse_admins_not_namespace_admins(maintained):
    token = admin_token(maintained)
    catalog = admin_catalog(maintained)
    catalog.create_namespace("db")
    catalog.create_table("db.t", schema=SCHEMA)
    writer, _ = principal(
        maintained, token, "writer", "writers", "admin", {"type": "namespace", "warehouse": "default", "namespace": ["db"]},
    )
    for verb in ("plan", "run"):
        assert status_of(maintained, writer, "POST", f"{WAREHOUSE}/maintenance/{verb}", {}) == 403
    assert status_of(maintained, writer, "GET", f"{WAREHOUSE}/maintenance/quarantine") == 403
    restore = {"namespace": ["db"], "table": "t"}
    assert status_of(maintained, writer, "POST", f"{WAREHOUSE}/maintenance/quarantine/restore", restore) == 403
    assert status_of(maintained, token, "POST", f"{WAREHOUSE}/maintenance/plan", {"actions": ["vacuum"]}) == 400
    assert status_of(maintained, token, "POST", f"{WAREHOUSE}/maintenance/plan", {"table": "t"}) == 400
    nope = {"namespace": ["db"], "table": "nope"}
    assert status_of(maintained, token, "POST", f"{WAREHOUSE}/maintenance/run", nope) == 404


def test_a_folder_a_table_claims_later_keeps_the_files_it_held(maintained):
    """A principal with `write` on an older table points its `write.data.path` at a folder of its
    namespace that holds files it did not write: files another table added with `add_files`,
    and a table dropped without purge. Orphan clean-up of the claiming table never takes a file
    older than its claim (the attack round of docs/security.md)."""
    token = admin_token(maintained)
    catalog = admin_catalog(maintained)
    settings = {"lifecycle.orphan.older-than": "1s", "lifecycle.orphan.quarantine": "1s"}
    admin_call(maintained, token, "PUT", f"{WAREHOUSE}/settings", settings)
    catalog.create_namespace("db", {"lifecycle.soft-delete.hold": "0s"})
    catalog.create_table("db.attacker", schema=SCHEMA)
    mallory_token, _ = principal(
        maintained, token, "mallory", "mallories", "write",
        {"type": "table", "warehouse": "default", "namespace": ["db"], "name": "attacker"},
    )
    mallory = load_catalog("m", type="rest", uri=maintained.uri, warehouse="default", token=mallory_token)
    # Another table's data added from a landing folder, and a table dropped without purge.
    victim = catalog.create_table("db.victim", schema=SCHEMA)
    landing = local(victim.metadata.location).parent / "landing" / "batch1"
    landing.mkdir(parents=True)
    pq.write_table(rows([10, 11]), landing / "part-0.parquet")
    victim.add_files([f"file://{landing / 'part-0.parquet'}"])
    dropped = catalog.create_table("db.dropped", schema=SCHEMA)
    dropped.append(rows([5]))
    dropped_dir, last_metadata = local(dropped.metadata.location), dropped.metadata_location
    catalog.drop_table("db.dropped")
    dropped_files = {str(p) for p in dropped_dir.rglob("*") if p.is_file()}
    time.sleep(1.1)

    for folder in (landing.parent, dropped_dir):
        table = mallory.load_table("db.attacker")
        with table.transaction() as tx:
            tx.set_properties({"write.data.path": f"file://{folder}"})
        time.sleep(1.1)
        scope = {"namespace": ["db"], "table": "attacker", "actions": ["remove-orphans"]}
        (plan,) = maintenance(maintained, token, "plan", scope)["tables"]
        assert plan["remove-orphans"]["would-quarantine"] == 0, plan
        run_to_the_end(maintained, token, scope)
        time.sleep(1.1)
        run_to_the_end(maintained, token, scope)
    assert (landing / "part-0.parquet").exists()
    assert sorted(catalog.load_table("db.victim").scan().to_arrow()["id"].to_pylist()) == [10, 11]
    assert {str(p) for p in dropped_dir.rglob("*") if p.is_file()} == dropped_files
    assert local(last_metadata).exists(), "the dropped table's metadata can still be registered elsewhere"
    # What the claiming table writes there after its claim is its own to clean up.
    orphan = landing.parent / "00000-0-mallory-failed.parquet"
    pq.write_table(rows([1]), orphan)
    time.sleep(1.1)
    scope = {"namespace": ["db"], "table": "attacker", "actions": ["remove-orphans"]}
    (plan,) = maintenance(maintained, token, "plan", scope)["tables"]
    assert plan["remove-orphans"]["would-quarantine"] == 1, plan


@pytest.fixture
def swept(tmp_path, backend):
    env = secured_env(backend, ICEGATE__LIFECYCLE__SWEEP_INTERVAL="1s")
    server = Server(tmp_path, [], env).start()
    try:
        yield server
    finally:
        server.stop()


def test_the_sweep_applies_a_policy_set_after_the_last_commit(swept):
    """No commit follows the namespace's policy: the maintenance sweep alone finds the table due
    and queues its expiry, with no request asking."""
    token = admin_token(swept)
    catalog = admin_catalog(swept)
    catalog.create_namespace("db")
    table = catalog.create_table("db.quiet", schema=SCHEMA)
    for i in range(4):
        table.append(rows([i]))
    history = [s.snapshot_id for s in table.snapshots()]
    prefix = admin_call(swept, token, "GET", "/v1/config?warehouse=default")["overrides"]["prefix"]
    policy = {"lifecycle.expire.max-snapshot-age": "1s", "lifecycle.expire.min-snapshots-to-keep": "1"}
    admin_call(swept, token, "POST", f"/v1/{prefix}/namespaces/db/properties", {"updates": policy})
    wait_for(lambda: len(catalog.load_table("db.quiet").snapshots()) == 1, "the sweep's expiry", 60)
    table = catalog.load_table("db.quiet")
    assert [s.snapshot_id for s in table.snapshots()] == history[-1:]
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [0, 1, 2, 3]
    # The expiry's commit is visible before its task ends (it deletes the files after it).
    done = "/management/v1/tasks?kind=expire-snapshots&state=done"
    tasks = wait_for(lambda: admin_call(swept, token, "GET", done)["tasks"], "the expiry task to end")
    assert tasks and all("sweep" in t["reason"] for t in tasks), tasks
    assert sum(t["result"].get("expired-snapshots", 0) for t in tasks) == 3, tasks


def test_metadata_files_out_of_the_log_are_deleted_by_an_inherited_policy(maintained):
    token = admin_token(maintained)
    catalog = admin_catalog(maintained)
    prefix = admin_call(maintained, token, "GET", "/v1/config?warehouse=default")["overrides"]["prefix"]
    catalog.create_namespace("kept")
    catalog.create_namespace("trimmed")
    bad = {"updates": {"lifecycle.metadata.delete-after-commit": "sometimes"}}
    assert status_of(maintained, token, "POST", f"/v1/{prefix}/namespaces/trimmed/properties", bad) == 400
    update = {"updates": {"lifecycle.metadata.delete-after-commit": "true"}}
    admin_call(maintained, token, "POST", f"/v1/{prefix}/namespaces/trimmed/properties", update)
    counts = {}
    for namespace in ("kept", "trimmed"):
        table = catalog.create_table(f"{namespace}.t", schema=SCHEMA, properties={"write.metadata.previous-versions-max": "2"})
        for i in range(5):
            table.append(rows([i]))
        table = catalog.load_table(f"{namespace}.t")
        on_disk = {str(p) for p in (local(table.metadata.location) / "metadata").glob("*.metadata.json")}
        in_log = {str(local(entry.metadata_file)) for entry in table.metadata.metadata_log}
        assert in_log <= on_disk and str(local(table.metadata_location)) in on_disk
        counts[namespace] = len(on_disk)
        if namespace == "trimmed":
            assert on_disk == in_log | {str(local(table.metadata_location))}, "only the log and the current file"
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [0, 1, 2, 3, 4]
    assert counts == {"kept": 6, "trimmed": 3}, counts
    # A table that says false keeps its files whatever its namespace says.
    table = catalog.create_table("trimmed.own", schema=SCHEMA,
                                 properties={"write.metadata.previous-versions-max": "1", "write.metadata.delete-after-commit.enabled": "false"})
    for i in range(3):
        table.append(rows([i]))
    assert len(list((local(table.metadata.location) / "metadata").glob("*.metadata.json"))) == 4
