"""Access reviews through a real client: the effective-access report of a scope lists exactly the
grants set up for it (with the grant path, and when PyIceberg's requests last used each), as
JSON and CSV, to reviewers only; a review campaign revokes a line and the principal's PyIceberg
session loses the table at once; a reviewer cannot take away a grant above its scope, leave
principals out of roles, attest its own access or decide twice; the campaign's decisions and
outcome are in the audit trail; and a later campaign's diff shows what was revoked."""

import csv
import io
import json
import time
import urllib.error
import urllib.parse
import urllib.request

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError

from test_audit import search, status_of
from test_auth_clients import ADMIN_ID, ADMIN_SECRET, SCHEMA, admin_call, admin_token, secured  # noqa: F401


def principal(server, token, name, role, privilege, securable, expires_at_ms=None):
    """A principal in a role of its own holding `privilege` on `securable`; returns its token."""
    created = admin_call(server, token, "POST", "/management/v1/principals", {"name": name})
    admin_call(server, token, "POST", "/management/v1/roles", {"name": role})
    admin_call(server, token, "PUT", f"/management/v1/roles/{role}/principals/{name}")
    grant = {"role": role, "privilege": privilege, "securable": securable}
    if expires_at_ms:
        grant["expires-at-ms"] = expires_at_ms
    admin_call(server, token, "POST", "/management/v1/grants", grant)
    data = f"grant_type=client_credentials&client_id={created['client-id']}&client_secret={created['client-secret']}"
    with urllib.request.urlopen(
        urllib.request.Request(f"{server.uri}/v1/oauth/tokens", data=data.encode()), timeout=10
    ) as r:
        return json.load(r)["access_token"], created


def report(server, token, **scope):
    return admin_call(server, token, "GET", f"/management/v1/access-reviews/effective?{urllib.parse.urlencode(scope)}")


def shape(lines):
    return {
        (l["principal"], l["role"], l["privilege"], l["securable"]["type"], l["securable"].get("name"), l["relation"])
        for l in lines
    }


def raw(server, token, path):
    request = urllib.request.Request(f"{server.uri}{path}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Content-Type"], response.read().decode()


def setup(server):
    admin = load_catalog("admin", type="rest", uri=server.uri, warehouse="default", credential=f"{ADMIN_ID}:{ADMIN_SECRET}")
    admin.create_namespace("db")
    admin.create_namespace("other")
    admin.create_table("db.shared", schema=SCHEMA).append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    admin.create_table("other.t", schema=SCHEMA)
    token = admin_token(server)
    table = {"type": "table", "warehouse": "default", "namespace": ["db"], "name": "shared"}
    _, reader = principal(server, token, "reader", "readers", "read", table)
    soon = int(time.time() * 1000) + 2 * 86_400_000
    writer_token, _ = principal(
        server, token, "writer", "writers", "write", {"type": "namespace", "warehouse": "default", "namespace": ["db"]}, soon
    )
    outsider_token, _ = principal(
        server, token, "outsider", "outsiders", "read", {"type": "namespace", "warehouse": "default", "namespace": ["other"]}
    )
    reviewer_token, _ = principal(server, token, "reviewer", "reviewers", "review", {"type": "warehouse", "warehouse": "default"})
    reader_catalog = load_catalog(
        "reader", type="rest", uri=server.uri, warehouse="default", credential=f"{reader['client-id']}:{reader['client-secret']}"
    )
    return token, reader_catalog, writer_token, outsider_token, reviewer_token


