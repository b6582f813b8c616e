"""A metadata write that hangs: the object store accepts the connection and never answers.

icegate sits behind a loopback TCP proxy in front of moto_server that can be switched to swallow
every request. A commit during the stall must fail within icegate's storage timeout with an error
the client can act on, leave the table at its previous metadata, and leave no file behind; after
the stall the same commit succeeds."""

import socket
import threading
import time

import pytest

from harness import BUCKET, call, catalog, moto, s3_profile  # noqa: F401


class StallingProxy:
    """Forwards TCP connections to `target` until `stall` is set; then accepts and holds them."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.stall = threading.Event()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.stall.is_set():
                self.held.append(client)  # read nothing, answer nothing
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if self.stall.is_set():
                    # Pooled connections opened before the stall hang too: swallow the request.
                    self.held.append(source)
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            if not self.stall.is_set():
                for s in (source, sink):
                    try:
                        s.close()
                    except OSError:
                        pass

    def close(self):
        self.listener.close()
        for s in self.held:
            s.close()


def test_a_stalled_metadata_write_fails_cleanly_and_leaves_the_table_unchanged(catalog, moto):
    server, token = catalog
    proxy = StallingProxy(moto.port)
    try:
        profile = s3_profile(moto)
        profile["endpoint"] = f"http://127.0.0.1:{proxy.port}"
        status, warehouse = call(
            server,
            token,
            "POST",
            "/management/v1/warehouses",
            {"name": "stalling", "storage-root": f"s3://{BUCKET}/stalling", "storage-profile": profile},
        )
        assert status == 201, warehouse
        base = f"/v1/{warehouse['id']}/namespaces"
        assert call(server, token, "POST", base, {"namespace": ["db"]})[0] == 200
        schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
        status, created = call(server, token, "POST", f"{base}/db/tables", {"name": "t", "schema": schema})
        assert status == 200, created
        before = created["metadata-location"]
        commit = {
            "requirements": [{"type": "assert-table-uuid", "uuid": created["metadata"]["table-uuid"]}],
            "updates": [{"action": "set-properties", "updates": {"k": "v"}}],
        }

        proxy.stall.set()
        started = time.monotonic()
        status, body = call(server, token, "POST", f"{base}/db/tables/t", commit)
        elapsed = time.monotonic() - started
        assert status == 503 and body["error"]["type"] == "ServiceUnavailableException", body
        assert "nothing was committed" in body["error"]["message"], body
        assert elapsed < 30, f"the storage timeout bounds the commit ({elapsed:.1f}s)"
        proxy.stall.clear()

        status, loaded = call(server, token, "GET", f"{base}/db/tables/t")
        assert status == 200 and loaded["metadata-location"] == before, "the table still points at its old metadata"
        assert "k" not in loaded["metadata"].get("properties", {})
        s3 = moto.client("s3", *moto.icegate_keys)
        prefix = loaded["metadata"]["location"].split(f"s3://{BUCKET}/", 1)[1]
        files = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/")["Contents"]]
        assert files == [before.split(f"s3://{BUCKET}/", 1)[1]], f"no orphan metadata file: {files}"

        # The store is back: the same commit goes through.
        status, body = call(server, token, "POST", f"{base}/db/tables/t", commit)
        assert status == 200 and body["metadata"]["properties"]["k"] == "v", body
    finally:
        proxy.close()
