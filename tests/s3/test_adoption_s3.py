"""Adoption on S3 (moto_server with IAM enforcement and session policies, see moto_enforcing.py):
a Hive-style dataset under s3://lake/raw/events is adopted in place; PyIceberg and DuckDB read it
through the credentials icegate vends, which read the source and write only the table's own
location (the store refuses a PUT or DELETE into the source); a principal of another table
reads nothing of it; remote signing signs reads of the source and refuses writes to it, even
for an admin; a re-sync adds a new object, and a purge leaves every source object in place,
ETags unchanged."""

import io
import time

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import EqualTo

from harness import ADMIN_ID, ADMIN_SECRET, BUCKET, call, catalog, moto, s3_profile, token_for  # noqa: F401
from test_vending import denied, s3_for

SOURCE = f"s3://{BUCKET}/raw"
EVENTS = f"{SOURCE}/events"


def put_parquet(s3, key, table):
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    s3.put_object(Bucket=BUCKET, Key=key, Body=buffer.getvalue())


def objects(moto, prefix):
    """Every object below `prefix`: key → ETag."""
    s3 = moto.client("s3", *moto.icegate_keys)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def principal(server, token, name, privilege, securable):
    status, created = call(server, token, "POST", "/management/v1/principals", {"name": name})
    assert status == 201, created
    call(server, token, "POST", "/management/v1/roles", {"name": f"{name}-role"})
    call(server, token, "PUT", f"/management/v1/roles/{name}-role/principals/{name}")
    status, body = call(server, token, "POST", "/management/v1/grants",
                        {"role": f"{name}-role", "privilege": privilege, "securable": securable})
    assert status in (200, 201), body
    return created


@pytest.fixture(scope="module")
def adopted(catalog, moto):  # noqa: F811
    server, token = catalog
    s3 = moto.client("s3", *moto.icegate_keys)
    expected = {}
    for dt in ["2026-11-01", "2026-11-02"]:
        for region in ["eu", "us"]:
            for i in range(3):
                ids = list(range(i * 10, i * 10 + 5))
                put_parquet(s3, f"raw/events/dt={dt}/region={region}/part-{i}.parquet",
                            pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array([1.0] * 5)}))
                expected[(dt, region)] = expected.get((dt, region), 0) + 5
    s3.put_object(Bucket=BUCKET, Key="raw/events/dt=2026-11-01/region=eu/broken.parquet", Body=b"not parquet")
    status, body = call(server, token, "POST", "/management/v1/warehouses/lake/source-locations", {"location": SOURCE})
    assert status == 201, body
    admin = load_catalog("adopt-admin", type="rest", uri=server.uri, warehouse="lake",
                         credential=f"{ADMIN_ID}:{ADMIN_SECRET}",
                         **{"header.X-Iceberg-Access-Delegation": "vended-credentials"})
    admin.create_namespace("adopted")
    status, report = call(server, token, "POST", "/management/v1/warehouses/lake/adoptions",
                          {"source": EVENTS, "namespace": ["adopted"], "name": "events", "partitioning": {"type": "hive"}})
    assert status == 200, report
    assert report["files-added"] == 12 and report["rows-added"] == 60, report
    assert [s["path"] for s in report["files-skipped"]] == [f"{EVENTS}/dt=2026-11-01/region=eu/broken.parquet"]
    prefix = call(server, token, "GET", "/v1/config?warehouse=lake")[1]["overrides"]["prefix"]
    return server, token, prefix, expected, report["id"]


