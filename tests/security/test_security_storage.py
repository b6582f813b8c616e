"""Security regressions, storage side (issue 13): what icegate vends, signs and deletes stays
inside one table's own recorded locations. One test per reproduced item, judged by effects at the
store (through the verifying front): the object is still there, the store refused, nothing landed.
"""

import base64
import gzip
import hashlib
import http.client
import http.server
import json
import os
import threading
import time
import urllib.parse
import uuid
import zlib

import botocore.exceptions
import pytest
import requests

from lab import SCHEMA, lab, namespace_securable, profile, staged_commit, table_securable  # noqa: F401
from harness import BUCKET, OTHER_BUCKET, WHOLE_BUCKET, ADMIN_ID, ADMIN_SECRET  # noqa: E402
from helpers import DELEGATE, key_of  # noqa: E402


def denied(fn):
    with pytest.raises(botocore.exceptions.ClientError) as info:
        fn()
    assert info.value.response["Error"]["Code"] in ("AccessDenied", "403"), info.value.response


def namespace(lab, warehouse, name):
    lab.ok(lab.admin, "POST", f"/v1/{lab.prefix(warehouse)}/namespaces", {"namespace": [name]})


def create_table(lab, token, warehouse, ns, name, location=None, properties=None, stage=False):
    body = {"name": name, "schema": SCHEMA}
    if location:
        body["location"] = location
    if properties:
        body["properties"] = properties
    if stage:
        body["stage-create"] = True
    return lab.call(token, "POST", lab.tables(warehouse, ns), body, headers=DELEGATE)


def has_credentials(body):
    text = json.dumps(body or {})
    return "s3.secret-access-key" in text or "s3.session-token" in text


def victim_table(lab, warehouse, ns, name="t"):
    """An admin's table with a data object and its current metadata file; returns its location,
    the data object's key and the metadata file's key."""
    namespace(lab, warehouse, ns)
    status, body = create_table(lab, lab.admin, warehouse, ns, name)
    assert status == 200, body
    location = body["metadata"]["location"]
    data = f"{key_of(location)}/data/secret-{uuid.uuid4().hex}.parquet"
    lab.s3().put_object(Bucket=BUCKET, Key=data, Body=b"victim's data")
    return location, data, key_of(body["metadata-location"])


def s3_with(lab, config):
    return lab.s3(config["s3.access-key-id"], config["s3.secret-access-key"], config["s3.session-token"])


