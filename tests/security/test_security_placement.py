"""Security regressions, placement: where a table, view, namespace or staged create may be put.
A location never equals, contains or lies inside another namespace's directory (its own included)
or another table's locations; a staged create reserves its location, and a dropped or unregistered
table (or a dropped namespace's staged creates) leases its locations, while credentials vended for
them may still work; a registration is placed like a create. Judged at the catalog (what exists,
what was refused) and at the store (what the vended credentials reach). From attack rounds 2, 3,
4 and 6 (docs/security.md).
"""

from lab import SCHEMA, lab, staged_commit  # noqa: F401 (lab is a fixture; it puts ../s3 on the path)
from harness import BUCKET  # noqa: E402
from helpers import (  # noqa: E402
    DELEGATE,
    ROOT,
    create,
    has_credentials,
    key_of,
    namespace,
    ns_path,
    ns_securable,
    reads,
    s3_with,
    table_securable,
    tables,
)


def exists(lab, levels):
    return lab.call(lab.admin, "GET", f"/v1/{lab.prefix('lake')}/namespaces/{ns_path(levels)}")[0] == 200


def view_body(name, location, levels):
    return {
        "name": name,
        "schema": SCHEMA,
        "location": location,
        "view-version": {
            "version-id": 1, "timestamp-ms": 1, "schema-id": 0, "summary": {}, "default-namespace": levels,
            "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
        },
    }


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


def test_a_reservation_lasts_until_its_credentials_expire_whatever_is_staged_or_created_meanwhile(lab):
    assert namespace(lab, ["q1"])[0] == 200
    _, attacker, _ = lab.principal([("create", ns_securable(["q1"]))])
    status, staged = create(lab, attacker, ["q1"], "grab", location=f"{ROOT}/q1/sub", stage=True)
    assert status == 200 and has_credentials(staged), staged
    # Staging the name again elsewhere, and creating it at its default location, end nothing.
    assert create(lab, attacker, ["q1"], "grab", stage=True)[0] == 200
    assert create(lab, attacker, ["q1"], "grab")[0] == 200
    assert namespace(lab, ["q1", "sub"])[0] == 400
    assert not exists(lab, ["q1", "sub"])
    # Another principal with create cannot take over the reservation, nor place a table in it.
    _, other, _ = lab.principal([("create", ns_securable(["q1"]))])
    status, body = create(lab, other, ["q1"], "grab2", location=f"{ROOT}/q1/sub", stage=True)
    assert status == 400 and not has_credentials(body), body
    assert create(lab, other, ["q1"], "inside", location=f"{ROOT}/q1/sub/inside")[0] == 400
    # And the first credentials reach no table: none was created there.
    s3 = s3_with(lab, staged["config"])
    listing = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{key_of(ROOT)}/q1/sub/")
    assert listing.get("KeyCount", 0) == 0
    # A reservation does not keep its namespace once the namespace's tables are gone (it is
    # empty, as clients see it), but its location stays out of reach until the credentials
    # expire: for the namespace made anew, for its child at that directory, and for the tables
    # of anyone, the stager included.
    for table in ("grab",):
        assert lab.call(lab.admin, "DELETE", f"{tables(lab, ['q1'])}/{table}")[0] == 204
    assert lab.call(lab.admin, "DELETE", f"/v1/{lab.prefix('lake')}/namespaces/q1")[0] == 204
    assert namespace(lab, ["q1"])[0] == 200
    assert namespace(lab, ["q1", "sub"])[0] == 400 and not exists(lab, ["q1", "sub"])
    for who in (attacker, other):
        status, body = create(lab, who, ["q1"], "grab", location=f"{ROOT}/q1/sub", stage=True)
        assert status in (400, 403, 404) and not has_credentials(body), body
    assert create(lab, lab.admin, ["q1"], "inside", location=f"{ROOT}/q1/sub/inside")[0] == 400


def test_no_table_is_placed_at_a_namespaces_own_directory(lab):
    for levels in (["q5"], ["q5", "b"], ["q5", "b", "c"]):
        assert namespace(lab, levels)[0] == 200
    # Even the server's admin (placement anywhere in the warehouse): such a table would hold
    # every namespace below and every default location there.
    for location in (f"{ROOT}/q5/b", f"{ROOT}/q5"):
        status, body = create(lab, lab.admin, ["q5", "b"], "t", location=location)
        assert status == 400, (location, body)
    assert lab.call(lab.admin, "GET", f"{tables(lab, ['q5', 'b'])}/t")[0] == 404
    assert create(lab, lab.admin, ["q5", "b", "c"], "t")[0] == 200