def test_vended_credentials_read_the_source_and_write_only_the_tables_own_location(adopted, moto):
    server, token, prefix, expected, _ = adopted
    before = objects(moto, "raw/")
    writer = principal(server, token, "adopt-writer", "write",
                       {"type": "table", "warehouse": "lake", "namespace": ["adopted"], "name": "events"})
    client = load_catalog("adopt-writer", type="rest", uri=server.uri, warehouse="lake",
                          credential=f"{writer['client-id']}:{writer['client-secret']}",
                          **{"header.X-Iceberg-Access-Delegation": "vended-credentials"})
    table = client.load_table("adopted.events")
    arrow = table.scan().to_arrow()
    got = {}
    for dt, region in zip(arrow["dt"].to_pylist(), arrow["region"].to_pylist()):
        got[(dt.isoformat(), region)] = got.get((dt.isoformat(), region), 0) + 1
    assert got == expected
    assert len(list(table.scan(row_filter=EqualTo("region", "us")).plan_files())) == 6

    # The credentials themselves, at the store: the source is read, never written or deleted.
    writer_token = token_for(server, writer["client-id"], writer["client-secret"])
    status, loaded = call(server, writer_token, "GET", f"/v1/{prefix}/namespaces/adopted/tables/events",
                          headers={"X-Iceberg-Access-Delegation": "vended-credentials"})
    assert status == 200, loaded
    prefixes = [c["prefix"] for c in loaded["storage-credentials"]]
    assert EVENTS in prefixes and loaded["metadata"]["location"] in prefixes, prefixes
    s3 = s3_for(moto, loaded["config"])
    source_key = "raw/events/dt=2026-11-02/region=us/part-0.parquet"
    assert s3.get_object(Bucket=BUCKET, Key=source_key)["Body"].read()[:4] == b"PAR1"
    denied(lambda: s3.put_object(Bucket=BUCKET, Key=source_key, Body=b"overwritten"))
    denied(lambda: s3.put_object(Bucket=BUCKET, Key="raw/events/new.parquet", Body=b"planted"))
    denied(lambda: s3.delete_object(Bucket=BUCKET, Key=source_key))
    denied(lambda: s3.get_object(Bucket=BUCKET, Key="raw/other/x"))  # beside the source: not its
    own_key = loaded["metadata"]["location"].split(f"s3://{BUCKET}/", 1)[1] + "/data/probe.bin"
    s3.put_object(Bucket=BUCKET, Key=own_key, Body=b"own")
    s3.delete_object(Bucket=BUCKET, Key=own_key)
    # A PyIceberg append through the same credentials lands in the table's own location.
    table.append(pa.table({"id": pa.array([99], pa.int64()), "amount": pa.array([2.0]),
                           "dt": pa.array([__import__("datetime").date(2026, 12, 1)]), "region": pa.array(["eu"])}))
    assert objects(moto, "raw/") == before, "nothing in the source changed"
    fresh = client.load_table("adopted.events")
    assert fresh.scan().to_arrow().num_rows == 61

    # A principal of another table reads nothing of the source.
    status, _ = call(server, token, "POST", f"/v1/{prefix}/namespaces/adopted/tables",
                     {"name": "other", "schema": {"type": "struct", "schema-id": 0,
                      "fields": [{"id": 1, "name": "n", "type": "long", "required": False}]}})
    assert status == 200
    other = principal(server, token, "adopt-other", "write",
                      {"type": "table", "warehouse": "lake", "namespace": ["adopted"], "name": "other"})
    other_token = token_for(server, other["client-id"], other["client-secret"])
    status, theirs = call(server, other_token, "GET", f"/v1/{prefix}/namespaces/adopted/tables/other",
                          headers={"X-Iceberg-Access-Delegation": "vended-credentials"})
    assert status == 200, theirs
    assert all(not c["prefix"].startswith(SOURCE) for c in theirs["storage-credentials"])
    denied(lambda: s3_for(moto, theirs["config"]).get_object(Bucket=BUCKET, Key=source_key))
    status, _ = call(server, other_token, "GET", f"/v1/{prefix}/namespaces/adopted/tables/events")
    assert status in (403, 404)


def test_duckdb_reads_the_adopted_table_through_vended_credentials(adopted, moto):
    from clients.test_duckdb import duckdb_with_iceberg

    server, token, _, expected, _ = adopted
    reader = principal(server, token, "adopt-duck", "read",
                       {"type": "table", "warehouse": "lake", "namespace": ["adopted"], "name": "events"})
    con = duckdb_with_iceberg()
    con.execute(f"""CREATE SECRET adopt (TYPE iceberg, CLIENT_ID '{reader["client-id"]}',
        CLIENT_SECRET '{reader["client-secret"]}', OAUTH2_SERVER_URI '{server.uri}/v1/oauth/tokens')""")
    con.execute(f"ATTACH 'lake' AS adopted_lake (TYPE iceberg, ENDPOINT '{server.uri}', SECRET adopt)")
    rows = con.execute("SELECT strftime(dt, '%Y-%m-%d'), region, count(*) FROM adopted_lake.adopted.events "
                       "WHERE dt < DATE '2026-12-01' GROUP BY ALL").fetchall()
    assert {(r[0], r[1]): r[2] for r in rows} == expected
    with pytest.raises(duckdb.Error):
        con.execute("INSERT INTO adopted_lake.adopted.events VALUES (1, 1.0, DATE '2026-12-02', 'eu')")


