"""Security regressions, authorization in the service methods (issue 14 moved it there from the
HTTP layer's route rules): every catalog and management operation is decided by what the caller
holds now. A principal holding nothing is answered alike for existing and missing objects and
changes nothing; a reader of one table sees that table alone; a transaction touching a hidden table
changes nothing; cached decisions do not outlive a drop, rename or revoke; a warehouse admin stays
inside its warehouse; the warehouse listing shows only warehouses the caller holds something in.
Judged by status codes, what the catalog holds and what vended credentials can do. From attack
round 5 (docs/security.md).
"""

import uuid

from lab import SCHEMA, lab, profile  # noqa: F401 (lab is a fixture; it puts ../s3 on the path)
from harness import BUCKET  # noqa: E402
from helpers import (  # noqa: E402
    DELEGATE,
    create,
    error_type,
    has_credentials,
    key_of,
    namespace,
    ns_securable,
    revoke,
    s3_with,
    table_securable,
    tables,
    warehouse_securable,
    writes,
)


def view_body(name, levels):
    return {
        "name": name,
        "schema": SCHEMA,
        "view-version": {
            "version-id": 1, "timestamp-ms": 1, "schema-id": 0, "summary": {}, "default-namespace": levels,
            "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
        },
    }


def test_a_stranger_is_answered_alike_for_existing_and_missing_objects_and_changes_nothing(lab):
    """Every catalog operation of a principal with no grants: the answer for an existing
    namespace, table or view is the answer for a missing one (status, type, message up to the
    name), whatever the body, and nothing changes."""
    assert namespace(lab, ["s5"])[0] == 200
    status, table = create(lab, lab.admin, ["s5"], "t")
    assert status == 200, table
    prefix = lab.prefix("lake")
    lab.ok(lab.admin, "POST", f"/v1/{prefix}/namespaces/s5/views", view_body("v", ["s5"]))
    metadata_location = table["metadata-location"]
    _, stranger, _ = lab.principal([])

    def walk(ns):
        base = f"/v1/{prefix}/namespaces/{ns}"
        return [
            ("GET", base, None), ("HEAD", base, None),
            ("GET", f"/v1/{prefix}/namespaces?parent={ns}", None),
            ("POST", f"/v1/{prefix}/namespaces", {"namespace": [ns, "child"]}),
            ("DELETE", base, None),
            ("POST", f"{base}/properties", {"updates": {"a": "b"}, "removals": ["a"]}),
            ("GET", f"{base}/tables", None), ("GET", f"{base}/views", None),
            ("POST", f"{base}/tables", {"name": "x", "schema": SCHEMA}),
            ("POST", f"{base}/tables", {"name": "x", "schema": SCHEMA, "stage-create": True}),
            ("POST", f"{base}/register", {"name": "x", "metadata-location": metadata_location}),
            ("POST", f"{base}/register", {"name": "t", "metadata-location": metadata_location, "overwrite": True}),
            ("POST", f"{base}/views", view_body("x", [ns])),
            ("POST", f"{base}/register-view", {"name": "x", "metadata-location": metadata_location}),
            ("GET", f"{base}/tables/t", None), ("HEAD", f"{base}/tables/t", None),
            ("POST", f"{base}/tables/t", {"requirements": [], "updates": []}),
            ("POST", f"{base}/tables/t", {"requirements": [{"type": "assert-create"}], "updates": []}),
            ("DELETE", f"{base}/tables/t?purgeRequested=true", None),
            ("GET", f"{base}/tables/t/credentials", None),
            ("POST", f"{base}/tables/t/sign",
             {"region": "us-east-1", "uri": f"http://127.0.0.1/{BUCKET}/x", "method": "GET", "headers": {}}),
            ("POST", f"{base}/tables/t/metrics",
             {"report-type": "scan-report", "table-name": "t", "snapshot-id": 1, "filter": True, "schema-id": 0,
              "projected-field-ids": [], "projected-field-names": [], "metrics": {}}),
            ("GET", f"{base}/views/v", None), ("HEAD", f"{base}/views/v", None),
            ("POST", f"{base}/views/v", {"requirements": [], "updates": []}),
            ("DELETE", f"{base}/views/v", None),
            ("POST", f"/v1/{prefix}/tables/rename",
             {"source": {"namespace": [ns], "name": "t"}, "destination": {"namespace": [ns], "name": "t2"}}),
            ("POST", f"/v1/{prefix}/views/rename",
             {"source": {"namespace": [ns], "name": "v"}, "destination": {"namespace": [ns], "name": "v2"}}),
            ("POST", f"/v1/{prefix}/transactions/commit",
             {"table-changes": [{"identifier": {"namespace": [ns], "name": "t"}, "requirements": [], "updates": []}]}),
        ]

    for (method, path, body), (_, missing_path, missing_body) in zip(walk("s5"), walk("s5missing")):
        status, answer = lab.call(stranger, method, path, body, headers=DELEGATE)
        missing_status, missing = lab.call(stranger, method, missing_path, missing_body, headers=DELEGATE)
        assert status == missing_status and status in (403, 404), (method, path, status, answer, missing_status)
        assert error_type(answer) == error_type(missing), (method, path, answer, missing)
        if answer:
            assert answer["error"]["message"] == missing["error"]["message"].replace("s5missing", "s5"), (path, answer)
        assert not has_credentials(answer)
    # Nothing changed.
    after = lab.ok(lab.admin, "GET", f"{tables(lab, ['s5'])}/t")
    assert after["metadata-location"] == metadata_location
    assert lab.ok(lab.admin, "GET", f"{tables(lab, ['s5'])}")["identifiers"] == [{"namespace": ["s5"], "name": "t"}]
    assert lab.ok(lab.admin, "GET", f"/v1/{prefix}/namespaces/s5/views")["identifiers"] == [
        {"namespace": ["s5"], "name": "v"}]
    assert lab.call(lab.admin, "GET", f"/v1/{prefix}/namespaces/s5%1Fchild")[0] == 404
    # The stranger's view of the server: nothing, and no warehouse by any name.
    assert lab.ok(stranger, "GET", "/management/v1/warehouses")["warehouses"] == []
    for name in ("lake", "no-such-warehouse"):
        status, body = lab.call(stranger, "GET", f"/v1/config?warehouse={name}")
        assert status == 404 and name in body["error"]["message"], body
        assert lab.call(stranger, "GET", f"/management/v1/warehouses/{name}")[0] == 404
        assert lab.call(stranger, "DELETE", f"/management/v1/warehouses/{name}")[0] == 404
    assert lab.ok(lab.admin, "GET", "/management/v1/warehouses/lake")["name"] == "lake"


