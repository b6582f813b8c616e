"""The operators' CLI (docs/cli.md), run as the real binary against a started server: every noun,
`--output json` parsed and checked, the server's message and exit 1 when it refuses, exit 2 for a
usage error, a migration followed to its end with its final report, shell completions, and
connection settings from flags, the environment and a named profile."""

import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from conftest import Server, icegate_bin
from test_auth_clients import ADMIN_ID, ADMIN_SECRET, secured_env
from test_lifecycle import admin_catalog

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


def icegate(server, *args, env=None, check=True):
    """Runs `icegate ARGS` against `server` as the bootstrap admin (from the environment)."""
    full = {**os.environ, "ICEGATE_URL": server.uri, "ICEGATE_CLIENT_ID": ADMIN_ID,
            "ICEGATE_CLIENT_SECRET": ADMIN_SECRET, **(env or {})}
    result = subprocess.run([icegate_bin(), *args], env=full, capture_output=True, text=True, timeout=120)
    if check:
        assert result.returncode == 0, f"icegate {' '.join(args)}: {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def as_json(server, *args, **kwargs):
    return json.loads(icegate(server, *args, "--output", "json", **kwargs).stdout)


@pytest.fixture
def secured(tmp_path):
    server = Server(tmp_path, [], secured_env({})).start()
    try:
        yield server
    finally:
        server.stop()


