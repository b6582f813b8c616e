"""Security regressions, idempotent replays: a request replayed under its Idempotency-Key vends
only what the caller holds at the time of the replay, never what it held when the key was first
used (after a revoke, or after the table's owner moved its data). Judged at the store (what the
replayed answer's credentials can read and write). From attack rounds 2 and 5
(docs/security.md); who may use a key and what is stored under it is in test_security_access.py.
"""

import json
import uuid

from lab import lab  # noqa: F401 (lab is a fixture; it puts ../s3 on the path)
from harness import BUCKET  # noqa: E402
from helpers import (  # noqa: E402
    DELEGATE,
    ROOT,
    create,
    has_credentials,
    key_of,
    namespace,
    ns_securable,
    reads,
    revoke,
    s3_with,
    table_securable,
    tables,
    warehouse_securable,
    writes,
)


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


def test_a_replay_after_create_was_revoked_vends_no_write_access(lab):
    """FINDING 1 (fails on 35df3e8 and HEAD). The replay of a createTable runs with no route
    check now, and `Catalog::replayed_table` answers read-write to any caller that can merely
    describe the table while it is unchanged (`unchanged && !overwrite` is tested before what
    the caller holds). Before the change the route rule (create on the namespace) refused the
    replay. Reproduction: P holds create on N and describe on the warehouse; P creates N.t with
    Idempotency-Key K; create is revoked (P's load of N.t now answers 403, a new create 403);
    P sends the same request with K again: 200 with fresh read-write STS credentials, which write
    into the table's location. Expected: no credentials beyond what P holds now (none here: it
    cannot even read the table)."""
    assert namespace(lab, ["f5"])[0] == 200
    name, creator, _ = lab.principal([("create", ns_securable(["f5"])), ("describe", warehouse_securable("lake"))])
    keyed = {**DELEGATE, "Idempotency-Key": str(uuid.uuid4())}
    status, first = create(lab, creator, ["f5"], "t", headers=keyed)
    assert status == 200 and has_credentials(first), first
    location = first["metadata"]["location"]
    revoke(lab, name, "create", ns_securable(["f5"]))
    assert lab.call(creator, "GET", f"{tables(lab, ['f5'])}/t", headers=DELEGATE)[0] == 403
    assert create(lab, creator, ["f5"], "t2")[0] == 403
    status, replayed = create(lab, creator, ["f5"], "t", headers=keyed)
    assert status in (200, 403), replayed
    planted = f"{key_of(location)}/data/after-revoke.parquet"
    if has_credentials(replayed):
        writes(s3_with(lab, replayed["config"]), planted)
    assert not lab.exists(BUCKET, planted), "a revoked creator's replay vended credentials that write the table"
    assert not has_credentials(replayed), "a caller that may not read the table was vended credentials for it"


def test_a_replay_vends_a_reader_no_more_than_a_load_does(lab):
    """FINDING 1, second face: with create revoked and read granted on the table, a load vends
    read-only credentials, the replay of the create read-write ones."""
    assert namespace(lab, ["f5b"])[0] == 200
    name, creator, _ = lab.principal([("create", ns_securable(["f5b"]))])
    keyed = {**DELEGATE, "Idempotency-Key": str(uuid.uuid4())}
    status, first = create(lab, creator, ["f5b"], "t", headers=keyed)
    assert status == 200 and has_credentials(first), first
    location = first["metadata"]["location"]
    revoke(lab, name, "create", ns_securable(["f5b"]))
    lab.ok(lab.admin, "POST", "/management/v1/grants",
           {"role": f"{name}-role", "privilege": "read", "securable": table_securable(["f5b"], "t")})
    status, loaded = lab.call(creator, "GET", f"{tables(lab, ['f5b'])}/t", headers=DELEGATE)
    assert status == 200 and not writes(s3_with(lab, loaded["config"]), f"{key_of(location)}/data/load.parquet")
    status, replayed = create(lab, creator, ["f5b"], "t", headers=keyed)
    assert status in (200, 403), replayed
    planted = f"{key_of(location)}/data/replay.parquet"
    if has_credentials(replayed):
        writes(s3_with(lab, replayed["config"]), planted)
    assert not lab.exists(BUCKET, planted), "the replay vended write access that a load does not"
