"""Adopting a Parquet dataset in place (docs/adoption.md), through real clients: pyarrow writes
a Hive-style tree (several partitions, hundreds of files, a later file with an added column and
a wider integer type, a corrupt file, `_SUCCESS`); icegate adopts it without changing a byte of
it; PyIceberg, DuckDB and Spark read exactly the rows pyarrow wrote (counts and sums per
partition, the partition columns coming from the paths); a filter on a path column plans only
that partition's files; new writes land under the table's own location; re-syncs add what
appeared (twice adds nothing), report a file changed in place and, when asked, remove a file that
vanished; a purge leaves every source file in place; and the source is protected from tables
placed over it and from principals who are not the warehouse's admins."""

import hashlib
import json
import urllib.error
import urllib.request
from collections import defaultdict
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import EqualTo

from conftest import Server
from test_access_reviews import principal
from test_audit import search, status_of
from test_auth_clients import ADMIN_ID, ADMIN_SECRET, admin_call, admin_token, secured_env
from test_duckdb import duckdb_with_iceberg
from test_lifecycle import admin_catalog, local, purge_tasks, wait_for
from test_spark import spark_jars  # noqa: F401 (a fixture)

WAREHOUSE = "/management/v1/warehouses/default"
DATES = ["2026-11-01", "2026-11-02", "2026-11-03"]
REGIONS = ["eu", "us", None]  # None: Hive's __HIVE_DEFAULT_PARTITION__
FILES_PER_PARTITION = 25


def region_dir(region):
    return "__HIVE_DEFAULT_PARTITION__" if region is None else region


def write_dataset(root: Path):
    """Writes the tree; answers the rows per (date, region): [count, sum of amount, sum of id]."""
    expected = defaultdict(lambda: [0, 0.0, 0])
    next_id = 0
    for dt in DATES:
        for region in REGIONS:
            folder = root / f"dt={dt}" / f"region={region_dir(region)}"
            folder.mkdir(parents=True)
            for i in range(FILES_PER_PARTITION):
                n = 3 + (i % 4)
                ids = list(range(next_id, next_id + n))
                next_id += n
                amounts = [round(x * 0.5, 1) for x in ids]
                table = pa.table({"id": pa.array(ids, pa.int32()), "amount": pa.array(amounts, pa.float64()),
                                  "name": pa.array([f"n{x}" for x in ids])})
                pq.write_table(table, folder / f"part-{i:05d}.parquet")
                key = (date.fromisoformat(dt), region)
                expected[key][0] += n
                expected[key][1] += sum(amounts)
                expected[key][2] += sum(ids)
    # A later file: an added column, and ids as 64-bit integers (the table's column widens).
    later = root / "dt=2026-11-03" / "region=eu" / "part-later.parquet"
    ids = [10_000_000_000, 10_000_000_001]
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array([1.0, 2.0]),
                             "name": pa.array(["x", "y"]), "channel": pa.array(["web", "app"])}), later)
    key = (date(2026, 11, 3), "eu")
    expected[key][0] += 2
    expected[key][1] += 3.0
    expected[key][2] += sum(ids)
    (root / "_SUCCESS").write_bytes(b"")
    (root / "dt=2026-11-01" / "region=eu" / "corrupt.parquet").write_bytes(b"PAR1 this is not parquet")
    (root / "dt=2026-11-01" / "region=eu" / ".part-00000.parquet.crc").write_bytes(b"crc")
    return expected


