"""The security regression suite's lab (a module-scoped fixture each test module imports): an enforcing moto (S3, STS, IAM; session policies and
expiry enforced, see ../s3/moto_enforcing.py) behind a verifying front that checks what real S3
checks and moto does not (see verifying_front.py), and one icegate with authentication required
whose warehouses live there. Attackers are principals with ordinary grants, clients holding
vended credentials, and warehouse admins; every test judges by effects at the store.
"""

import base64
import contextlib
import json
import os
import sys
import threading
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "s3"))

from conftest import Server, free_port  # noqa: E402
from harness import ADMIN_ID, ADMIN_SECRET, BUCKET, REGION, ROLE_ARN, call, start_moto, token_for  # noqa: E402
from verifying_front import REFUSALS, serve  # noqa: E402


class Lab:
    def __init__(self, server, moto, front_endpoint, admin):
        self.server = server
        self.moto = moto
        self.front = front_endpoint
        self.admin = admin
        self.prefixes: dict[str, str] = {}

    # --- HTTP to icegate -------------------------------------------------------------------
    def call(self, token, method, path, body=None, headers=None):
        """(status, parsed JSON body or None) of a request to icegate."""
        return call(self.server, token, method, path, body, headers)

    def ok(self, token, method, path, body=None, headers=None):
        status, answer = self.call(token, method, path, body, headers)
        assert 200 <= status < 300, (method, path, status, answer)
        return answer

    def prefix(self, warehouse):
        if warehouse not in self.prefixes:
            config = self.ok(self.admin, "GET", f"/v1/config?warehouse={warehouse}")
            self.prefixes[warehouse] = config["overrides"]["prefix"]
        return self.prefixes[warehouse]

    def tables(self, warehouse, namespace):
        return f"/v1/{self.prefix(warehouse)}/namespaces/{namespace}/tables"

    # --- principals --------------------------------------------------------------------------
    def principal(self, grants, name=None):
        """A new principal with its own role holding `grants` [(privilege, securable)]; returns
        (name, token, client credential for PyIceberg)."""
        name = name or f"p-{uuid.uuid4().hex[:8]}"
        created = self.ok(self.admin, "POST", "/management/v1/principals", {"name": name})
        self.ok(self.admin, "POST", "/management/v1/roles", {"name": f"{name}-role"})
        self.ok(self.admin, "PUT", f"/management/v1/roles/{name}-role/principals/{name}")
        for privilege, securable in grants:
            self.ok(
                self.admin,
                "POST",
                "/management/v1/grants",
                {"role": f"{name}-role", "privilege": privilege, "securable": securable},
            )
        token = token_for(self.server, created["client-id"], created["client-secret"])
        return name, token, f"{created['client-id']}:{created['client-secret']}"

    # --- the store, as icegate's own identity (the test's view of what happened) -------------
    def s3(self, key_id=None, secret=None, token=None):
        if key_id is None:
            key_id, secret = self.moto.icegate_keys
        return self.moto.client("s3", key_id, secret, token)

    def exists(self, bucket, key):
        import botocore.exceptions

        try:
            self.s3().head_object(Bucket=bucket, Key=key)
            return True
        except botocore.exceptions.ClientError as e:
            if e.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def front_refusals(self):
        return list(REFUSALS)


def profile(endpoint, keys, vending="sts"):
    return {
        "type": "s3",
        "region": REGION,
        "endpoint": endpoint,
        "path-style-access": True,
        "credentials": {"type": "static", "access-key-id": keys[0], "secret-access-key": keys[1]},
        "sts": {"role-arn": ROLE_ARN, "session-duration-seconds": 3600},
        "vending": vending,
    }


def table_securable(warehouse, namespace, name):
    return {"type": "table", "warehouse": warehouse, "namespace": [namespace], "name": name}


def namespace_securable(warehouse, namespace):
    return {"type": "namespace", "warehouse": warehouse, "namespace": [namespace]}


def staged_commit(metadata, location):
    """The updateTable body that creates a staged table (`assert-create`), as clients send it."""
    return {
        "requirements": [{"type": "assert-create"}],
        "updates": [
            {"action": "assign-uuid", "uuid": metadata["table-uuid"]},
            {"action": "upgrade-format-version", "format-version": metadata["format-version"]},
            {"action": "add-schema", "schema": metadata["schemas"][0]},
            {"action": "set-current-schema", "schema-id": -1},
            {"action": "add-spec", "spec": metadata["partition-specs"][0]},
            {"action": "set-default-spec", "spec-id": -1},
            {"action": "add-sort-order", "sort-order": metadata["sort-orders"][0]},
            {"action": "set-default-sort-order", "sort-order-id": -1},
            {"action": "set-location", "location": location},
        ],
    }


SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


@contextlib.contextmanager
def running_lab(workdir, moto_env=None):
    """The lab's processes, stopped when the block ends. `moto_env`: extra environment of moto
    (S3_IGNORE_SUBDOMAIN_BUCKETNAME=true makes it a path-style-only store, as MinIO without
    MINIO_DOMAIN and Ceph RGW without rgw_dns_name are)."""
    saved = {k: os.environ.get(k) for k in (moto_env or {})}
    os.environ.update(moto_env or {})
    try:
        process, moto = start_moto(workdir)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    front_port = free_port()
    front = serve(front_port, moto.port)
    threading.Thread(target=front.serve_forever, daemon=True).start()
    front_endpoint = f"http://127.0.0.1:{front_port}"
    env = {
        "ICEGATE__AUTH__MODE": "required",
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID": ADMIN_ID,
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET": ADMIN_SECRET,
        "ICEGATE__SECRETS__ENCRYPTION_KEY": base64.b64encode(os.urandom(32)).decode(),
        "ICEGATE__STORAGE__ALLOWED_ENDPOINTS": json.dumps([front_endpoint, f"http://localhost:{front_port}"]),
    }
    server = Server(workdir, [], env).start()
    try:
        admin = token_for(server, ADMIN_ID, ADMIN_SECRET)
        lab = Lab(server, moto, front_endpoint, admin)
        for name, root, vending in (
            ("lake", f"s3://{BUCKET}/sec", "sts"),
            ("signed", f"s3://{BUCKET}/signed-sec", "remote-signing"),
        ):
            lab.ok(
                admin,
                "POST",
                "/management/v1/warehouses",
                {"name": name, "storage-root": root, "storage-profile": profile(front_endpoint, moto.icegate_keys, vending)},
            )
        yield lab
    finally:
        server.stop()
        front.shutdown()
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("security")) as running:
        yield running
