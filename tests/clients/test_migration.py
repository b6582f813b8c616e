"""Migrating tables from a PyIceberg SqlCatalog (docs/migration.md), with real clients: PyIceberg
writes the source (several snapshots, a partitioned table, namespace properties) into the SQL
catalog on SQLite or PostgreSQL; a dry run plans and registers nothing; the run fences each table
at the source, registers it at icegate and verifies it; PyIceberg then reads identical data from
icegate, time travel to the first snapshot works, a writer still pointed at the source fails
(fenced) and commits at icegate once switched; rollback hands the tables back with what icegate
committed meanwhile, and the source's writers commit again; no file is touched. A run killed
half-way (the source's row locked under its fence, the server killed) resumes on the next start."""

import base64
import json
import os
import signal
import sqlite3
import urllib.error
import urllib.parse
import uuid
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from conftest import Server, database_url, psql
from test_access_reviews import principal
from test_audit import status_of
from test_auth_clients import admin_call, admin_token, secured_env
from test_lifecycle import admin_catalog, local, wait_for

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "amount", DoubleType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))


def batch(start, n, region):
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "region": pa.array([region] * n),
                     "amount": pa.array([i * 0.5 for i in ids])})


def sorted_rows(table):
    return sorted(zip(*(table.column(c).to_pylist() for c in ["id", "region", "amount"])))