def test_a_reader_of_one_table_sees_that_table_alone_and_only_reads_it(lab):
    assert namespace(lab, ["r5"])[0] == 200
    status, table = create(lab, lab.admin, ["r5"], "t")
    assert status == 200, table
    assert create(lab, lab.admin, ["r5"], "secret")[0] == 200
    prefix = lab.prefix("lake")
    lab.ok(lab.admin, "POST", f"/v1/{prefix}/namespaces/r5/views", view_body("v", ["r5"]))
    assert namespace(lab, ["r5", "child"])[0] == 200
    _, reader, _ = lab.principal([("read", table_securable(["r5"], "t"))])
    # Listings are filtered to what it holds something on.
    assert lab.ok(reader, "GET", tables(lab, ["r5"]))["identifiers"] == [{"namespace": ["r5"], "name": "t"}]
    assert lab.ok(reader, "GET", f"/v1/{prefix}/namespaces/r5/views")["identifiers"] == []
    assert ["r5"] in lab.ok(reader, "GET", f"/v1/{prefix}/namespaces")["namespaces"]
    assert lab.ok(reader, "GET", f"/v1/{prefix}/namespaces?parent=r5")["namespaces"] == []
    # Other objects in the namespace are answered as missing ones are.
    for method in ("GET", "HEAD"):
        assert lab.call(reader, method, f"{tables(lab, ['r5'])}/secret")[0] == 404
        assert lab.call(reader, method, f"/v1/{prefix}/namespaces/r5/views/v")[0] == 404
    # Changes need more than read: refused, nothing changed.
    path = f"{tables(lab, ['r5'])}/t"
    commit = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"owned": "yes"}}]}
    assert lab.call(reader, "POST", path, commit)[0] == 403
    assert lab.call(reader, "DELETE", path)[0] == 403
    rename = {"source": {"namespace": ["r5"], "name": "t"}, "destination": {"namespace": ["r5"], "name": "mine"}}
    assert lab.call(reader, "POST", f"/v1/{prefix}/tables/rename", rename)[0] == 403
    assert lab.call(reader, "POST", f"/v1/{prefix}/namespaces/r5/properties", {"updates": {"a": "b"}})[0] == 403
    assert lab.call(reader, "DELETE", f"/v1/{prefix}/namespaces/r5")[0] == 403
    assert lab.call(reader, "POST", f"/v1/{prefix}/namespaces", {"namespace": ["r5", "mine"]})[0] == 403
    assert lab.call(reader, "POST", tables(lab, ["r5"]), {"name": "mine", "schema": SCHEMA})[0] == 403
    assert lab.ok(lab.admin, "GET", path)["metadata-location"] == table["metadata-location"]
    # Credentials from the credentials endpoint and from a load read, never write.
    location = table["metadata"]["location"]
    status, vended = lab.call(reader, "GET", f"{path}/credentials")
    assert status == 200 and vended["storage-credentials"], vended
    assert not writes(s3_with(lab, vended["storage-credentials"][0]["config"]), f"{key_of(location)}/data/a.parquet")
    status, loaded = lab.call(reader, "GET", path, headers=DELEGATE)
    assert status == 200 and has_credentials(loaded), loaded
    assert not writes(s3_with(lab, loaded["config"]), f"{key_of(location)}/data/b.parquet")
    assert not lab.exists(BUCKET, f"{key_of(location)}/data/a.parquet")
    assert not lab.exists(BUCKET, f"{key_of(location)}/data/b.parquet")


