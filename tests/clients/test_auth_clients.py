"""Real clients authenticate through /v1/oauth/tokens with client credentials and are refused
what their role lacks: PyIceberg (`credential`), DuckDB (`CLIENT_ID`/`CLIENT_SECRET`) and Spark
(`credential`)."""

import json
import urllib.request

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import ForbiddenError, NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from conftest import Server

ADMIN_ID, ADMIN_SECRET = "bootstrap-admin", "bootstrap-secret-0123456789"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def admin_call(server, token, method, path, body=None):
    request = urllib.request.Request(
        f"{server.uri}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method=method,
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read()
        return json.loads(text) if text else None


def admin_token(server):
    data = f"grant_type=client_credentials&client_id={ADMIN_ID}&client_secret={ADMIN_SECRET}".encode()
    with urllib.request.urlopen(urllib.request.Request(f"{server.uri}/v1/oauth/tokens", data=data), timeout=10) as r:
        return json.load(r)["access_token"]


def secured_env(backend, **extra):
    """The environment of a catalog with authentication on and the bootstrap admin (plus `extra`)."""
    return {
        **backend,
        "ICEGATE__AUTH__MODE": "required",
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID": ADMIN_ID,
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET": ADMIN_SECRET,
        **extra,
    }


@pytest.fixture
def secured(tmp_path, backend):
    server = Server(tmp_path, [], secured_env(backend)).start()
    try:
        yield server
    finally:
        server.stop()


def reader_of(server, token, table):
    """A principal whose role may read exactly `db.<table>`; returns (client_id, secret)."""
    created = admin_call(server, token, "POST", "/management/v1/principals", {"name": "reader"})
    admin_call(server, token, "POST", "/management/v1/roles", {"name": "readers"})
    admin_call(server, token, "PUT", "/management/v1/roles/readers/principals/reader")
    admin_call(
        server,
        token,
        "POST",
        "/management/v1/grants",
        {"role": "readers", "privilege": "read", "securable": {"type": "table", "warehouse": "default", "namespace": ["db"], "name": table}},
    )
    return created["client-id"], created["client-secret"]


def test_pyiceberg_authenticates_and_is_held_to_its_grants(secured):
    admin = load_catalog("admin", type="rest", uri=secured.uri, warehouse="default", credential=f"{ADMIN_ID}:{ADMIN_SECRET}")
    admin.create_namespace("db")
    table = admin.create_table("db.shared", schema=SCHEMA)
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    admin.create_table("db.private", schema=SCHEMA)

    client_id, secret = reader_of(secured, admin_token(secured), "shared")
    reader = load_catalog("reader", type="rest", uri=secured.uri, warehouse="default", credential=f"{client_id}:{secret}")
    assert reader.list_tables("db") == [("db", "shared")]
    shared = reader.load_table("db.shared")
    assert shared.scan().to_arrow().num_rows == 2
    with pytest.raises(ForbiddenError):
        shared.append(pa.table({"id": pa.array([3], pa.int64())}))
    with pytest.raises(NoSuchTableError):
        reader.load_table("db.private")

    with pytest.raises(Exception):
        load_catalog("anonymous", type="rest", uri=secured.uri, warehouse="default").list_namespaces()
    with pytest.raises(Exception):
        load_catalog("wrong", type="rest", uri=secured.uri, warehouse="default", credential=f"{client_id}:not-the-secret")


def test_duckdb_authenticates_with_client_credentials(secured):
    from test_duckdb import duckdb_with_iceberg

    admin = load_catalog("admin", type="rest", uri=secured.uri, warehouse="default", credential=f"{ADMIN_ID}:{ADMIN_SECRET}")
    admin.create_namespace("db")
    admin.create_table("db.shared", schema=SCHEMA).append(pa.table({"id": pa.array([7], pa.int64())}))
    admin.create_table("db.private", schema=SCHEMA)
    client_id, secret = reader_of(secured, admin_token(secured), "shared")

    con = duckdb_with_iceberg()
    con.execute(
        f"CREATE SECRET reader (TYPE iceberg, CLIENT_ID '{client_id}', CLIENT_SECRET '{secret}', "
        f"OAUTH2_SERVER_URI '{secured.uri}/v1/oauth/tokens')"
    )
    con.execute(f"ATTACH 'default' AS ice (TYPE iceberg, ENDPOINT '{secured.uri}', SECRET reader)")
    assert con.execute("SELECT id FROM ice.db.shared").fetchall() == [(7,)]
    with pytest.raises(Exception):
        con.execute("SELECT * FROM ice.db.private").fetchall()
    with pytest.raises(Exception):
        con.execute("INSERT INTO ice.db.shared VALUES (8)")
    assert [r[0] for r in con.execute("SELECT id FROM ice.db.shared").fetchall()] == [7]