# 1 ------------------------------------------------------------------------------------------
def test_a_staged_create_gets_no_credentials_for_another_tables_location(lab):
    location, data, _ = victim_table(lab, "lake", "victim1")
    namespace(lab, "lake", "att1")
    # The attacker may create in its own namespace, and in the victim's (a shared namespace whose
    # tables it may not read).
    _, attacker, _ = lab.principal(
        [("create", namespace_securable("lake", "att1")), ("create", namespace_securable("lake", "victim1"))]
    )
    parent = location.rsplit("/", 1)[0]
    for ns in ("victim1", "att1"):
        for where, properties in [
            (location, None),
            (f"{location}/inner", None),
            (parent, None),
            (None, {"write.data.path": f"{location}/data"}),
            (None, {"write.metadata.path": f"{location}/metadata"}),
            (f"s3://{OTHER_BUCKET}/t", None),
        ]:
            status, body = create_table(lab, attacker, "lake", ns, "s", where, properties, stage=True)
            # 400: overlaps the victim's table; 403: outside the namespace's own directory.
            assert status in (400, 403), (ns, where, properties, body)
            assert not has_credentials(body), body
    # A staged create at a free location is handed credentials, and they reach only it.
    free = f"s3://{BUCKET}/sec/att1/staged-{uuid.uuid4().hex[:6]}"
    status, body = create_table(lab, attacker, "lake", "att1", "s", free, stage=True)
    assert status == 200 and body.get("metadata-location") is None, body
    s3 = s3_with(lab, body["config"])
    s3.put_object(Bucket=BUCKET, Key=f"{key_of(free)}/data/x.parquet", Body=b"mine")
    denied(lambda: s3.get_object(Bucket=BUCKET, Key=data))
    denied(lambda: s3.put_object(Bucket=BUCKET, Key=f"{key_of(location)}/data/evil.parquet", Body=b"x"))
    denied(lambda: s3.delete_object(Bucket=BUCKET, Key=data))
    denied(lambda: s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{key_of(location)}/"))
    assert lab.exists(BUCKET, data)


def test_a_staged_location_is_reserved_until_its_create_commits(lab):
    namespace(lab, "lake", "att1b")
    _, attacker, _ = lab.principal([("create", namespace_securable("lake", "att1b"))])
    where = f"s3://{BUCKET}/sec/att1b/contested-{uuid.uuid4().hex[:6]}"
    status, staged = create_table(lab, attacker, "lake", "att1b", "mine", where, stage=True)
    assert status == 200, staged
    # Nobody else creates a table at (or inside) that location before the staged create commits:
    # its creator holds read-write credentials for it.
    for other in (where, f"{where}/inside"):
        status, theirs = create_table(lab, lab.admin, "lake", "att1b", "theirs", other)
        assert status == 400 and "overlaps" in theirs["error"]["message"], theirs
    status, _ = lab.call(lab.admin, "GET", f"{lab.tables('lake', 'att1b')}/theirs")
    assert status == 404
    meta = staged["metadata"]
    commit = staged_commit(meta, where)
    status, body = lab.call(attacker, "POST", f"{lab.tables('lake', 'att1b')}/mine", commit)
    assert status == 200, body
    assert lab.ok(lab.admin, "GET", f"{lab.tables('lake', 'att1b')}/mine")["metadata"]["location"] == where
    # Once created, the table itself holds the location.
    status, theirs = create_table(lab, lab.admin, "lake", "att1b", "theirs", where)
    assert status == 400, theirs


# 2, 3, 4 ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def signing(lab):
    """A remote-signing warehouse with tables sig.a (the attacker writes it) and sig.b (a
    victim's, with an object)."""
    namespace(lab, "signed", "sig")
    tables = {}
    for name in ("a", "b"):
        status, body = create_table(lab, lab.admin, "signed", "sig", name)
        assert status == 200, body
        tables[name] = key_of(body["metadata"]["location"])
    victim = f"{tables['b']}/data/victim.parquet"
    lab.s3().put_object(Bucket=BUCKET, Key=victim, Body=b"victim's data")
    _, writer, _ = lab.principal([("write", table_securable("signed", "sig", "a"))])

    def sign(method, uri, headers=None, body=None):
        request = {"region": "us-east-1", "uri": uri, "method": method, "headers": headers or {}}
        if body is not None:
            request["body"] = body
        return lab.call(writer, "POST", f"{lab.tables('signed', 'sig')}/a/sign", request)

    return tables["a"], victim, sign


def send(method, uri, headers, body=b""):
    """Sends exactly this request (raw path, no client-side normalisation)."""
    parsed = urllib.parse.urlsplit(uri)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    path = parsed.path + (f"?{parsed.query}" if parsed.query else "")
    flat = {k: ", ".join(v) for k, v in headers.items()}
    flat.pop("Host", None)
    flat.pop("host", None)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    connection.putheader("Host", parsed.netloc)
    for name, value in flat.items():
        connection.putheader(name, value)
    connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    return response.status, response.read()


def delete_body(*keys):
    objects = "".join(f"<Object><Key>{k}</Key></Object>" for k in keys)
    return f'<?xml version="1.0" encoding="UTF-8"?><Delete>{objects}</Delete>'


def test_a_signed_delete_objects_holds_only_for_the_body_that_was_checked(lab, signing):
    own, victim, sign = signing
    mine = f"{own}/data/own.parquet"
    lab.s3().put_object(Bucket=BUCKET, Key=mine, Body=b"x")
    checked = delete_body(mine)
    md5 = base64.b64encode(hashlib.md5(checked.encode()).digest()).decode()
    status, signed = sign(
        "POST",
        f"{lab.front}/{BUCKET}?delete",
        headers={"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"], "Content-MD5": [md5]},
        body=checked,
    )
    assert status == 200, signed
    headers = {k.lower(): v for k, v in signed["headers"].items()}
    assert headers["x-amz-content-sha256"] == [hashlib.sha256(checked.encode()).hexdigest()]
    # Another body, naming the victim's object, under the same signature: the store refuses.
    swapped = delete_body(victim)
    status, answer = send("POST", signed["uri"], signed["headers"], swapped.encode())
    assert status in (400, 403), answer
    assert lab.exists(BUCKET, victim)
    # The body that was checked goes through.
    status, answer = send("POST", signed["uri"], signed["headers"], checked.encode())
    assert status == 200, answer
    assert not lab.exists(BUCKET, mine)
    assert lab.exists(BUCKET, victim)


