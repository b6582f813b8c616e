"""Regression tests of the second attack round on the security hardening (docs/security.md):
namespace directories claimed by tables, views and staged creates; a location cache shared by
tables registered from one metadata file; replayed creates and registrations that vended more
than the caller holds; signatures for virtual-hosted URIs on a path-style-only store. Each test
judges by effects at the store (an object read, written or deleted with the credentials or the
signature) or at the catalog (what exists)."""

import json
import urllib.parse
import uuid

import botocore.exceptions
import pytest
import requests

from lab import SCHEMA, lab, profile, running_lab, staged_commit  # noqa: F401 (lab is a fixture; it puts ../s3 on the path)
from harness import BUCKET, WHOLE_BUCKET  # noqa: E402

DELEGATE = {"X-Iceberg-Access-Delegation": "vended-credentials"}
ROOT = f"s3://{BUCKET}/sec"


def key_of(location):
    return location.split(f"s3://{BUCKET}/", 1)[1]


def ns_path(levels):
    return urllib.parse.quote("\x1f".join(levels), safe="")


def namespace(lab, levels):
    return lab.call(lab.admin, "POST", f"/v1/{lab.prefix('lake')}/namespaces", {"namespace": levels})


def tables(lab, levels):
    return f"/v1/{lab.prefix('lake')}/namespaces/{ns_path(levels)}/tables"


def ns_securable(levels):
    return {"type": "namespace", "warehouse": "lake", "namespace": levels}


def table_securable(levels, name):
    return {"type": "table", "warehouse": "lake", "namespace": levels, "name": name}


def create(lab, token, levels, name, location=None, properties=None, stage=False, headers=None):
    body = {"name": name, "schema": SCHEMA}
    if location:
        body["location"] = location
    if properties:
        body["properties"] = properties
    if stage:
        body["stage-create"] = True
    return lab.call(token, "POST", tables(lab, levels), body, headers={**DELEGATE, **(headers or {})})


def s3_with(lab, config):
    return lab.s3(config["s3.access-key-id"], config["s3.secret-access-key"], config.get("s3.session-token"))


def reads(s3, key):
    try:
        return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    except botocore.exceptions.ClientError:
        return None


def writes(s3, key):
    try:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"evil")
        return True
    except botocore.exceptions.ClientError:
        return False


def has_credentials(body):
    return "s3.secret-access-key" in json.dumps(body or {})


def test_a_staged_create_cannot_take_a_namespaces_directory_or_what_is_created_there_later(lab):
    assert namespace(lab, ["r1"])[0] == 200
    assert namespace(lab, ["r1", "sub"])[0] == 200
    _, attacker, _ = lab.principal([("create", ns_securable(["r1"]))])
    # The directory of an existing child namespace: refused before anything is vended.
    status, staged = create(lab, attacker, ["r1"], "grab", location=f"{ROOT}/r1/sub", stage=True)
    assert status == 400 and not has_credentials(staged), staged
    status, victim = create(lab, lab.admin, ["r1", "sub"], "payroll")
    assert status == 200, victim
    # A directory no namespace has yet: the staged create gets its credentials, and the location
    # stays reserved for it until they expire; no namespace, table or view is placed there.
    status, staged = create(lab, attacker, ["r1"], "grab", location=f"{ROOT}/r1/later", stage=True)
    assert status == 200 and has_credentials(staged), staged
    status, refused = namespace(lab, ["r1", "later"])
    assert status == 400, refused
    assert lab.call(lab.admin, "GET", f"/v1/{lab.prefix('lake')}/namespaces/{ns_path(['r1', 'later'])}")[0] == 404
    status, refused = create(lab, lab.admin, ["r1"], "inside", location=f"{ROOT}/r1/later/inside")
    assert status == 400, refused
    # The staged table itself commits (its own reservation), and then holds the location.
    meta = staged["metadata"]
    commit = staged_commit(meta, f"{ROOT}/r1/later")
    # Only by the principal that staged it: another one with `create` cannot take the location.
    _, other, _ = lab.principal([("create", ns_securable(["r1"]))])
    status, body = lab.call(other, "POST", f"{tables(lab, ['r1'])}/grab", commit)
    assert status == 400, body
    status, body = lab.call(attacker, "POST", f"{tables(lab, ['r1'])}/grab", commit)
    assert status == 200, body
    assert body["metadata"]["location"] == f"{ROOT}/r1/later"


