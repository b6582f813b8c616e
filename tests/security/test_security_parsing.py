"""What parsing may cost (issue 29): schemas are built only after a request is authorized, and only
within the schema limits; what a commit builds is reserved in the commit budget; an answer is never
stored for idempotent replay with the credentials it carried. Judged by effects: the server
process's peak memory (VmHWM), what the catalog and its database hold.

Before the fixes, one createTable of 1.3 MB from a principal holding nothing (a field with a
16 KiB name and 20,000 children) grew the server by about a gigabyte while its body was parsed,
before anything was decided; and a schema nested 123 lists deep was accepted, after which its
table answered 500 and the idempotency table held the vended credentials of its create.
"""

import contextlib
import json
import socket
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import Server
from lab import lab  # noqa: F401 (a fixture; it puts ../s3 on the path)
from harness import ADMIN_ID, ADMIN_SECRET, call, token_for  # noqa: E402

MIB = 1024 * 1024


def peak_rss(server) -> int:
    """The server process's peak resident memory so far (VmHWM), in bytes."""
    with open(f"/proc/{server.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@contextlib.contextmanager
def own_server(workdir, extra_env=None):
    """An icegate of its own (auth required, a local warehouse, a namespace `db`), so that its
    peak memory is what the test did to it. Yields (server, admin token); `server.db` is the
    namespace's path."""
    env = {
        "ICEGATE__AUTH__MODE": "required",
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID": ADMIN_ID,
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET": ADMIN_SECRET,
        **(extra_env or {}),
    }
    server = Server(workdir, [], env).start()
    try:
        admin = token_for(server, ADMIN_ID, ADMIN_SECRET)
        prefix = call(server, admin, "GET", "/v1/config")[1]["overrides"]["prefix"]
        assert call(server, admin, "POST", f"/v1/{prefix}/namespaces", {"namespace": ["db"]})[0] == 200
        server.db = f"/v1/{prefix}/namespaces/db"
        yield server, admin
    finally:
        server.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with own_server(tmp_path_factory.mktemp("parsing")) as running:
        yield running


def principal(server, admin, grants):
    name = f"p-{uuid.uuid4().hex[:8]}"
    status, created = call(server, admin, "POST", "/management/v1/principals", {"name": name})
    assert status == 201, created
    assert call(server, admin, "POST", "/management/v1/roles", {"name": f"{name}-role"})[0] == 201
    assert call(server, admin, "PUT", f"/management/v1/roles/{name}-role/principals/{name}")[0] == 204
    for privilege, securable in grants:
        grant = {"role": f"{name}-role", "privilege": privilege, "securable": securable}
        assert call(server, admin, "POST", "/management/v1/grants", grant)[0] == 201
    return token_for(server, created["client-id"], created["client-secret"])


VIEW_VERSION = {
    "version-id": 1, "schema-id": 0, "timestamp-ms": 1700000000000, "summary": {},
    "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}],
    "default-namespace": ["db"],
}


def amplifying_schema(name_bytes=16 * 1024, children=20_000):
    """The reported body's schema: one struct field with a long name over many children, whose
    full names (`<long>.<child>`) add up to name_bytes * children bytes once indexed."""
    fields = [{"id": i + 2, "name": f"c{i}", "required": False, "type": "int"} for i in range(children)]
    return {
        "type": "struct",
        "schema-id": 0,
        "fields": [{"id": 1, "name": "p" * name_bytes, "required": False, "type": {"type": "struct", "fields": fields}}],
    }


def in_parallel(requests):
    """Runs the (server, token, method, path, body) calls at once; their statuses."""
    statuses = [None] * len(requests)

    def run(i, request):
        statuses[i] = call(*request)[0]

    threads = [threading.Thread(target=run, args=(i, r)) for i, r in enumerate(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def test_a_principal_holding_nothing_cannot_make_the_server_build_a_schema(secured):
    server, admin = secured
    stranger = principal(server, admin, [])
    body = {"name": "t", "schema": amplifying_schema()}
    view = {**body, "view-version": VIEW_VERSION}
    assert len(json.dumps(body)) > MIB
    before = peak_rss(server)
    statuses = in_parallel(
        [
            (server, stranger, "POST", f"{server.db}/tables", body),
            (server, stranger, "POST", "/v1/nowhere/namespaces/nothing/tables", body),
            (server, stranger, "POST", f"{server.db}/views", view),
        ]
    )
    assert all(s in (403, 404) for s in statuses), statuses
    grown = peak_rss(server) - before
    print(f"stranger: peak grew by {grown / MIB:.1f} MiB")
    # The bodies themselves (three of 1.3 MB, read and copied once) are all that is held.
    assert grown < 48 * MIB, f"the server grew by {grown / MIB:.0f} MiB"


def test_an_authorized_create_past_the_limits_is_refused_before_it_is_built(secured):
    server, admin = secured
    creator = principal(server, admin, [("create", {"type": "namespace", "warehouse": "default", "namespace": ["db"]})])
    before = peak_rss(server)
    # The reported shape (a 16 KiB name), and one within the name limit whose full names alone
    # would be 40 MB (1,000-byte name over 40,000 children).
    for schema, limit in ((amplifying_schema(), "max_name_bytes"), (amplifying_schema(1000, 40_000), "max_full_name_bytes")):
        status, answer = call(server, creator, "POST", f"{server.db}/tables", {"name": "t", "schema": schema})
        assert status == 400, answer
        assert limit in answer["error"]["message"], answer
        update = {"requirements": [], "updates": [{"action": "add-schema", "schema": schema}]}
        status, _ = call(server, creator, "POST", f"{server.db}/tables/t", update)
        assert status in (403, 404), status
    grown = peak_rss(server) - before
    print(f"creator: peak grew by {grown / MIB:.1f} MiB")
    assert grown < 48 * MIB, f"the server grew by {grown / MIB:.0f} MiB"
    assert call(server, admin, "GET", f"{server.db}/tables/t")[0] == 404


def test_padding_a_schema_does_not_multiply_what_it_costs(secured):
    """A member the iceberg crate ignores, deep in a schema, is buffered again by its parser at
    every level above it (2 MB of zeros under 31 structs grew the server by a gigabyte): the
    walk counts what the parser would buffer, and refuses it before anything is built."""
    server, admin = secured
    creator = principal(server, admin, [("create", DB)])
    inner = {"type": "struct", "fields": [{"id": 1, "name": "leaf", "required": False, "type": "int"}], "x-pad": [0] * 1_000_000}
    for level in range(31):
        inner = {"type": "struct", "fields": [{"id": 100 + level, "name": f"l{level}", "required": False, "type": inner}]}
    schema = {"type": "struct", "schema-id": 0, "fields": inner["fields"]}
    before = peak_rss(server)
    status, answer = call(server, creator, "POST", f"{server.db}/tables", {"name": "padded", "schema": schema})
    grown = peak_rss(server) - before
    print(f"padded schema: peak grew by {grown / MIB:.1f} MiB")
    assert status == 400 and "max_build_bytes" in answer["error"]["message"], answer
    assert grown < 48 * MIB, f"the server grew by {grown / MIB:.0f} MiB"


def test_a_principal_holding_nothing_cannot_expand_its_request_bodies(secured):
    """Bodies a stranger sends to any endpoint are parsed before anything is decided; parsed,
    some shapes take ten to eighty times their text. Large bodies now take turns in a memory
    budget (server.request_memory_bytes), and a metrics report's metrics are never parsed."""
    server, admin = secured
    stranger = principal(server, admin, [])
    many = {f"k{i}": "" for i in range(200_000)}  # 2 MB of tiny properties
    report = {"report-type": "scan-report", "table-name": "t", "snapshot-id": 1, "metrics": {"x": [{"a": 0}] * 1_500_000}}
    requirement = {"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000", "x-pad": [0] * 1_000_000}
    before = peak_rss(server)
    statuses = in_parallel(
        [
            (server, stranger, "POST", f"{server.db}/tables/t/metrics", report),
            (server, stranger, "POST", f"{server.db}/tables/t/metrics", report),
            (server, stranger, "POST", server.db.rsplit("/", 1)[0], {"namespace": ["x"], "properties": many}),
            (server, stranger, "POST", server.db.rsplit("/", 1)[0], {"namespace": ["y"], "properties": many}),
            (server, stranger, "POST", f"{server.db}/tables/t", {"requirements": [requirement], "updates": []}),
        ]
    )
    grown = peak_rss(server) - before
    print(f"stranger's bodies: peak grew by {grown / MIB:.1f} MiB, answers {statuses}")
    assert all(s in (403, 404) for s in statuses), statuses
    # Two 15 MB reports, two 2 MB namespaces and a 2 MB commit: their bytes, and what parsing
    # takes, one large body at a time (before: 2.6 GB for the two reports alone).
    assert grown < 160 * MIB, f"the server grew by {grown / MIB:.0f} MiB"


@pytest.mark.parametrize("kind", ["tables", "views"])
def test_commits_take_turns_building_what_they_cost(tmp_path, kind):
    """Six commits at once, each adding a 40,000-column schema (a 2.6 MB body whose build takes
    tens of MB) to a tiny table or view of its own: nothing is built while the bodies are read,
    and each commit reserves what its schema will build (past the 16 MiB budget: it runs alone),
    not what its tiny document holds (a few KiB; views reserved nothing), so the server never
    builds six at once."""
    with own_server(tmp_path) as (server, admin):
        writer = principal(server, admin, [("create", DB), ("write", DB)])
        targets = tiny(server, writer, kind, 6)
        columns = 40_000
        schema = {
            "type": "struct",
            "schema-id": 1,
            "fields": [{"id": i, "name": f"column_number_{i}", "required": False, "type": "long"} for i in range(1, columns + 1)],
        }
        add = {"action": "add-schema", "schema": schema}
        if kind == "views":
            add["last-column-id"] = columns
        update = {"requirements": [], "updates": [add]}
        before = peak_rss(server)
        statuses = in_parallel([(server, writer, "POST", target, update) for target in targets])
        assert statuses == [200] * 6, statuses
        grown = peak_rss(server) - before
        print(f"{kind}, add-schema: peak grew by {grown / MIB:.1f} MiB")
        assert grown < 150 * MIB, f"{kind}: the server grew by {grown / MIB:.0f} MiB"
        for target in targets:
            schemas = call(server, writer, "GET", target)[1]["metadata"]["schemas"]
            assert sorted(len(schema["fields"]) for schema in schemas) == [1, columns], target


@pytest.mark.parametrize("kind", ["tables", "views"])
def test_large_property_commits_reserve_for_their_requests(tmp_path, kind):
    """Six 8 MiB set-properties commits at once, each on a tiny table (or view) of its own: each
    reserves its request four times over (past the 16 MiB budget, so it runs alone), not the few
    KiB of its document."""
    with own_server(tmp_path) as (server, admin):
        writer = principal(server, admin, [("create", DB), ("write", DB)])
        targets = tiny(server, writer, kind, 6)
        update = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v" * (8 * MIB)}}]}
        before = peak_rss(server)
        statuses = in_parallel([(server, writer, "POST", target, update) for target in targets])
        assert statuses == [200] * 6, statuses
        grown = peak_rss(server) - before
        print(f"{kind}, set-properties: peak grew by {grown / MIB:.1f} MiB")
        # Six bodies are read before any commit runs (6 x 8 MiB, and a copy of each); what the
        # commits build comes on top, one at a time. (On two cores the commits' CPU-bound steps
        # run at most two at a time anyway: before the fix this measured 158 and 184 MiB.)
        assert grown < 200 * MIB, f"{kind}: the server grew by {grown / MIB:.0f} MiB"
        for target in targets:
            properties = call(server, writer, "GET", target)[1]["metadata"]["properties"]
            assert len(properties["k"]) == 8 * MIB, target


DB = {"type": "namespace", "warehouse": "default", "namespace": ["db"]}


def tiny(server, writer, kind, count):
    """`count` tables or views of one column; their paths."""
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "x", "required": False, "type": "int"}]}
    targets = []
    for i in range(count):
        body = {"name": f"tiny_{i}", "schema": schema}
        if kind == "views":
            body["view-version"] = VIEW_VERSION
        status, created = call(server, writer, "POST", f"{server.db}/{kind}", body)
        assert status == 200, created
        targets.append(f"{server.db}/{kind}/tiny_{i}")
    return targets