def test_signing_refuses_uris_that_a_store_would_read_as_another_place(lab, signing):
    own, victim, sign = signing
    victim_dir = victim.rsplit("/", 2)[0]
    up = "/".join([".."] * len(own.split("/")))
    attempts = [
        f"{lab.front}/{OTHER_BUCKET}/x/../../{BUCKET}/{own}/landed.txt",
        f"{lab.front}/{BUCKET}/{own}/{up}/{victim_dir}/landed.txt",
        f"{lab.front}/{BUCKET}/{own}/{up.replace('..', '%2e%2e')}/{victim_dir}/landed.txt",
        f"{lab.front}/{BUCKET}/{own}%2F..%2F..%2F{victim_dir}/landed.txt",
        f"{lab.front}/{BUCKET}/{own}/./landed.txt",
    ]
    for uri in attempts:
        status, signed = sign("PUT", uri)
        assert status == 403, (uri, signed)
        if status == 200:  # what an older icegate allowed: show where it lands
            send("PUT", signed["uri"], signed["headers"], b"landed")
    assert lab.s3().list_objects_v2(Bucket=OTHER_BUCKET).get("KeyCount", 0) == 0
    listed = lab.s3().list_objects_v2(Bucket=BUCKET, Prefix=f"{victim_dir}/")
    assert not [o for o in listed.get("Contents", []) if o["Key"].endswith("landed.txt")]
    # The canonical form of an in-table URI is signed, and lands where it says.
    status, signed = sign("PUT", f"{lab.front}/{BUCKET}/{own}/data/fine.txt")
    assert status == 200, signed
    assert send("PUT", signed["uri"], signed["headers"], b"fine")[0] == 200
    assert lab.exists(BUCKET, f"{own}/data/fine.txt")
    # Other hosts and buckets are not this warehouse's bucket.
    host = urllib.parse.urlsplit(lab.front)
    for uri in [
        f"http://{BUCKET}.x.{host.hostname}:{host.port}/{own}/data/y.txt",
        f"{lab.front}/{OTHER_BUCKET}/{own}/data/y.txt",
        f"http://localhost:{host.port}/{BUCKET}/{own}/data/y.txt",
    ]:
        assert sign("PUT", uri)[0] in (400, 403), uri


def public(lab, key):
    acl = lab.s3().get_object_acl(Bucket=BUCKET, Key=key)
    return any(g["Grantee"].get("URI", "").endswith("/AllUsers") for g in acl["Grants"])


def test_signatures_never_carry_headers_that_change_exposure(lab, signing):
    own, _, sign = signing
    for header, value in [
        ("x-amz-acl", "public-read"),
        ("x-amz-grant-read", 'uri="http://acs.amazonaws.com/groups/global/AllUsers"'),
        ("x-amz-tagging", "visibility=public"),
        ("x-amz-website-redirect-location", "/elsewhere"),
    ]:
        key = f"{own}/data/{header}.txt"
        status, signed = sign("PUT", f"{lab.front}/{BUCKET}/{key}", headers={header: [value]})
        assert status == 403, (header, signed)
        if status == 200:
            send("PUT", signed["uri"], signed["headers"], b"x")
        assert not lab.exists(BUCKET, key) or not public(lab, key), header
    # A header added after signing is not covered by the signature: the store refuses it.
    key = f"{own}/data/added.txt"
    status, signed = sign("PUT", f"{lab.front}/{BUCKET}/{key}")
    assert status == 200, signed
    status, _ = send("PUT", signed["uri"], {**signed["headers"], "x-amz-acl": ["public-read"]}, b"x")
    assert status == 403
    assert not lab.exists(BUCKET, key)


# 5 ------------------------------------------------------------------------------------------
def test_a_warehouse_admin_cannot_take_the_servers_identity_or_aim_its_requests(lab):
    keys = lab.moto.icegate_keys
    created = lab.ok(
        lab.admin,
        "POST",
        "/management/v1/warehouses",
        {"name": "wa", "storage-root": f"s3://{BUCKET}/wa-sec", "storage-profile": profile(lab.front, keys)},
    )
    _, wadmin, _ = lab.principal([("admin", {"type": "warehouse", "warehouse": "wa"})])
    default_chain = profile(lab.front, keys)
    default_chain["credentials"] = {"type": "default-chain"}
    outside = profile("http://127.0.0.1:1", keys)
    sts_outside = profile(lab.front, keys)
    sts_outside["sts"]["endpoint"] = "http://169.254.169.254"
    for candidate in (default_chain, profile(lab.front, keys, vending="static"), outside, sts_outside):
        status, body = lab.call(wadmin, "PUT", "/management/v1/warehouses/wa/storage-profile", candidate)
        assert status == 403, (candidate, body)
    after = lab.ok(lab.admin, "GET", "/management/v1/warehouses/wa")
    assert after["profile-version"] == created["profile-version"], "the profile did not change"
    # Within the operator's allowlist, with its own keys and scoped vending, it may.
    fine = profile(lab.front, keys)
    fine["sts"]["session-duration-seconds"] = 1800
    assert lab.call(wadmin, "PUT", "/management/v1/warehouses/wa/storage-profile", fine)[0] == 200