def test_a_table_or_view_cannot_claim_a_child_namespaces_directory(lab):
    assert namespace(lab, ["r2"])[0] == 200
    assert namespace(lab, ["r2", "sub"])[0] == 200
    assert create(lab, lab.admin, ["r2"], "t")[0] == 200
    _, writer, _ = lab.principal([("write", table_securable(["r2"], "t")), ("create", ns_securable(["r2"]))])
    commit = {
        "requirements": [],
        "updates": [{"action": "set-properties", "updates": {"write.data.path": f"{ROOT}/r2/sub"}}],
    }
    status, refused = lab.call(writer, "POST", f"{tables(lab, ['r2'])}/t", commit)
    assert status == 400, refused
    view = {
        "name": "v",
        "schema": SCHEMA,
        "location": f"{ROOT}/r2/sub",
        "view-version": {
            "version-id": 1, "timestamp-ms": 1, "schema-id": 0, "summary": {}, "default-namespace": ["r2"],
            "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
        },
    }
    status, refused = lab.call(writer, "POST", f"/v1/{lab.prefix('lake')}/namespaces/r2/views", view)
    assert status == 400, refused
    # Nothing claimed the child's directory: its creates work, and the writer's credentials for
    # its one table do not reach them.
    status, victim = create(lab, lab.admin, ["r2", "sub"], "payroll")
    assert status == 200, victim
    data = f"{key_of(victim['metadata']['location'])}/data/secret.parquet"
    lab.s3().put_object(Bucket=BUCKET, Key=data, Body=b"victim secret")
    status, loaded = lab.call(writer, "GET", f"{tables(lab, ['r2'])}/t", headers=DELEGATE)
    assert status == 200
    assert reads(s3_with(lab, loaded["config"]), data) is None
    # The other way round: a namespace is not created at (or inside) a table's location.
    assert create(lab, lab.admin, ["r2"], "x", location=f"{ROOT}/r2/x")[0] == 200
    assert namespace(lab, ["r2", "x"])[0] == 400
    assert lab.call(lab.admin, "GET", f"/v1/{lab.prefix('lake')}/namespaces/{ns_path(['r2', 'x'])}")[0] == 404


def test_a_table_registered_from_another_tables_file_gets_credentials_for_its_own_locations_only(lab):
    assert namespace(lab, ["r3"])[0] == 200
    name, attacker, _ = lab.principal([("create", ns_securable(["r3"]))])
    status, body = create(lab, attacker, ["r3"], "t1", location=f"{ROOT}/r3/l0")
    assert status == 200, body
    for privilege in ("write", "drop"):
        grant = {"role": f"{name}-role", "privilege": privilege, "securable": table_securable(["r3"], "t1")}
        lab.ok(lab.admin, "POST", "/management/v1/grants", grant)
    move = {"requirements": [], "updates": [{"action": "set-location", "location": f"{ROOT}/r3/t1-new"}]}
    status, moved = lab.call(attacker, "POST", f"{tables(lab, ['r3'])}/t1", move)
    assert status == 200, moved
    status, loaded = lab.call(attacker, "GET", f"{tables(lab, ['r3'])}/t1", headers=DELEGATE)
    prefixes = sorted(c["prefix"] for c in loaded["storage-credentials"])
    assert prefixes == [f"{ROOT}/r3/l0", f"{ROOT}/r3/t1-new"], prefixes  # the old location stays its own
    assert lab.call(attacker, "DELETE", f"{tables(lab, ['r3'])}/t1")[0] == 204
    register = {"name": "t2", "metadata-location": moved["metadata-location"]}
    status, registered = lab.call(attacker, "POST", f"/v1/{lab.prefix('lake')}/namespaces/r3/register", register, headers=DELEGATE)
    assert status == 200, registered
    assert [c["prefix"] for c in registered["storage-credentials"]] == [f"{ROOT}/r3/t1-new"]
    # The dropped table's old location is not free for another table while the credentials
    # vended for it may still work (round 4: it is leased until then).
    status, victim = create(lab, lab.admin, ["r3"], "payroll", location=f"{ROOT}/r3/l0")
    assert status == 400, victim


