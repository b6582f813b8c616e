"""Audit retention and checkpoints, as an operator runs them: with `audit.retention` and a
checkpoint location, records older than the retention are exported (gzipped JSON Lines),
checkpointed and only then removed from the database; `icegate audit verify` stays green across
the cut (the archive from record 1 to the database's base, the base vouched for by a checkpoint,
the database on to its head); and a rewrite of the database's whole chain (every hash
recomputed, so the database alone looks consistent) or a cut moved behind the catalog's back is
found through the checkpoints."""

import gzip
import json
import os
import sqlite3
import subprocess
import time
import urllib.request

import pyarrow as pa
from pyiceberg.catalog import load_catalog

from conftest import Server, icegate_bin
from test_auth_clients import SCHEMA


def verify(cwd, env):
    return subprocess.run(
        [icegate_bin(), "audit", "verify"], cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )


def link(previous, text):
    import hashlib

    return hashlib.sha256(f"{previous}\n{text}".encode()).hexdigest()


def wait_for(condition, what, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_retention_archives_checkpoints_and_cuts_and_verify_holds_across_the_cut(tmp_path, backend):
    archive = tmp_path / "audit-archive"
    env = {
        **backend,
        "ICEGATE__AUDIT__RETENTION": "2s",
        "ICEGATE__AUDIT__CHECKPOINT__LOCATION": f"file://{archive}",
        "ICEGATE__AUDIT__CHECKPOINT__INTERVAL": "1s",
    }
    server = Server(tmp_path, [], env).start()
    try:
        catalog = load_catalog("icegate", type="rest", uri=server.uri, warehouse="default")
        catalog.create_namespace("shop")
        table = catalog.create_table("shop.orders", schema=SCHEMA)
        table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
        segments = lambda: sorted((archive / "records").glob("*.jsonl.gz")) if (archive / "records").exists() else []
        wait_for(lambda: segments(), "records archived")
        # Later requests: records after the cut, and a checkpoint past it.
        catalog.list_tables("shop")
        first_cut = int(segments()[0].name.split("-")[1].split(".")[0])
        checkpoints = lambda: sorted(int(p.stem) for p in (archive / "checkpoints").glob("*.json"))
        wait_for(lambda: any(c > first_cut for c in checkpoints()), "a checkpoint after the cut")
        # The oldest records are gone from the trail the API reads.
        with urllib.request.urlopen(f"{server.uri}/management/v1/audit?pageSize=1", timeout=10) as r:
            oldest = json.load(r)["records"][0]["seq"]
        assert oldest > 1, oldest
    finally:
        server.stop()

    # The archive: gzipped JSON Lines from record 1, each linked to the one before.
    previous, expected = "0" * 64, 1
    for segment in segments():
        for line in gzip.decompress(segment.read_bytes()).decode().splitlines():
            record = json.loads(line)
            assert record["seq"] == expected and record["hash"] == link(previous, record["text"]), record
            previous, expected = record["hash"], expected + 1
    assert expected > oldest - 1 >= 1
    done = verify(tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the chain holds" in done.stdout and f"{expected - 1} archived" in done.stdout, done.stdout
    # Each cut is itself recorded, by the system, with what it removed.
    done = subprocess.run(
        [icegate_bin(), "audit", "export"], cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    cuts = [json.loads(l)["record"] for l in done.stdout.splitlines() if '"audit-cut"' in l]
    assert cuts and cuts[0]["actor"]["kind"] == "system" and cuts[0]["change"]["audit-cut"]["removed"] > 0, cuts[:1]
    if backend:
        return  # the tampering below edits the SQLite file; the store tests tamper on PostgreSQL

    database = tmp_path / "icegate-data" / "catalog.db"
    base = sqlite3.connect(database).execute("SELECT seq FROM audit_base").fetchone()[0]
    # Retention's path is the only one: records after the base are still not removed.
    with sqlite3.connect(database) as db:
        try:
            db.execute("DELETE FROM audit_log WHERE seq = ?", (base + 1,))
            raise AssertionError("a record after the cut was removed")
        except sqlite3.IntegrityError:
            pass

    # A rewrite of the whole chain in the database: one record changed, every hash after it
    # recomputed, the head moved. The database alone is consistent; the checkpoints are not.
    with sqlite3.connect(database) as db:
        db.execute("DROP TRIGGER audit_log_no_update")
        rows = db.execute("SELECT seq, record FROM audit_log ORDER BY seq").fetchall()
        previous = db.execute("SELECT hash FROM audit_base").fetchone()[0]
        for number, (seq, record) in enumerate(rows):
            if number == 0:
                record = "{ " + record[1:]  # the same fields: its columns still agree
            previous = link(previous, record)
            db.execute("UPDATE audit_log SET record = ?, hash = ? WHERE seq = ?", (record, previous, seq))
        db.execute("UPDATE audit_head SET hash = ?", (previous,))
    done = verify(tmp_path, {})  # the database alone cannot tell
    assert done.returncode == 0, done.stdout + done.stderr
    done = verify(tmp_path, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "is not the one checkpointed (the trail was rewritten)" in done.stderr, done.stderr


def namespaces_checkpointed(server, archive, count):
    """Starts `server`, makes `count` namespaces, waits for a checkpoint, and stops it."""
    server.start()
    try:
        catalog = load_catalog("icegate", type="rest", uri=server.uri, warehouse="default")
        for i in range(count):
            catalog.create_namespace(f"n{i}")
        wait_for(lambda: list((archive / "checkpoints").glob("*.json")), "a checkpoint")
    finally:
        server.stop()


def test_a_cut_moved_behind_the_catalogs_back_is_found(tmp_path):
    archive = tmp_path / "audit-archive"
    env = {"ICEGATE__AUDIT__CHECKPOINT__LOCATION": f"file://{archive}", "ICEGATE__AUDIT__CHECKPOINT__INTERVAL": "1s"}
    namespaces_checkpointed(Server(tmp_path, [], env), archive, 3)
    done = verify(tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    # Someone holding the database hides the first records: moves the base past them and
    # removes them (the triggers allow removing what is at or below the base).
    database = tmp_path / "icegate-data" / "catalog.db"
    with sqlite3.connect(database) as db:
        hash3 = db.execute("SELECT hash FROM audit_log WHERE seq = 3").fetchone()[0]
        db.execute("UPDATE audit_base SET seq = 3, hash = ?", (hash3,))
        db.execute("DELETE FROM audit_log WHERE seq <= 3")
    assert verify(tmp_path, {}).returncode == 0  # the database alone cannot tell
    done = verify(tmp_path, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "breaks at record 3" in done.stderr, done.stderr


def serve_with_retention(tmp_path, retention="2s"):
    archive = tmp_path / "audit-archive"
    env = {
        "ICEGATE__AUDIT__RETENTION": retention,
        "ICEGATE__AUDIT__CHECKPOINT__LOCATION": f"file://{archive}",
        "ICEGATE__AUDIT__CHECKPOINT__INTERVAL": "1s",
    }
    return Server(tmp_path, [], env), archive, env


def base_of(tmp_path):
    with sqlite3.connect(tmp_path / "icegate-data" / "catalog.db") as db:
        return db.execute("SELECT seq FROM audit_base").fetchone()[0]


def test_what_is_planted_at_the_location_neither_stands_for_a_checkpoint_nor_lets_records_go(tmp_path):
    server, archive, env = serve_with_retention(tmp_path, retention="1h")
    namespaces_checkpointed(server, archive, 5)
    real = sorted((archive / "checkpoints").glob("*.json"))[-1]
    seq = int(real.stem)
    # An alias of the real checkpoint under another name that parses to the same number (one a
    # rewriter of the database would plant, with its own hash): reported, never read as one.
    alias = archive / "checkpoints" / f"{seq}.json"
    alias.write_text(json.dumps({"seq": seq, "hash": "f" * 64, "at-ms": 0, "written-at-ms": 0}))
    done = verify(tmp_path, env)
    assert done.returncode == 1 and f"checkpoints/{seq}.json" in done.stderr, done.stdout + done.stderr
    alias.unlink()
    # A checkpoint planted far past the head: the head is still checkpointed on schedule, and
    # verify says records are missing (what such a checkpoint claims).
    future = archive / "checkpoints" / f"{99_999_999:020}.json"
    future.write_text(json.dumps({"seq": 99_999_999, "hash": "0" * 64, "at-ms": 0, "written-at-ms": 0}))
    # Junk planted where retention will write its next segment: nothing is cut.
    with sqlite3.connect(tmp_path / "icegate-data" / "catalog.db") as db:
        head = db.execute("SELECT seq FROM audit_head").fetchone()[0]
    (archive / "records").mkdir(exist_ok=True)
    for last in range(1, head + 10):
        (archive / "records" / f"{1:020}-{last:020}.jsonl.gz").write_bytes(gzip.compress(b'{"junk":1}\n'))
    server, _, env = serve_with_retention(tmp_path, retention="1s")
    server.start()
    try:
        time.sleep(1.5)
        catalog = load_catalog("icegate", type="rest", uri=server.uri, warehouse="default")
        catalog.list_namespaces()
        wait_for(lambda: max(int(p.stem) for p in (archive / "checkpoints").glob("0*.json") if int(p.stem) < 99_999_999) > seq,
                 "the head checkpointed despite the planted one")
        time.sleep(2)  # retention runs: and refuses
    finally:
        server.stop()
    assert base_of(tmp_path) == 0, "records were cut over a planted segment"
    done = verify(tmp_path, env)
    assert done.returncode == 1, done.stdout + done.stderr


def test_a_cut_cut_short_is_resumed_without_overlapping_segments(tmp_path):
    server, archive, env = serve_with_retention(tmp_path, retention="1h")
    namespaces_checkpointed(server, archive, 6)
    # A run that exported records 1-4 and was killed before its cut: the segment is there, the
    # records are not cut.
    done = subprocess.run(
        [icegate_bin(), "audit", "export"], cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, timeout=60
    )
    lines = done.stdout.splitlines()[:4]
    (archive / "records").mkdir(parents=True)
    (archive / "records" / f"{1:020}-{4:020}.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    time.sleep(1.1)
    server, _, env = serve_with_retention(tmp_path, retention="1s")
    server.start()
    try:
        wait_for(lambda: base_of(tmp_path) >= 4 and len(list((archive / "records").glob("*.gz"))) >= 2, "the cut resumed")
    finally:
        server.stop()
    names = sorted(p.name for p in (archive / "records").glob("*.gz"))
    ranges = [tuple(int(n) for n in name.split(".")[0].split("-")) for name in names]
    assert ranges[0] == (1, 4) and all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:])), ranges
    done = verify(tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