def test_the_effective_access_report_matches_the_grants_and_their_use(secured):
    token, reader, writer_token, outsider_token, reviewer_token = setup(secured)
    assert reader.load_table("db.shared").scan().to_arrow().num_rows == 2

    # A namespace's report: grants above it, on it and inside it; not the other namespace's.
    lines = report(secured, reviewer_token, warehouse="default", namespace="db")["lines"]
    assert shape(lines) == {
        ("admin", "admin", "admin", "server", None, "above"),
        ("reviewer", "reviewers", "review", "warehouse", None, "above"),
        ("writer", "writers", "write", "namespace", None, "on"),
        ("reader", "readers", "read", "table", "shared", "inside"),
    }, lines
    by = {l["principal"]: l for l in lines}
    # PyIceberg's load was decided by the reader's grant: its use is in the report; the writer
    # has not used its grant.
    assert by["reader"]["last-used-at-ms"] is not None
    assert by["writer"]["last-used-at-ms"] is None
    assert by["writer"]["implies"] == ["read", "write"]
    assert "review" not in by["admin"]["implies"] and "drop" in by["admin"]["implies"]
    # The warehouse's report has the other namespace's grant too; the table's only what reaches it.
    assert ("outsider", "outsiders", "read", "namespace", None, "inside") in shape(
        report(secured, reviewer_token, warehouse="default")["lines"]
    )
    assert {l["principal"] for l in report(secured, reviewer_token, warehouse="default", namespace="db", table="shared")["lines"]} == {
        "admin", "reviewer", "writer", "reader"
    }
    # Expiring within a week: the writer's grant alone. Dormant for 0 days: all but what was used
    # this very millisecond — the reader's use is recent, so a 1-day window excludes it.
    expiring = report(secured, reviewer_token, warehouse="default", namespace="db", expiringDays=7)["lines"]
    assert [l["principal"] for l in expiring] == ["writer"]
    dormant = {l["principal"] for l in report(secured, reviewer_token, warehouse="default", namespace="db", dormantDays=1)["lines"]}
    assert "reader" not in dormant and "admin" not in dormant

    # CSV: the same lines, a header, a row each.
    kind, text = raw(secured, reviewer_token, "/management/v1/access-reviews/effective?warehouse=default&namespace=db&format=csv")
    assert kind.startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {(r["principal"], r["privilege"], r["relation"]) for r in rows} == {
        (l["principal"], l["privilege"], l["relation"]) for l in lines
    }
    assert next(r for r in rows if r["principal"] == "reader")["last_used_at"].endswith("Z")

    # Not a reviewer: the writer may see the namespace (403), the outsider may not (404).
    assert status_of(secured, writer_token, "GET", "/management/v1/access-reviews/effective?warehouse=default&namespace=db") == 403
    assert status_of(secured, outsider_token, "GET", "/management/v1/access-reviews/effective?warehouse=default&namespace=db") == 404
    # The server's report is for reviewers of the server.
    assert status_of(secured, reviewer_token, "GET", "/management/v1/access-reviews/effective") == 403
    assert len(report(secured, token)["lines"]) >= 5
    # Reading the report is recorded, whatever the warehouse says of reads.
    assert search(secured, token, action="effectiveAccess", principal="reviewer")


def test_a_campaign_revokes_a_line_and_the_principal_loses_access_at_once(secured):
    token, reader, writer_token, outsider_token, reviewer_token = setup(secured)
    assert reader.load_table("db.shared").scan().to_arrow().num_rows == 2

    campaign = admin_call(
        secured, reviewer_token, "POST", "/management/v1/access-reviews",
        {"scope": {"warehouse": "default", "namespace": ["db"]}, "description": "Q4 review of db"},
    )
    number = {l["principal"]: l["line"] for l in campaign["lines"]}
    assert campaign["summary"] == {"attested": 0, "revoked": 0, "undecided": 4}
    path = f"/management/v1/access-reviews/{campaign['id']}"

    def decide(who, line, decision):
        return status_of(secured, who, "POST", f"{path}/decisions", {"decisions": [{"line": line, "decision": decision}]})

    # Above its scope: the server admin's grant is not this reviewer's to take away; leaving a
    # role needs review on the server; its own access another reviewer attests.
    assert decide(reviewer_token, number["admin"], "revoke-grant") == 403
    assert decide(reviewer_token, number["reader"], "revoke-membership") == 403
    assert decide(reviewer_token, number["reviewer"], "attest") == 403
    assert admin_call(secured, token, "GET", "/management/v1/principals")  # the admin is still admin
    # Not a reviewer of the scope: the campaign is not there for it.
    assert status_of(secured, outsider_token, "GET", path) == 404
    assert decide(outsider_token, number["reader"], "revoke-grant") == 404

    done = admin_call(secured, reviewer_token, "POST", f"{path}/decisions", {"decisions": [
        {"line": number["writer"], "decision": "attest", "comment": "owns the pipeline"},
        {"line": number["reader"], "decision": "revoke-grant", "comment": "left the team"},
    ]})
    assert done["decided"] == [{"line": number["writer"], "revoked": "none"}, {"line": number["reader"], "revoked": "removed"}]
    # At once: the reader's session no longer finds the table.
    with pytest.raises(NoSuchTableError):
        reader.load_table("db.shared")
    assert decide(reviewer_token, number["reader"], "attest") == 409  # decided already

    state = admin_call(secured, reviewer_token, "GET", path)
    assert state["summary"] == {"attested": 1, "revoked": 1, "undecided": 2}
    decided = {l["principal"]: l for l in state["lines"]}
    assert (decided["reader"]["decision"], decided["reader"]["decided-by"], decided["reader"]["comment"]) == (
        "revoke-grant", "reviewer", "left the team"
    )
    closed = admin_call(secured, reviewer_token, "POST", f"{path}/close")
    assert closed["closed-by"] == "reviewer"
    assert decide(token, number["admin"], "attest") == 409  # closed

    # The trail: each decision with what it revoked, and the campaign's outcome.
    records = [r["record"] for r in search(secured, token, principal="reviewer") if r["record"]["outcome"] == "applied"]
    changes = [(r["operation"], r["change"].get("decision"), r["change"].get("revoked")) for r in records]
    assert changes == [
        ("createAccessReview", None, None),
        ("decideAccessReview", "attest", None),
        ("decideAccessReview", "revoke-grant", "removed"),
        ("closeAccessReview", None, None),
    ], changes
    assert records[-1]["change"]["outcome"] == {"attest": 1, "revoke-grant": 1, "undecided": 2}

    # The next campaign, compared with this one: the reader's access is gone, nothing else moved.
    later = admin_call(secured, token, "POST", "/management/v1/access-reviews", {"scope": {"warehouse": "default", "namespace": "db"}})
    diff = admin_call(secured, token, "GET", f"/management/v1/access-reviews/{later['id']}/diff?against={campaign['id']}")
    assert [l["principal"] for l in diff["removed"]] == ["reader"]
    assert diff["added"] == [] and diff["changed"] == [] and diff["unchanged"] == 3
    listed = admin_call(secured, reviewer_token, "GET", "/management/v1/access-reviews")["reviews"]
    assert [r["id"] for r in listed] == [later["id"], campaign["id"]]
    assert status_of(secured, outsider_token, "GET", "/management/v1/access-reviews") == 200
    assert admin_call(secured, outsider_token, "GET", "/management/v1/access-reviews")["reviews"] == []


