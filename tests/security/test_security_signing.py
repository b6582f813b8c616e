"""Security regressions, remote signing: the signer signs only requests for the table's own files
that the caller's grants allow. On a path-style-only store (as MinIO without MINIO_DOMAIN and Ceph
RGW without rgw_dns_name are) a virtual-hosted URI, which that store reads as another bucket and
key, is not signed; a reader of a signed table gets signatures for reads only, a stranger none.
Judged at the store (what a signed request does) and by the signer's answers. From attack rounds
2 and 5 (docs/security.md); the first test runs a second lab whose moto is path-style only.
"""

import pytest
import requests

from lab import SCHEMA, lab, profile, running_lab  # noqa: F401 (lab is a fixture; it puts ../s3 on the path)
from harness import BUCKET, WHOLE_BUCKET  # noqa: E402
from helpers import error_type, key_of  # noqa: E402


@pytest.fixture(scope="module")
def path_style_lab(tmp_path_factory):
    with running_lab(tmp_path_factory.mktemp("path-style"), {"S3_IGNORE_SUBDOMAIN_BUCKETNAME": "true"}) as running:
        yield running


def test_signing_for_a_path_style_store_refuses_virtual_hosted_uris(path_style_lab):
    lab = path_style_lab
    port = lab.front.rsplit(":", 1)[1]
    endpoint = f"http://localhost:{port}"
    warehouse = {"name": "whole", "storage-root": f"s3://{WHOLE_BUCKET}",
                 "storage-profile": profile(endpoint, lab.moto.icegate_keys, "remote-signing")}
    lab.ok(lab.admin, "POST", "/management/v1/warehouses", warehouse)
    prefix = lab.prefix("whole")
    lab.ok(lab.admin, "POST", f"/v1/{prefix}/namespaces", {"namespace": ["lake"]})
    _, attacker, _ = lab.principal([("admin", {"type": "namespace", "warehouse": "whole", "namespace": ["lake"]})])
    victim = "sec/victimns/t/data/secret.parquet"
    lab.s3().put_object(Bucket=BUCKET, Key=victim, Body=b"victim secret")
    body = {"name": "t", "schema": SCHEMA, "location": f"s3://{WHOLE_BUCKET}/lake/sec"}
    assert lab.call(attacker, "POST", f"/v1/{prefix}/namespaces/lake/tables", body)[0] == 200
    sign = f"/v1/{prefix}/namespaces/lake/tables/t/sign"
    for method, key, data in (
        ("GET", f"lake/{victim}", None),
        ("PUT", "lake/sec/victimns/t/data/planted.parquet", b"planted"),
        ("DELETE", f"lake/{victim}", None),
    ):
        # Read by this store as bucket `lake`, key `sec/...`: another warehouse's files.
        uri = f"http://{WHOLE_BUCKET}.localhost:{port}/{key}"
        request = {"region": "us-east-1", "uri": uri, "method": method,
                   "headers": {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"]}}
        status, signed = lab.call(attacker, "POST", sign, request)
        if status == 200:
            headers = {k: ",".join(v) for k, v in signed["headers"].items()}
            headers["Host"] = f"{WHOLE_BUCKET}.localhost:{port}"
            answer = requests.request(method, f"http://127.0.0.1:{port}/{key}", headers=headers, data=data, timeout=10)
            assert not (method == "GET" and answer.status_code == 200 and answer.content == b"victim secret")
    assert lab.exists(BUCKET, victim), "the victim's file is still there"
    assert not lab.exists(BUCKET, "sec/victimns/t/data/planted.parquet")
    # The path-style form of the table's own files is still signed, and works at the store.
    own = f"{WHOLE_BUCKET}/lake/sec/data/own.parquet"
    request = {"region": "us-east-1", "uri": f"{endpoint}/{own}", "method": "PUT",
               "headers": {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"]}}
    status, signed = lab.call(attacker, "POST", sign, request)
    assert status == 200, signed
    headers = {k: ",".join(v) for k, v in signed["headers"].items()}
    headers["Host"] = f"localhost:{port}"
    answer = requests.put(f"http://127.0.0.1:{port}/{own}", headers=headers, data=b"mine", timeout=10)
    assert answer.status_code == 200, answer.text
    assert lab.exists(WHOLE_BUCKET, "lake/sec/data/own.parquet")


def test_a_reader_of_a_signed_table_gets_no_signature_for_a_write(lab):
    prefix = lab.prefix("signed")
    lab.ok(lab.admin, "POST", f"/v1/{prefix}/namespaces", {"namespace": ["g5"]})
    status, table = lab.call(lab.admin, "POST", f"/v1/{prefix}/namespaces/g5/tables", {"name": "t", "schema": SCHEMA})
    assert status == 200, table
    _, reader, _ = lab.principal([("read", {"type": "table", "warehouse": "signed", "namespace": ["g5"], "name": "t"})])
    port = lab.front.rsplit(":", 1)[1]
    key = f"{key_of(table['metadata']['location'])}/data/planted.parquet"
    sign = f"/v1/{prefix}/namespaces/g5/tables/t/sign"
    for method in ("PUT", "DELETE", "POST"):
        request = {"region": "us-east-1", "uri": f"http://127.0.0.1:{port}/{BUCKET}/{key}", "method": method,
                   "headers": {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"]}}
        status, body = lab.call(reader, "POST", sign, request)
        assert status == 403, (method, body)
    request = {"region": "us-east-1", "uri": f"http://127.0.0.1:{port}/{BUCKET}/{key}", "method": "GET",
               "headers": {"x-amz-content-sha256": ["UNSIGNED-PAYLOAD"]}}
    assert lab.call(reader, "POST", sign, request)[0] == 200
    # A stranger gets no signature at all, and is told nothing about the table.
    _, stranger, _ = lab.principal([])
    status, body = lab.call(stranger, "POST", sign, request)
    assert status == 404 and error_type(body) == "NoSuchTableException", body