def fingerprint(root: Path):
    """Every file below `root`: its size, mtime (ns) and SHA-256."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            stat = path.stat()
            out[str(path)] = (stat.st_size, stat.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def per_partition(rows):
    """(dt, region, id, amount) rows → {(dt, region): [count, sum amount, sum id]}."""
    got = defaultdict(lambda: [0, 0.0, 0])
    for dt, region, id_, amount in rows:
        got[(dt, region)][0] += 1
        got[(dt, region)][1] += amount
        got[(dt, region)][2] += id_
    return {k: [v[0], round(v[1], 6), v[2]] for k, v in got.items()}


def rounded(expected):
    return {k: [v[0], round(v[1], 6), v[2]] for k, v in expected.items()}


def adopt(server, token, body):
    return admin_call(server, token, "POST", f"{WAREHOUSE}/adoptions", body)


def error_of(server, token, method, path, body=None):
    try:
        admin_call(server, token, method, path, body)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    return 200, ""


@pytest.fixture
def adopting(tmp_path, backend):
    server = Server(tmp_path, [], secured_env(backend)).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_hive_dataset_is_adopted_in_place_read_by_every_client_and_kept_in_sync(adopting, tmp_path):
    token = admin_token(adopting)
    lake = tmp_path / "lake" / "events"
    expected = write_dataset(lake)
    before = fingerprint(tmp_path / "lake")
    source = f"file://{tmp_path / 'lake'}"
    events = f"file://{lake}"
    catalog = admin_catalog(adopting)
    catalog.create_namespace("raw")

    # Outside every source location: refused before anything is read.
    body = {"source": events, "namespace": ["raw"], "name": "events", "partitioning": {"type": "hive"}}
    assert error_of(adopting, token, "POST", f"{WAREHOUSE}/adoptions", body)[0] == 403
    assert error_of(adopting, token, "POST", f"{WAREHOUSE}/source-locations", {"location": "file:///etc/../etc"})[0] == 400
    added = admin_call(adopting, token, "POST", f"{WAREHOUSE}/source-locations", {"location": source})
    assert added["location"] == source
    assert error_of(adopting, token, "POST", f"{WAREHOUSE}/source-locations", {"location": source})[0] == 409
    listed = admin_call(adopting, token, "GET", f"{WAREHOUSE}/source-locations")["source-locations"]
    assert [s["location"] for s in listed] == [source]

    # The dry run: the same report, nothing created.
    dry = adopt(adopting, token, {**body, "dry-run": True})
    total_files = len(DATES) * len(REGIONS) * FILES_PER_PARTITION + 1
    assert dry["dry-run"] is True and dry["files-added"] == total_files, dry
    assert not catalog.table_exists("raw.events")

    report = adopt(adopting, token, body)
    assert report["files-added"] == total_files and report["rows-added"] == sum(v[0] for v in expected.values())
    assert report["bytes-added"] > 0 and report["snapshot-id"]
    assert report["verified"]["rows-per-partition-match-footers"] is True
    skipped = {s["path"]: s["reason"] for s in report["files-skipped"]}
    assert list(skipped) == [f"{events}/dt=2026-11-01/region=eu/corrupt.parquet"], skipped
    assert "not a Parquet file" in skipped[f"{events}/dt=2026-11-01/region=eu/corrupt.parquet"]
    assert report["files-hidden"] == 2  # _SUCCESS and the .crc
    columns = {c["name"]: c for c in report["schema"]["columns"]}
    assert columns["id"]["type"] == "long" and columns["id"]["widened-from"] == "int", columns
    assert columns["channel"]["from"] == "file" and columns["dt"]["from"] == "path", columns
    assert columns["dt"]["type"] == "date" and columns["region"]["type"] == "string"
    rows_by_partition = {(p["partition"]["dt"], p["partition"]["region"]): p["rows"] for p in report["partitions"]}
    assert rows_by_partition == {(k[0].isoformat(), k[1]): v[0] for k, v in expected.items()}

    table = catalog.load_table("raw.events")
    assert table.properties["icegate.adoption.source"] == events
    assert "schema.name-mapping.default" in table.properties
    assert [f.name for f in table.spec().fields] == ["dt", "region"]
    # PyIceberg: the partition columns come from the partition tuple (no file holds them).
    arrow = table.scan().to_arrow()
    got = per_partition(zip(arrow["dt"].to_pylist(), arrow["region"].to_pylist(), arrow["id"].to_pylist(),
                            arrow["amount"].to_pylist()))
    assert got == rounded(expected)
    assert sorted(set(arrow["channel"].to_pylist()) - {None}) == ["app", "web"]
    # A filter on a path column plans only that partition's files.
    planned = list(table.scan(row_filter=EqualTo("region", "us")).plan_files())
    assert len(planned) == len(DATES) * FILES_PER_PARTITION
    assert all("/region=us/" in task.file.file_path for task in planned)

    # DuckDB reads the same rows.
    con = duckdb_with_iceberg()
    con.execute(f"CREATE SECRET admin (TYPE iceberg, CLIENT_ID '{ADMIN_ID}', CLIENT_SECRET '{ADMIN_SECRET}', "
                f"OAUTH2_SERVER_URI '{adopting.uri}/v1/oauth/tokens')")
    con.execute(f"ATTACH 'default' AS ice (TYPE iceberg, ENDPOINT '{adopting.uri}', SECRET admin)")
    duck = con.execute("SELECT dt, region, id, amount FROM ice.raw.events").fetchall()
    assert per_partition(duck) == rounded(expected)
    assert con.execute("SELECT count(*) FROM ice.raw.events WHERE region IS NULL").fetchone()[0] == sum(
        v[0] for k, v in expected.items() if k[1] is None)

    # Nothing in the source changed; a PyIceberg append lands under the table's own location.
    assert fingerprint(tmp_path / "lake") == before
    table.append(pa.table({"id": pa.array([-1], pa.int64()), "amount": pa.array([0.0]), "name": pa.array(["new"]),
                           "dt": pa.array([date(2026, 12, 1)]), "region": pa.array(["eu"]),
                           "channel": pa.array([None], pa.string())}))
    table = catalog.load_table("raw.events")
    own = [t.file.file_path for t in table.scan().plan_files() if not t.file.file_path.startswith(events)]
    assert len(own) == 1 and own[0].startswith(table.location() + "/"), own
    assert fingerprint(tmp_path / "lake") == before

    # A re-sync picks up a new partition; a second one adds nothing.
    new_dir = lake / "dt=2026-11-04" / "region=eu"
    new_dir.mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array([7, 8, 9], pa.int32()), "amount": pa.array([1.0, 1.0, 1.0]),
                             "name": pa.array(["a", "b", "c"])}), new_dir / "part-00000.parquet")
    adoption = report["id"]
    first = admin_call(adopting, token, "POST", f"{WAREHOUSE}/adoptions/{adoption}/sync")
    assert first["files-added"] == 1 and first["rows-added"] == 3 and first["files-changed-count"] == 0, first
    second = admin_call(adopting, token, "POST", f"{WAREHOUSE}/adoptions/{adoption}/sync")
    assert second["files-added"] == 0 and second["snapshot-id"] is None, second
    table = catalog.load_table("raw.events")
    assert table.scan(row_filter=EqualTo("dt", "2026-11-04")).to_arrow().num_rows == 3

    # A file rewritten in place under the same name is refused loudly, never re-added.
    victim = lake / "dt=2026-11-02" / "region=us" / "part-00003.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int32()), "amount": pa.array([1.0]), "name": pa.array(["z"])}), victim)
    changed = admin_call(adopting, token, "POST", f"{WAREHOUSE}/adoptions/{adoption}/sync")
    assert changed["files-added"] == 0 and [c["path"] for c in changed["files-changed"]] == [f"file://{victim}"]
    shown = admin_call(adopting, token, "GET", f"{WAREHOUSE}/adoptions/{adoption}")
    assert shown["source"] == events and shown["mode"] == "snapshot" and len(shown["runs"]) == 4, shown
    assert shown["runs"][0]["report"]["files-changed-count"] == 1
    # Every run is in the audit trail.
    records = search(adopting, token, action="syncAdoption")
    assert len(records) >= 3 and all(r["record"]["actor"]["name"] == "admin" for r in records), records

    # Its source location cannot go while the table references its files.
    code, text = error_of(adopting, token, "DELETE", f"{WAREHOUSE}/source-locations?location={source}")
    assert code == 409 and adoption in text, text

    # A purge deletes the table's own files and leaves every source file in place.
    victim_state = fingerprint(tmp_path / "lake")
    table_dir = local(table.location())
    assert any(table_dir.rglob("*.avro"))
    catalog.purge_table("raw.events")
    wait_for(lambda: not table_dir.exists(), "the purge to delete the table's own directory")
    wait_for(lambda: [t for t in purge_tasks(adopting, token) if t["state"] == "done"], "the purge task")
    assert fingerprint(tmp_path / "lake") == victim_state
    # Gone for good, the table no longer holds its source location.
    assert error_of(adopting, token, "DELETE", f"{WAREHOUSE}/source-locations?location={source}")[0] == 200
    assert admin_call(adopting, token, "GET", f"{WAREHOUSE}/source-locations")["source-locations"] == []


def test_vanished_files_are_removed_when_asked_and_the_source_is_guarded(adopting, tmp_path):
    token = admin_token(adopting)
    catalog = admin_catalog(adopting)
    catalog.create_namespace("landing")
    root = local(admin_call(adopting, token, "GET", WAREHOUSE)["storage-root"])
    # A dataset inside the warehouse's storage root: adopting it registers it as a source.
    lake = root / "landing-zone" / "clicks"
    lake.mkdir(parents=True)
    for i in range(4):
        pq.write_table(pa.table({"n": pa.array([i, i], pa.int64())}), lake / f"f{i}.parquet")
    body = {"source": f"file://{lake}", "namespace": ["landing"], "name": "clicks", "remove-missing": True,
            "mode": "continuous", "sync-interval": "1h", "properties": {"owner": "web"}}
    report = adopt(adopting, token, body)
    assert report["files-added"] == 4 and report["rows-added"] == 8, report
    sources = [s["location"] for s in admin_call(adopting, token, "GET", f"{WAREHOUSE}/source-locations")["source-locations"]]
    assert sources == [f"file://{lake}"]
    table = catalog.load_table("landing.clicks")
    assert table.properties["owner"] == "web" and table.spec().is_unpartitioned()
    # A continuous adoption has its next re-sync queued, as a task.
    tasks = admin_call(adopting, token, "GET", "/management/v1/tasks?kind=adoption-sync&pageSize=100")["tasks"]
    assert [t["state"] for t in tasks] == ["queued"] and tasks[0]["not-before-ms"] > tasks[0]["created-at-ms"] + 3_000_000

    # No table or view may be placed over the source, nor point its writes into it.
    status, text = error_of(adopting, token, "POST", f"/v1/{prefix(adopting, token)}/namespaces/landing/tables",
                            {"name": "over", "location": f"file://{lake}/sub", "schema": SCHEMA_JSON})
    assert status == 400 and "source location" in text, text
    status, text = error_of(adopting, token, "POST", f"/v1/{prefix(adopting, token)}/namespaces/landing/tables",
                            {"name": "around", "location": f"file://{root / 'landing-zone'}", "schema": SCHEMA_JSON})
    assert status == 400, text
    with pytest.raises(Exception):
        with table.transaction() as tx:
            tx.set_properties({"write.data.path": f"file://{lake}/data"})
    assert "write.data.path" not in catalog.load_table("landing.clicks").properties

    # A vanished file is removed from the table (a delete snapshot); the rest stay.
    (lake / "f2.parquet").unlink()
    synced = admin_call(adopting, token, "POST", f"{WAREHOUSE}/adoptions/{report['id']}/sync")
    assert synced["files-missing-count"] == 1 and synced["files-removed"] == [f"file://{lake}/f2.parquet"], synced
    table = catalog.load_table("landing.clicks")
    assert sorted(table.scan().to_arrow()["n"].to_pylist()) == [0, 0, 1, 1, 3, 3]
    assert table.current_snapshot().summary.operation.value == "delete"
    again = admin_call(adopting, token, "POST", f"{WAREHOUSE}/adoptions/{report['id']}/sync")
    assert again["files-missing-count"] == 0 and again["snapshot-id"] is None, again

    # Only the warehouse's admins adopt: a principal with create on the namespace is refused,
    # and can register no source location either.
    creator, _ = principal(adopting, token, "creator", "creators", "create",
                           {"type": "namespace", "warehouse": "default", "namespace": ["landing"]})
    other = root / "landing-zone" / "other"
    other.mkdir()
    pq.write_table(pa.table({"n": pa.array([1], pa.int64())}), other / "x.parquet")
    attempt = {"source": f"file://{other}", "namespace": ["landing"], "name": "stolen"}
    assert status_of(adopting, creator, "POST", f"{WAREHOUSE}/adoptions", attempt) in (403, 404)
    assert status_of(adopting, creator, "POST", f"{WAREHOUSE}/source-locations", {"location": f"file://{other}"}) in (403, 404)
    assert status_of(adopting, creator, "POST", f"{WAREHOUSE}/adoptions/{report['id']}/sync") in (403, 404)
    assert not catalog.table_exists("landing.stolen")
    # Nor can anyone adopt another table's files.
    catalog.create_table("landing.theirs", schema=pa.schema([("n", pa.int64())])).append(
        pa.table({"n": pa.array([5], pa.int64())}))
    theirs = catalog.load_table("landing.theirs").location()
    status, text = error_of(adopting, token, "POST", f"{WAREHOUSE}/adoptions",
                            {"source": theirs, "namespace": ["landing"], "name": "copycat"})
    assert status == 400 and "overlaps" in text, text


SCHEMA_JSON = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "n", "type": "long", "required": False}]}


def prefix(server, token):
    return admin_call(server, token, "GET", "/v1/config?warehouse=default")["overrides"]["prefix"]


def test_spark_reads_an_adopted_dataset_with_its_path_columns(icegate, spark_jars, tmp_path):
    from test_spark import rows, start_spark, stop_spark

    lake = tmp_path / "lake" / "sales"
    expected = defaultdict(lambda: [0, 0.0, 0])
    for dt in DATES[:2]:
        for region in ["eu", "us"]:
            folder = lake / f"dt={dt}" / f"region={region}"
            folder.mkdir(parents=True)
            for i in range(5):
                ids = list(range(i * 10, i * 10 + 4))
                pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array([float(x) for x in ids])}),
                               folder / f"part-{i}.parquet")
                key = (date.fromisoformat(dt), region)
                expected[key][0] += 4
                expected[key][1] += float(sum(ids))
                expected[key][2] += sum(ids)
    token = "unused"  # authentication is off on this server
    catalog = load_catalog("spark-test", type="rest", uri=icegate.uri, warehouse="default")
    catalog.create_namespace("raw")
    admin_call(icegate, token, "POST", f"{WAREHOUSE}/source-locations", {"location": f"file://{tmp_path / 'lake'}"})
    report = adopt(icegate, token, {"source": f"file://{lake}", "namespace": ["raw"], "name": "sales",
                                    "partitioning": {"type": "hive"}})
    assert report["files-added"] == 20
    session = start_spark(icegate.uri, spark_jars, tmp_path)
    try:
        got = rows(session, "SELECT dt, region, count(*), sum(amount), sum(id) FROM ice.raw.sales GROUP BY dt, region")
        assert {(r[0], r[1]): [r[2], r[3], r[4]] for r in got} == {k: v for k, v in expected.items()}
        assert rows(session, "SELECT count(*) FROM ice.raw.sales WHERE region = 'us'") == [(40,)]
        # Spark writes to the table's own location.
        session.sql("INSERT INTO ice.raw.sales VALUES (999, 1.0, DATE '2026-12-01', 'eu')")
        files = rows(session, "SELECT file_path FROM ice.raw.sales.files WHERE file_path NOT LIKE 'file:%/lake/%'")
        assert len(files) == 1 and "/lake/" not in files[0][0], files
    finally:
        stop_spark(session)


@pytest.fixture
def scheduled(tmp_path, backend):
    # Small bounds so a run is queued as a task and a continuous adoption re-syncs within seconds.
    env = secured_env(backend, ICEGATE__ADOPTION__INLINE_FILES="3", ICEGATE__ADOPTION__MIN_SYNC_INTERVAL="1s")
    server = Server(tmp_path, [], env).start()
    try:
        yield server
    finally:
        server.stop()


def test_a_large_source_is_adopted_by_a_task_and_a_continuous_adoption_resyncs_itself(scheduled, tmp_path):
    token = admin_token(scheduled)
    catalog = admin_catalog(scheduled)
    catalog.create_namespace("raw")
    lake = tmp_path / "lake" / "metrics"
    lake.mkdir(parents=True)
    for i in range(5):
        pq.write_table(pa.table({"v": pa.array([i], pa.int64())}), lake / f"f{i}.parquet")
    admin_call(scheduled, token, "POST", f"{WAREHOUSE}/source-locations", {"location": f"file://{tmp_path / 'lake'}"})
    body = {"source": f"file://{lake}", "namespace": ["raw"], "name": "metrics", "mode": "continuous",
            "sync-interval": "2s"}
    request = urllib.request.Request(f"{scheduled.uri}{WAREHOUSE}/adoptions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
                                     method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 202
        queued = json.load(response)
    # Recorded before its task runs: its source location cannot be removed from under it.
    code, text = error_of(scheduled, token, "DELETE", f"{WAREHOUSE}/source-locations?location=file://{tmp_path / 'lake'}")
    assert code == 409 and queued["id"] in text, text

    def finished(task_id):
        task = admin_call(scheduled, token, "GET", f"/management/v1/tasks/{task_id}")
        return task if task["state"] in ("done", "failed") else None

    task = wait_for(lambda: finished(queued["task-id"]), "the adoption task")
    assert task["state"] == "done" and task["result"]["files-added"] == 5, task
    assert "a large first adoption run" in task["reason"], task
    assert sorted(catalog.load_table("raw.metrics").scan().to_arrow()["v"].to_pylist()) == [0, 1, 2, 3, 4]
    shown = admin_call(scheduled, token, "GET", f"{WAREHOUSE}/adoptions/{queued['id']}")
    assert shown["mode"] == "continuous" and len(shown["runs"]) == 1, shown

    # A file that appears is picked up by the scheduled re-sync, as the system.
    pq.write_table(pa.table({"v": pa.array([5], pa.int64())}), lake / "f5.parquet")
    wait_for(lambda: len(catalog.load_table("raw.metrics").scan().to_arrow()) == 6, "the scheduled re-sync", 30)
    tasks = admin_call(scheduled, token, "GET", "/management/v1/tasks?kind=adoption-sync&pageSize=100")["tasks"]
    done = [t for t in tasks if t["state"] == "done"]
    assert any(t["result"].get("files-added") == 1 for t in done), done
    assert any("scheduled re-sync" in t["reason"] for t in done), done
    runs = admin_call(scheduled, token, "GET", f"{WAREHOUSE}/adoptions/{queued['id']}")["runs"]
    assert len(runs) >= 2 and sum(r["report"]["files-added"] for r in runs) == 6, runs


def nested_struct(depth):
    field = pa.field("leaf", pa.int32())
    for i in range(depth):
        field = pa.field(f"s{i}", pa.struct([field]))
    return field


def test_links_deep_footers_and_other_warehouses_are_refused(adopting, tmp_path):
    """The attack round's findings (docs/security.md, issue 34), judged by effects."""
    token = admin_token(adopting)
    catalog = admin_catalog(adopting)
    catalog.create_namespace("ns")
    root = local(admin_call(adopting, token, "GET", WAREHOUSE)["storage-root"])
    # A link planted inside the storage root, to a directory outside it, is never followed.
    secret = tmp_path / "outside"
    secret.mkdir()
    pq.write_table(pa.table({"key": pa.array(["sk-secret"])}), secret / "keys.parquet")
    (root / "landing").symlink_to(secret, target_is_directory=True)
    status, text = error_of(adopting, token, "POST", f"{WAREHOUSE}/adoptions",
                            {"source": f"file://{root / 'landing'}", "namespace": ["ns"], "name": "leak"})
    assert status == 400 and "link" in text, text
    assert not catalog.table_exists("ns.leak")

    # A footer nesting past the bound is skipped, and the server stays up.
    lake = tmp_path / "lake" / "nested"
    lake.mkdir(parents=True)
    pq.write_table(pa.table({"v": pa.array([1], pa.int64())}), lake / "flat.parquet")
    deep = nested_struct(70)
    pq.write_table(pa.Table.from_arrays([pa.array([None], deep.type)], schema=pa.schema([deep])), lake / "deep.parquet")
    admin_call(adopting, token, "POST", f"{WAREHOUSE}/source-locations", {"location": f"file://{tmp_path / 'lake'}"})
    report = adopt(adopting, token, {"source": f"file://{lake}", "namespace": ["ns"], "name": "nested"})
    assert report["files-added"] == 1, report
    (skipped,) = report["files-skipped"]
    assert skipped["path"].endswith("/deep.parquet") and "levels" in skipped["reason"], skipped
    assert admin_call(adopting, token, "GET", "/management/v1/whoami")["server-privileges"] == ["admin"]

    # While an adoption reads from it, its source location cannot be removed.
    status, text = error_of(adopting, token, "DELETE", f"{WAREHOUSE}/source-locations?location=file://{tmp_path / 'lake'}")
    assert status == 409, text
    # No warehouse is made over another warehouse's source location.
    status, text = error_of(adopting, token, "POST", "/management/v1/warehouses",
                            {"name": "tenant", "storage-root": f"file://{tmp_path / 'lake' / 'tenant'}"})
    assert status == 400 and "source location" in text, text


