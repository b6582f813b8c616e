"""Security regressions, access side (issue 13): a principal reaches exactly what it was granted,
whatever route, parameter or replay it tries. One test per reproduced item, judged by effects (the
table is unchanged, the grant does not exist, the token no longer works), with the status codes
that clients dispatch on.
"""

import json
import sqlite3
import uuid

from lab import SCHEMA, lab, namespace_securable, table_securable  # noqa: F401
from harness import BUCKET
from helpers import DELEGATE


def namespace(lab, warehouse, name):
    lab.ok(lab.admin, "POST", f"/v1/{lab.prefix(warehouse)}/namespaces", {"namespace": [name]})


def create(lab, token, ns, name, warehouse="lake", headers=None, extra=None):
    return lab.call(
        token, "POST", lab.tables(warehouse, ns), {"name": name, "schema": SCHEMA, **(extra or {})}, headers=headers
    )


def grants_of(lab, role):
    return lab.ok(lab.admin, "GET", f"/management/v1/grants?role={role}")["grants"]


# 7 ------------------------------------------------------------------------------------------
def test_register_with_overwrite_needs_write_and_drop_on_the_table(lab):
    namespace(lab, "lake", "n7")
    status, victim = create(lab, lab.admin, "n7", "vt")
    assert status == 200, victim
    _, attacker, _ = lab.principal([("create", namespace_securable("lake", "n7"))])
    # A metadata file of a table at a free location of the namespace (how it got there does not
    # matter here: a writer of any table could have put it).
    where = f"s3://{BUCKET}/sec/n7/own-{uuid.uuid4().hex[:6]}"
    key = f"{where.split(f's3://{BUCKET}/')[1]}/metadata/00000-{uuid.uuid4()}.metadata.json"
    document = dict(victim["metadata"], location=where, **{"table-uuid": str(uuid.uuid4())})
    lab.s3().put_object(Bucket=BUCKET, Key=key, Body=json.dumps(document).encode())
    register = {"name": "vt", "metadata-location": f"s3://{BUCKET}/{key}", "overwrite": True}
    status, body = lab.call(attacker, "POST", f"/v1/{lab.prefix('lake')}/namespaces/n7/register", register)
    assert status in (403, 409), body
    after = lab.ok(lab.admin, "GET", f"{lab.tables('lake', 'n7')}/vt")
    assert after["metadata-location"] == victim["metadata-location"], "the table still points where it did"
    # Holding write and drop on the table, the same registration replaces it.
    _, owner, _ = lab.principal(
        [("create", namespace_securable("lake", "n7")), ("write", table_securable("lake", "n7", "vt")), ("drop", table_securable("lake", "n7", "vt"))]
    )
    status, body = lab.call(owner, "POST", f"/v1/{lab.prefix('lake')}/namespaces/n7/register", register)
    assert status == 200, body
    assert lab.ok(lab.admin, "GET", f"{lab.tables('lake', 'n7')}/vt")["metadata-location"] == register["metadata-location"]


# 8 ------------------------------------------------------------------------------------------
def test_manage_grants_hands_on_only_what_its_holder_holds(lab):
    namespace(lab, "lake", "n8")
    assert create(lab, lab.admin, "n8", "t")[0] == 200
    name, manager, _ = lab.principal([("manage_grants", namespace_securable("lake", "n8"))])
    for privilege in ("admin", "read", "write", "drop"):
        grant = {"role": f"{name}-role", "privilege": privilege, "securable": namespace_securable("lake", "n8")}
        status, body = lab.call(manager, "POST", "/management/v1/grants", grant)
        assert status == 403, (privilege, body)
    assert {g["privilege"] for g in grants_of(lab, f"{name}-role")} == {"manage_grants"}
    assert lab.call(manager, "GET", f"{lab.tables('lake', 'n8')}/t")[0] in (403, 404)
    # What it holds, it may hand on (and take back).
    _, _, _ = lab.principal([], name=f"{name}-peer")
    other, reader_manager, _ = lab.principal(
        [("manage_grants", namespace_securable("lake", "n8")), ("read", namespace_securable("lake", "n8"))]
    )
    grant = {"role": f"{name}-peer-role", "privilege": "read", "securable": namespace_securable("lake", "n8")}
    assert lab.call(reader_manager, "POST", "/management/v1/grants", grant)[0] == 201
    assert lab.call(reader_manager, "DELETE", "/management/v1/grants", grant)[0] == 204
    grant["privilege"] = "write"
    assert lab.call(reader_manager, "POST", "/management/v1/grants", grant)[0] == 403


