"""The web console (/ui) in a real headless Chromium (Debian's, driven by playwright-core from
npm; no browser download): sign in, browse to a table and see its columns and snapshot plot, a
grant shown in "who can access", undrop a table, tasks with their progress, a forged form and a
signed-out session refused, a phone's width; a narrow principal finds no trace of what it may
not see; names and properties holding markup are shown as text. Screenshots of every page go to
the test's directory (not committed)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

# The clients' helpers (principals, the admin's calls), whether or not their suite ran first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients"))

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from conftest import Server
from test_access_reviews import principal
from test_auth_clients import ADMIN_ID, ADMIN_SECRET, admin_call, admin_token, secured_env
from test_lifecycle import admin_catalog

NODE_DIR = Path(os.environ.get("ICEGATE_CONSOLE_NODE", Path.home() / ".cache/icegate/console-node"))
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "label", StringType(), required=False))
MARKUP = '<img src=x onerror=alert(1)>'


def drive(server, outdir: Path, params: dict) -> dict:
    script = NODE_DIR / "console.mjs"
    shutil.copy(Path(__file__).with_name("console.mjs"), script)
    result = subprocess.run(["node", str(script), server.uri, str(outdir), json.dumps(params)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads((outdir / "results.json").read_text())
    assert "error" not in results, results.get("error")
    return results


def test_the_console_in_a_real_browser(tmp_path):
    assert (NODE_DIR / "node_modules" / "playwright-core").exists(), f"playwright-core is not installed in {NODE_DIR}"
    assert Path(os.environ.get("CHROMIUM", "/usr/bin/chromium")).exists(), "Debian's chromium is not installed"
    server = Server(tmp_path, [], secured_env({})).start()
    try:
        token = admin_token(server)
        catalog = admin_catalog(server)
        catalog.create_namespace("sales")
        orders = catalog.create_table("sales.orders", schema=SCHEMA, properties={"note": MARKUP})
        for i in range(3):
            orders.append(pa.table({"id": pa.array([i], pa.int64()), "label": [MARKUP]}))
        catalog.create_table("sales.old", schema=SCHEMA)
        catalog.drop_table("sales.old")
        catalog.create_namespace("secret_hr")
        catalog.create_table("secret_hr.salaries", schema=SCHEMA)
        catalog.create_namespace(MARKUP)
        narrow_token, narrow = principal(server, token, "narrow", "narrow-readers", "read",
                                         {"type": "table", "warehouse": "default", "namespace": ["sales"], "name": "orders"})
        # A role whose member the console's grant reaches.
        principal(server, token, "eve", "console-role", "describe", {"type": "warehouse", "warehouse": "default"})
        # A task to show.
        admin_call(server, token, "POST", "/management/v1/warehouses/default/maintenance/run",
                   {"namespace": ["sales"], "table": "orders", "actions": ["remove-orphans"]})
        out = tmp_path / "screenshots"
        out.mkdir()
        results = drive(server, out, {
            "admin_id": ADMIN_ID, "admin_secret": ADMIN_SECRET, "narrow_id": narrow["client-id"],
            "narrow_secret": narrow["client-secret"], "dropped": "old", "hidden_namespace": "secret_hr",
            "hidden_table": "salaries", "grant_role": "console-role",
        })
        steps = results["steps"]
        assert results["dialogs"] == [], "no markup ran as script"
        assert "script-src" not in steps["csp"] and "default-src 'none'" in steps["csp"]
        cookie = steps["cookie"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert set(steps["namespaces"]) >= {"sales", "secret_hr", MARKUP}
        assert steps["columns"] == ["id", "label"]
        assert steps["plot_points"] == 3
        assert MARKUP in steps["table_text"], "the property shows as text"
        assert steps["grant_note"] == "Granted read to console-role."
        assert "narrow" in steps["who_can"] and "eve" in steps["who_can"]
        grants = admin_call(server, token, "GET", "/management/v1/grants?role=console-role")["grants"]
        assert {(g["privilege"], g["securable"].get("name")) for g in grants} >= {("read", "orders")}
        assert steps["audit_rows"] > 0 and "loadTable" in steps["audit_text"]
        assert steps["focused"] == "A"
        assert "old is back" in steps["undrop_note"]
        assert steps["spoofed_note"] == 0
        assert catalog.load_table("sales.old") is not None
        assert "remove-orphans" in steps["tasks_text"] or "orphan" in steps["tasks_text"]
        assert steps["forged_status"] == 403
        assert steps["after_signout_status"] in (302, 303, 307)
        assert steps["phone_overflow"] <= 1
        # The narrow principal sees its table, and no trace of the rest.
        assert steps["narrow_namespaces"] == ["sales"]
        assert steps["narrow_search"] == []
        assert "salaries" not in steps["narrow_html"] and "secret_hr" not in steps["narrow_html"]
        assert "does not exist" in steps["narrow_hidden_table"] or "Not" in steps["narrow_hidden_table"]
        assert "old" not in steps["narrow_deleted"].split("Dropped tables of default", 1)[-1].split()
        assert steps["narrow_visible_columns"] == ["id", "label"]
        for name in ["login", "warehouses", "warehouse", "table", "access", "audit", "deleted", "tasks", "table-phone",
                     "narrow-table"]:
            assert (out / f"{name}.png").stat().st_size > 1000, name
    finally:
        server.stop()