def files_below(root: Path):
    return {str(p): p.stat().st_size for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def source_db(tmp_path, backend):
    """The SQL catalog's database: SQLite beside the icegate under test on SQLite, a PostgreSQL
    database beside the one on PostgreSQL (icegate answers with the URI it opens)."""
    if not backend:
        path = tmp_path / "source-catalog.db"
        yield f"sqlite:///{path}", f"sqlite:///{path}"
        return
    name = f"icegate_src_{uuid.uuid4().hex}"
    psql(f"CREATE DATABASE {name}")
    url = database_url(name)
    try:
        yield url.replace("postgres://", "postgresql+psycopg2://", 1), url.replace("postgres://", "postgresql://", 1)
    finally:
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def source_catalog(uri, warehouse):
    return SqlCatalog("legacy", uri=uri, warehouse=warehouse)


def plan(server, token, source_uri, **extra):
    body = {"source": {"type": "sql", "uri": source_uri, "catalog-name": "legacy"}, "target-warehouse": "default",
            **extra}
    return admin_call(server, token, "POST", "/management/v1/migrations", body)


def migration(server, token, id):
    return admin_call(server, token, "GET", f"/management/v1/migrations/{id}")


def ended(server, token, id):
    run = migration(server, token, id)
    return run if run["state"] in ("completed", "failed") else None


def write_source(catalog, root):
    """sales.orders (partitioned, three snapshots), ops.events, and ops.elsewhere outside `root`."""
    catalog.create_namespace("sales", {"owner": "finance", "comment": "orders and refunds"})
    catalog.create_namespace("ops")
    orders = catalog.create_table("sales.orders", schema=SCHEMA, partition_spec=SPEC)
    orders.append(batch(0, 10, "eu"))
    orders.append(batch(10, 5, "us"))
    orders.append(batch(15, 7, "eu"))
    events = catalog.create_table("ops.events", schema=SCHEMA)
    events.append(batch(100, 3, "eu"))
    elsewhere = catalog.create_table("ops.elsewhere", schema=SCHEMA, location=f"file://{root.parent / 'elsewhere'}")
    elsewhere.append(batch(200, 1, "us"))


def test_a_sql_catalog_moves_to_icegate_and_back_losing_nothing(tmp_path, backend, source_db):
    server = Server(tmp_path, [], secured_env(backend)).start()
    try:
        token = admin_token(server)
        root = local(admin_call(server, token, "GET", "/management/v1/warehouses/default")["storage-root"])
        writer_uri, source_uri = source_db
        source = source_catalog(writer_uri, f"file://{root}/legacy")
        write_source(source, root)
        expected = sorted_rows(source.load_table("sales.orders").scan().to_arrow())
        first_snapshot = source.load_table("sales.orders").history()[0].snapshot_id
        # A writer that loaded the table before the move (it commits after it).
        stale = source.load_table("sales.orders")
        before = files_below(root)

        # The dry run: the plan with its conflict, nothing registered, nothing fenced.
        dry = plan(server, token, source_uri, **{"dry-run": True})
        assert dry["state"] == "completed" and dry["tables"] == []
        by_name = {p["source"]["name"]: p for p in dry["report"]["plan"]}
        assert set(by_name) == {"orders", "events", "elsewhere"}
        assert by_name["orders"]["moves"] and by_name["orders"]["snapshots"] == 3
        assert not by_name["elsewhere"]["moves"] and "outside" in by_name["elsewhere"]["conflict"]
        icegate = admin_catalog(server)
        assert icegate.list_namespaces() == []
        source.load_table("sales.orders").append(batch(22, 1, "us"))  # the source still takes commits
        expected = sorted_rows(source.load_table("sales.orders").scan().to_arrow())
        # The secret-free source is shown; no password could leak (none given on SQLite; PG: see docs).
        assert dry["source"]["type"] == "sql"

        # The run: 202, a task; ops maps to operations.
        run = plan(server, token, source_uri, **{"namespace-mapping": {"ops": "operations"}})
        assert run["state"] == "planned" and run["task-id"]
        done = wait_for(lambda: ended(server, token, run["id"]), "the migration to end", 60)
        states = {t["source-name"]: t for t in done["tables"]}
        assert done["state"] == "completed", done
        assert states["orders"]["state"] == "verified" and states["events"]["state"] == "verified"
        assert states["elsewhere"]["state"] == "skipped"
        checks = states["orders"]["report"]["checks"]
        assert all(c["ok"] for c in checks.values()) and checks["data-files"]["detail"]["checked"] >= 3
        # What moved is the newest commit the source acknowledged (made after the plan's dry run).
        assert states["orders"]["moved-location"] == states["orders"]["planned-location"]

        # icegate reads identical data, time travel works, namespace properties came along.
        orders = icegate.load_table("sales.orders")
        assert sorted_rows(orders.scan().to_arrow()) == expected
        assert len(sorted_rows(orders.scan(snapshot_id=first_snapshot).to_arrow())) == 10
        assert icegate.load_namespace_properties("sales")["owner"] == "finance"
        assert len(icegate.load_table("operations.events").scan().to_arrow()) == 3
        with pytest.raises(NoSuchTableError):
            icegate.load_table("ops.elsewhere")

        # A writer still at the source cannot commit there: a handle loaded before the move and a
        # fresh load both fail, naming the fence.
        with pytest.raises(FileNotFoundError, match="moved-to-icegate"):
            stale.append(batch(500, 1, "eu"))
        with pytest.raises(Exception, match="moved-to-icegate"):
            source.load_table("sales.orders").scan().to_arrow()
        # The elsewhere table, not moved, still takes commits at the source.
        source.load_table("ops.elsewhere").append(batch(201, 1, "us"))
        # Switched to icegate, the writer commits there.
        orders.append(batch(1000, 4, "us"))
        assert len(icegate.load_table("sales.orders").scan().to_arrow()) == len(expected) + 4

        # Nothing but new files (icegate's commit) appeared; no file went or changed.
        after = files_below(root)
        assert all(after.get(p) == size for p, size in before.items())

        # Rollback: icegate's commit goes back with the table; the source's writers commit again.
        rolled = admin_call(server, token, "POST", f"/management/v1/migrations/{run['id']}/rollback", {})
        assert rolled["state"] == "rolled-back"
        back = {t["source-name"]: t for t in rolled["tables"]}
        assert back["orders"]["state"] == "rolled-back"
        assert back["orders"]["handed-back"] != back["orders"]["moved-location"]
        assert back["events"]["handed-back"] == back["events"]["moved-location"]
        with pytest.raises(NoSuchTableError):
            icegate.load_table("sales.orders")
        at_source = source.load_table("sales.orders")
        assert len(at_source.scan().to_arrow()) == len(expected) + 4, "icegate's commit was handed back"
        at_source.append(batch(2000, 2, "eu"))
        assert len(source.load_table("sales.orders").scan().to_arrow()) == len(expected) + 6
        final = files_below(root)
        assert all(final.get(p) == size for p, size in after.items()), "rollback touched no file"

        # A second run moves it again (the first is rolled back), and retire removes the
        # source's entries for good.
        again = plan(server, token, source_uri, tables=[["sales", "orders"]])
        done = wait_for(lambda: ended(server, token, again["id"]), "the second migration", 60)
        assert done["state"] == "completed", done
        assert len(icegate.load_table("sales.orders").scan().to_arrow()) == len(expected) + 6
        retired = admin_call(server, token, "POST", f"/management/v1/migrations/{again['id']}/retire")
        assert [t["state"] for t in retired["tables"]] == ["retired"]
        with pytest.raises(NoSuchTableError):
            source.load_table("sales.orders")
        assert status_of(server, token, "POST", f"/management/v1/migrations/{again['id']}/rollback", {}) == 409
        assert len(icegate.load_table("sales.orders").scan().to_arrow()) == len(expected) + 6

        listed = admin_call(server, token, "GET", "/management/v1/migrations")["migrations"]
        assert [m["id"] for m in listed] == [dry["id"], run["id"], again["id"]]
    finally:
        server.stop()


def test_who_may_migrate_and_what_a_crafted_source_cannot_reach(tmp_path):
    server = Server(tmp_path, [], secured_env({})).start()
    try:
        token = admin_token(server)
        root = local(admin_call(server, token, "GET", "/management/v1/warehouses/default")["storage-root"])
        db = tmp_path / "crafted.db"
        source = source_catalog(f"sqlite:///{db}", f"file://{root}/legacy")
        source.create_namespace("db")
        victim = admin_catalog(server)
        victim.create_namespace("prod")
        secret = victim.create_table("prod.secret", schema=SCHEMA)
        secret.append(batch(0, 2, "eu"))
        # A crafted source entry pointing at another table's metadata (inside the root), one at
        # a file outside it, and one at a server file.
        mine = source.create_table("db.mine", schema=SCHEMA)
        con = sqlite3.connect(db)
        con.execute("INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location) "
                    "VALUES ('legacy', 'db', 'stolen', ?)", (secret.metadata_location,))
        con.execute("INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location) "
                    "VALUES ('legacy', 'db', 'passwd', 'file:///etc/passwd')")
        con.commit()
        con.close()
        uri = f"sqlite:///{db}"

        # A warehouse admin (not a server admin) may not open a SQL source; a stranger sees nothing.
        wh_admin, _ = principal(server, token, "wh-admin", "wh-admins", "admin", {"type": "warehouse", "warehouse": "default"})
        assert status_of(server, wh_admin, "POST", "/management/v1/migrations",
                         {"source": {"type": "sql", "uri": uri, "catalog-name": "legacy"},
                          "target-warehouse": "default"}) == 403
        creator, _ = principal(server, token, "creator", "creators", "create", {"type": "warehouse", "warehouse": "default"})
        assert status_of(server, creator, "POST", "/management/v1/migrations",
                         {"source": {"type": "sql", "uri": uri, "catalog-name": "legacy"},
                          "target-warehouse": "default"}) in (403, 404)

        run = plan(server, token, uri)
        done = wait_for(lambda: ended(server, token, run["id"]), "the migration", 60)
        states = {t["source-name"]: t for t in done["tables"]}
        assert states["mine"]["state"] == "verified"
        assert states["passwd"]["state"] == "skipped" and "outside" in states["passwd"]["error"]
        # Another table's metadata cannot be registered a second time (its location is taken):
        # the registration fails and the crafted entry is restored as it was.
        assert states["stolen"]["state"] == "failed", states["stolen"]
        con = sqlite3.connect(db)
        (location,) = con.execute("SELECT metadata_location FROM iceberg_tables WHERE table_name = 'stolen'").fetchone()
        assert location == secret.metadata_location
        assert victim.load_table("prod.secret").metadata_location == secret.metadata_location
        # A principal without admin on the warehouse cannot read the run (it sees the warehouse:
        # 403), nor list runs.
        assert status_of(server, creator, "GET", f"/management/v1/migrations/{run['id']}") == 403
        assert status_of(server, creator, "GET", "/management/v1/migrations") == 403
        assert status_of(server, wh_admin, "GET", f"/management/v1/migrations/{run['id']}") == 200
    finally:
        server.stop()


def test_a_run_killed_half_way_resumes(tmp_path):
    """PostgreSQL source: the second table's row is locked, so the run stops at its fence; the
    server is killed there, the lock released (the fence then lands with no one to record it),
    and the next start takes the run up and finishes it, each table registered once."""
    name = f"icegate_src_{uuid.uuid4().hex}"
    psql(f"CREATE DATABASE {name}")
    server = None
    try:
        url = database_url(name)
        env = secured_env({}, ICEGATE__LIFECYCLE__TASK_LEASE="3s")
        server = Server(tmp_path, [], env).start()
        token = admin_token(server)
        root = local(admin_call(server, token, "GET", "/management/v1/warehouses/default")["storage-root"])
        source = source_catalog(url.replace("postgres://", "postgresql+psycopg2://", 1), f"file://{root}/legacy")
        source.create_namespace("db")
        for table in ["a", "b", "c"]:
            source.create_table(f"db.{table}", schema=SCHEMA).append(batch(0, 3, "eu"))
        import psycopg2

        lock = psycopg2.connect(url)
        cur = lock.cursor()
        cur.execute("SELECT 1 FROM iceberg_tables WHERE table_name = 'b' FOR UPDATE")
        run = plan(server, token, url.replace("postgres://", "postgresql://", 1))

        def first_verified():
            tables = {t["source-name"]: t["state"] for t in migration(server, token, run["id"])["tables"]}
            return tables if tables["a"] == "verified" else None

        wait_for(first_verified, "the first table to move", 60)
        server.stop(signal.SIGKILL)
        lock.rollback()
        lock.close()
        server = Server(tmp_path, [], env).start()
        token = admin_token(server)
        done = wait_for(lambda: ended(server, token, run["id"]), "the resumed run", 90)
        assert done["state"] == "completed", done
        assert [t["state"] for t in done["tables"]] == ["verified"] * 3
        # The task was taken up again after the kill (its first attempt died at b's fence).
        task = admin_call(server, token, "GET", f"/management/v1/tasks/{run['task-id']}")
        assert task["state"] == "done" and task["attempts"] == 2, task
        icegate = admin_catalog(server)
        for table in ["a", "b", "c"]:
            assert len(icegate.load_table(f"db.{table}").scan().to_arrow()) == 3
        with pytest.raises(Exception, match="moved-to-icegate"):
            source.load_table("db.b").scan().to_arrow()
    finally:
        if server:
            server.stop()
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_a_second_icegate_as_the_rest_source(tmp_path):
    """A REST catalog source (a second icegate): its tables are released with unregisterTable,
    registered here, verified; its clients then find no table there; rollback registers the
    table at the source again with what was committed here; the credential is never shown."""
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    source_server = Server(tmp_path / "src", [], secured_env({})).start()
    key = base64.b64encode(os.urandom(32)).decode()
    target = Server(tmp_path / "dst", [], secured_env({}, ICEGATE__SECRETS__ENCRYPTION_KEY=key)).start()
    try:
        source_token = admin_token(source_server)
        root = admin_call(source_server, source_token, "GET", "/management/v1/warehouses/default")["storage-root"]
        source = admin_catalog(source_server)
        source.create_namespace("sales", {"owner": "finance"})
        orders = source.create_table("sales.orders", schema=SCHEMA, partition_spec=SPEC)
        for start, region in [(0, "eu"), (10, "us"), (20, "eu")]:
            orders.append(batch(start, 5, region))
        first_snapshot = source.load_table("sales.orders").history()[0].snapshot_id
        expected = sorted_rows(source.load_table("sales.orders").scan().to_arrow())

        token = admin_token(target)
        # The target warehouse's storage is where the source keeps its tables.
        admin_call(target, token, "POST", "/management/v1/warehouses", {"name": "migrated", "storage-root": root})
        secret = "bootstrap-secret-0123456789"
        body = {"source": {"type": "rest", "uri": source_server.uri, "warehouse": "default",
                           "credential": f"bootstrap-admin:{secret}"},
                "target-warehouse": "migrated"}
        dry = admin_call(target, token, "POST", "/management/v1/migrations", {**body, "dry-run": True})
        assert [p["moves"] for p in dry["report"]["plan"]] == [True]
        run = admin_call(target, token, "POST", "/management/v1/migrations", body)
        done = wait_for(lambda: ended(target, token, run["id"]), "the REST migration", 60)
        assert done["state"] == "completed", done
        assert done["source"]["credential"] == "***"
        shown = json.dumps(admin_call(target, token, "GET", "/management/v1/migrations")) + json.dumps(done)
        assert secret not in shown and secret not in target.logs()

        here = load_catalog("t", type="rest", uri=target.uri, warehouse="migrated",
                            credential="bootstrap-admin:bootstrap-secret-0123456789")
        table = here.load_table("sales.orders")
        assert sorted_rows(table.scan().to_arrow()) == expected
        assert len(table.scan(snapshot_id=first_snapshot).to_arrow()) == 5
        assert here.load_namespace_properties("sales")["owner"] == "finance"
        with pytest.raises(NoSuchTableError):
            source.load_table("sales.orders")
        table.append(batch(100, 2, "us"))

        rolled = admin_call(target, token, "POST", f"/management/v1/migrations/{run['id']}/rollback", {})
        assert rolled["state"] == "rolled-back"
        with pytest.raises(NoSuchTableError):
            here.load_table("sales.orders")
        back = source.load_table("sales.orders")
        assert len(back.scan().to_arrow()) == len(expected) + 2, "the commit made here went back"
        back.append(batch(200, 1, "eu"))
        assert len(source.load_table("sales.orders").scan().to_arrow()) == len(expected) + 3
    finally:
        target.stop()
        source_server.stop()


def avro_bomb(original: bytes, inflated: int) -> bytes:
    """`original` (an Avro container) with its records replaced by one deflate block of zeros
    that inflates to `inflated` bytes."""
    def read_long(b, i):
        shift = value = 0
        while True:
            c = b[i]
            i += 1
            value |= (c & 0x7F) << shift
            shift += 7
            if not c & 0x80:
                return (value >> 1) ^ -(value & 1), i

    def long(n):
        n = (n << 1) ^ (n >> 63)
        out = bytearray()
        while n & ~0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out)

    i, meta = 4, {}
    while True:
        count, i = read_long(original, i)
        if count == 0:
            break
        if count < 0:
            count = -count
            _, i = read_long(original, i)
        for _ in range(count):
            n, i = read_long(original, i)
            key = original[i:i + n]
            i += n
            n, i = read_long(original, i)
            meta[key] = original[i:i + n]
            i += n
    sync = original[i:i + 16]
    meta[b"avro.codec"] = b"deflate"
    out = bytearray(b"Obj\x01") + long(len(meta))
    for key, value in meta.items():
        out += long(len(key)) + key + long(len(value)) + value
    out += long(0) + sync
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = b"".join(compressor.compress(b"\0" * (1 << 20)) for _ in range(inflated >> 20)) + compressor.flush()
    return bytes(out + long(1) + long(len(data)) + data + sync)