def test_a_spec_partitions_files_by_their_column_bounds(adopting, tmp_path):
    from datetime import datetime

    token = admin_token(adopting)
    catalog = admin_catalog(adopting)
    catalog.create_namespace("logs")
    lake = tmp_path / "lake" / "logs"
    lake.mkdir(parents=True)
    for day in (1, 2, 3):
        stamps = [datetime(2026, 11, day, hour) for hour in (1, 5, 9)]
        pq.write_table(pa.table({"ts": pa.array(stamps, pa.timestamp("us")), "n": pa.array([day] * 3, pa.int64())}),
                       lake / f"day-{day}.parquet")
    # One file spans two days: it has no single partition and is skipped, named.
    pq.write_table(pa.table({"ts": pa.array([datetime(2026, 11, 4), datetime(2026, 11, 5)], pa.timestamp("us")),
                             "n": pa.array([4, 5], pa.int64())}), lake / "two-days.parquet")
    admin_call(adopting, token, "POST", f"{WAREHOUSE}/source-locations", {"location": f"file://{tmp_path / 'lake'}"})
    report = adopt(adopting, token, {"source": f"file://{lake}", "namespace": ["logs"], "name": "events",
                                     "partitioning": {"type": "spec", "fields": [{"source": "ts", "transform": "day"}]}})
    assert report["files-added"] == 3 and report["rows-added"] == 9, report
    (skipped,) = report["files-skipped"]
    assert skipped["path"].endswith("/two-days.parquet") and "spans several" in skipped["reason"], skipped
    table = catalog.load_table("logs.events")
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("ts_day", "day")]
    from pyiceberg.expressions import GreaterThanOrEqual, LessThan
    day_two = table.scan(row_filter=GreaterThanOrEqual("ts", "2026-11-02T00:00:00") & LessThan("ts", "2026-11-03T00:00:00"))
    assert [t.file.file_path.rsplit("/", 1)[1] for t in day_two.plan_files()] == ["day-2.parquet"]
    assert sorted(day_two.to_arrow()["n"].to_pylist()) == [2, 2, 2]
    # A bad spec is refused before anything is made.
    status, text = error_of(adopting, token, "POST", f"{WAREHOUSE}/adoptions",
                            {"source": f"file://{lake}", "namespace": ["logs"], "name": "bad",
                             "partitioning": {"type": "spec", "fields": [{"source": "missing", "transform": "day"}]}})
    assert status == 400 and "missing" in text, text
    assert not catalog.table_exists("logs.bad")