def test_a_failing_storage_probe_names_the_step_never_the_remote_reply(lab):
    secret = f"SECRET-{uuid.uuid4().hex}"

    class Leaky(http.server.BaseHTTPRequestHandler):
        def _reply(self):
            body = f"<Error><Code>AccessDenied</Code><Message>{secret}</Message></Error>".encode()
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _reply

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Leaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        status, body = lab.call(
            lab.admin,
            "POST",
            "/management/v1/warehouses",
            {"name": "leaky", "storage-root": f"s3://{BUCKET}/leaky", "storage-profile": profile(endpoint, lab.moto.icegate_keys)},
        )
        assert status == 400, body
        assert secret not in json.dumps(body), body
        assert "probe" in body["error"]["message"]
    finally:
        server.shutdown()


# 6 ------------------------------------------------------------------------------------------
def test_a_registered_metadata_log_cannot_make_the_server_delete_another_tables_files(lab):
    _, _, victim_meta = victim_table(lab, "lake", "victim6")
    namespace(lab, "lake", "att6")
    _, attacker, _ = lab.principal([("create", namespace_securable("lake", "att6")), ("write", namespace_securable("lake", "att6"))])
    where = f"s3://{BUCKET}/sec/att6/crafted-{uuid.uuid4().hex[:6]}"
    status, staged = create_table(lab, attacker, "lake", "att6", "stage", where, stage=True)
    assert status == 200, staged
    crafted = dict(staged["metadata"])
    crafted["metadata-log"] = [{"timestamp-ms": 1, "metadata-file": f"s3://{BUCKET}/{victim_meta}"}]
    crafted["properties"] = {
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": "1",
    }
    crafted_key = f"{key_of(where)}/metadata/00001-{uuid.uuid4()}.metadata.json"
    s3_with(lab, staged["config"]).put_object(Bucket=BUCKET, Key=crafted_key, Body=json.dumps(crafted).encode())
    status, body = lab.call(
        attacker,
        "POST",
        f"/v1/{lab.prefix('lake')}/namespaces/att6/register",
        {"name": "stage", "metadata-location": f"s3://{BUCKET}/{crafted_key}"},
    )
    assert status == 200, body
    for n in range(3):
        status, body = lab.call(
            attacker,
            "POST",
            f"{lab.tables('lake', 'att6')}/stage",
            {"requirements": [], "updates": [{"action": "set-properties", "updates": {"n": str(n)}}]},
        )
        assert status == 200, body
    time.sleep(0.5)  # clean-up runs after the commit answers
    assert lab.exists(BUCKET, victim_meta), "the victim's metadata file is still there"
    # A metadata file outside the table it describes is not registered at all.
    status, body = lab.call(
        attacker,
        "POST",
        f"/v1/{lab.prefix('lake')}/namespaces/att6/register",
        {"name": "elsewhere", "metadata-location": f"s3://{BUCKET}/{victim_meta}"},
    )
    assert status in (400, 403), body


def test_a_purge_deletes_no_file_that_a_manifest_borrows_from_another_table(lab, tmp_path):
    from pyiceberg.catalog import load_catalog
    import pyarrow as pa

    catalog = load_catalog("sec", type="rest", uri=lab.server.uri, warehouse="default", credential=f"{ADMIN_ID}:{ADMIN_SECRET}")
    catalog.create_namespace("purge6")
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    schema = Schema(NestedField(1, "id", LongType(), required=False))
    victim = catalog.create_table("purge6.victim", schema=schema)
    victim.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
    victim_files = [task.file.file_path for task in victim.scan().plan_files()]
    borrower = catalog.create_table("purge6.borrower", schema=schema)
    borrower.add_files(victim_files)
    assert borrower.scan().to_arrow().num_rows == 3, "the borrower's manifest lists the victim's file"
    borrower_dir = urllib.parse.urlsplit(borrower.metadata.location).path
    status, body = lab.call(lab.admin, "DELETE", f"{lab.tables('default', 'purge6')}/borrower?purgeRequested=true")
    assert status == 204, body
    # The purge (a task) has run: the borrower's own directory is gone.
    deadline = time.monotonic() + 30
    while os.path.exists(borrower_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(borrower_dir)
    for path in victim_files:
        assert os.path.exists(urllib.parse.urlsplit(path).path), path
    assert catalog.load_table("purge6.victim").scan().to_arrow().num_rows == 3


# 10 -----------------------------------------------------------------------------------------
def peak_rss_mb(lab):
    status = open(f"/proc/{lab.server.process.pid}/status").read()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) / 1024


