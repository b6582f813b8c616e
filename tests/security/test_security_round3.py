"""Regression tests of the third attack round (docs/security.md): a staged create's reservation
ended early (by staging the name again, creating it elsewhere, or another principal staging it),
a table placed at its own namespace's directory, a staged create of an existing name. Judged at
the catalog (what exists, what was refused) and at the store."""

from lab import SCHEMA, lab  # noqa: F401 (lab is a fixture; it puts ../s3 on the path)
from harness import BUCKET  # noqa: E402
from test_security_round2 import (  # noqa: E402
    ROOT,
    create,
    has_credentials,
    key_of,
    namespace,
    ns_path,
    ns_securable,
    s3_with,
    tables,
)


def exists(lab, levels):
    return lab.call(lab.admin, "GET", f"/v1/{lab.prefix('lake')}/namespaces/{ns_path(levels)}")[0] == 200


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