def test_a_staged_create_of_an_existing_name_is_refused(lab):
    assert namespace(lab, ["q7"])[0] == 200
    assert create(lab, lab.admin, ["q7"], "t")[0] == 200
    _, creator, _ = lab.principal([("create", ns_securable(["q7"]))])
    status, body = create(lab, creator, ["q7"], "t", location=f"{ROOT}/q7/elsewhere", stage=True)
    assert status == 409 and not has_credentials(body), body
    assert body["error"]["type"] == "AlreadyExistsException"
    # Nothing was reserved under the existing table's name.
    assert namespace(lab, ["q7", "elsewhere"])[0] == 200


def test_a_view_does_not_take_a_staged_tables_reservation(lab):
    assert namespace(lab, ["d2"])[0] == 200
    _, attacker, _ = lab.principal([("create", ns_securable(["d2"]))])
    status, staged = create(lab, attacker, ["d2"], "t", location=f"{ROOT}/d2/x", stage=True)
    assert status == 200, staged
    path = f"/v1/{lab.prefix('lake')}/namespaces/d2/views"
    status, body = lab.call(attacker, "POST", path, view_body("t", f"{ROOT}/d2/x", ["d2"]))
    assert status == 400, body
    assert namespace(lab, ["d2", "x"])[0] == 400


def test_a_staged_create_whose_data_path_holds_its_base_commits(lab):
    assert namespace(lab, ["d6"])[0] == 200
    _, creator, _ = lab.principal([("create", ns_securable(["d6"]))])
    properties = {"write.data.path": f"{ROOT}/d6/p"}
    status, staged = create(lab, creator, ["d6"], "t", location=f"{ROOT}/d6/p/q", properties=properties, stage=True)
    assert status == 200, staged
    commit = staged_commit(staged["metadata"], f"{ROOT}/d6/p/q")
    commit["updates"].append({"action": "set-properties", "updates": properties})
    status, body = lab.call(creator, "POST", f"{tables(lab, ['d6'])}/t", commit)
    assert status == 200, body
    assert body["metadata"]["properties"]["write.data.path"] == f"{ROOT}/d6/p"


def test_a_dropped_tables_locations_stay_out_of_reach_while_its_credentials_work(lab):
    assert namespace(lab, ["d9"])[0] == 200
    _, attacker, _ = lab.principal([("create", ns_securable(["d9"]))])
    # A staged table, committed, then dropped by the namespace's owner.
    status, staged = create(lab, attacker, ["d9"], "t", location=f"{ROOT}/d9/x", stage=True)
    assert status == 200 and has_credentials(staged), staged
    status, body = lab.call(attacker, "POST", f"{tables(lab, ['d9'])}/t", staged_commit(staged["metadata"], f"{ROOT}/d9/x"))
    assert status == 200, body
    assert lab.call(lab.admin, "DELETE", f"{tables(lab, ['d9'])}/t")[0] == 204
    # A plain create's credentials, then a drop.
    status, created = create(lab, attacker, ["d9"], "u", location=f"{ROOT}/d9/y")
    assert status == 200 and has_credentials(created), created
    assert lab.call(lab.admin, "DELETE", f"{tables(lab, ['d9'])}/u")[0] == 204
    # Neither location is handed to a namespace or a table while those credentials may work.
    for place in ("x", "y"):
        assert namespace(lab, ["d9", place])[0] == 400
        status, _ = lab.call(lab.admin, "GET", f"/v1/{lab.prefix('lake')}/namespaces/{ns_path(['d9', place])}")
        assert status == 404
        assert create(lab, lab.admin, ["d9"], f"again-{place}", location=f"{ROOT}/d9/{place}/inside")[0] == 400
    # The namespace itself can still be dropped: leases do not hold it.
    assert lab.call(lab.admin, "DELETE", f"/v1/{lab.prefix('lake')}/namespaces/d9")[0] == 204
    # The dropped table itself may be registered again where it was (same table, same uuid).
    assert namespace(lab, ["d11"])[0] == 200
    status, kept = create(lab, lab.admin, ["d11"], "k", location=f"{ROOT}/d11/k")
    assert status == 200, kept
    assert lab.call(lab.admin, "DELETE", f"{tables(lab, ['d11'])}/k")[0] == 204
    again = {"name": "k", "metadata-location": kept["metadata-location"]}
    status, body = lab.call(lab.admin, "POST", f"/v1/{lab.prefix('lake')}/namespaces/d11/register", again)
    assert status == 200, body