def test_a_transaction_touching_a_hidden_table_changes_nothing(lab):
    assert namespace(lab, ["x5"])[0] == 200
    for name in ("mine", "hidden"):
        assert create(lab, lab.admin, ["x5"], name)[0] == 200
    _, writer, _ = lab.principal([("write", table_securable(["x5"], "mine"))])
    before = lab.ok(lab.admin, "GET", f"{tables(lab, ['x5'])}/mine")["metadata-location"]
    answers = []
    for hidden in ("hidden", "missing"):
        change = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"a": "1"}}]}
        body = {"table-changes": [{"identifier": {"namespace": ["x5"], "name": "mine"}, **change},
                                  {"identifier": {"namespace": ["x5"], "name": hidden}, **change}]}
        status, answer = lab.call(writer, "POST", f"/v1/{lab.prefix('lake')}/transactions/commit", body)
        answers.append((status, error_type(answer), answer["error"]["message"].replace(hidden, "X")))
    assert answers[0] == answers[1] and answers[0][0] == 404, answers
    assert lab.ok(lab.admin, "GET", f"{tables(lab, ['x5'])}/mine")["metadata-location"] == before


def test_cached_decisions_do_not_survive_a_drop_rename_revoke_or_namespace_drop(lab):
    """Decisions are cached by name (auth.authorization_cache_ttl, 2 s by default): each of these
    follows at once a request that put the decision in the cache."""
    prefix = lab.prefix("lake")
    assert namespace(lab, ["k5"])[0] == 200
    for name in ("dropped", "renamed"):
        assert create(lab, lab.admin, ["k5"], name)[0] == 200
    lab.ok(lab.admin, "POST", f"/v1/{prefix}/namespaces/k5/views", view_body("v", ["k5"]))
    _, reader, _ = lab.principal([
        ("read", table_securable(["k5"], "dropped")),
        ("read", table_securable(["k5"], "renamed")),
        ("read", {"type": "view", "warehouse": "lake", "namespace": ["k5"], "name": "v"}),
    ])
    path = tables(lab, ["k5"])
    # Drop and make anew under the same name: the grant stayed with the dropped table.
    assert lab.call(reader, "GET", f"{path}/dropped")[0] == 200
    assert lab.call(lab.admin, "DELETE", f"{path}/dropped")[0] == 204
    assert create(lab, lab.admin, ["k5"], "dropped")[0] == 200
    assert lab.call(reader, "GET", f"{path}/dropped")[0] == 404
    # Rename away and make anew: the grant follows the renamed table.
    assert lab.call(reader, "GET", f"{path}/renamed")[0] == 200
    rename = {"source": {"namespace": ["k5"], "name": "renamed"}, "destination": {"namespace": ["k5"], "name": "moved"}}
    assert lab.call(lab.admin, "POST", f"/v1/{prefix}/tables/rename", rename)[0] == 204
    assert create(lab, lab.admin, ["k5"], "renamed")[0] == 200
    assert lab.call(reader, "GET", f"{path}/renamed")[0] == 404
    assert lab.call(reader, "GET", f"{path}/moved")[0] == 200
    # Revoke.
    name = lab.ok(reader, "GET", "/management/v1/whoami")["principal"]
    revoke(lab, name, "read", table_securable(["k5"], "moved"))
    assert lab.call(reader, "GET", f"{path}/moved")[0] == 404
    # A view dropped and made anew.
    assert lab.call(reader, "GET", f"/v1/{prefix}/namespaces/k5/views/v")[0] == 200
    assert lab.call(lab.admin, "DELETE", f"/v1/{prefix}/namespaces/k5/views/v")[0] == 204
    lab.ok(lab.admin, "POST", f"/v1/{prefix}/namespaces/k5/views", view_body("v", ["k5"]))
    assert lab.call(reader, "GET", f"/v1/{prefix}/namespaces/k5/views/v")[0] == 404
    # A namespace dropped and made anew.
    assert namespace(lab, ["k5b"])[0] == 200
    _, creator, _ = lab.principal([("create", ns_securable(["k5b"]))])
    assert lab.call(creator, "GET", tables(lab, ["k5b"]))[0] == 200
    assert lab.call(lab.admin, "DELETE", f"/v1/{prefix}/namespaces/k5b")[0] == 204
    assert namespace(lab, ["k5b"])[0] == 200
    assert lab.call(creator, "GET", tables(lab, ["k5b"]))[0] == 404
    assert create(lab, creator, ["k5b"], "t")[0] == 404
    assert lab.call(lab.admin, "GET", f"{tables(lab, ['k5b'])}/t")[0] == 404


