"""Lifecycle at scale against a running release icegate (auth off): snapshot expiry of a table
whose removed snapshots reach 10,000 data files, and an orphan scan, quarantine and deletion of
a table with 10,000 referenced data files and 1,000 orphans. Prints each task's elapsed time
(the task's own measure) and the server's resident memory (VmRSS now, VmHWM peak).

    scripts/bench-lifecycle.sh sqlite|postgres [--files 10000] [--orphans 1000]  (starts the server)
"""
import argparse
import json
import os
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def call(uri, method, path, body=None):
    request = urllib.request.Request(
        f"{uri}{path}", data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"}, method=method)
    with urllib.request.urlopen(request, timeout=600) as response:
        text = response.read()
        return json.loads(text) if text else None


def memory(pid):
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) // 1024
    return f"RSS {fields['VmRSS']} MB, peak {fields['VmHWM']} MB"


def wait_done(uri, task_id):
    while True:
        task = call(uri, "GET", f"/management/v1/tasks/{task_id}")
        if task["state"] in ("done", "failed"):
            assert task["state"] == "done", task
            return task
        time.sleep(0.05)


def run(uri, namespace, table, action):
    body = {"namespace": [namespace], "table": table, "actions": [action]}
    outcome = call(uri, "POST", "/management/v1/warehouses/default/maintenance/run", body)
    return wait_done(uri, outcome["tables"][0][action]["task-id"])


def fill(catalog, name, files, batch):
    """A table of `files` one-row data files added in commits of `batch` (pyarrow writes them)."""
    table = catalog.create_table(name, schema=SCHEMA)
    data = Path(urllib.parse.urlsplit(table.location()).path) / "data"
    data.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    for first in range(0, files, batch):
        paths = []
        for i in range(first, min(first + batch, files)):
            path = data / f"bench-{i:06}.parquet"
            pq.write_table(pa.table({"id": pa.array([i], pa.int64())}), path)
            paths.append(f"file://{path}")
        table.add_files(paths)
    print(f"  {name}: {files} data files in {files // batch} commits, {time.monotonic() - started:.1f} s")
    return table, data


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", default="http://127.0.0.1:8385")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--orphans", type=int, default=1_000)
    args = parser.parse_args()
    uri = args.uri
    catalog = load_catalog("bench", type="rest", uri=uri, warehouse="default")
    catalog.create_namespace("bench")
    call(uri, "PUT", "/management/v1/warehouses/default/settings",
         {"lifecycle.orphan.older-than": "1s", "lifecycle.orphan.quarantine": "0s"})
    print(f"server at start: {memory(args.pid)}")

    # Expiry: ten commits of 1,000 files each, then an overwrite that leaves one row; the
    # namespace's policy then lets every snapshot but the last go.
    table, _ = fill(catalog, "bench.expired", args.files, 1_000)
    table.overwrite(pa.table({"id": pa.array([0], pa.int64())}))
    print(f"after ingest: {memory(args.pid)}")
    prefix = call(uri, "GET", "/v1/config?warehouse=default")["overrides"]["prefix"]
    call(uri, "POST", f"/v1/{prefix}/namespaces/bench/properties",
         {"updates": {"lifecycle.expire.max-snapshot-age": "1s", "lifecycle.expire.min-snapshots-to-keep": "1"}})
    time.sleep(1.1)
    started = time.monotonic()
    plan = call(uri, "POST", "/management/v1/warehouses/default/maintenance/plan",
                {"namespace": ["bench"], "table": "expired", "actions": ["expire-snapshots"]})
    print(f"expiry dry run: {time.monotonic() - started:.2f} s, {json.dumps(plan['tables'][0]['expire-snapshots']['would-remove'])}")
    task = run(uri, "bench", "expired", "expire-snapshots")
    result = task["result"]
    print(f"expiry: {result['expired-snapshots']} snapshots, {result['files']} files deleted, "
          f"{result['elapsed-ms'] / 1000:.2f} s; server: {memory(args.pid)}")
    call(uri, "POST", f"/v1/{prefix}/namespaces/bench/properties",
         {"removals": ["lifecycle.expire.max-snapshot-age", "lifecycle.expire.min-snapshots-to-keep"]})

    # Orphans: a table of 10,000 referenced data files and 1,000 orphans beside them.
    table, data = fill(catalog, "bench.scanned", args.files, 1_000)
    for i in range(args.orphans):
        pq.write_table(pa.table({"id": pa.array([i], pa.int64())}), data / f"orphan-{i:06}.parquet")
    time.sleep(1.1)
    started = time.monotonic()
    plan = call(uri, "POST", "/management/v1/warehouses/default/maintenance/plan",
                {"namespace": ["bench"], "table": "scanned", "actions": ["remove-orphans"]})
    print(f"orphan dry run: {time.monotonic() - started:.2f} s, {json.dumps(plan['tables'][0]['remove-orphans'])}")
    first = run(uri, "bench", "scanned", "remove-orphans")["result"]
    print(f"orphan scan and quarantine: listed {first['listed']}, quarantined {first['quarantined']}, "
          f"{first['elapsed-ms'] / 1000:.2f} s; server: {memory(args.pid)}")
    # The quarantine is 0s here: the run it queued for its end deletes them, checked again.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = call(uri, "GET", "/management/v1/tasks?kind=remove-orphans&state=done&pageSize=100")["tasks"]
        deleting = [t for t in done if t["result"].get("deleted")]
        if deleting:
            second = deleting[0]["result"]
            print(f"orphan re-check and delete: deleted {second['deleted']}, {second['elapsed-ms'] / 1000:.2f} s; "
                  f"server: {memory(args.pid)}")
            break
        time.sleep(0.2)
    else:
        raise SystemExit("the deletion run did not come")


if __name__ == "__main__":
    main()
