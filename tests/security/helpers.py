"""Helpers shared by the security suite's test modules, for the lab's `lake` warehouse (see
lab.py): namespaces addressed by their levels, creates with vended credentials, grants and
revocations, and what vended credentials can do at the store. Importing this module puts ../s3 on
the path (through lab)."""

import json
import urllib.parse

import botocore.exceptions

from lab import SCHEMA  # noqa: E402 (puts ../s3 on the path)
from harness import BUCKET  # noqa: E402

DELEGATE = {"X-Iceberg-Access-Delegation": "vended-credentials"}
ROOT = f"s3://{BUCKET}/sec"


def key_of(location, bucket=BUCKET):
    return location.split(f"s3://{bucket}/", 1)[1]


def ns_path(levels):
    return urllib.parse.quote("\x1f".join(levels), safe="")


def namespace(lab, levels):
    return lab.call(lab.admin, "POST", f"/v1/{lab.prefix('lake')}/namespaces", {"namespace": levels})


def tables(lab, levels):
    return f"/v1/{lab.prefix('lake')}/namespaces/{ns_path(levels)}/tables"


def ns_securable(levels):
    return {"type": "namespace", "warehouse": "lake", "namespace": levels}


def table_securable(levels, name):
    return {"type": "table", "warehouse": "lake", "namespace": levels, "name": name}


def warehouse_securable(name):
    return {"type": "warehouse", "warehouse": name}


def revoke(lab, principal, privilege, securable):
    lab.ok(lab.admin, "DELETE", "/management/v1/grants",
           {"role": f"{principal}-role", "privilege": privilege, "securable": securable})


def create(lab, token, levels, name, location=None, properties=None, stage=False, headers=None):
    body = {"name": name, "schema": SCHEMA}
    if location:
        body["location"] = location
    if properties:
        body["properties"] = properties
    if stage:
        body["stage-create"] = True
    return lab.call(token, "POST", tables(lab, levels), body, headers={**DELEGATE, **(headers or {})})


def error_type(body):
    return (body or {}).get("error", {}).get("type")


def has_credentials(body):
    return "s3.secret-access-key" in json.dumps(body or {})


def s3_with(lab, config):
    return lab.s3(config["s3.access-key-id"], config["s3.secret-access-key"], config.get("s3.session-token"))


def reads(s3, key):
    try:
        return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    except botocore.exceptions.ClientError:
        return None


def writes(s3, key):
    try:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"evil")
        return True
    except botocore.exceptions.ClientError:
        return False