# 9 ------------------------------------------------------------------------------------------
def test_listing_grants_decides_on_the_parameter_it_reads(lab):
    name, token, _ = lab.principal([])
    # With its own name, `role` narrows its own grants (none through `admin`); the admin role's
    # grants are not listed, and whether a role exists is not told.
    for role in ("admin", "no-such-role"):
        status, body = lab.call(token, "GET", f"/management/v1/grants?principal={name}&role={role}")
        assert status == 200 and body["grants"] == [], body
    status, body = lab.call(token, "GET", "/management/v1/grants?role=admin")
    assert status == 403 and "grants" not in body, body
    status, body = lab.call(token, "GET", f"/management/v1/grants?principal={name}")
    assert status == 200 and body["grants"] == [], body


# 11 -----------------------------------------------------------------------------------------
def test_write_alone_creates_no_table(lab):
    namespace(lab, "lake", "n11")
    _, writer, _ = lab.principal([("write", namespace_securable("lake", "n11"))])
    commit = {
        "requirements": [{"type": "assert-create"}],
        "updates": [{"action": "add-schema", "schema": SCHEMA}, {"action": "set-current-schema", "schema-id": -1}],
    }
    status, body = lab.call(writer, "POST", f"{lab.tables('lake', 'n11')}/made", commit)
    assert status == 403, body
    assert lab.call(lab.admin, "GET", f"{lab.tables('lake', 'n11')}/made")[0] == 404
    # `create` (without write) may commit the create.
    _, creator, _ = lab.principal([("create", namespace_securable("lake", "n11"))])
    status, body = lab.call(creator, "POST", f"{lab.tables('lake', 'n11')}/made", commit)
    assert status == 200, body


# 12 -----------------------------------------------------------------------------------------
def stored_bodies(lab):
    database = lab.server.workdir / "icegate-data" / "catalog.db"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        return [row[0] or "" for row in db.execute("SELECT body FROM idempotency_keys")]


def test_idempotency_keys_belong_to_their_caller_and_keep_no_credentials(lab):
    for ns in ("na12", "nb12"):
        namespace(lab, "lake", ns)
    _, alice, _ = lab.principal([("create", namespace_securable("lake", "na12"))])
    _, bob, _ = lab.principal([("create", namespace_securable("lake", "nb12"))])
    key = str(uuid.uuid4())
    keyed = {**DELEGATE, "Idempotency-Key": key}
    status, first = create(lab, alice, "na12", "t", headers=keyed)
    assert status == 200 and first["config"]["s3.secret-access-key"], first
    # Another principal's request with the same key is its own request, never a replay.
    status, body = create(lab, bob, "na12", "t", headers=keyed)
    assert status in (403, 404), body
    status, theirs = create(lab, bob, "nb12", "t", headers=keyed)
    assert status == 200 and theirs["metadata"]["table-uuid"] != first["metadata"]["table-uuid"], theirs
    assert lab.call(lab.admin, "GET", f"{lab.tables('lake', 'nb12')}/t")[0] == 200
    # The same principal reusing the key for another request is refused.
    status, body = create(lab, alice, "na12", "other", headers=keyed)
    assert status == 422 and "na12" not in json.dumps(body).replace('"na12', ""), body
    assert lab.call(lab.admin, "GET", f"{lab.tables('lake', 'na12')}/other")[0] == 404
    # Nothing stored holds a credential; a replay is vended credentials afresh.
    secret = first["config"]["s3.secret-access-key"]
    bodies = stored_bodies(lab)
    assert bodies and not any(secret in b or "secret-access-key" in b for b in bodies), bodies
    status, again = create(lab, alice, "na12", "t", headers=keyed)
    assert status == 200 and again["metadata"]["table-uuid"] == first["metadata"]["table-uuid"], again
    assert again["config"]["s3.access-key-id"].startswith("ASIA"), again["config"]
    assert [c["prefix"] for c in again["storage-credentials"]] == [first["metadata"]["location"]]