def test_every_noun_against_a_running_server(secured, tmp_path):
    server = secured
    warehouses = as_json(server, "warehouse", "list")["warehouses"]
    assert [w["name"] for w in warehouses] == ["default"]
    human = icegate(server, "warehouse", "list").stdout
    assert human.splitlines()[0].split()[:2] == ["NAME", "STORAGE"] and "default" in human
    lake = tmp_path / "lake"
    created = as_json(server, "warehouse", "create", "lake", "--storage-root", f"file://{lake}")
    assert created["name"] == "lake" and created["storage-root"] == f"file://{lake}"
    assert as_json(server, "warehouse", "show", "lake")["storage-profile"]["type"] == "file"

    as_json(server, "namespace", "create", "default.sales", "-p", "owner=finance")
    as_json(server, "namespace", "create", 'default.sales."eu.west"')
    assert as_json(server, "namespace", "show", "default.sales")["properties"]["owner"] == "finance"
    listed = as_json(server, "namespace", "list", "default.sales")["namespaces"]
    assert listed == [["sales", "eu.west"]]
    assert 'default.sales."eu.west"' in icegate(server, "namespace", "list", "default.sales").stdout

    catalog = admin_catalog(server)
    orders = catalog.create_table("sales.orders", schema=SCHEMA)
    orders.append(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    orders.append(pa.table({"id": pa.array([3], pa.int64()), "name": ["c"]}))
    assert as_json(server, "table", "list", "default.sales")["tables"] == ["orders"]
    shown = as_json(server, "table", "show", "default.sales.orders")
    assert len(shown["metadata"]["snapshots"]) == 2
    text = icegate(server, "table", "show", "default.sales.orders").stdout
    assert "schema 0" in text and "append" in text and "unpartitioned" in text, text

    # Access: a principal, a role, a grant, and who can read the table.
    bob = as_json(server, "principal", "create", "bob")
    assert bob["client-id"] and bob["client-secret"]
    assert "shown once" in icegate(server, "principal", "create", "carol").stdout
    as_json(server, "role", "create", "readers")
    as_json(server, "role", "add", "readers", "bob")
    as_json(server, "grant", "add", "readers", "read", "table:default.sales.orders")
    grants = as_json(server, "grant", "list", "readers")["grants"]
    assert [(g["privilege"], g["securable"]["name"]) for g in grants] == [("read", "orders")]
    who = as_json(server, "access", "who-can", "default.sales.orders")
    assert ("bob", "read", "readers") in {(l["principal"], l["privilege"], l["role"]) for l in who["lines"]}
    assert "bob" in icegate(server, "access", "who-can", "default.sales.orders").stdout
    assert "bob" in {p["name"] for p in as_json(server, "principal", "list")["principals"]}
    rotated = as_json(server, "principal", "rotate-secret", "bob")
    assert rotated["client-secret"] != bob["client-secret"]

    # A refusal: exit 1 with the server's message; bob may read but not drop.
    refused = icegate(server, "table", "drop", "default.sales.orders", check=False,
                      env={"ICEGATE_CLIENT_ID": rotated["client-id"], "ICEGATE_CLIENT_SECRET": rotated["client-secret"]})
    assert refused.returncode == 1 and "403" in refused.stderr, refused.stderr
    missing = icegate(server, "table", "show", "default.sales.nothing", check=False)
    assert missing.returncode == 1 and "404" in missing.stderr and "nothing" in missing.stderr
    usage = icegate(server, "table", check=False)
    assert usage.returncode == 2
    assert icegate(server, "table", "show", "default..x", check=False).returncode == 1

    # Drop, see it among the deleted, undrop it.
    as_json(server, "table", "drop", "default.sales.orders")
    deleted = as_json(server, "table", "deleted", "default")["deleted"]
    assert [d["name"] for d in deleted] == ["orders"]
    as_json(server, "table", "undrop", "default.sales.orders")
    assert len(catalog.load_table("sales.orders").scan().to_arrow()) == 3

    as_json(server, "grant", "remove", "readers", "read", "table:default.sales.orders")
    assert as_json(server, "grant", "list", "readers")["grants"] == []
    as_json(server, "role", "remove", "readers", "bob")
    as_json(server, "principal", "delete", "carol")
    as_json(server, "namespace", "drop", 'default.sales."eu.west"')
    as_json(server, "warehouse", "delete", "lake")
    assert [w["name"] for w in as_json(server, "warehouse", "list")["warehouses"]] == ["default"]


def test_a_migration_is_followed_to_its_report_and_tasks_are_listed(secured, tmp_path):
    server = secured
    root = Path(as_json(server, "warehouse", "show", "default")["storage-root"].removeprefix("file://"))
    db = tmp_path / "legacy.db"
    legacy = SqlCatalog("legacy", uri=f"sqlite:///{db}", warehouse=f"file://{root}/legacy")
    legacy.create_namespace("db")
    for name in ["a", "b"]:
        legacy.create_table(f"db.{name}", schema=SCHEMA).append(pa.table({"id": pa.array([1], pa.int64()), "name": ["x"]}))
    source = json.dumps({"type": "sql", "uri": f"sqlite:///{db}", "catalog-name": "legacy"})
    plan = as_json(server, "migration", "plan", "--source", source, "--target", "default")
    assert plan["state"] == "completed" and [p["moves"] for p in plan["report"]["plan"]] == [True, True]
    run = icegate(server, "migration", "run", "--source", source, "--target", "default", "--map", "db=moved")
    assert "verified" in run.stdout and "moved.a" in run.stdout, run.stdout
    assert "2/2" in run.stderr, "the progress bar reached the end"
    migrations = as_json(server, "migration", "list")["migrations"]
    assert [m["state"] for m in migrations] == ["completed", "completed"]
    task_id = migrations[1]["task-id"]
    task = as_json(server, "task", "show", task_id)
    assert task["state"] == "done" and task["progress"]["done"] == 2
    assert task_id in {t["id"] for t in as_json(server, "task", "list", "--kind", "migration-run")["tasks"]}
    watched = icegate(server, "task", "watch", task_id)
    assert "done" in watched.stdout
    rolled = as_json(server, "migration", "rollback", migrations[1]["id"])
    assert rolled["state"] == "rolled-back"
    assert len(legacy.load_table("db.a").scan().to_arrow()) == 1


def test_connection_settings_come_from_flags_the_environment_and_profiles(secured, tmp_path):
    server = secured
    config = tmp_path / "config"
    (config / "icegate").mkdir(parents=True)
    (config / "icegate" / "profiles.toml").write_text(
        f'[ops]\nurl = "{server.uri}"\nclient-id = "{ADMIN_ID}"\nclient-secret = "{ADMIN_SECRET}"\n')
    bare = {k: v for k, v in os.environ.items() if not k.startswith("ICEGATE_")}
    run = lambda *args: subprocess.run([icegate_bin(), *args], env={**bare, "XDG_CONFIG_HOME": str(config)},
                                        capture_output=True, text=True, timeout=60)
    by_profile = run("warehouse", "list", "--profile", "ops", "--output", "json")
    assert by_profile.returncode == 0 and json.loads(by_profile.stdout)["warehouses"][0]["name"] == "default"
    by_flags = run("warehouse", "list", "--url", server.uri, "--client-id", ADMIN_ID, "--client-secret", ADMIN_SECRET)
    assert by_flags.returncode == 0 and "default" in by_flags.stdout
    wrong = run("warehouse", "list", "--url", server.uri, "--client-id", ADMIN_ID, "--client-secret", "wrong")
    assert wrong.returncode == 1 and "signing in failed" in wrong.stderr
    unknown = run("warehouse", "list", "--profile", "nope")
    assert unknown.returncode == 1 and "no profile [nope]" in unknown.stderr
    completions = run("completions", "bash")
    assert completions.returncode == 0 and "_icegate" in completions.stdout and "migration" in completions.stdout


def test_maintenance_adoption_audit_and_reviews(secured, tmp_path):
    import pyarrow.parquet as pq

    server = secured
    catalog = admin_catalog(server)
    catalog.create_namespace("ops")
    events = catalog.create_table("ops.events", schema=SCHEMA)
    for i in range(3):
        events.append(pa.table({"id": pa.array([i], pa.int64()), "name": ["x"]}))
    plan = as_json(server, "maintenance", "plan", "default.ops.events", "--table")
    assert [t["name"] for t in plan["tables"]] == ["events"]
    run = icegate(server, "maintenance", "run", "default.ops.events", "--table", "--action", "remove-orphans")
    assert "done" in run.stdout, run.stdout + run.stderr

    root = Path(as_json(server, "warehouse", "show", "default")["storage-root"].removeprefix("file://"))
    dataset = root / "landing" / "clicks"
    for region in ["eu", "us"]:
        (dataset / f"region={region}").mkdir(parents=True)
        pq.write_table(pa.table({"id": [1, 2, 3]}), dataset / f"region={region}" / "part-0.parquet")
    dry = as_json(server, "adopt", "run", "default.ops.clicks", "--source", f"file://{dataset}", "--partitioning", "hive", "--dry-run")
    assert dry["files-added"] == 2 and dry["rows-added"] == 6
    adopted = icegate(server, "adopt", "run", "default.ops.clicks", "--source", f"file://{dataset}", "--partitioning", "hive")
    assert "2 files, 6 rows added" in adopted.stdout, adopted.stdout
    listed = as_json(server, "adopt", "list", "default")["adoptions"]
    assert [a["name"] for a in listed] == ["clicks"]
    assert as_json(server, "adopt", "sync", "default", listed[0]["id"])["files-added"] == 0

    records = as_json(server, "audit", "search", "--action", "adoptDataset")["records"]
    assert records and all("adoptDataset" in r["text"] for r in records)

    as_json(server, "principal", "create", "dora")
    as_json(server, "role", "create", "analysts")
    as_json(server, "role", "add", "analysts", "dora")
    as_json(server, "grant", "add", "analysts", "read", "namespace:default.ops")
    review = as_json(server, "access", "review", "create", "default.ops", "--description", "quarterly")
    line = next(l for l in review["lines"] if l["principal"] == "dora")
    as_json(server, "access", "review", "decide", review["id"], str(line["line"]), "revoke-grant")
    as_json(server, "access", "review", "close", review["id"])
    assert as_json(server, "grant", "list", "analysts")["grants"] == []
    assert "closed" in icegate(server, "access", "review", "show", review["id"]).stdout
