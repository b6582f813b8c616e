"""Security regressions, credential vending: the credentials a create, load or registration vends
reach the locations of that one table and no others, read-write only where the caller may write.
A table registered from another table's metadata file gets credentials for its own locations only;
a create-only principal writes the tables it creates and nothing else. Judged at the store (what
the vended credentials read and write). From attack rounds 2 and 5 (docs/security.md).
"""

import json

from lab import lab  # noqa: F401 (lab is a fixture; it puts ../s3 on the path)
from helpers import (  # noqa: E402
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
    writes,
)


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


def test_a_creator_gets_write_access_to_what_it_creates_and_nothing_else(lab):
    assert namespace(lab, ["c5"])[0] == 200
    status, other = create(lab, lab.admin, ["c5"], "other")
    assert status == 200, other
    _, creator, _ = lab.principal([("create", ns_securable(["c5"]))])
    status, mine = create(lab, creator, ["c5"], "mine")
    assert status == 200 and has_credentials(mine), mine
    mine_location = mine["metadata"]["location"]
    assert writes(s3_with(lab, mine["config"]), f"{key_of(mine_location)}/data/ok.parquet")
    assert not writes(s3_with(lab, mine["config"]), f"{key_of(other['metadata']['location'])}/data/evil.parquet")
    # On the other table: it may see it (create on the namespace), not read, change or drop it.
    path = f"{tables(lab, ['c5'])}/other"
    assert lab.call(creator, "HEAD", path)[0] == 204
    assert lab.call(creator, "GET", path)[0] == 403
    assert lab.call(creator, "GET", f"{path}/credentials")[0] == 403
    commit = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"owned": "yes"}}]}
    assert lab.call(creator, "POST", path, commit)[0] == 403
    assert lab.call(creator, "DELETE", path)[0] == 403
    # Registering the other table's own metadata file under a new name is refused, as is
    # repointing it; neither vends credentials.
    register = f"/v1/{lab.prefix('lake')}/namespaces/c5/register"
    for body in ({"name": "stolen", "metadata-location": other["metadata-location"]},
                 {"name": "other", "metadata-location": mine["metadata-location"], "overwrite": True}):
        status, answer = lab.call(creator, "POST", register, body, headers=DELEGATE)
        assert status in (400, 403, 409) and not has_credentials(answer), (body, answer)
    assert lab.call(lab.admin, "GET", f"{tables(lab, ['c5'])}/stolen")[0] == 404
    assert lab.ok(lab.admin, "GET", path)["metadata-location"] == other["metadata-location"]
    # A view registered from a table's metadata file says nothing of the file's content.
    status, body = lab.call(creator, "POST", f"/v1/{lab.prefix('lake')}/namespaces/c5/register-view",
                            {"name": "peek", "metadata-location": other["metadata-location"]})
    assert status == 400 and other["metadata"]["table-uuid"] not in json.dumps(body), body