def test_a_deeply_nested_schema_is_refused_and_nothing_is_stored_with_credentials(lab):
    """On a warehouse that vends STS credentials: the 123-lists schema is refused (400), and no
    answer kept for replay holds a secret, for that request or for a create that vended."""
    from helpers import DELEGATE, has_credentials, namespace, tables

    assert namespace(lab, ["deep"])[0] == 200
    element = "long"
    for level in range(123):
        element = {"type": "list", "element-id": 1000 + level, "element-required": False, "element": element}
    deep = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "d", "required": False, "type": element}]}
    headers = {**DELEGATE, "Idempotency-Key": str(uuid.uuid4())}
    status, answer = lab.call(lab.admin, "POST", tables(lab, ["deep"]), {"name": "d", "schema": deep}, headers=headers)
    assert status == 400 and "max_depth" in answer["error"]["message"], answer
    assert lab.call(lab.admin, "GET", f"{tables(lab, ['deep'])}/d")[0] == 404
    # A create that vends, with a key: its answer carries credentials, what is kept does not.
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "x", "required": False, "type": "long"}]}
    key = str(uuid.uuid4())
    status, created = lab.call(
        lab.admin, "POST", tables(lab, ["deep"]), {"name": "ok", "schema": schema}, headers={**DELEGATE, "Idempotency-Key": key}
    )
    assert status == 200 and has_credentials(created), created
    database = lab.server.workdir / "icegate-data" / "catalog.db"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT body FROM idempotency_keys WHERE body IS NOT NULL").fetchall()
    assert rows, "no answer was kept"
    kept = " ".join(row[0] for row in rows)
    assert created["config"]["s3.secret-access-key"] not in kept
    assert "s3.secret-access-key" not in kept and "s3.session-token" not in kept
    # The replay vends again.
    status, replayed = lab.call(
        lab.admin, "POST", tables(lab, ["deep"]), {"name": "ok", "schema": schema}, headers={**DELEGATE, "Idempotency-Key": key}
    )
    assert status == 200 and has_credentials(replayed), replayed