# 13 -----------------------------------------------------------------------------------------
def test_a_grant_follows_a_renamed_table_and_can_be_revoked_by_its_new_name(lab):
    for ns in ("e13", "f13"):
        namespace(lab, "lake", ns)
    assert create(lab, lab.admin, "e13", "t")[0] == 200
    name, reader, _ = lab.principal([("read", table_securable("lake", "e13", "t"))])
    lab.ok(
        lab.admin,
        "POST",
        f"/v1/{lab.prefix('lake')}/tables/rename",
        {"source": {"namespace": ["e13"], "name": "t"}, "destination": {"namespace": ["f13"], "name": "t"}},
    )
    assert lab.call(reader, "GET", f"{lab.tables('lake', 'f13')}/t")[0] == 200
    [grant] = grants_of(lab, f"{name}-role")
    assert grant["securable"] == table_securable("lake", "f13", "t"), grant
    on = lab.ok(lab.admin, "GET", "/management/v1/grants/on?type=table&warehouse=lake&namespace=f13&name=t")["grants"]
    assert any(g["role"] == f"{name}-role" for g in on), on
    revoke = {"role": f"{name}-role", "privilege": "read", "securable": table_securable("lake", "f13", "t")}
    assert lab.call(lab.admin, "DELETE", "/management/v1/grants", revoke)[0] == 204
    assert lab.call(reader, "GET", f"{lab.tables('lake', 'f13')}/t")[0] == 404
    assert grants_of(lab, f"{name}-role") == []


# 15b ----------------------------------------------------------------------------------------
def test_a_deleted_principals_tokens_stop_at_once(lab):
    namespace(lab, "lake", "n15b")
    name, token, _ = lab.principal([("describe", namespace_securable("lake", "n15b"))])
    assert lab.call(token, "GET", "/management/v1/whoami")[0] == 200
    assert lab.call(lab.admin, "DELETE", f"/management/v1/principals/{name}")[0] == 204
    for path in ("/management/v1/whoami", f"/v1/{lab.prefix('lake')}/namespaces/n15b"):
        status, body = lab.call(token, "GET", path)
        assert status == 401 and body["error"]["type"] == "NotAuthorizedException", body


# 15c, 15f -----------------------------------------------------------------------------------
def test_hidden_and_missing_warehouses_are_answered_alike(lab):
    _, stranger, _ = lab.principal([])
    answers = []
    for warehouse in ("lake", "no-such-warehouse"):
        grant = {"role": "admin", "privilege": "read", "securable": {"type": "warehouse", "warehouse": warehouse}}
        status, body = lab.call(stranger, "POST", "/management/v1/grants", grant)
        answers.append((status, body["error"]["type"], body["error"]["message"].replace(warehouse, "W")))
    assert answers[0] == answers[1] and answers[0][0] == 404, answers
    prefix = lab.prefix("lake")
    status, body = lab.call(stranger, "GET", f"/v1/{prefix}/namespaces")
    status_unknown, unknown = lab.call(stranger, "GET", "/v1/no-such-prefix/namespaces")
    assert (status, status_unknown) == (404, 404)
    assert body["error"]["message"] == unknown["error"]["message"].replace("no-such-prefix", prefix), (body, unknown)
    assert "lake" not in body["error"]["message"]


