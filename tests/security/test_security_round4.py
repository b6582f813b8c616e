"""Regression tests of the fourth attack round (docs/security.md): a dropped table's locations
(and a staged create's, once its table was made and dropped) freed while credentials vended for
them still worked; a view taking a staged table's reservation; a staged create whose
`write.data.path` holds its base refused at its own commit. Judged at the catalog."""

from lab import SCHEMA, lab, staged_commit  # noqa: F401 (lab is a fixture; it puts ../s3 on the path)
from test_security_round2 import ROOT, create, has_credentials, namespace, ns_path, ns_securable, tables  # noqa: E402


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