def test_dropping_a_namespace_keeps_its_staged_locations_out_of_reach(lab):
    assert namespace(lab, ["u7"])[0] == 200
    _, stager, _ = lab.principal([("create", ns_securable(["u7"])), ("drop", ns_securable(["u7"]))])
    status, staged = create(lab, stager, ["u7"], "s", location=f"{ROOT}/u7/s", stage=True)
    assert status == 200 and has_credentials(staged), staged
    # The namespace is empty as clients see it: it is dropped, and made anew by the admin.
    assert lab.call(stager, "DELETE", f"/v1/{lab.prefix('lake')}/namespaces/u7")[0] == 204
    assert namespace(lab, ["u7"])[0] == 200
    # The staged location stays out of reach: no table, namespace or staged create there.
    assert create(lab, lab.admin, ["u7"], "victim", location=f"{ROOT}/u7/s")[0] == 400
    assert create(lab, lab.admin, ["u7"], "inside", location=f"{ROOT}/u7/s/inside")[0] == 400
    assert namespace(lab, ["u7", "s"])[0] == 400
    status, again = create(lab, lab.admin, ["u7"], "s", location=f"{ROOT}/u7/s", stage=True)
    assert status == 400 and not has_credentials(again), again
    # A table elsewhere in the new namespace is out of the stager's credentials' reach.
    status, victim = create(lab, lab.admin, ["u7"], "elsewhere")
    assert status == 200, victim
    s3 = s3_with(lab, staged["config"])
    target = f"{key_of(victim['metadata']['location'])}/data/planted.parquet"
    try:
        s3.put_object(Bucket=BUCKET, Key=target, Body=b"evil")
        planted = True
    except Exception:  # noqa: BLE001 (any refusal by the store)
        planted = False
    assert not planted, "the stager's credentials reach the new namespace's table"


def test_an_unregistered_table_is_not_taken_over_by_whoever_learns_its_metadata_file(lab):
    assert namespace(lab, ["u6"])[0] == 200
    owner_name, owner, _ = lab.principal([("create", ns_securable(["u6"]))])
    status, created = create(lab, owner, ["u6"], "t")
    assert status == 200 and has_credentials(created), created
    s3 = s3_with(lab, created["config"])
    secret = f"{key_of(created['metadata']['location'])}/data/secret.parquet"
    s3.put_object(Bucket=BUCKET, Key=secret, Body=b"secret")
    # The owner is given drop and read on its table, and unregisters it.
    for privilege in ("drop", "read"):
        lab.ok(lab.admin, "POST", "/management/v1/grants",
               {"role": f"{owner_name}-role", "privilege": privilege, "securable": table_securable(["u6"], "t")})
    status, unregistered = lab.call(owner, "POST", f"{tables(lab, ['u6'])}/t/unregister", {})
    assert status == 200, unregistered
    location = unregistered["metadata-location"]
    # Someone else who may create in the namespace, and learned the file's path, cannot register
    # it while credentials vended for the table may still work: no credentials, no table.
    _, other, _ = lab.principal([("create", ns_securable(["u6"]))])
    body = {"name": "stolen", "metadata-location": location}
    status, refused = lab.call(other, "POST", f"/v1/{lab.prefix('lake')}/namespaces/u6/register", body, headers=DELEGATE)
    assert status == 400 and not has_credentials(refused), refused
    assert lab.call(lab.admin, "GET", f"{tables(lab, ['u6'])}/stolen")[0] == 404
    # Its owner may register it again (the same table, by the principal that let it go).
    body = {"name": "back", "metadata-location": location}
    status, back = lab.call(owner, "POST", f"/v1/{lab.prefix('lake')}/namespaces/u6/register", body, headers=DELEGATE)
    assert status == 200, back
    assert s3.get_object(Bucket=BUCKET, Key=secret)["Body"].read() == b"secret", "the files stayed"