# 15d ----------------------------------------------------------------------------------------
def test_storage_profile_details_are_for_the_warehouses_admins(lab):
    namespace(lab, "lake", "n15d")
    _, describer, _ = lab.principal([("describe", namespace_securable("lake", "n15d"))])
    key_id = lab.moto.icegate_keys[0]
    for path in ("/management/v1/warehouses/lake", "/management/v1/warehouses"):
        status, body = lab.call(describer, "GET", path)
        assert status == 200, body
        text = json.dumps(body)
        assert key_id not in text and "role/icegate-vending" not in text and lab.front not in text, text
    full = json.dumps(lab.ok(lab.admin, "GET", "/management/v1/warehouses/lake"))
    assert key_id in full and "role/icegate-vending" in full


# 15g ----------------------------------------------------------------------------------------
def test_a_grant_that_has_already_expired_is_refused(lab):
    namespace(lab, "lake", "n15g")
    name, _, _ = lab.principal([])
    grant = {
        "role": f"{name}-role",
        "privilege": "read",
        "securable": namespace_securable("lake", "n15g"),
        "expires-at-ms": 1_800_000_000,  # seconds given for milliseconds: January 1970
    }
    status, body = lab.call(lab.admin, "POST", "/management/v1/grants", grant)
    assert status == 400, body
    assert grants_of(lab, f"{name}-role") == []


