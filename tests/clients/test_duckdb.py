"""DuckDB 1.5.5 with its iceberg extension attaches icegate, reads a table PyIceberg wrote and
inserts into it; PyIceberg reads DuckDB's rows back. The extensions are loaded from their PyPI
packages, so no network is needed."""

import glob
import os

import duckdb
import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType


def duckdb_with_iceberg():
    site = os.path.dirname(os.path.dirname(duckdb.__file__))
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    for name in ["httpfs", "avro", "iceberg"]:
        found = glob.glob(os.path.join(site, f"duckdb_extension_{name}", "extensions", "*", f"{name}.duckdb_extension"))
        if not found:
            pytest.fail(f"the DuckDB {name} extension package is not installed (tests/requirements.txt)")
        connection.execute(f"LOAD '{found[0]}'")
    return connection


def test_duckdb_reads_and_writes_a_pyiceberg_table(icegate):
    catalog = load_catalog("icegate", type="rest", uri=icegate.uri, warehouse="default")
    catalog.create_namespace("shop")
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "item", StringType(), required=False))
    table = catalog.create_table("shop.orders", schema=schema)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "item": ["apple", "pear"]}))

    con = duckdb_with_iceberg()
    con.execute(f"ATTACH 'default' AS ice (TYPE iceberg, ENDPOINT '{icegate.uri}', AUTHORIZATION_TYPE 'none')")
    tables = [(row[1], row[2]) for row in con.execute("SHOW ALL TABLES").fetchall() if row[0] == "ice"]
    assert ("shop", "orders") in tables
    assert con.execute("SELECT id, item FROM ice.shop.orders ORDER BY id").fetchall() == [(1, "apple"), (2, "pear")]

    con.execute("INSERT INTO ice.shop.orders VALUES (3, 'plum'), (4, 'fig')")
    assert con.execute("SELECT count(*) FROM ice.shop.orders").fetchone()[0] == 4

    reloaded = catalog.load_table("shop.orders").scan().to_arrow()
    assert sorted(zip(reloaded["id"].to_pylist(), reloaded["item"].to_pylist())) == [
        (1, "apple"),
        (2, "pear"),
        (3, "plum"),
        (4, "fig"),
    ]
