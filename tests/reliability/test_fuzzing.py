"""Schemathesis fuzzes the running server against the OpenAPI documents icegate publishes (the
Iceberg REST surface it implements and the management API): no 5xx, and every status code,
content type, header and body conforms to the documents."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Server

REPO = Path(__file__).resolve().parents[2]
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance"


@pytest.mark.parametrize("document", ["iceberg-rest.yaml", "management.yaml"])
def test_schemathesis_finds_no_server_error_or_nonconformance(tmp_path, document):
    st = Path(sys.executable).parent / "st"
    if not st.exists() and shutil.which("st") is None:
        pytest.fail("schemathesis is not installed (tests/requirements.txt)")
    server = Server(tmp_path, [], {}).start()
    try:
        result = subprocess.run(
            [str(st if st.exists() else "st"), "run", str(REPO / "openapi" / document), "--url", server.uri,
             "--max-examples", "20", "--seed", "1", "--checks", CHECKS, "--no-color"],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,  # schemathesis keeps a cache in its working directory
        )
        assert result.returncode == 0, f"schemathesis found problems:\n{result.stdout[-6000:]}\n{result.stderr[-2000:]}"
        assert "passed" in result.stdout
    finally:
        server.stop()
    assert "ServiceFailureException" not in server.stderr_path.read_text()
