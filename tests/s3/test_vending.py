"""Per-table credential vending and remote signing, proven against a real S3 API (moto_server)
with IAM enforcement on and session policies enforced (see moto_enforcing.py).

PyIceberg holds no storage keys: it creates, appends and reads using what icegate vends. The
vended credentials are then used directly (boto3) to show what the store lets them do.
"""

import json
import urllib.request

import botocore.exceptions
import duckdb
import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog import load_catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from harness import ADMIN_ID, ADMIN_SECRET, BUCKET, call, catalog, moto, s3_profile, token_for  # noqa: F401

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", "b", "c"])})


def pyiceberg(server, credential, warehouse="lake"):
    return load_catalog(
        "s3",
        type="rest",
        uri=server.uri,
        warehouse=warehouse,
        credential=credential,
        **{"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    )


def denied(fn):
    with pytest.raises(botocore.exceptions.ClientError) as info:
        fn()
    code = info.value.response["Error"]["Code"]
    assert code in ("AccessDenied", "403"), info.value.response
    return code


def principal_with(server, token, name, privilege, table):
    """A principal holding `privilege` on lake.db.<table> only; returns its token."""
    status, created = call(server, token, "POST", "/management/v1/principals", {"name": name})
    assert status == 201, created
    call(server, token, "POST", "/management/v1/roles", {"name": f"{name}-role"})
    call(server, token, "PUT", f"/management/v1/roles/{name}-role/principals/{name}")
    status, body = call(
        server,
        token,
        "POST",
        "/management/v1/grants",
        {
            "role": f"{name}-role",
            "privilege": privilege,
            "securable": {"type": "table", "warehouse": "lake", "namespace": ["db"], "name": table},
        },
    )
    assert status in (200, 201), body
    return token_for(server, created["client-id"], created["client-secret"])


def load(server, token, table, prefix):
    status, body = call(
        server,
        token,
        "GET",
        f"/v1/{prefix}/namespaces/db/tables/{table}",
        headers={"X-Iceberg-Access-Delegation": "vended-credentials"},
    )
    assert status == 200, body
    return body


def s3_for(moto, config):
    return moto.client("s3", config["s3.access-key-id"], config["s3.secret-access-key"], config["s3.session-token"])


def key_of(location):
    return location.split(f"s3://{BUCKET}/", 1)[1]


@pytest.fixture(scope="module")
def tables(catalog, moto):
    """Tables db.a and db.b in the S3 warehouse, written by PyIceberg through vended credentials."""
    server, token = catalog
    admin = pyiceberg(server, f"{ADMIN_ID}:{ADMIN_SECRET}")
    admin.create_namespace("db")
    for name in ("a", "b"):
        table = admin.create_table(f"db.{name}", schema=SCHEMA)
        table.append(ROWS)
    prefix = call(server, token, "GET", "/v1/config?warehouse=lake")[1]["overrides"]["prefix"]
    return server, token, prefix


def test_pyiceberg_creates_a_table_in_a_transaction_with_vended_credentials(tables, moto):
    # A staged create (create_table_transaction): the staged table's credentials write its first
    # files, the assert-create commit makes it, and a reader reads them back.
    server, _, _ = tables
    admin = pyiceberg(server, f"{ADMIN_ID}:{ADMIN_SECRET}")
    with admin.create_table_transaction("db.staged", schema=SCHEMA) as transaction:
        transaction.append(ROWS)
    table = admin.load_table("db.staged")
    assert table.current_snapshot() is not None
    assert table.scan().to_arrow().sort_by("id").equals(ROWS)


def test_pyiceberg_writes_and_reads_an_s3_table_with_vended_credentials_only(tables, moto):
    server, token, prefix = tables
    admin = pyiceberg(server, f"{ADMIN_ID}:{ADMIN_SECRET}")
    table = admin.load_table("db.a")
    assert table.scan().to_arrow().sort_by("id").equals(ROWS)
    # The files are really in the bucket, below the table's location.
    keys = [o["Key"] for o in moto.client("s3", *moto.icegate_keys).list_objects_v2(Bucket=BUCKET)["Contents"]]
    location = key_of(table.metadata.location)
    assert any(k.startswith(f"{location}/data/") and k.endswith(".parquet") for k in keys), keys
    assert any(k.startswith(f"{location}/metadata/") and k.endswith(".metadata.json") for k in keys), keys
    body = load(server, token, "a", prefix)
    config = body["config"]
    assert config["s3.access-key-id"].startswith("ASIA"), "temporary STS credentials, not the warehouse's keys"
    assert config["s3.access-key-id"] != moto.icegate_keys[0]
    assert int(config["s3.session-token-expires-at-ms"]) > 0
    assert config["client.refresh-credentials-endpoint"].endswith(f"/v1/{prefix}/namespaces/db/tables/a/credentials")
    assert [c["prefix"] for c in body["storage-credentials"]] == [table.metadata.location]


def test_a_readers_credentials_read_exactly_one_table(tables, moto):
    server, token, prefix = tables
    reader = principal_with(server, token, "reader-a", "read", "a")
    a = load(server, reader, "a", prefix)
    b_location = key_of(load(server, token, "b", prefix)["metadata"]["location"])
    a_location = key_of(a["metadata"]["location"])
    s3 = s3_for(moto, a["config"])
    # Reads inside table a work.
    assert s3.get_object(Bucket=BUCKET, Key=key_of(a["metadata-location"]))["Body"].read()
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{a_location}/")
    assert listed["KeyCount"] > 0
    # Writing a, and reading or listing anything else, is refused by the store.
    denied(lambda: s3.put_object(Bucket=BUCKET, Key=f"{a_location}/data/evil.parquet", Body=b"x"))
    denied(lambda: s3.delete_object(Bucket=BUCKET, Key=key_of(a["metadata-location"])))
    b_metadata = key_of(load(server, token, "b", prefix)["metadata-location"])
    denied(lambda: s3.get_object(Bucket=BUCKET, Key=b_metadata))
    denied(lambda: s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{b_location}/"))
    denied(lambda: s3.list_objects_v2(Bucket=BUCKET))
    denied(lambda: s3.list_objects_v2(Bucket=BUCKET, Prefix="warehouse/"))
    # A reader of a is no reader of b at the catalog either.
    status, _ = call(server, reader, "GET", f"/v1/{prefix}/namespaces/db/tables/b")
    assert status in (403, 404)
    # And PyIceberg as that reader reads a with nothing but the vended credentials.
    status, created = call(server, token, "POST", "/management/v1/principals", {"name": "reader-py"})
    call(server, token, "PUT", f"/management/v1/roles/reader-a-role/principals/reader-py")
    client = pyiceberg(server, f"{created['client-id']}:{created['client-secret']}")
    assert client.load_table("db.a").scan().to_arrow().num_rows == 3


def test_a_writers_credentials_write_exactly_one_table(tables, moto):
    server, token, prefix = tables
    writer = principal_with(server, token, "writer-a", "write", "a")
    a = load(server, writer, "a", prefix)
    a_location = key_of(a["metadata"]["location"])
    b_location = key_of(load(server, token, "b", prefix)["metadata"]["location"])
    s3 = s3_for(moto, a["config"])
    s3.put_object(Bucket=BUCKET, Key=f"{a_location}/data/extra.parquet", Body=b"x")
    s3.delete_object(Bucket=BUCKET, Key=f"{a_location}/data/extra.parquet")
    denied(lambda: s3.put_object(Bucket=BUCKET, Key=f"{b_location}/data/evil.parquet", Body=b"x"))
    denied(lambda: s3.put_object(Bucket=BUCKET, Key=f"{a_location}-sibling/x", Body=b"x"))
    denied(lambda: s3.put_object(Bucket=BUCKET, Key="warehouse/db/loose-file", Body=b"x"))


def test_credentials_are_cached_refreshable_and_expire_at_the_store(tables, moto):
    server, token, prefix = tables
    first = load(server, token, "a", prefix)["config"]
    second = load(server, token, "a", prefix)["config"]
    assert first["s3.access-key-id"] == second["s3.access-key-id"], "a warm cache serves the same credential"
    status, refreshed = call(server, token, "GET", f"/v1/{prefix}/namespaces/db/tables/a/credentials")
    assert status == 200, refreshed
    [credential] = refreshed["storage-credentials"]
    assert credential["prefix"] == load(server, token, "a", prefix)["metadata"]["location"]
    assert credential["config"]["s3.session-token"]
    metrics = urllib.request.urlopen(f"{server.uri}/metrics", timeout=10).read().decode()
    hits = [line for line in metrics.splitlines() if line.startswith("icegate_vended_credentials_cache_hits_total")]
    assert hits and float(hits[0].split()[-1]) >= 1, hits
    assert first["s3.secret-access-key"] not in metrics
    # An hour later the store refuses them.
    s3 = s3_for(moto, first)
    metadata = key_of(load(server, token, "a", prefix)["metadata-location"])
    s3.head_object(Bucket=BUCKET, Key=metadata)
    moto.advance_clock(7200)
    try:
        with pytest.raises(botocore.exceptions.ClientError) as info:
            s3.get_object(Bucket=BUCKET, Key=metadata)
        assert info.value.response["Error"]["Code"] in ("ExpiredToken", "400"), info.value.response
    finally:
        moto.advance_clock(0)


def test_locations_outside_the_table_area_are_refused_before_anything_is_minted(tables, moto):
    server, token, prefix = tables
    b = load(server, token, "b", prefix)
    base = f"/v1/{prefix}/namespaces/db/tables"
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    for location in (f"s3://{BUCKET}/elsewhere/t", "s3://other-bucket/warehouse/t", b["metadata"]["location"] + "/inner"):
        status, body = call(server, token, "POST", base, {"name": "bad", "schema": schema, "location": location})
        assert status == 400, (location, body)
    a_uuid = load(server, token, "a", prefix)["metadata"]["table-uuid"]
    for key, value in (
        ("write.data.path", b["metadata"]["location"] + "/data"),
        ("write.metadata.path", f"s3://{BUCKET}/outside/metadata"),
        ("write.data.path", f"s3://{BUCKET}/warehouse/db"),
    ):
        status, body = call(
            server,
            token,
            "POST",
            f"{base}/a",
            {
                "requirements": [{"type": "assert-table-uuid", "uuid": a_uuid}],
                "updates": [{"action": "set-properties", "updates": {key: value}}],
            },
        )
        assert status == 400, (key, value, body)
    # A data path of its own, inside the warehouse, is fine and is part of the credentials.
    own = f"s3://{BUCKET}/warehouse/data-of-a"
    status, body = call(
        server,
        token,
        "POST",
        f"{base}/a",
        {
            "requirements": [{"type": "assert-table-uuid", "uuid": a_uuid}],
            "updates": [{"action": "set-properties", "updates": {"write.data.path": own}}],
        },
    )
    assert status == 200, body
    loaded = load(server, token, "a", prefix)
    assert sorted(c["prefix"] for c in loaded["storage-credentials"]) == sorted([own, loaded["metadata"]["location"]])
    s3_for(moto, loaded["config"]).put_object(Bucket=BUCKET, Key="warehouse/data-of-a/f.parquet", Body=b"x")
    # ...and no other table may now claim it.
    status, body = call(
        server,
        token,
        "POST",
        f"{base}/b",
        {"requirements": [], "updates": [{"action": "set-properties", "updates": {"write.data.path": own + "/x"}}]},
    )
    assert status == 400, body


def test_profiles_are_validated_and_secrets_never_returned(tables, moto):
    server, token, _ = tables
    status, body = call(
        server,
        token,
        "POST",
        "/management/v1/warehouses",
        {"name": "broken", "storage-root": f"s3://{BUCKET}/broken", "storage-profile": s3_profile(moto, secret="wrong")},
    )
    assert status == 400 and "probe" in body["error"]["message"], body
    bad_role = s3_profile(moto)
    bad_role["sts"]["role-arn"] = "arn:aws:iam::123456789012:role/missing"
    status, body = call(
        server,
        token,
        "POST",
        "/management/v1/warehouses",
        {"name": "broken", "storage-root": f"s3://{BUCKET}/broken", "storage-profile": bad_role},
    )
    assert status == 400 and "STS" in body["error"]["message"], body
    status, listed = call(server, token, "GET", "/management/v1/warehouses")
    text = json.dumps(listed)
    assert moto.icegate_keys[1] not in text and "secret" not in text.lower().replace("secret-access-key", ""), text
    [lake] = [w for w in listed["warehouses"] if w["name"] == "lake"]
    assert lake["storage-profile"]["access-key-id"] == moto.icegate_keys[0]
    assert lake["storage-profile"]["vending"] == "sts"
    log = (server.workdir / "icegate.stdout").read_text() + (server.workdir / "icegate.stderr").read_text()
    assert moto.icegate_keys[1] not in log


def test_remote_signing_signs_only_inside_the_table(tables, moto):
    server, token, _ = tables
    status, body = call(
        server,
        token,
        "POST",
        "/management/v1/warehouses",
        {"name": "signed", "storage-root": f"s3://{BUCKET}/signed", "storage-profile": s3_profile(moto, "remote-signing")},
    )
    assert status == 201, body
    prefix = body["id"]
    # PyIceberg (fsspec FileIO with the REST signer) writes and reads through signatures only.
    client = load_catalog("signed", type="rest", uri=server.uri, warehouse="signed", token=token)
    client.create_namespace("db")
    table = client.create_table("db.t", schema=SCHEMA)
    table.append(ROWS)
    assert client.load_table("db.t").scan().to_arrow().num_rows == 3
    loaded = load(server, token, "t", prefix)
    assert "s3.access-key-id" not in loaded["config"] and loaded["config"]["s3.remote-signing-enabled"] == "true"
    location = loaded["metadata"]["location"]
    sign_path = f"/v1/{prefix}/namespaces/db/tables/t/sign"

    def sign(method, url, headers=None, body=None, as_token=token):
        request = {"region": "us-east-1", "uri": url, "method": method, "headers": headers or {}}
        if body is not None:
            request["body"] = body
        return call(server, as_token, "POST", sign_path, request)

    inside = f"{moto.endpoint}/{BUCKET}/{key_of(loaded['metadata-location'])}"
    status, signed = sign("GET", inside)
    assert status == 200, signed
    response = requests.get(signed["uri"], headers={k: ", ".join(v) for k, v in signed["headers"].items()}, timeout=10)
    assert response.status_code == 200 and b"format-version" in response.content
    # Outside the table, sub-resources that change exposure, and listings elsewhere: refused.
    for method, url in [
        ("GET", f"{moto.endpoint}/{BUCKET}/warehouse/db/a/metadata/x.json"),
        ("GET", f"{moto.endpoint}/{BUCKET}/{key_of(location)}-sibling/x"),
        ("PUT", f"{moto.endpoint}/{BUCKET}/{key_of(location)}/data/x.parquet?acl"),
        ("GET", f"{moto.endpoint}/{BUCKET}?list-type=2&prefix=signed/"),
        ("GET", f"{moto.endpoint}/{BUCKET}?list-type=2"),
        ("GET", f"http://127.0.0.1:1/{BUCKET}/{key_of(location)}/x"),
        ("DELETE", f"{moto.endpoint}/{BUCKET}?policy"),
    ]:
        status, body = sign(method, url)
        assert status == 403, (method, url, body)
    status, body = sign("GET", f"{moto.endpoint}/{BUCKET}?list-type=2&prefix={key_of(location)}/")
    assert status == 200, body
    # DeleteObjects is checked key by key.
    outside_key = "signed/elsewhere/x"
    delete = f"<Delete><Object><Key>{key_of(location)}/data/x</Key></Object><Object><Key>{outside_key}</Key></Object></Delete>"
    status, body = sign("POST", f"{moto.endpoint}/{BUCKET}?delete", body=delete)
    assert status == 403, body
    # A reader gets GETs signed but not PUTs.
    status, created = call(server, token, "POST", "/management/v1/principals", {"name": "signed-reader"})
    call(server, token, "POST", "/management/v1/roles", {"name": "signed-readers"})
    call(server, token, "PUT", "/management/v1/roles/signed-readers/principals/signed-reader")
    grant = {
        "role": "signed-readers",
        "privilege": "read",
        "securable": {"type": "table", "warehouse": "signed", "namespace": ["db"], "name": "t"},
    }
    call(server, token, "POST", "/management/v1/grants", grant)
    reader = token_for(server, created["client-id"], created["client-secret"])
    assert sign("GET", inside, as_token=reader)[0] == 200
    status, body = sign("PUT", f"{moto.endpoint}/{BUCKET}/{key_of(location)}/data/x.parquet", as_token=reader)
    assert status == 403, body


def test_duckdb_reads_an_s3_table_with_vended_credentials(tables, moto):
    """DuckDB's iceberg extension, authenticated with client credentials, reads through the
    credentials icegate vends (it has no S3 secret of its own)."""
    from clients.test_duckdb import duckdb_with_iceberg

    server, token, prefix = tables
    reader = principal_with(server, token, "duck", "read", "b")
    del reader
    status, created = call(server, token, "POST", "/management/v1/principals", {"name": "duck-py"})
    assert status == 201, created
    call(server, token, "PUT", "/management/v1/roles/duck-role/principals/duck-py")
    con = duckdb_with_iceberg()
    con.execute(
        f"""CREATE SECRET ice (TYPE iceberg, CLIENT_ID '{created["client-id"]}',
            CLIENT_SECRET '{created["client-secret"]}', OAUTH2_SERVER_URI '{server.uri}/v1/oauth/tokens')"""
    )
    con.execute(f"ATTACH 'lake' AS lake (TYPE iceberg, ENDPOINT '{server.uri}', SECRET ice)")
    rows = con.execute("SELECT id, name FROM lake.db.b ORDER BY id").fetchall()
    assert rows == [(1, "a"), (2, "b"), (3, "c")]
    # Its grant covers b only: a is not even visible to it.
    with pytest.raises(duckdb.Error):
        con.execute("SELECT count(*) FROM lake.db.a").fetchall()


def test_profile_rules_updates_and_config(tables, moto, tmp_path):
    server, token, prefix = tables
    status, config = call(server, token, "GET", "/v1/config?warehouse=lake")
    assert status == 200
    for endpoint in (
        "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/sign",
    ):
        assert endpoint in config["endpoints"], config["endpoints"]
    create = "/management/v1/warehouses"
    bad = [
        {"name": "x1", "storage-root": f"s3://{BUCKET}/x1"},  # an s3 root needs an s3 profile
        {"name": "x2", "storage-root": "file:///tmp/x2", "storage-profile": s3_profile(moto)},
        {"name": "x3", "storage-root": f"s3://{BUCKET}/x3", "storage-profile": {**s3_profile(moto), "sts": {}}},
        {
            "name": "x4",
            "storage-root": f"s3://{BUCKET}/x4",
            "storage-profile": {**s3_profile(moto), "sts": {"role-arn": "arn:aws:iam::1:role/r", "session-duration-seconds": 60}},
        },
        {"name": "x5", "storage-root": f"s3://{BUCKET}/x5", "storage-profile": {**s3_profile(moto), "region": "US East"}},
        {"name": "x6", "storage-root": "s3://Bad_Bucket/x6", "storage-profile": s3_profile(moto)},
    ]
    for body in bad:
        status, answer = call(server, token, "POST", create, body)
        assert status == 400 and answer["error"]["type"] == "BadRequestException", (body["name"], answer)
    status, answer = call(server, token, "PUT", "/management/v1/warehouses/missing/storage-profile", s3_profile(moto))
    assert status == 404, answer

    # A profile update bumps the version and nothing vended under the old profile is reused.
    before = load(server, token, "b", prefix)["config"]["s3.access-key-id"]
    status, updated = call(server, token, "PUT", "/management/v1/warehouses/lake/storage-profile", s3_profile(moto))
    assert status == 200 and updated["profile-version"] >= 2, updated
    after = load(server, token, "b", prefix)["config"]["s3.access-key-id"]
    assert after != before

    # Without secrets.encryption_key a server refuses to store static keys.
    from conftest import Server

    plain = Server(tmp_path, [], {}).start()
    try:
        status, answer = call(
            plain, "unused", "POST", create, {"name": "s", "storage-root": f"s3://{BUCKET}/s", "storage-profile": s3_profile(moto)}
        )
        assert status == 400 and "secrets.encryption_key" in answer["error"]["message"], answer
    finally:
        plain.stop()
