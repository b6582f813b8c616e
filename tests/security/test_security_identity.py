"""Identity (issue 29): the token endpoint, open to anyone, cannot be used to spend the server's
CPU, and a rotated secret ends the tokens issued under the old one. Judged by effects: the server
process's CPU time, the answers of authenticated requests while the endpoint is flooded, which
tokens still work.

Before the fixes, every attempt with a random client id ran Argon2id (19 MiB, t = 2) on the
async workers: 32 anonymous connections made authenticated requests take 1.3 s (from ~3 ms), 96
made them time out; and a token issued before a rotation kept working until it expired.

The external-issuer items (claims joining only roles made claimable for their issuer; principals
named by the issuer's subject) are in the HTTP suite: crates/icegate-api/tests/http/oidc.rs.
"""

import os
import statistics
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

from conftest import Server
from lab import lab  # noqa: F401 (puts ../s3 on the path)
from harness import ADMIN_ID, ADMIN_SECRET, call, token_for  # noqa: E402


def cpu_seconds(server) -> float:
    """User and system CPU time the server process has used so far."""
    with open(f"/proc/{server.process.pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    env = {
        "ICEGATE__AUTH__MODE": "required",
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID": ADMIN_ID,
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET": ADMIN_SECRET,
        # The flood must not be shed by the in-flight bound: it has to reach the endpoint.
        "ICEGATE__SERVER__MAX_IN_FLIGHT_REQUESTS": "0",
    }
    server = Server(tmp_path_factory.mktemp("identity"), [], env).start()
    try:
        yield server, token_for(server, ADMIN_ID, ADMIN_SECRET)
    finally:
        server.stop()


def refused_token_request(server) -> int:
    data = f"grant_type=client_credentials&client_id=ig-{uuid.uuid4().hex}&client_secret={uuid.uuid4().hex}".encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{server.uri}/v1/oauth/tokens", data=data), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_refused_token_requests_cost_the_server_little_cpu(secured):
    server, _ = secured
    statuses = []
    lock = threading.Lock()

    def flood(n):
        for _ in range(n):
            status = refused_token_request(server)
            with lock:
                statuses.append(status)

    before = cpu_seconds(server)
    threads = [threading.Thread(target=flood, args=(100,)) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spent = cpu_seconds(server) - before
    print(f"1,600 refused token requests: {spent:.2f} s of server CPU")
    assert statuses.count(401) == 1600, {s: statuses.count(s) for s in set(statuses)}
    # Argon2id would be at least 1,600 x ~20 ms = 32 s of CPU; a keyed hash is microseconds.
    assert spent < 8, f"1,600 refused token requests took {spent:.1f} s of the server's CPU"


def test_authenticated_requests_keep_their_latency_while_the_token_endpoint_is_flooded(secured):
    """Coarse (the benchmark, scripts/bench-token-flood.sh, measures it): 32 anonymous connections
    flooding the token endpoint no longer push authenticated requests into seconds."""
    server, admin = secured
    stop = threading.Event()

    def flood():
        while not stop.is_set():
            refused_token_request(server)

    flooders = [threading.Thread(target=flood) for _ in range(32)]
    for t in flooders:
        t.start()
    try:
        time.sleep(0.5)
        latencies = []
        for _ in range(40):
            started = time.monotonic()
            status, _ = call(server, admin, "GET", "/v1/config")
            latencies.append(time.monotonic() - started)
            assert status == 200
    finally:
        stop.set()
        for t in flooders:
            t.join()
    median = statistics.median(latencies)
    print(f"authenticated requests under the flood: median {median * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms")
    assert median < 0.5, f"authenticated requests took {median:.2f} s (median) under the flood"


def test_a_rotated_secret_ends_the_tokens_issued_under_the_old_one(secured):
    server, admin = secured
    status, created = call(server, admin, "POST", "/management/v1/principals", {"name": "rotating"})
    assert status == 201, created
    old = token_for(server, created["client-id"], created["client-secret"])
    assert call(server, old, "GET", "/management/v1/whoami")[0] == 200
    status, rotated = call(server, admin, "POST", "/management/v1/principals/rotating/rotate-secret")
    assert status == 200, rotated
    status, body = call(server, old, "GET", "/management/v1/whoami")
    assert status == 401 and body["error"]["type"] == "NotAuthorizedException", body
    new = token_for(server, rotated["client-id"], rotated["client-secret"])
    assert call(server, new, "GET", "/management/v1/whoami")[1]["principal"] == "rotating"
