"""The audit trail through a real client: a PyIceberg session's changes are recorded in order,
`icegate audit verify` (run beside the server, with its configuration) says the chain holds, and
after a record is edited behind the catalog's back it names that record and exits 1."""

import os
import sqlite3
import subprocess

import pyarrow as pa
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from conftest import icegate_bin


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
    if backend:
        return  # PostgreSQL: the records are read by the store tests; the chain holds here too
    database = tmp_path / "icegate-data" / "catalog.db"
    with sqlite3.connect(database) as db:
        operations = [row[0] for row in db.execute("SELECT operation FROM audit_log ORDER BY seq")]
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
