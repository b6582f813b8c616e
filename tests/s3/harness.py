"""A real S3 + STS + IAM API (moto_server, with enforcement on) and an icegate whose warehouses
live in it. Clients in these tests hold no storage keys of their own: whatever they can reach
comes from icegate's vended credentials or signatures, and the store decides what they may do.
"""

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import botocore.config
import botocore.exceptions
import pytest

from conftest import Server, free_port

ACCOUNT = "123456789012"
BUCKET = "lake"
# Buckets beside the lake that icegate's own identity can also reach: one for a warehouse rooted
# at a whole bucket, one that no warehouse uses (a target that signatures must never reach).
WHOLE_BUCKET = "lake-whole"
OTHER_BUCKET = "lake-other"
REGION = "us-east-1"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/icegate-vending"
ADMIN_ID, ADMIN_SECRET = "bootstrap-admin", "bootstrap-secret-0123456789"
# The requests the harness makes before enforcement starts (see moto_setup).
SETUP_REQUESTS = 8


class Moto:
    def __init__(self, port: int, workdir: Path):
        self.port = port
        self.endpoint = f"http://127.0.0.1:{port}"
        self.clock_file = workdir / "moto-clock-offset"
        self.clock_file.write_text("0")
        self.sts_log = workdir / "sts-calls.jsonl"
        self.icegate_keys: tuple[str, str] = ("", "")

    def sts_call_for(self, access_key_id: str) -> dict:
        """What the AssumeRole call that minted `access_key_id` asked for (see moto_enforcing)."""
        calls = [json.loads(line) for line in self.sts_log.read_text().splitlines()]
        (call,) = [c for c in calls if c["access-key-id"] == access_key_id]
        return call

    def client(self, service: str, key_id: str, secret: str, token: str | None = None):
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            aws_session_token=token,
            config=botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )

    def advance_clock(self, seconds: float) -> None:
        self.clock_file.write_text(str(seconds))


def launch(workdir: Path, script: str, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """Starts `script` (a moto_server launcher beside this file, taking the port) on a free
    loopback port with `env` added; answers the process and its endpoint once it serves."""
    port = free_port()
    name = Path(script).stem
    log = open(workdir / f"{name}.log", "w")
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name(script)), str(port)],
        env={**os.environ, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
            break
        except urllib.error.HTTPError:
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"{name} did not start:\n{(workdir / f'{name}.log').read_text()}")
            time.sleep(0.2)
    return process, endpoint


def start_moto(workdir: Path) -> tuple[subprocess.Popen, Moto]:
    """moto_server with enforcement, on a free loopback port, set up by moto_setup."""
    env = {
        "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS),
        "MOTO_CLOCK_OFFSET_FILE": str(workdir / "moto-clock-offset"),
        "MOTO_STS_LOG": str(workdir / "sts-calls.jsonl"),
    }
    (workdir / "moto-clock-offset").write_text("0")
    process, endpoint = launch(workdir, "moto_enforcing.py", env)
    server = Moto(int(endpoint.rsplit(":", 1)[1]), workdir)
    moto_setup(server)
    return process, server


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    process, server = start_moto(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        process.terminate()
        process.wait(timeout=10)


def moto_setup(server: Moto) -> None:
    """Exactly SETUP_REQUESTS unauthenticated requests: icegate's IAM user (allowed S3 on the
    bucket and AssumeRole on the vending role), the role (trusting that user, allowed S3 on the
    bucket) and the bucket. Every later request is authenticated and authorized."""
    anonymous = ("AKIAHARNESSSETUP0000", "setup")
    iam = server.client("iam", *anonymous)
    iam.create_user(UserName="icegate")
    key = iam.create_access_key(UserName="icegate")["AccessKey"]
    bucket_policy = {
        "Effect": "Allow",
        "Action": "s3:*",
        "Resource": [r for b in (BUCKET, WHOLE_BUCKET, OTHER_BUCKET) for r in (f"arn:aws:s3:::{b}", f"arn:aws:s3:::{b}/*")],
    }
    iam.put_user_policy(
        UserName="icegate",
        PolicyName="icegate",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [bucket_policy, {"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": ROLE_ARN}],
            }
        ),
    )
    iam.create_role(
        RoleName="icegate-vending",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:user/icegate"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )
    iam.put_role_policy(
        RoleName="icegate-vending",
        PolicyName="bucket",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [bucket_policy]}),
    )
    for bucket in (BUCKET, WHOLE_BUCKET, OTHER_BUCKET):
        server.client("s3", *anonymous).create_bucket(Bucket=bucket)
    server.icegate_keys = (key["AccessKeyId"], key["SecretAccessKey"])
    # Enforcement is on from here: unknown keys are refused, icegate's keys work.
    try:
        server.client("s3", *anonymous).list_objects_v2(Bucket=BUCKET)
    except botocore.exceptions.ClientError as e:
        assert e.response["Error"]["Code"] in ("InvalidAccessKeyId", "AccessDenied", "403"), e.response
    else:
        raise AssertionError("moto_server accepted an unknown access key: enforcement is off")
    server.client("s3", *server.icegate_keys).list_objects_v2(Bucket=BUCKET)


