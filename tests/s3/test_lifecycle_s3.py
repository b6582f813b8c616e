"""Soft delete and purges on S3 (moto_server with IAM enforcement, see moto_enforcing.py): a
purged table's objects are deleted by the purge task (bulk DeleteObjects) and a neighbour whose
prefix shares the table's name keeps every object; a table dropped without purge keeps its
objects and, undropped, is read again with freshly vended credentials; snapshot expiry leaves
exactly what the retained snapshot needs; orphan objects are quarantined, then deleted after
their quarantine, and a neighbour's objects under a shared prefix are never touched."""

import time

import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from harness import ADMIN_ID, ADMIN_SECRET, BUCKET, call, catalog, moto  # noqa: F401

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def keys(moto, prefix):
    s3 = moto.client("s3", *moto.icegate_keys)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_a_purge_deletes_the_tables_objects_and_an_undrop_brings_one_back(catalog, moto):  # noqa: F811
    server, token = catalog
    client = load_catalog(
        "s3", type="rest", uri=server.uri, warehouse="lake", credential=f"{ADMIN_ID}:{ADMIN_SECRET}",
        **{"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    client.create_namespace("lc")
    base = f"s3://{BUCKET}/warehouse/lc"
    doomed = client.create_table("lc.doomed", schema=SCHEMA, location=f"{base}/doomed")
    neighbour = client.create_table("lc.neighbour", schema=SCHEMA, location=f"{base}/doomed-2")
    for batch in range(3):
        doomed.append(pa.table({"id": pa.array([batch], pa.int64())}))
    neighbour.append(pa.table({"id": pa.array([7, 8], pa.int64())}))
    assert len(keys(moto, "warehouse/lc/doomed/")) >= 9
    neighbours = keys(moto, "warehouse/lc/doomed-2/")

    client.purge_table("lc.doomed")
    deadline = time.monotonic() + 30
    while keys(moto, "warehouse/lc/doomed/") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert keys(moto, "warehouse/lc/doomed/") == []
    assert keys(moto, "warehouse/lc/doomed-2/") == neighbours

    # Dropped without purge: its objects stay, and undrop brings it back, readable.
    client.drop_table("lc.neighbour")
    try:
        client.load_table("lc.neighbour")
        raise AssertionError("a dropped table loaded")
    except NoSuchTableError:
        pass
    assert keys(moto, "warehouse/lc/doomed-2/") == neighbours
    status, body = call(server, token, "POST", "/management/v1/warehouses/lake/undrop", {"namespace": ["lc"], "name": "neighbour"})
    assert status == 200, body
    back = client.load_table("lc.neighbour")
    assert sorted(back.scan().to_arrow()["id"].to_pylist()) == [7, 8]


def test_the_catalog_expires_snapshots_on_s3(catalog, moto):  # noqa: F811
    server, token = catalog
    client = load_catalog(
        "s3", type="rest", uri=server.uri, warehouse="lake", credential=f"{ADMIN_ID}:{ADMIN_SECRET}",
        **{"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    client.create_namespace("expiry")
    policy = {"history.expire.max-snapshot-age-ms": "1000", "history.expire.min-snapshots-to-keep": "1"}
    table = client.create_table("expiry.t", schema=SCHEMA, location=f"s3://{BUCKET}/warehouse/expiry/t", properties=policy)
    for i in range(4):
        table.append(pa.table({"id": pa.array([i], pa.int64())}))
    table.overwrite(pa.table({"id": pa.array([7], pa.int64())}))
    def settled():
        active = [
            t for state in ("queued", "running")
            for t in call(server, token, "GET", f"/management/v1/tasks?kind=expire-snapshots&state={state}&warehouse=lake")[1]["tasks"]
        ]
        return not active and len(client.load_table("expiry.t").snapshots()) == 1

    deadline = time.monotonic() + 60
    while not settled() and time.monotonic() < deadline:
        time.sleep(0.3)
    table = client.load_table("expiry.t")
    assert len(table.snapshots()) == 1 and table.scan().to_arrow()["id"].to_pylist() == [7]
    needed = {table.snapshots()[0].manifest_list}
    for manifest in table.snapshots()[0].manifests(table.io):
        needed.add(manifest.manifest_path)
        needed.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False))
    present = {f"s3://{BUCKET}/{key}" for key in keys(moto, "warehouse/expiry/t/") if not key.endswith(".metadata.json")}
    assert present == needed, (sorted(present - needed), sorted(needed - present))


def test_orphan_objects_are_quarantined_then_deleted_and_a_neighbour_is_untouched(catalog, moto):  # noqa: F811
    server, token = catalog
    client = load_catalog(
        "s3", type="rest", uri=server.uri, warehouse="lake", credential=f"{ADMIN_ID}:{ADMIN_SECRET}",
        **{"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    status, _ = call(server, token, "PUT", "/management/v1/warehouses/lake/settings",
                     {"lifecycle.orphan.older-than": "1s", "lifecycle.orphan.quarantine": "2s"})
    assert status == 200
    client.create_namespace("orphans")
    base = f"s3://{BUCKET}/warehouse/orphans"
    table = client.create_table("orphans.t", schema=SCHEMA, location=f"{base}/t")
    neighbour = client.create_table("orphans.t2", schema=SCHEMA, location=f"{base}/t-2")
    for i in range(3):
        table.append(pa.table({"id": pa.array([i], pa.int64())}))
    neighbour.append(pa.table({"id": pa.array([9], pa.int64())}))
    s3 = moto.client("s3", *moto.icegate_keys)
    # A failed writer's objects in the table, and an unreferenced one in the neighbour.
    for key in ("warehouse/orphans/t/data/failed-1.parquet", "warehouse/orphans/t/metadata/failed-snap.avro",
                "warehouse/orphans/t-2/data/left-behind.parquet"):
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"PAR1 not really")
    neighbours = sorted(keys(moto, "warehouse/orphans/t-2/"))
    time.sleep(2.2)

    def run():
        body = {"namespace": ["orphans"], "table": "t", "actions": ["remove-orphans"]}
        status, answer = call(server, token, "POST", "/management/v1/warehouses/lake/maintenance/run", body)
        assert status == 200, answer
        task_id = answer["tables"][0]["remove-orphans"]["task-id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            task = call(server, token, "GET", f"/management/v1/tasks/{task_id}")[1]
            if task["state"] in ("done", "failed"):
                assert task["state"] == "done", task
                return task["result"]
            time.sleep(0.2)
        raise AssertionError("the orphan removal did not finish")

    first = run()
    assert first["quarantined"] == 2 and first["deleted"] == 0, first
    assert "warehouse/orphans/t/data/failed-1.parquet" in keys(moto, "warehouse/orphans/t/data/")
    time.sleep(2.2)
    run()
    done = call(server, token, "GET", "/management/v1/tasks?kind=remove-orphans&state=done&warehouse=lake")[1]["tasks"]
    assert sum(t["result"].get("deleted", 0) for t in done) == 2, done
    present = set(keys(moto, "warehouse/orphans/t/"))
    assert not {k for k in present if "failed" in k}, present
    assert sorted(keys(moto, "warehouse/orphans/t-2/")) == neighbours, "the neighbour keeps every object"
    table = client.load_table("orphans.t")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [0, 1, 2]