def test_a_decompression_bomb_is_refused_without_the_memory_it_asks_for(lab):
    namespace(lab, "lake", "bomb10")
    _, attacker, _ = lab.principal([("create", namespace_securable("lake", "bomb10"))])
    where = f"s3://{BUCKET}/sec/bomb10/b-{uuid.uuid4().hex[:6]}"
    status, staged = create_table(lab, attacker, "lake", "bomb10", "s", where, stage=True)
    assert status == 200, staged
    # 1 GiB of JSON whitespace in under 1.5 MB of gzip.
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b" " * (1 << 20)
    parts = [compressor.compress(b'{"format-version": 2,')]
    parts += [compressor.compress(chunk) for _ in range(1024)]
    parts.append(compressor.compress(b"}") + compressor.flush())
    bomb = b"".join(parts)
    assert len(bomb) < 1_600_000
    key = f"{key_of(where)}/metadata/00000-{uuid.uuid4()}.gz.metadata.json"
    s3_with(lab, staged["config"]).put_object(Bucket=BUCKET, Key=key, Body=bomb)
    before = peak_rss_mb(lab)
    status, body = lab.call(
        attacker,
        "POST",
        f"/v1/{lab.prefix('lake')}/namespaces/bomb10/register",
        {"name": "bomb", "metadata-location": f"s3://{BUCKET}/{key}"},
    )
    assert peak_rss_mb(lab) < max(before, 100) + 200, "the server did not expand the bomb"
    assert status == 400 and "max_metadata_bytes" in body["error"]["message"], body


# 14 -----------------------------------------------------------------------------------------
def test_warehouses_cannot_share_storage(lab):
    keys = lab.moto.icegate_keys
    for name, root in [("same", f"s3://{BUCKET}/sec"), ("inner", f"s3://{BUCKET}/sec/inner"), ("outer", f"s3://{BUCKET}")]:
        status, body = lab.call(
            lab.admin,
            "POST",
            "/management/v1/warehouses",
            {"name": name, "storage-root": root, "storage-profile": profile(lab.front, keys)},
        )
        assert status == 400, (root, body)
    names = [w["name"] for w in lab.ok(lab.admin, "GET", "/management/v1/warehouses")["warehouses"]]
    assert not {"same", "inner", "outer"} & set(names)


def test_a_warehouse_may_be_a_whole_bucket(lab):
    lab.ok(
        lab.admin,
        "POST",
        "/management/v1/warehouses",
        {"name": "whole", "storage-root": f"s3://{WHOLE_BUCKET}", "storage-profile": profile(lab.front, lab.moto.icegate_keys)},
    )
    namespace(lab, "whole", "w")
    status, body = create_table(lab, lab.admin, "whole", "w", "t")
    assert status == 200, body
    s3 = s3_with(lab, body["config"])
    key = f"{key_of(body['metadata']['location'], WHOLE_BUCKET)}/data/x.parquet"
    s3.put_object(Bucket=WHOLE_BUCKET, Key=key, Body=b"x")
    denied(lambda: s3.put_object(Bucket=WHOLE_BUCKET, Key="elsewhere/x", Body=b"x"))


# 15a ----------------------------------------------------------------------------------------
def test_a_readers_credentials_do_not_list_a_sibling_with_a_longer_name(lab):
    namespace(lab, "lake", "sib15")
    base = f"s3://{BUCKET}/sec/sib15"
    for name in ("t1", "t10"):
        status, body = create_table(lab, lab.admin, "lake", "sib15", name, f"{base}/{name}")
        assert status == 200, body
    lab.s3().put_object(Bucket=BUCKET, Key="sec/sib15/t10/data/secret.parquet", Body=b"x")
    _, reader, _ = lab.principal([("read", table_securable("lake", "sib15", "t1"))])
    status, body = lab.call(reader, "GET", f"{lab.tables('lake', 'sib15')}/t1", headers=DELEGATE)
    assert status == 200, body
    s3 = s3_with(lab, body["config"])
    denied(lambda: s3.list_objects_v2(Bucket=BUCKET, Prefix="sec/sib15/t1"))
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="sec/sib15/t1/")
    assert all(o["Key"].startswith("sec/sib15/t1/") for o in listed.get("Contents", []))
