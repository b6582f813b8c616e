"""PyIceberg 0.12 creates, writes, evolves and reads tables through icegate, on both stores."""

import datetime
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestampType

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "category", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
)
BY_DAY = PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=DayTransform(), name="ts_day"))


def rows(ids, category="a", day=1):
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "category": pa.array([category] * len(ids), pa.string()),
            "ts": pa.array([datetime.datetime(2024, 1, day, 12)] * len(ids), pa.timestamp("us")),
        }
    )


@pytest.fixture
def catalog(icegate):
    catalog = load_catalog("icegate", type="rest", uri=icegate.uri, warehouse="default")
    catalog.create_namespace("db")
    return catalog


def local(location: str) -> Path:
    assert location.startswith("file://"), location
    return Path(location[len("file://") :])


def test_a_partitioned_table_is_written_evolved_and_read_back(catalog):
    table = catalog.create_table("db.events", schema=SCHEMA, partition_spec=BY_DAY)
    table.append(rows([1, 2, 3], day=1))
    first_snapshot = table.current_snapshot().snapshot_id
    table.append(rows([4, 5], "b", day=2))
    table.append(rows([6], day=3))

    reloaded = catalog.load_table("db.events")
    assert sorted(reloaded.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3, 4, 5, 6]
    assert reloaded.spec().fields[0].transform == DayTransform()
    # Time travel to an earlier snapshot.
    assert sorted(reloaded.scan(snapshot_id=first_snapshot).to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert len(reloaded.metadata.snapshots) == 3

    # Schema evolution: add, rename, drop.
    with reloaded.update_schema() as update:
        update.add_column("note", StringType())
    with reloaded.update_schema() as update:
        update.rename_column("category", "kind")
    with reloaded.update_schema() as update:
        update.delete_column("note")
    reloaded = catalog.load_table("db.events")
    assert [f.name for f in reloaded.schema().fields] == ["id", "kind", "ts"]
    assert reloaded.scan(row_filter=EqualTo("kind", "b")).to_arrow().num_rows == 2

    # Partition evolution: add an identity partition on the renamed column.
    with reloaded.update_spec() as update:
        update.add_field("kind", IdentityTransform(), "kind")
    reloaded = catalog.load_table("db.events")
    assert len(reloaded.metadata.partition_specs) == 2
    reloaded.append(
        pa.table({"id": pa.array([7], pa.int64()), "kind": ["c"], "ts": pa.array([datetime.datetime(2024, 1, 4)], pa.timestamp("us"))})
    )
    assert catalog.load_table("db.events").scan().to_arrow().num_rows == 7


def test_overwrite_and_delete_rewrite_the_table(catalog):
    table = catalog.create_table("db.changes", schema=SCHEMA, partition_spec=BY_DAY)
    table.append(rows([1, 2, 3, 4]))
    table.delete(EqualTo("id", 2))
    assert sorted(catalog.load_table("db.changes").scan().to_arrow()["id"].to_pylist()) == [1, 3, 4]
    table = catalog.load_table("db.changes")
    table.overwrite(rows([10, 11], "z", day=5))
    result = catalog.load_table("db.changes").scan().to_arrow()
    assert sorted(result["id"].to_pylist()) == [10, 11]
    assert set(result["category"].to_pylist()) == {"z"}


def test_concurrent_appends_with_retry_keep_every_row(catalog):
    catalog.create_table("db.hot", schema=SCHEMA)
    errors = []

    def writer(worker: int):
        batch = rows([worker * 100 + i for i in range(5)])
        for _attempt in range(40):
            try:
                catalog.load_table("db.hot").append(batch)
                return
            except CommitFailedException:
                continue
        errors.append(f"writer {worker} gave up")

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ids = catalog.load_table("db.hot").scan().to_arrow()["id"].to_pylist()
    assert sorted(ids) == sorted(w * 100 + i for w in range(8) for i in range(5))


def test_tables_are_renamed_registered_and_purged(catalog):
    table = catalog.create_table("db.orig", schema=SCHEMA)
    table.append(rows([1, 2]))
    catalog.create_namespace("other")
    catalog.rename_table("db.orig", "other.moved")
    assert catalog.list_tables("db") == []
    assert catalog.list_tables("other") == [("other", "moved")]
    moved = catalog.load_table("other.moved")
    assert moved.scan().to_arrow().num_rows == 2
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table("other.moved", schema=SCHEMA)

    # Drop (keeping files), then register the same metadata file under a new name.
    metadata_location = moved.metadata_location
    catalog.drop_table("other.moved")
    with pytest.raises(NoSuchTableError):
        catalog.load_table("other.moved")
    registered = catalog.register_table("db.registered", metadata_location)
    assert registered.scan().to_arrow().num_rows == 2

    # Purge removes the table's files.
    table_dir = local(registered.metadata.location)
    assert any(table_dir.rglob("*.parquet"))
    catalog.purge_table("db.registered")
    assert not catalog.table_exists("db.registered")
    # The purge runs as a task, promptly.
    deadline = time.monotonic() + 30
    while table_dir.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not table_dir.exists()


def test_a_create_table_transaction_stages_then_commits(catalog):
    with catalog.create_table_transaction("db.staged", schema=SCHEMA, partition_spec=BY_DAY) as tx:
        tx.append(rows([1, 2, 3]))
    table = catalog.load_table("db.staged")
    assert table.scan().to_arrow().num_rows == 3
    assert table.spec().spec_id == 0, "the staged spec id is kept, so data files stay readable"
    assert pc.sum(table.scan().to_arrow()["id"]).as_py() == 6
