"""Spark 3.5 with the Iceberg 1.10 Spark runtime drives icegate through SQL: CREATE TABLE,
INSERT, MERGE INTO, ALTER TABLE ADD COLUMN, CREATE VIEW and SELECT from it, RENAME, and
DROP TABLE PURGE. The runtime jars come from tests/spark/prepare.sh (offline)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark_jars():
    out = Path(os.environ.get("ICEGATE_SPARK_JARS", Path.home() / ".cache" / "icegate" / "spark-jars"))
    result = subprocess.run(
        ["bash", str(REPO / "tests" / "spark" / "prepare.sh"), sys.executable, str(out)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.fail(f"preparing the Iceberg Spark runtime failed:\n{result.stderr}")
    return [str(out / "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"), str(out / "iceberg-relocated-deps.jar")]


def start_spark(uri, spark_jars, tmp_path, **catalog_options):
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("icegate-e2e")
        .config("spark.jars", ",".join(spark_jars))
        .config("spark.driver.extraJavaOptions", "-XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote")
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.catalog.ice", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.ice.type", "rest")
        .config("spark.sql.catalog.ice.uri", uri)
        .config("spark.sql.catalog.ice.warehouse", "default")
        .config("spark.sql.defaultCatalog", "ice")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.local.dir", str(tmp_path / "spark-local"))
    )
    for key, value in catalog_options.items():
        builder = builder.config(f"spark.sql.catalog.ice.{key}", value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def stop_spark(session):
    from pyspark.sql import SparkSession

    session.stop()
    # A fresh session for the next backend: forget the active one.
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None


@pytest.fixture
def spark(icegate, spark_jars, tmp_path):
    session = start_spark(icegate.uri, spark_jars, tmp_path)
    try:
        yield session
    finally:
        stop_spark(session)


def rows(spark, sql):
    return [tuple(r) for r in spark.sql(sql).collect()]


def test_spark_sql_creates_writes_merges_evolves_and_drops(spark, icegate):
    spark.sql("CREATE NAMESPACE ice.sales")
    spark.sql("CREATE TABLE ice.sales.orders (id BIGINT, item STRING, qty INT) USING iceberg PARTITIONED BY (item)")
    spark.sql("INSERT INTO ice.sales.orders VALUES (1, 'apple', 3), (2, 'pear', 5)")
    assert rows(spark, "SELECT id, item, qty FROM ice.sales.orders ORDER BY id") == [(1, "apple", 3), (2, "pear", 5)]

    spark.sql("CREATE TEMPORARY VIEW updates AS SELECT * FROM VALUES (2, 'pear', 50), (3, 'plum', 7) AS t(id, item, qty)")
    spark.sql(
        """MERGE INTO ice.sales.orders t USING updates u ON t.id = u.id
           WHEN MATCHED THEN UPDATE SET t.qty = u.qty
           WHEN NOT MATCHED THEN INSERT *"""
    )
    assert rows(spark, "SELECT id, qty FROM ice.sales.orders ORDER BY id") == [(1, 3), (2, 50), (3, 7)]

    spark.sql("ALTER TABLE ice.sales.orders ADD COLUMN note STRING")
    spark.sql("INSERT INTO ice.sales.orders VALUES (4, 'fig', 1, 'new')")
    assert rows(spark, "SELECT id, note FROM ice.sales.orders WHERE id >= 3 ORDER BY id") == [(3, None), (4, "new")]

    spark.sql("CREATE VIEW ice.sales.big_orders AS SELECT id, qty FROM ice.sales.orders WHERE qty > 4")
    assert rows(spark, "SELECT id FROM ice.sales.big_orders ORDER BY id") == [(2,), (3,)]
    assert ("sales", "big_orders") in [(r.namespace, r.viewName) for r in spark.sql("SHOW VIEWS IN ice.sales").collect()]

    spark.sql("ALTER TABLE ice.sales.orders RENAME TO sales.orders_v2")
    assert rows(spark, "SELECT count(*) FROM ice.sales.orders_v2") == [(4,)]
    tables = [r.tableName for r in spark.sql("SHOW TABLES IN ice.sales").collect()]
    assert "orders_v2" in tables and "orders" not in tables

    location = rows(spark, "SELECT file_path FROM ice.sales.orders_v2.files LIMIT 1")[0][0]
    data_file = Path(location.replace("file:", "", 1))
    assert data_file.is_file()
    spark.sql("DROP VIEW ice.sales.big_orders")
    spark.sql("DROP TABLE ice.sales.orders_v2 PURGE")
    assert not data_file.exists(), "PURGE removed the data files"
    assert "orders_v2" not in [r.tableName for r in spark.sql("SHOW TABLES IN ice.sales").collect()]


def test_spark_authenticates_with_a_credential_and_is_held_to_its_grants(spark_jars, tmp_path, backend):
    from test_auth_clients import ADMIN_ID, ADMIN_SECRET, admin_token, reader_of

    from conftest import Server

    env = {
        **backend,
        "ICEGATE__AUTH__MODE": "required",
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID": ADMIN_ID,
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET": ADMIN_SECRET,
    }
    server = Server(tmp_path, [], env).start()
    try:
        admin = start_spark(server.uri, spark_jars, tmp_path, credential=f"{ADMIN_ID}:{ADMIN_SECRET}",
                            **{"oauth2-server-uri": f"{server.uri}/v1/oauth/tokens"})
        admin.sql("CREATE NAMESPACE ice.db")
        admin.sql("CREATE TABLE ice.db.shared (id BIGINT) USING iceberg")
        admin.sql("INSERT INTO ice.db.shared VALUES (1), (2)")
        stop_spark(admin)

        client_id, secret = reader_of(server, admin_token(server), "shared")
        reader = start_spark(server.uri, spark_jars, tmp_path, credential=f"{client_id}:{secret}",
                             **{"oauth2-server-uri": f"{server.uri}/v1/oauth/tokens"})
        try:
            assert rows(reader, "SELECT id FROM ice.db.shared ORDER BY id") == [(1,), (2,)]
            with pytest.raises(Exception, match="(?i)forbidden|not authorized"):
                reader.sql("INSERT INTO ice.db.shared VALUES (3)")
        finally:
            stop_spark(reader)
        # The audit trail holds both sessions in order, with their principals: the admin's
        # changes, the reader's read and its refused write.
        from test_audit import search

        token = admin_token(server)
        changes = [r["record"] for r in search(server, token, outcome="applied", namespace="db")]
        assert [(c["operation"], c["subject"]["name"]) for c in changes][:3] == [
            ("createNamespace", None), ("createTable", "shared"), ("updateTable", "shared")
        ], changes
        assert {c["actor"]["name"] for c in changes} == {"admin"}, changes
        reads = [r["record"] for r in search(server, token, principal="reader", name="shared")]
        outcomes = [(r["operation"], r["outcome"]) for r in reads]
        assert ("loadTable", "allowed") in outcomes and ("updateTable", "refused") in outcomes, outcomes
        refused = next(r for r in reads if r["operation"] == "updateTable")
        assert refused["status"] == 403 and refused["decisions"][-1]["outcome"] == "forbidden", refused
    finally:
        server.stop()