def test_what_the_attack_round_found_stays_fixed(tmp_path):
    """docs/security.md, "Migrating from another catalog": a broken table fails alone and can be
    rolled back (the run never sticks), a manifest list that inflates to 1 GiB is refused
    unparsed, a namespace 2,000 levels deep is refused at once, the source's lifecycle policy is
    not carried, and retire and rollback touch only the migrated table's own row."""
    server = Server(tmp_path, [], secured_env({})).start()
    try:
        token = admin_token(server)
        root = local(admin_call(server, token, "GET", "/management/v1/warehouses/default")["storage-root"])
        db = tmp_path / "source.db"
        source = source_catalog(f"sqlite:///{db}", f"file://{root}/legacy")
        source.create_namespace("team", {"owner": "ops", "lifecycle.soft-delete.hold": "0s"})
        for name in ["good", "broken", "bomb"]:
            source.create_table(f"team.{name}", schema=SCHEMA).append(batch(0, 3, "eu"))
        broken_list = Path(urllib.parse.urlsplit(
            source.load_table("team.broken").current_snapshot().manifest_list).path)
        broken_list.unlink()
        bomb_list = Path(urllib.parse.urlsplit(source.load_table("team.bomb").current_snapshot().manifest_list).path)
        bomb_list.write_bytes(avro_bomb(bomb_list.read_bytes(), 1 << 30))
        uri = f"sqlite:///{db}"

        dry = plan(server, token, uri, **{"dry-run": True})
        assert dry["report"]["plan"][0]["namespace-properties-left-out"] == ["lifecycle.soft-delete.hold"]
        run = plan(server, token, uri)
        done = wait_for(lambda: ended(server, token, run["id"]), "the migration", 60)
        states = {t["source-name"]: t for t in done["tables"]}
        assert done["state"] == "failed"
        assert states["good"]["state"] == "verified"
        assert states["broken"]["state"] == "failed" and "does not exist" in states["broken"]["error"]
        assert states["bomb"]["state"] == "failed" and "avro" in states["bomb"]["error"].lower()
        properties = admin_catalog(server).load_namespace_properties("team")
        assert properties["owner"] == "ops" and "lifecycle.soft-delete.hold" not in properties

        # A row elsewhere set to the good table's fenced string is not the good table.
        con = sqlite3.connect(db)
        (fenced,) = con.execute("SELECT metadata_location FROM iceberg_tables WHERE table_name = 'good'").fetchone()
        con.execute("INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location) "
                    "VALUES ('legacy', 'other', 'decoy', ?)", (fenced,))
        con.commit()
        # The failed run rolls back: the failed tables go back to the source as they were.
        rolled = admin_call(server, token, "POST", f"/management/v1/migrations/{run['id']}/rollback",
                            {"tables": [["team", "broken"], ["team", "bomb"]]})
        assert {t["source-name"]: t["state"] for t in rolled["tables"]} == {
            "good": "verified", "broken": "rolled-back", "bomb": "rolled-back"}
        assert source.load_table("team.broken").metadata_location == states["broken"]["moved-location"]
        retired = admin_call(server, token, "POST", f"/management/v1/migrations/{run['id']}/retire")
        assert [t["state"] for t in retired["tables"] if t["source-name"] == "good"] == ["retired"]
        rows = dict(con.execute("SELECT table_name, metadata_location FROM iceberg_tables").fetchall())
        assert "good" not in rows and rows["decoy"] == fenced, "retire removed only the migrated table's row"
        con.close()
        assert server.process.poll() is None, "the server survived the bomb"

        # A namespace 2,000 levels deep is refused before it costs anything.
        deep = tmp_path / "deep.db"
        SqlCatalog("legacy", uri=f"sqlite:///{deep}", warehouse=f"file://{root}/deep").create_namespace("x")
        con = sqlite3.connect(deep)
        con.execute("INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location) "
                    "VALUES ('legacy', ?, 't', 'file:///nowhere')", (".".join(["a"] * 2000),))
        con.commit()
        con.close()
        status, answer = status_and_body(server, token, "POST", "/management/v1/migrations",
                                         {"source": {"type": "sql", "uri": f"sqlite:///{deep}", "catalog-name": "legacy"},
                                          "target-warehouse": "default", "dry-run": True})
        assert status == 400 and "deeper than" in answer["error"]["message"]
    finally:
        server.stop()


