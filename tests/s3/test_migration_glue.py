"""Migrating Glue's Iceberg tables (docs/migration.md) from moto's Glue, made to enforce
UpdateTable's VersionId as AWS does (moto_glue.py) and to authenticate every request (SigV4 of an
IAM user allowed glue:*): PyIceberg's GlueCatalog writes the tables; icegate fences each with
Glue's own compare-and-swap (a writer's commit racing the fence makes icegate read again, not
overwrite it), registers and verifies it; PyIceberg reads the same rows from icegate, a writer at
Glue fails on the fence, and rollback gives Glue the table back with icegate's commits."""

import json
import time
from pathlib import Path

import boto3
import pyarrow as pa
import pytest
from pyiceberg.catalog.glue import GlueCatalog
from pyiceberg.exceptions import NoSuchTableError

from pyiceberg.catalog import load_catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from conftest import Server
from harness import ADMIN_ID, ADMIN_SECRET, call, launch, token_for

REGION = "us-east-1"
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "region", StringType(), required=False),
    NestedField(3, "amount", DoubleType(), required=False),
)
SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"))


def batch(start, n, region):
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "region": pa.array([region] * n),
                     "amount": pa.array([i * 0.5 for i in ids])})


def sorted_rows(table):
    return sorted(zip(*(table.column(c).to_pylist() for c in ["id", "region", "amount"])))


def admin_call(server, token, method, path, body=None):
    status, answer = call(server, token, method, path, body)
    assert status < 300, (status, answer)
    return answer


def ended(server, token, id):
    run = admin_call(server, token, "GET", f"/management/v1/migrations/{id}")
    return run if run["state"] in ("completed", "failed") else None


def wait_for(check, what, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def start_moto_glue(workdir: Path):
    env = {"INITIAL_NO_AUTH_ACTION_COUNT": "3", "MOTO_GLUE_RACE_LOG": str(workdir / "glue-race.log")}
    process, endpoint = launch(workdir, "moto_glue.py", env)
    iam = boto3.client("iam", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="AKIASETUP",
                       aws_secret_access_key="setup")
    iam.create_user(UserName="migrator")
    key = iam.create_access_key(UserName="migrator")["AccessKey"]
    iam.put_user_policy(UserName="migrator", PolicyName="glue", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "glue:*", "Resource": "*"}]}))
    return process, endpoint, (key["AccessKeyId"], key["SecretAccessKey"])


def test_glue_tables_move_with_glues_own_compare_and_swap(tmp_path):
    process, endpoint, (key_id, secret) = start_moto_glue(tmp_path)
    aws = {"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": REGION,
           "AWS_EC2_METADATA_DISABLED": "true"}
    env = {"ICEGATE__AUTH__MODE": "required", "ICEGATE__AUTH__BOOTSTRAP_CLIENT_ID": ADMIN_ID,
           "ICEGATE__AUTH__BOOTSTRAP_CLIENT_SECRET": ADMIN_SECRET, **aws}
    server = Server(tmp_path, [], env).start()
    try:
        # Enforcement is on: an unknown key is refused.
        stranger = boto3.client("glue", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="AKIANOBODY",
                                aws_secret_access_key="x")
        with pytest.raises(Exception):
            stranger.get_databases()
        token = token_for(server, ADMIN_ID, ADMIN_SECRET)
        root = admin_call(server, token, "GET", "/management/v1/warehouses/default")["storage-root"].removeprefix("file://")
        glue = GlueCatalog("legacy", **{"glue.endpoint": endpoint, "glue.region": REGION, "glue.access-key-id": key_id,
                                        "glue.secret-access-key": secret, "warehouse": f"file://{root}/glue"})
        glue.create_namespace("sales", {"comment": "orders", "owner": "finance"})
        orders = glue.create_table("sales.orders", schema=SCHEMA, partition_spec=SPEC)
        for start, region in [(0, "eu"), (10, "us")]:
            orders.append(batch(start, 4, region))
        expected = sorted_rows(glue.load_table("sales.orders").scan().to_arrow())
        stale = glue.load_table("sales.orders")

        body = {"source": {"type": "glue", "region": REGION, "endpoint": endpoint}, "target-warehouse": "default"}
        run = admin_call(server, token, "POST", "/management/v1/migrations", body)
        done = wait_for(lambda: ended(server, token, run["id"]), "the Glue migration", 60)
        assert done["state"] == "completed", done
        assert "raced orders" in (tmp_path / "glue-race.log").read_text(), "a writer's commit raced the fence"

        icegate = load_catalog("icegate", type="rest", uri=server.uri, warehouse="default",
                               credential=f"{ADMIN_ID}:{ADMIN_SECRET}")
        table = icegate.load_table("sales.orders")
        assert sorted_rows(table.scan().to_arrow()) == expected
        assert icegate.load_namespace_properties("sales")["owner"] == "finance"
        with pytest.raises(FileNotFoundError, match="moved-to-icegate"):
            stale.append(batch(99, 1, "eu"))
        raw = boto3.client("glue", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=key_id,
                           aws_secret_access_key=secret).get_table(DatabaseName="sales", Name="orders")["Table"]
        assert raw["Parameters"]["metadata_location"].endswith(".moved-to-icegate." + done["tables"][0]["id"])
        assert raw["Parameters"]["last-writer"] == "racing", "the racing writer's change was kept, not overwritten"
        table.append(batch(100, 2, "us"))

        rolled = admin_call(server, token, "POST", f"/management/v1/migrations/{run['id']}/rollback", {})
        assert rolled["state"] == "rolled-back"
        with pytest.raises(NoSuchTableError):
            icegate.load_table("sales.orders")
        back = glue.load_table("sales.orders")
        assert len(back.scan().to_arrow()) == len(expected) + 2
        back.append(batch(200, 1, "eu"))
        assert len(glue.load_table("sales.orders").scan().to_arrow()) == len(expected) + 3
    finally:
        server.stop()
        process.terminate()
        process.wait(timeout=10)