def test_slow_bodies_do_not_hold_request_slots(tmp_path):
    """Anonymous connections that send the start of a body and then nothing hold their request
    slot no longer than server.request_timeout (they held it for good, the body being read
    outside the timeout)."""
    env = {"ICEGATE__SERVER__REQUEST_TIMEOUT": "2s", "ICEGATE__SERVER__MAX_IN_FLIGHT_REQUESTS": "4"}
    with own_server(tmp_path, env) as (server, admin):
        stalled = []
        for _ in range(4):
            connection = socket.create_connection(("127.0.0.1", server.port))
            connection.sendall(
                b"POST /v1/oauth/tokens HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                b"Content-Length: 1000\r\n\r\ngrant_type=client_cred"
            )
            stalled.append(connection)
        try:
            time.sleep(3)
            status, _ = call(server, admin, "GET", "/v1/config")
            assert status == 200, f"a request slot is still held by a stalled body: {status}"
        finally:
            for connection in stalled:
                connection.close()


def test_a_large_body_to_the_token_endpoint_is_refused_unread(secured):
    server, _ = secured
    before = peak_rss(server)
    connection = socket.create_connection(("127.0.0.1", server.port))
    try:
        connection.sendall(
            b"POST /v1/oauth/tokens HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 16000000\r\n\r\n"
        )
        answer = connection.recv(4096).decode(errors="replace")
    finally:
        connection.close()
    assert answer.startswith("HTTP/1.1 413"), answer[:200]
    assert peak_rss(server) - before < 8 * MIB