def status_and_body(server, token, method, path, body=None):
    try:
        return 200, admin_call(server, token, method, path, body)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_run_whose_task_is_cancelled_can_be_rolled_back(tmp_path):
    """A PostgreSQL source row held by a writer's open transaction: the fence waits (at most
    lock_timeout), the operator cancels the task, and the run, no longer moving, is rolled back."""
    name = f"icegate_src_{uuid.uuid4().hex}"
    psql(f"CREATE DATABASE {name}")
    server = Server(tmp_path, [], secured_env({})).start()
    try:
        import psycopg2

        url = database_url(name)
        token = admin_token(server)
        root = local(admin_call(server, token, "GET", "/management/v1/warehouses/default")["storage-root"])
        source = source_catalog(url.replace("postgres://", "postgresql+psycopg2://", 1), f"file://{root}/legacy")
        source.create_namespace("db")
        source.create_table("db.held", schema=SCHEMA).append(batch(0, 3, "eu"))
        lock = psycopg2.connect(url)
        lock.cursor().execute("SELECT 1 FROM iceberg_tables WHERE table_name = 'held' FOR UPDATE")
        run = plan(server, token, url.replace("postgres://", "postgresql://", 1))
        wait_for(lambda: migration(server, token, run["id"])["state"] == "running", "the run to start", 30)
        assert status_of(server, token, "POST", f"/management/v1/migrations/{run['id']}/rollback", {}) == 409
        admin_call(server, token, "POST", f"/management/v1/tasks/{run['task-id']}/cancel")
        rolled = admin_call(server, token, "POST", f"/management/v1/migrations/{run['id']}/rollback", {})
        assert rolled["state"] == "rolled-back" and rolled["report"]["previous"]["ended"].startswith("its task ended")
        lock.rollback()
        lock.close()
        # The fence that waited on the lock lands now; the run's worker, finding the table rolled
        # back, undoes it as soon as it returns (a rollback repeated would too).
        def restored():
            try:
                return source.load_table("db.held").metadata_location.endswith(".json")
            except FileNotFoundError:
                return False

        wait_for(restored, "the source to be restored", 30)
        admin_call(server, token, "POST", f"/management/v1/migrations/{run['id']}/rollback", {})
        # The source is as it was: its writers commit.
        source.load_table("db.held").append(batch(3, 1, "eu"))
        assert len(source.load_table("db.held").scan().to_arrow()) == 4
    finally:
        server.stop()
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


