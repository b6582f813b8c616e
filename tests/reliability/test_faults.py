"""Reliability under faults: the database going away and coming back, a crash during a commit
storm, several replicas on one database, and a metadata write that fails."""

import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from conftest import ADMIN_URL, Server, database_url, free_port, psql


def request(method, url, body=None, timeout=15):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            text = response.read()
            return response.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as error:
        text = error.read()
        return error.code, (json.loads(text) if text else None)


def prefix_of(server):
    return request("GET", f"{server.uri}/v1/config")[1]["overrides"]["prefix"]


def make_table(server, name="t"):
    prefix = prefix_of(server)
    request("POST", f"{server.uri}/v1/{prefix}/namespaces", {"namespace": ["db"]})
    status, body = request(
        "POST",
        f"{server.uri}/v1/{prefix}/namespaces/db/tables",
        {"name": name, "schema": {"type": "struct", "fields": [{"id": 1, "name": "x", "required": False, "type": "long"}]}},
    )
    assert status == 200, body
    return prefix, body["metadata"]["table-uuid"]


def commit_property(server, prefix, uuid_, key, table="t"):
    return request(
        "POST",
        f"{server.uri}/v1/{prefix}/namespaces/db/tables/{table}",
        {"requirements": [{"type": "assert-table-uuid", "uuid": uuid_}], "updates": [{"action": "set-properties", "updates": {key: "1"}}]},
    )


def local(location):
    return Path(location[len("file://") :])