def test_a_padded_metadata_file_is_refused_before_it_is_parsed(secured):
    """A registered file of 30 MB whose padding (outside its schemas) the parser buffers whole,
    twice (1.9 GB from 60 MB before): refused after a walk, four such registrations at once
    taking turns."""
    server, admin = secured
    creator = principal(server, admin, [("create", DB)])
    status, created = call(server, admin, "POST", f"{server.db}/tables", {"name": "pad_source", "schema": {
        "type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "x", "required": False, "type": "int"}]}})
    assert status == 200, created
    document = dict(created["metadata"])
    location = document["location"].rsplit("/", 1)[0] + "/padded"
    document["location"] = location
    document["table-uuid"] = str(uuid.uuid4())
    document["x-pad"] = [0] * 15_000_000
    path = location.removeprefix("file://") + "/metadata/00000-padded.metadata.json"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(document, separators=(",", ":")))
    register = {"name": "padded", "metadata-location": f"{location}/metadata/00000-padded.metadata.json"}
    before = peak_rss(server)
    statuses = in_parallel([(server, creator, "POST", f"{server.db}/register", register)] * 4)
    grown = peak_rss(server) - before
    print(f"padded registrations: peak grew by {grown / MIB:.1f} MiB, answers {statuses}")
    assert statuses == [400] * 4, statuses
    # The file's text, read and walked one registration at a time.
    assert grown < 160 * MIB, f"the server grew by {grown / MIB:.0f} MiB"