def call(server, token, method, path, body=None, headers=None):
    """(status, parsed JSON body) of a request to icegate."""
    request = urllib.request.Request(
        f"{server.uri}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}", **(headers or {})},
        method=method,
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
            return response.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, (json.loads(text) if text else None)


def token_for(server, client_id, secret):
    data = f"grant_type=client_credentials&client_id={client_id}&client_secret={secret}".encode()
    with urllib.request.urlopen(urllib.request.Request(f"{server.uri}/v1/oauth/tokens", data=data), timeout=10) as r:
        return json.load(r)["access_token"]


def s3_profile(moto: Moto, vending: str = "sts", secret: str | None = None) -> dict:
    key_id, key_secret = moto.icegate_keys
    return {
        "type": "s3",
        "region": REGION,
        "endpoint": moto.endpoint,
        "path-style-access": True,
        "credentials": {"type": "static", "access-key-id": key_id, "secret-access-key": secret or key_secret},
        "sts": {"role-arn": ROLE_ARN, "session-duration-seconds": 3600},
        "vending": vending,
    }


@pytest.fixture(scope="module")
def catalog(tmp_path_factory, moto):
    """icegate with authentication on, a secrets key, and an STS-vending warehouse `lake` at
    s3://lake/warehouse. Yields (server, admin token)."""
    workdir = tmp_path_factory.mktemp("icegate-s3")
    env = {
        "ICEGATE__AUTH__MODE": "required",
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID": ADMIN_ID,
        "ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET": ADMIN_SECRET,
        "ICEGATE__SECRETS__ENCRYPTION_KEY": base64.b64encode(os.urandom(32)).decode(),
        # Orphan clean-up tests make files "old" within seconds.
        "ICEGATE__LIFECYCLE__ORPHAN__MIN_OLDER_THAN": "0s",
        "ICEGATE__LIFECYCLE__ORPHAN__MIN_QUARANTINE": "0s",
    }
    server = Server(workdir, [], env).start()
    try:
        token = token_for(server, ADMIN_ID, ADMIN_SECRET)
        status, body = call(
            server,
            token,
            "POST",
            "/management/v1/warehouses",
            {"name": "lake", "storage-root": f"s3://{BUCKET}/warehouse", "storage-profile": s3_profile(moto)},
        )
        assert status == 201, body
        yield server, token
    finally:
        server.stop()


if __name__ == "__main__":
    # For benchmarks (scripts/bench-s3.sh): start moto_server, set it up, print what icegate needs
    # as one JSON line (endpoint and icegate's keys), and serve until terminated.
    import signal
    import tempfile

    workdir = Path(tempfile.mkdtemp(prefix="icegate-moto-"))
    process, server = start_moto(workdir)
    print(json.dumps({"endpoint": server.endpoint, "profile": s3_profile(server)}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: (process.terminate(), sys.exit(0)))
    process.wait()