def test_a_warehouse_admin_stays_inside_its_warehouse(lab):
    name = f"w5-{uuid.uuid4().hex[:6]}"
    wh_profile = profile(lab.front, lab.moto.icegate_keys)
    lab.ok(lab.admin, "POST", "/management/v1/warehouses",
           {"name": name, "storage-root": f"s3://{BUCKET}/{name}", "storage-profile": wh_profile})
    admin_name, wadmin, _ = lab.principal([("admin", warehouse_securable(name))])
    _, victim, _ = lab.principal([])
    victim_name = lab.ok(victim, "GET", "/management/v1/whoami")["principal"]
    assert lab.call(wadmin, "GET", f"/management/v1/warehouses/{name}")[0] == 200
    # Other warehouses are answered as missing ones are.
    for other in ("lake", "signed", "no-such-warehouse"):
        assert lab.call(wadmin, "GET", f"/management/v1/warehouses/{other}")[0] == 404
        assert lab.call(wadmin, "DELETE", f"/management/v1/warehouses/{other}")[0] == 404
        assert lab.call(wadmin, "PUT", f"/management/v1/warehouses/{other}/storage-profile", wh_profile)[0] == 404
        grant = {"role": f"{admin_name}-role", "privilege": "admin", "securable": warehouse_securable(other)}
        assert lab.call(wadmin, "POST", "/management/v1/grants", grant)[0] == 404
        assert lab.call(wadmin, "GET", f"/management/v1/grants/on?type=warehouse&warehouse={other}")[0] == 404
    # Nothing server-wide.
    assert lab.call(wadmin, "POST", "/management/v1/warehouses",
                    {"name": f"{name}x", "storage-root": f"s3://{BUCKET}/{name}x", "storage-profile": wh_profile})[0] == 403
    server_grant = {"role": f"{admin_name}-role", "privilege": "admin", "securable": {"type": "server"}}
    assert lab.call(wadmin, "POST", "/management/v1/grants", server_grant)[0] == 403
    assert lab.call(wadmin, "GET", "/management/v1/grants/on?type=server")[0] == 403
    for method, path in (("GET", "/management/v1/principals"), ("GET", f"/management/v1/principals/{victim_name}"),
                         ("POST", f"/management/v1/principals/{victim_name}/rotate-secret"),
                         ("DELETE", f"/management/v1/principals/{victim_name}"), ("GET", "/management/v1/roles"),
                         ("PUT", f"/management/v1/roles/admin/principals/{admin_name}"),
                         ("GET", "/management/v1/grants?role=admin"),
                         ("GET", f"/management/v1/grants?principal={victim_name}")):
        assert lab.call(wadmin, method, path)[0] == 403, (method, path)
    assert lab.ok(wadmin, "GET", "/management/v1/whoami")["server-privileges"] == []
    assert lab.ok(victim, "GET", "/management/v1/whoami")["principal"] == victim_name  # still there
    # A warehouse deleted and made anew under its name is another warehouse.
    assert lab.call(wadmin, "DELETE", f"/management/v1/warehouses/{name}")[0] == 204
    lab.ok(lab.admin, "POST", "/management/v1/warehouses",
           {"name": name, "storage-root": f"s3://{BUCKET}/{name}-2", "storage-profile": wh_profile})
    assert lab.call(wadmin, "GET", f"/management/v1/warehouses/{name}")[0] == 404