def test_a_replay_vends_only_what_the_caller_holds_now(lab):
    assert namespace(lab, ["r4"])[0] == 200
    assert create(lab, lab.admin, ["r4"], "t")[0] == 200
    name, principal, _ = lab.principal([
        ("create", ns_securable(["r4"])),
        ("write", table_securable(["r4"], "t")),
        ("drop", table_securable(["r4"], "t")),
    ])
    status, loaded = lab.call(principal, "GET", f"{tables(lab, ['r4'])}/t", headers=DELEGATE)
    location = loaded["metadata"]["location"]
    copy = f"{key_of(location)}/metadata/00009-{uuid.uuid4()}.metadata.json"
    s3_with(lab, loaded["config"]).put_object(Bucket=BUCKET, Key=copy, Body=json.dumps(loaded["metadata"]).encode())
    keyed = {**DELEGATE, "Idempotency-Key": str(uuid.uuid4())}
    register = {"name": "t", "metadata-location": f"s3://{BUCKET}/{copy}", "overwrite": True}
    path = f"/v1/{lab.prefix('lake')}/namespaces/r4/register"
    status, first = lab.call(principal, "POST", path, register, headers=keyed)
    assert status == 200 and has_credentials(first), first
    for privilege in ("write", "drop"):
        revoke = {"role": f"{name}-role", "privilege": privilege, "securable": table_securable(["r4"], "t")}
        lab.ok(lab.admin, "DELETE", "/management/v1/grants", revoke)
    status, again = lab.call(principal, "POST", path, register, headers=keyed)
    assert status == 200, again
    if has_credentials(again):
        assert not writes(s3_with(lab, again["config"]), f"{key_of(location)}/data/after-revoke.parquet")
    # A creator (create only) replaying its create after the owner moved the table's data.
    _, creator, _ = lab.principal([("create", ns_securable(["r4"]))])
    keyed = {**DELEGATE, "Idempotency-Key": str(uuid.uuid4())}
    status, created = create(lab, creator, ["r4"], "handed", headers=keyed)
    assert status == 200 and has_credentials(created)
    moved = f"{ROOT}/r4/handed-owner-data"
    data_path = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"write.data.path": moved}}]}
    lab.ok(lab.admin, "POST", f"{tables(lab, ['r4'])}/handed", data_path)
    lab.s3().put_object(Bucket=BUCKET, Key=f"{key_of(moved)}/secret.parquet", Body=b"owner's data")
    status, replayed = create(lab, creator, ["r4"], "handed", headers=keyed)
    assert status == 200, replayed
    if has_credentials(replayed):
        s3 = s3_with(lab, replayed["config"])
        assert reads(s3, f"{key_of(moved)}/secret.parquet") is None
        assert not writes(s3, f"{key_of(moved)}/evil.parquet")


@pytest.fixture(scope="module")
def path_style_lab(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("path-style"), {"S3_IGNORE_SUBDOMAIN_BUCKETNAME": "true"}) as running:
        yield running


def test_signing_for_a_path_style_store_refuses_virtual_hosted_uris(path_style_lab):
    lab = path_style_lab
    port = lab.front.rsplit(":", 1)[1]
    endpoint = f"http://localhost:{port}"
    warehouse = {"name": "whole", "storage-root": f"s3://{WHOLE_BUCKET}",
                 "storage-profile": profile(endpoint, lab.moto.icegate_keys, "remote-signing")}
    lab.ok(lab.admin, "POST", "/management/v1/warehouses", warehouse)
    prefix = lab.prefix("whole")
    lab.ok(lab.admin, "POST", f"/v1/{prefix}/namespaces", {"namespace": ["lake"]})
    _, attacker, _ = lab.principal([("admin", {"type": "namespace", "warehouse": "whole", "namespace": ["lake"]})])
    victim = "sec/victimns/t/data/secret.parquet"
    lab.s3().put_object(Bucket=BUCKET, Key=victim, Body=b"victim secret")
    body = {"name": "t", "schema": SCHEMA, "location": f"s3://{WHOLE_BUCKET}/lake/sec"}
    assert lab.call(attacker, "POST", f"/v1/{prefix}/namespaces/lake/tables", body)[0] == 200
    sign = f"/v1/{prefix}/namespaces/lake/tables/t/sign"
    for method, key, data in (
        ("GET", f"lake/{victim}", None),
        ("PUT", "lake/sec/victimns/t/data/planted.parquet", b"planted"),
        ("DELETE", f"lake/{victim}", None),
    ):
        # Read by this store as bucket `lake`, key `sec/...`: another warehouse's files.
        uri = f"http://{WHOLE_BUCKET}.localhost:{port}/{key}"
        request = {"region": "us-east-1", "uri": uri, "method": method,
                   "headers": {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"]}}
        status, signed = lab.call(attacker, "POST", sign, request)
        if status == 200:
            headers = {k: ",".join(v) for k, v in signed["headers"].items()}
            headers["Host"] = f"{WHOLE_BUCKET}.localhost:{port}"
            answer = requests.request(method, f"http://127.0.0.1:{port}/{key}", headers=headers, data=data, timeout=10)
            assert not (method == "GET" and answer.status_code == 200 and answer.content == b"victim secret")
    assert lab.exists(BUCKET, victim), "the victim's file is still there"
    assert not lab.exists(BUCKET, "sec/victimns/t/data/planted.parquet")
    # The path-style form of the table's own files is still signed, and works at the store.
    own = f"{WHOLE_BUCKET}/lake/sec/data/own.parquet"
    request = {"region": "us-east-1", "uri": f"{endpoint}/{own}", "method": "PUT",
               "headers": {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"]}}
    status, signed = lab.call(attacker, "POST", sign, request)
    assert status == 200, signed
    headers = {k: ",".join(v) for k, v in signed["headers"].items()}
    headers["Host"] = f"localhost:{port}"
    answer = requests.put(f"http://127.0.0.1:{port}/{own}", headers=headers, data=b"mine", timeout=10)
    assert answer.status_code == 200, answer.text
    assert lab.exists(WHOLE_BUCKET, "lake/sec/data/own.parquet")