class HostileCatalog:
    """A REST catalog that answers what a test asks: one namespace `db` with tables `t0..tN`,
    each at a metadata file the test wrote, and per-route overrides (status, body)."""

    def __init__(self, tables: dict[str, str]):
        import http.server
        import threading

        self.tables = tables
        self.overrides: dict[str, tuple[int, bytes]] = {}
        self.loads = 0
        catalog = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status, body: bytes):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def route(self):
                path = self.path.split("?")[0]
                if path in catalog.overrides:
                    return catalog.overrides[path]
                if path == "/v1/config":
                    return 200, b'{"defaults": {}, "overrides": {}}'
                if path == "/v1/namespaces":
                    return 200, b'{"namespaces": [["db"]]}'
                if path == "/v1/namespaces/db":
                    return 200, b'{"namespace": ["db"], "properties": {}}'
                if path == "/v1/namespaces/db/tables":
                    return 200, json.dumps({"identifiers": [{"namespace": ["db"], "name": n} for n in catalog.tables]}).encode()
                name = path.removeprefix("/v1/namespaces/db/tables/").removesuffix("/unregister")
                if name in catalog.tables:
                    catalog.loads += 1
                    return 200, json.dumps({"metadata-location": catalog.tables[name], "metadata": {}}).encode()
                return 404, b'{"error": {"message": "no", "type": "NoSuchTableException", "code": 404}}'

            def do_GET(self):
                self.answer(*self.route())

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.answer(*self.route())

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def peak_rss_mb(server) -> float:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(next(l for l in status.splitlines() if l.startswith("VmHWM")).split()[1]) / 1024