def test_listing_warehouses_shows_only_those_the_caller_holds_something_in(lab):
    """FINDING 2 (fails on 35df3e8 and HEAD). `Catalog::list_warehouses` lists every warehouse
    when `ctx.holds(server, describe)` is `Some`, but `holds` is also `Some` for the `Inside`
    outcome (the caller holds something anywhere below the server), so any principal with one
    grant anywhere sees every warehouse: names, ids (the /v1 prefixes) and storage roots. The
    old rule filtered to `Visibility::HeldBy` unless the caller held describe on the server
    itself. Reproduction: a principal holding only read on one table in `lake` calls
    GET /management/v1/warehouses: it lists `default`, `lake`, `signed` (and every other
    warehouse) while GET /management/v1/warehouses/signed answers it 404."""
    assert namespace(lab, ["l5"])[0] == 200
    assert create(lab, lab.admin, ["l5"], "t")[0] == 200
    _, reader, _ = lab.principal([("read", table_securable(["l5"], "t"))])
    assert lab.call(reader, "GET", "/management/v1/warehouses/signed")[0] == 404
    listed = lab.ok(reader, "GET", "/management/v1/warehouses")["warehouses"]
    names = sorted(w["name"] for w in listed)
    assert names == ["lake"], f"a reader of one table in lake is shown every warehouse: {names}"
    assert all(w["storage-profile"].get("access-key-id") is None for w in listed)
