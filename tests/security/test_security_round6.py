"""Regression tests of the sixth attack round (docs/security.md): the new unregisterTable, and a
namespace dropped while staged creates in it still hold their locations. Judged by effects: what
the catalog holds, and what vended credentials can do at the store.

Before the fixes, the unregistered table's metadata file was registered again by a principal that
could only create in its namespace, which then held read-write credentials for the table's
files.
"""

from lab import SCHEMA, lab  # noqa: F401 (lab is a fixture; it puts ../s3 on the path)
from harness import BUCKET  # noqa: E402
from test_security_round2 import (  # noqa: E402
    DELEGATE,
    ROOT,
    create,
    has_credentials,
    key_of,
    namespace,
    ns_securable,
    s3_with,
    table_securable,
    tables,
)


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