def test_a_hostile_rest_source_costs_little_and_says_little(tmp_path):
    """docs/security.md, second attack round: a REST source whose listing is one 7 MiB page of
    junk is refused without building it; one whose unregister fails with a 20 MiB message leaves
    a short error; one that releases a table at a location with a trailing `/` fails that table
    at once (it is registered there again); a fence reads one table, not the namespace."""
    key = base64.b64encode(os.urandom(32)).decode()
    server = Server(tmp_path, [], secured_env({}, ICEGATE__SECRETS__ENCRYPTION_KEY=key)).start()
    hostile = None
    try:
        token = admin_token(server)
        root = local(admin_call(server, token, "GET", "/management/v1/warehouses/default")["storage-root"])
        # Real tables to point at: written by a SQL catalog under the root.
        sql = source_catalog(f"sqlite:///{tmp_path / 'real.db'}", f"file://{root}/real")
        sql.create_namespace("db")
        locations = {}
        for i in range(12):
            locations[f"t{i}"] = sql.create_table(f"db.t{i}", schema=SCHEMA).metadata_location
        hostile = HostileCatalog(locations)
        body = {"source": {"type": "rest", "uri": hostile.uri}, "target-warehouse": "default"}

        hostile.overrides["/v1/namespaces"] = (200, b'{"namespaces": [' + b"0," * (3 * 1024 * 1024) + b"0]}")
        status, answer = status_and_body(server, token, "POST", "/management/v1/migrations", {**body, "dry-run": True})
        assert status == 400, answer
        assert peak_rss_mb(server) < 512, "the junk page was not built"
        del hostile.overrides["/v1/namespaces"]

        hostile.overrides["/v1/namespaces/db/tables/t0/unregister"] = (
            422, json.dumps({"error": {"message": "x" * (20 * 1024 * 1024), "type": "E", "code": 422}}).encode())
        hostile.overrides["/v1/namespaces/db/tables/t1/unregister"] = (
            200, json.dumps({"metadata-location": locations["t1"].rsplit("/", 1)[0] + "/", "metadata": {}}).encode())
        hostile.loads = 0
        run = admin_call(server, token, "POST", "/management/v1/migrations", {**body, "tables": [["db", "t0"], ["db", "t1"], ["db", "t2"]]})
        done = wait_for(lambda: ended(server, token, run["id"]), "the run", 60)
        states = {t["source-name"]: t for t in done["tables"]}
        assert states["t0"]["state"] == "failed" and len(states["t0"]["error"]) < 4096
        assert states["t1"]["state"] == "failed" and "segment" in states["t1"]["error"]
        assert states["t2"]["state"] == "verified"
        # Planning loads each of the 12 tables once; the run reads one table per fence, never the
        # namespace again.
        assert hostile.loads <= 12 + 3 + 3, hostile.loads
    finally:
        if hostile:
            hostile.close()
        server.stop()