def test_signing_reads_the_source_and_never_writes_it(adopted, moto):
    server, token, _, _, _ = adopted
    status, body = call(server, token, "POST", "/management/v1/warehouses",
                        {"name": "adopt-signed", "storage-root": f"s3://{BUCKET}/adopt-signed",
                         "storage-profile": s3_profile(moto, "remote-signing")})
    assert status == 201, body
    prefix = body["id"]
    status, body = call(server, token, "POST", "/management/v1/warehouses/adopt-signed/source-locations",
                        {"location": SOURCE})
    assert status == 201, body
    status, body = call(server, token, "POST", f"/v1/{prefix}/namespaces", {"namespace": ["s"]})
    assert status == 200, body
    status, report = call(server, token, "POST", "/management/v1/warehouses/adopt-signed/adoptions",
                          {"source": EVENTS, "namespace": ["s"], "name": "events", "partitioning": {"type": "hive"}})
    assert status == 200 and report["files-added"] == 12, report
    # PyIceberg reads through signatures only.
    client = load_catalog("adopt-signed", type="rest", uri=server.uri, warehouse="adopt-signed", token=token)
    assert client.load_table("s.events").scan().to_arrow().num_rows >= 60

    sign_path = f"/v1/{prefix}/namespaces/s/tables/events/sign"
    key = "raw/events/dt=2026-11-01/region=us/part-1.parquet"

    def sign(method, url):
        return call(server, token, "POST", sign_path, {"region": "us-east-1", "uri": url, "method": method, "headers": {}})

    status, signed = sign("GET", f"{moto.endpoint}/{BUCKET}/{key}")
    assert status == 200, signed
    status, _ = sign("GET", f"{moto.endpoint}/{BUCKET}?list-type=2&prefix=raw/events/")
    assert status == 200
    # The admin holds write on the table; the source is still read-only.
    for method, url in [
        ("PUT", f"{moto.endpoint}/{BUCKET}/{key}"),
        ("DELETE", f"{moto.endpoint}/{BUCKET}/{key}"),
        ("PUT", f"{moto.endpoint}/{BUCKET}/raw/events/planted.parquet"),
        ("GET", f"{moto.endpoint}/{BUCKET}/raw/other/x"),
        ("GET", f"{moto.endpoint}/{BUCKET}/raw/events/../other/x"),
    ]:
        status, body = sign(method, url)
        assert status == 403, (method, url, body)


def test_a_resync_adds_new_objects_and_a_purge_leaves_the_source(adopted, moto):
    server, token, prefix, _, adoption = adopted
    s3 = moto.client("s3", *moto.icegate_keys)
    put_parquet(s3, "raw/events/dt=2026-11-05/region=eu/part-0.parquet",
                pa.table({"id": pa.array([1, 2], pa.int64()), "amount": pa.array([1.0, 1.0])}))
    status, synced = call(server, token, "POST", f"/management/v1/warehouses/lake/adoptions/{adoption}/sync")
    assert status == 200 and synced["files-added"] == 1, synced
    status, again = call(server, token, "POST", f"/management/v1/warehouses/lake/adoptions/{adoption}/sync")
    assert status == 200 and again["files-added"] == 0 and again["files-changed-count"] == 0, again
    before = objects(moto, "raw/")
    status, loaded = call(server, token, "GET", f"/v1/{prefix}/namespaces/adopted/tables/events")
    own = loaded["metadata"]["location"].split(f"s3://{BUCKET}/", 1)[1] + "/"
    assert objects(moto, own)
    status, _ = call(server, token, "DELETE", f"/v1/{prefix}/namespaces/adopted/tables/events?purgeRequested=true")
    assert status == 204
    deadline = time.monotonic() + 30
    while objects(moto, own) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert objects(moto, own) == {}
    assert objects(moto, "raw/") == before, "every source object is in place, unchanged"