class ThrowawayPostgres:
    """A PostgreSQL server of its own (from the local binaries), so it can be stopped and
    started without disturbing anything else."""

    def __init__(self, tmp_path):
        binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not binaries and not shutil.which("initdb"):
            pytest.fail("these tests start their own PostgreSQL: install the server binaries (initdb, pg_ctl)")
        self.bin = binaries[-1] if binaries else os.path.dirname(shutil.which("initdb"))
        # Outside pytest's private temp dir: as root, the server runs as `postgres`, which must
        # be able to reach its files.
        self.dir = Path(tempfile.mkdtemp(prefix="icegate-pg-"))
        self.port = free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            os.chmod(self.dir, 0o755)
            shutil.chown(self.dir, "postgres")
        self.run("initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres", "--no-sync")
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def run(self, tool, *args):
        result = subprocess.run([*self.as_user, f"{self.bin}/{tool}", *args], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"{tool} failed: {result.stdout}{result.stderr}"

    def start(self):
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.run("pg_ctl", "-D", str(self.dir / "data"), "-o", options, "-l", str(self.dir / "log"), "-w", "start")

    def stop(self, mode="immediate"):
        self.run("pg_ctl", "-D", str(self.dir / "data"), "-m", mode, "-w", "stop")


@pytest.fixture
def own_postgres(tmp_path):
    pg = ThrowawayPostgres(tmp_path)
    pg.start()
    try:
        yield pg
    finally:
        try:
            pg.stop()
        except AssertionError:
            pass
        shutil.rmtree(pg.dir, ignore_errors=True)


def test_a_database_outage_fails_fast_and_heals_by_itself(tmp_path, own_postgres):
    server = Server(
        tmp_path,
        [],
        {
            "ICEGATE__DATABASE__URL": own_postgres.url,
            "ICEGATE__DATABASE__ACQUIRE_TIMEOUT": "1s",
            "ICEGATE__CATALOG__CREATE_DEFAULT_WAREHOUSE": "true",
        },
    ).start()
    try:
        prefix, _ = make_table(server)
        own_postgres.stop()
        started = time.monotonic()
        status, body = request("GET", f"{server.uri}/v1/{prefix}/namespaces/db/tables/t")
        assert status == 503 and body["error"]["type"] == "ServiceUnavailableException", body
        assert request("GET", f"{server.uri}/ready")[0] == 503
        assert request("GET", f"{server.uri}/health")[0] == 200
        assert time.monotonic() - started < 8, "requests fail fast, well before the request timeout"

        own_postgres.start()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if request("GET", f"{server.uri}/ready")[0] == 200 and request("GET", f"{server.uri}/v1/{prefix}/namespaces/db/tables/t")[0] == 200:
                break
            time.sleep(0.2)
        else:
            pytest.fail("icegate did not recover within 15s of PostgreSQL coming back")
    finally:
        server.stop()


def test_a_crash_during_a_commit_storm_loses_no_acknowledged_commit(tmp_path, backend):
    server = Server(tmp_path, [], backend).start()
    prefix, table_uuid = make_table(server)
    acknowledged, stop = [], threading.Event()

    def writer(worker):
        n = 0
        while not stop.is_set():
            key = f"w{worker}-{n}"
            try:
                status, _ = commit_property(server, prefix, table_uuid, key)
            except OSError:
                return  # the server is gone
            if status == 200:
                acknowledged.append(key)
            n += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    stop.set()
    for t in threads:
        t.join()
    assert len(acknowledged) > 5, "the storm committed something before the crash"

    restarted = Server(tmp_path, [], backend).start()
    try:
        status, table = request("GET", f"{restarted.uri}/v1/{prefix}/namespaces/db/tables/t")
        assert status == 200
        missing = [k for k in acknowledged if table["metadata"]["properties"].get(k) != "1"]
        assert missing == [], f"acknowledged commits lost: {missing[:5]}"
        assert local(table["metadata-location"]).is_file(), "the table points at a file that exists"
        for entry in table["metadata"].get("metadata-log", []):
            assert local(entry["metadata-file"]).is_file()
    finally:
        restarted.stop()


def test_replicas_on_one_database_lose_nothing_and_read_each_others_writes(tmp_path):
    name = f"icegate_replicas_{uuid.uuid4().hex}"
    psql(f"CREATE DATABASE {name}")
    try:
        env = {"ICEGATE__DATABASE__URL": database_url(name)}
        replicas = []
        for i in range(3):
            workdir = tmp_path / f"r{i}"
            workdir.mkdir()
            # One shared warehouse root, so every replica writes metadata where the others read it.
            env_i = {**env, "ICEGATE__CATALOG__DEFAULT_WAREHOUSE_ROOT": f"file://{tmp_path}/warehouse"}
            replicas.append(Server(workdir, [], env_i).start())
        prefix, table_uuid = make_table(replicas[0])
        # Read-your-write across replicas.
        assert commit_property(replicas[0], prefix, table_uuid, "seen")[0] == 200
        assert request("GET", f"{replicas[1].uri}/v1/{prefix}/namespaces/db/tables/t")[1]["metadata"]["properties"]["seen"] == "1"

        acknowledged, lock = [], threading.Lock()

        def writer(worker):
            server = replicas[worker % 3]
            for n in range(3):
                key = f"w{worker}-{n}"
                status, body = commit_property(server, prefix, table_uuid, key)
                assert status in (200, 409), body
                if status == 200:
                    with lock:
                        acknowledged.append(key)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        properties = request("GET", f"{replicas[2].uri}/v1/{prefix}/namespaces/db/tables/t")[1]["metadata"]["properties"]
        assert len(acknowledged) >= 96, f"only {len(acknowledged)} of 192 commits succeeded"
        assert [k for k in acknowledged if properties.get(k) != "1"] == []
    finally:
        for replica in locals().get("replicas", []):
            replica.stop()
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_a_failed_metadata_write_leaves_the_table_as_it_was(tmp_path):
    server = Server(tmp_path, [], {}).start()
    try:
        prefix, table_uuid = make_table(server)
        before = request("GET", f"{server.uri}/v1/{prefix}/namespaces/db/tables/t")[1]
        # A metadata path below a regular file cannot be written, not even by root.
        blocker = tmp_path / "icegate-data" / "warehouse" / "blocker"
        blocker.write_text("not a directory")
        status, body = request(
            "POST",
            f"{server.uri}/v1/{prefix}/namespaces/db/tables/t",
            {"requirements": [], "updates": [{"action": "set-properties", "updates": {"write.metadata.path": f"file://{blocker}/metadata"}}]},
        )
        assert status >= 500 and "error" in body, body
        after = request("GET", f"{server.uri}/v1/{prefix}/namespaces/db/tables/t")[1]
        assert after["metadata-location"] == before["metadata-location"]
        assert after["metadata"] == before["metadata"]
        assert request("GET", f"{server.uri}/ready")[0] == 200
    finally:
        server.stop()