# Found by the attack session on the fixes (docs/security.md) ----------------------------------
def test_a_table_cannot_be_placed_in_another_namespaces_directory(lab):
    for ns in ("own16", "victim16"):
        namespace(lab, "lake", ns)
    _, attacker, _ = lab.principal([("create", namespace_securable("lake", "own16"))])
    root = f"s3://{BUCKET}/sec"
    for location in (f"{root}/victim16", f"{root}/finance16", f"{root}/own16"):
        for stage in (True, False):
            status, body = create(lab, attacker, "own16", "s", headers=DELEGATE, extra={"location": location, "stage-create": stage})
            assert status == 403 and "s3.secret-access-key" not in json.dumps(body), (location, stage, body)
        view = {"name": "v", "schema": SCHEMA, "location": location, "view-version": {
            "version-id": 1, "timestamp-ms": 1, "schema-id": 0, "summary": {}, "default-namespace": ["own16"],
            "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}]}}
        assert lab.call(attacker, "POST", f"/v1/{lab.prefix('lake')}/namespaces/own16/views", view)[0] == 403
    # A registration is placed the same way, before the file is read: existence is not learned.
    for metadata in (f"{root}/victim16/t/metadata/00000-x.metadata.json", f"{root}/nowhere/00000-y.metadata.json"):
        status, body = lab.call(
            attacker, "POST", f"/v1/{lab.prefix('lake')}/namespaces/own16/register", {"name": "r", "metadata-location": metadata}
        )
        assert status == 403, body
    # Later tables of the other namespace are created where they should be, and are not reachable.
    status, victim = create(lab, lab.admin, "victim16", "t")
    assert status == 200 and victim["metadata"]["location"].startswith(f"{root}/victim16/"), victim
    # Inside its own namespace's directory, anything free goes.
    status, body = create(lab, attacker, "own16", "s", headers=DELEGATE, extra={"location": f"{root}/own16/custom"})
    assert status == 200, body


def test_a_location_a_table_moved_away_from_stays_its_own(lab):
    namespace(lab, "lake", "shared17")
    status, victim = create(lab, lab.admin, "shared17", "t")
    assert status == 200, victim
    old = victim["metadata"]["location"]
    old_key = f"{old.split(f's3://{BUCKET}/')[1]}/data/live.parquet"
    lab.s3().put_object(Bucket=BUCKET, Key=old_key, Body=b"still referenced by the current snapshot")
    moved = f"s3://{BUCKET}/sec/shared17/t-moved"
    lab.ok(
        lab.admin,
        "POST",
        f"{lab.tables('lake', 'shared17')}/t",
        {"requirements": [], "updates": [{"action": "set-location", "location": moved}]},
    )
    # Someone who may create in the same namespace cannot claim the old location.
    _, attacker, _ = lab.principal([("create", namespace_securable("lake", "shared17"))])
    for extra in ({"location": old}, {"properties": {"write.data.path": f"{old}/data"}}):
        status, body = create(lab, attacker, "shared17", "grab", headers=DELEGATE, extra=extra)
        assert status == 400 and "s3.secret-access-key" not in json.dumps(body), (extra, body)
    assert lab.exists(BUCKET, old_key)
    # The table's readers still reach the files its snapshots may use at the old location.
    _, reader, _ = lab.principal([("read", table_securable("lake", "shared17", "t"))])
    status, body = lab.call(reader, "GET", f"{lab.tables('lake', 'shared17')}/t", headers=DELEGATE)
    assert status == 200, body
    assert {c["prefix"] for c in body["storage-credentials"]} >= {old, moved}
    config = body["config"]
    s3 = lab.s3(config["s3.access-key-id"], config["s3.secret-access-key"], config["s3.session-token"])
    assert s3.get_object(Bucket=BUCKET, Key=old_key)["Body"].read().startswith(b"still")


def test_drop_on_a_table_is_not_turned_into_control_by_moving_it(lab):
    for ns in ("vic18", "own18"):
        namespace(lab, "lake", ns)
    assert create(lab, lab.admin, "vic18", "t")[0] == 200
    _, attacker, _ = lab.principal(
        [("drop", table_securable("lake", "vic18", "t")), ("admin", namespace_securable("lake", "own18"))]
    )
    rename = {"source": {"namespace": ["vic18"], "name": "t"}, "destination": {"namespace": ["own18"], "name": "stolen"}}
    status, body = lab.call(attacker, "POST", f"/v1/{lab.prefix('lake')}/tables/rename", rename)
    assert status == 403, body
    assert lab.call(lab.admin, "GET", f"{lab.tables('lake', 'vic18')}/t")[0] == 200
    assert lab.call(lab.admin, "GET", f"{lab.tables('lake', 'own18')}/stolen")[0] == 404


def test_a_grantor_cannot_outlast_its_own_expiring_grants(lab):
    import time

    namespace(lab, "lake", "x19")
    soon = int(time.time() * 1000) + 2_000
    name, grantor, _ = lab.principal([])
    for privilege in ("manage_grants", "write"):
        lab.ok(
            lab.admin,
            "POST",
            "/management/v1/grants",
            {"role": f"{name}-role", "privilege": privilege, "securable": {"type": "warehouse", "warehouse": "lake"}, "expires-at-ms": soon},
        )
    grant = {"role": f"{name}-role", "privilege": "write", "securable": namespace_securable("lake", "x19")}
    status, body = lab.call(grantor, "POST", "/management/v1/grants", grant)
    assert status == 201 and body["expires-at-ms"] is not None and body["expires-at-ms"] <= soon, body
    time.sleep(2.5)
    status, body = lab.call(grantor, "POST", f"/v1/{lab.prefix('lake')}/namespaces/x19/properties", {"updates": {"a": "b"}})
    assert status in (403, 404), body
    # An expired grant does not block granting the same again.
    lab.ok(lab.admin, "POST", "/management/v1/grants", {**grant, "expires-at-ms": int(time.time() * 1000) + 60_000})


def test_a_transaction_says_nothing_about_tables_the_caller_cannot_see(lab):
    namespace(lab, "lake", "hid20")
    assert create(lab, lab.admin, "hid20", "exists")[0] == 200
    namespace(lab, "lake", "mine20")
    _, prober, _ = lab.principal([("write", namespace_securable("lake", "mine20"))])
    answers = []
    for name in ("exists", "missing"):
        change = {"identifier": {"namespace": ["hid20"], "name": name}, "requirements": [{"type": "assert-create"}], "updates": []}
        status, body = lab.call(prober, "POST", f"/v1/{lab.prefix('lake')}/transactions/commit", {"table-changes": [change]})
        answers.append((status, body["error"]["type"], body["error"]["message"].replace(name, "N")))
    assert answers[0] == answers[1] and answers[0][0] == 404, answers