def test_review_is_granted_by_server_admins_only(secured):
    token = setup(secured)[0]
    # A warehouse admin grants most things there, but not review.
    wadmin, _ = principal(secured, token, "wadmin", "wadmins", "admin", {"type": "warehouse", "warehouse": "default"})
    review = {"role": "wadmins", "privilege": "review", "securable": {"type": "warehouse", "warehouse": "default"}}
    assert status_of(secured, wadmin, "POST", "/management/v1/grants", review) == 403
    # Holding admin on the warehouse does not make it a reviewer of it.
    assert status_of(secured, wadmin, "GET", "/management/v1/access-reviews/effective?warehouse=default") == 403
    assert status_of(secured, token, "POST", "/management/v1/grants", review) == 200
    assert status_of(secured, wadmin, "GET", "/management/v1/access-reviews/effective?warehouse=default") == 200


def test_reviewers_cannot_take_away_what_only_server_admins_give(secured):
    token = setup(secured)[0]
    auditor, _ = principal(secured, token, "auditor", "auditors", "audit", {"type": "warehouse", "warehouse": "default"})
    server_reviewer, _ = principal(secured, token, "chief-reviewer", "chief-reviewers", "review", {"type": "server"})
    # A reviewer of the warehouse: its campaign lists the auditor's grant, which it cannot revoke.
    whrev_token, _ = principal(secured, token, "wh-reviewer", "wh-reviewers", "review", {"type": "warehouse", "warehouse": "default"})
    campaign = admin_call(secured, whrev_token, "POST", "/management/v1/access-reviews", {"scope": {"warehouse": "default"}})
    number = {(l["principal"], l["privilege"]): l["line"] for l in campaign["lines"]}
    path = f"/management/v1/access-reviews/{campaign['id']}/decisions"
    for line in (number[("auditor", "audit")], number[("reviewer", "review")]):
        assert status_of(secured, whrev_token, "POST", path, {"decisions": [{"line": line, "decision": "revoke-grant"}]}) == 403
    # A reviewer of the server may take principals out of roles, but not out of the admins'.
    server_campaign = admin_call(secured, server_reviewer, "POST", "/management/v1/access-reviews", {"scope": {}})
    admin_line = next(l["line"] for l in server_campaign["lines"] if l["principal"] == "admin" and l["privilege"] == "admin")
    server_path = f"/management/v1/access-reviews/{server_campaign['id']}/decisions"
    assert status_of(secured, server_reviewer, "POST", server_path,
                     {"decisions": [{"line": admin_line, "decision": "revoke-membership"}]}) == 403
    assert status_of(secured, server_reviewer, "POST", server_path,
                     {"decisions": [{"line": admin_line, "decision": "revoke-grant"}]}) == 403
    # What they decided nothing about is still there: the auditor reads, the admin administers.
    assert status_of(secured, auditor, "GET", "/management/v1/audit?warehouse=default&pageSize=1") == 200
    assert admin_call(secured, token, "GET", "/management/v1/principals")
    # Free text is bounded and printable.
    assert status_of(secured, whrev_token, "POST", "/management/v1/access-reviews",
                     {"scope": {"warehouse": "default"}, "description": "x" * 5000}) == 400
    assert status_of(secured, whrev_token, "POST", path,
                     {"decisions": [{"line": number[("writer", "write")], "decision": "attest", "comment": "a\u0000b"}]}) == 400
