"""The web console (/ui) in a real headless Chromium (Debian's, driven by playwright-core from
npm; no browser download): sign in, browse to a table and see its columns and snapshot plot, a
grant shown in "who can access", undrop a table, tasks with their progress, a forged form and a
signed-out session refused, a phone's width; a narrow principal finds no trace of what it may
not see; names and properties holding markup are shown as text. Screenshots of every page go to
the test's directory (not committed)."""

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

# The clients' helpers (principals, the admin's calls), whether or not their suite ran first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients"))

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from conftest import Server, free_port
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


def token_for(server, client_id, secret):
    """A token for these client credentials, or the refusal's status."""
    data = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": client_id,
                                   "client_secret": secret}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{server.uri}/v1/oauth/tokens", data=data), timeout=10) as r:
            return json.load(r)["access_token"]
    except urllib.error.HTTPError as e:
        return e.code


def local(uri: str) -> Path:
    return Path(urllib.parse.urlparse(uri).path)


def a_view(server, token, name):
    """A view with its SQL in two dialects (one holding markup)."""
    prefix = admin_call(server, token, "GET", "/v1/config?warehouse=default")["overrides"]["prefix"]
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    body = {"name": name, "schema": schema, "properties": {},
            "view-version": {"version-id": 1, "timestamp-ms": int(time.time() * 1000), "schema-id": 0,
                             "summary": {"engine-name": "spark"}, "default-namespace": ["sales"],
                             "representations": [
                                 {"type": "sql", "sql": f"SELECT id FROM orders WHERE label = '{MARKUP}'", "dialect": "spark"},
                                 {"type": "sql", "sql": "SELECT id FROM sales.orders", "dialect": "trino"}]}}
    admin_call(server, token, "POST", f"/v1/{prefix}/namespaces/sales/views", body)


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
        a_view(server, token, "recent_orders")
        # A dataset adopted in place (one Hive-partitioned Parquet file).
        lake = tmp_path / "lake"
        (lake / "clicks" / "region=eu").mkdir(parents=True)
        pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64())}), lake / "clicks" / "region=eu" / "part-0.parquet")
        admin_call(server, token, "POST", "/management/v1/warehouses/default/source-locations",
                   {"location": f"file://{lake}"})
        catalog.create_namespace("raw")
        adopted = admin_call(server, token, "POST", "/management/v1/warehouses/default/adoptions",
                             {"source": f"file://{lake}/clicks", "namespace": ["raw"], "name": "clicks",
                              "partitioning": {"type": "hive"}})
        assert adopted["files-added"] == 1, adopted
        # A SQL catalog whose table migrates in (followed in the console, then rolled back there).
        root = local(admin_call(server, token, "GET", "/management/v1/warehouses/default")["storage-root"])
        legacy = SqlCatalog("legacy", uri=f"sqlite:///{tmp_path / 'legacy.db'}", warehouse=f"file://{root}/legacy")
        legacy.create_namespace("crm")
        accounts = legacy.create_table("crm.accounts", schema=SCHEMA)
        accounts.append(pa.table({"id": pa.array([7], pa.int64()), "label": ["acme"]}))
        run = admin_call(server, token, "POST", "/management/v1/migrations",
                         {"source": {"type": "sql", "uri": f"sqlite:///{tmp_path / 'legacy.db'}", "catalog-name": "legacy"},
                          "target-warehouse": "default"})
        out = tmp_path / "screenshots"
        out.mkdir()
        results = drive(server, out, {
            "admin_id": ADMIN_ID, "admin_secret": ADMIN_SECRET, "narrow_id": narrow["client-id"],
            "narrow_secret": narrow["client-secret"], "dropped": "old", "hidden_namespace": "secret_hr",
            "hidden_table": "salaries", "grant_role": "console-role", "view": "recent_orders",
            "adopted": "raw.clicks", "request_id": "console-grant-7f3a",
            "migration": run["id"],
        })
        steps = results["steps"]
        assert results["dialogs"] == [], "no markup ran as script"
        assert "script-src" not in steps["csp"] and "default-src 'none'" in steps["csp"]
        assert "Signed in as admin" in steps["signed_in_as"], "the principal's name, as the API gives it"
        cookie = steps["cookie"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert set(steps["namespaces"]) >= {"sales", "secret_hr", MARKUP}
        assert steps["columns"] == ["id", "label"]
        assert steps["plot_points"] == 3 and steps["plot_bars"] == 3
        assert all("+1 records, +1 files" in t for t in steps["plot_titles"]), steps["plot_titles"]
        assert "3 records" in steps["plot_titles"][-1]
        assert MARKUP in steps["table_text"], "the property shows as text"
        assert steps["grant_note"] == "Granted read to console-role."
        assert "narrow" in steps["who_can"] and "eve" in steps["who_can"]
        # (The grant reached the API: its member shows in who can access. The review below revokes it.)
        assert steps["role_created"] == "Role ops created." and steps["member_added"] == "eve is in ops."
        assert "eve" in steps["ops_row"]
        assert steps["member_removed"] == "eve left ops." and steps["role_deleted"] == "Role ops deleted."
        assert "ops" not in {r["name"] for r in admin_call(server, token, "GET", "/management/v1/roles")["roles"]}
        records = admin_call(server, token, "GET", "/management/v1/audit?pageSize=1000")["records"]
        tied = [r["record"] for r in records if r["record"].get("request-id") == "console-grant-7f3a"]
        assert tied and all(r["actor"].get("name") == "admin" for r in tied), tied
        assert steps["audit_rows"] > 0 and "loadTable" in steps["audit_text"]
        assert steps["focused"] == "A"
        assert "old is back" in steps["undrop_note"]
        assert steps["spoofed_note"] == 0
        assert catalog.load_table("sales.old") is not None
        assert "remove-orphans" in steps["tasks_text"] or "orphan" in steps["tasks_text"]
        assert steps["forged_status"] == 403
        assert steps["after_signout_status"] in (302, 303, 307)
        assert steps["phone_overflow"] <= 1
        assert all(overflow <= 1 for overflow in steps["phone_pages"].values()), steps["phone_pages"]
        assert steps["filtered_kinds"] and set(steps["filtered_kinds"]) == {"expire-snapshots"}
        # The narrow principal sees its table, and no trace of the rest.
        assert steps["narrow_namespaces"] == ["sales"]
        assert steps["narrow_search"] == []
        assert "salaries" not in steps["narrow_html"] and "secret_hr" not in steps["narrow_html"]
        assert "does not exist" in steps["narrow_hidden_table"] or "Not" in steps["narrow_hidden_table"]
        assert "old" not in steps["narrow_deleted"].split("Dropped tables of default", 1)[-1].split()
        assert steps["narrow_visible_columns"] == ["id", "label"]
        # Principals: the credentials shown once work, the rotated ones replace them, dave is gone.
        created, rotated = steps["created"], steps["rotated"]
        assert created["id"] == rotated["id"] and created["secret"] != rotated["secret"]
        assert token_for(server, rotated["id"], rotated["secret"]) == 401, "rotated once more in the console"
        assert token_for(server, created["id"], created["secret"]) == 401
        assert "Signed in as carol" in steps["carol_signed_in"]
        assert steps["carol_after_rotation"].endswith("/ui/login"), "the session ended with its token"
        assert steps["carol_then"].endswith("/ui/login")
        assert "dave is deleted" in steps["delete_note"] and "dave" not in steps["principals"]
        assert "carol" in steps["principals"]
        names = {p["name"] for p in admin_call(server, token, "GET", "/management/v1/principals")["principals"]}
        assert "dave" not in names and "carol" in names
        # The review: the console's grant is gone at the API, the narrow reader's stays.
        assert "Campaign started" in steps["review_started"]
        assert "revoke-grant" in steps["revoke_note"] and "attest" in steps["attest_note"]
        assert "<b>Q4</b>" in steps["review_text"], "the description shows as text"
        grants = admin_call(server, token, "GET", "/management/v1/grants?role=console-role")["grants"]
        assert ("read", "orders") not in {(g["privilege"], g["securable"].get("name")) for g in grants}
        assert narrow_token and catalog.load_table("sales.orders")
        reviews = admin_call(server, token, "GET", "/management/v1/access-reviews")["reviews"]
        assert len(reviews) == 1 and reviews[0]["closed-at-ms"] is not None
        # The view's SQL per dialect, the markup as text.
        assert steps["view_dialects"] == ["spark", "trino"]
        assert MARKUP in steps["view_sql"][0]
        # The storage profile (no secret), the adoption with its run.
        assert "Profile version" in steps["warehouse_text"] and "file" in steps["warehouse_text"]
        assert "raw.clicks" in steps["adoption_text"] and "files-added" in steps["adoption_text"]
        # The task and the migration followed to their end without a reload by the test.
        assert steps["task_states"][-1] == "done", steps["task_states"]
        if steps["task_states"][0] in ("queued", "running"):
            assert steps["task_follows"] == 1, "a page of work in progress reloads itself"
        assert steps["task_follows_after"] == 0, "a finished task's page stays still"
        queued = steps["task_url"].split("id=")[1]
        assert admin_call(server, token, "GET", f"/management/v1/tasks/{queued}")["kind"] == "expire-snapshots"
        assert steps["migration_states"][-1].startswith("completed"), steps["migration_states"]
        assert steps["migration_tables"] == ["verified"]
        assert "Rolled back" in steps["rollback_note"], steps["rollback_note"]
        moved = admin_call(server, token, "GET", f"/management/v1/migrations/{run['id']}")
        assert moved["state"] == "rolled-back" and [t["state"] for t in moved["tables"]] == ["rolled-back"]
        assert legacy.load_table("crm.accounts").scan().to_arrow().num_rows == 1, "the source has its table back"
        # The narrow principal manages nothing and sees no one's principals, runs or adoptions.
        for page in ["narrow_principals", "narrow_migrations", "narrow_adoptions"]:
            assert "carol" not in steps[page] and "crm" not in steps[page] and "clicks" not in steps[page], page
        assert "sales" not in steps["narrow_reviews"].split("Start a campaign")[0].replace("Access reviews", "")
        for name in ["login", "warehouses", "warehouse", "table", "access", "audit", "deleted", "tasks", "table-phone",
                     "narrow-table", "principals", "principal-created", "review", "view", "adoptions", "adoption",
                     "task", "migration"]:
            assert (out / f"{name}.png").stat().st_size > 1000, name
    finally:
        server.stop()


class Site:
    """A web page served from another origin of the same site (another port of 127.0.0.1)."""

    def __init__(self, handler):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def attacker_site(server, mallory):
    """A same-site page that plants its own sign-in nonce (cookies are not kept apart by port)
    and posts mallory's credentials to the console's sign-in form."""
    form = f"""<!doctype html><form id=f method=post action="{server.uri}/ui/login">
<input name=nonce value=tossed><input name=client_id value="{mallory['client-id']}">
<input name=client_secret value="{mallory['client-secret']}"></form>
<script>document.getElementById('f').submit()</script>"""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = form.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Set-Cookie", "icegate_login=tossed; Path=/ui/login; HttpOnly")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return Site(Handler)


def start_with_issuer(server, tmp_path, issuer, name, scopes=None):
    """Starts `server` with the console's sign-in through `issuer` (audience `urn:icegate`)."""
    scope_line = f'console_scopes = "{scopes}"\n' if scopes else ""
    (tmp_path / "icegate.toml").write_text(
        f'[server]\npublic_url = "{server.uri}"\n\n[[auth.oidc]]\nissuer = "{issuer}"\naudience = "urn:icegate"\n'
        f'name = "{name}"\nconsole_client_id = "icegate-console"\n{scope_line}')
    server.args = ["--config", str(tmp_path / "icegate.toml")]
    server.start()


def test_signing_in_through_an_identity_provider(tmp_path):
    """The console's sign-in through an OpenID Connect issuer (authorization code with PKCE):
    a real provider (panva's oidc-provider from npm, which requires PKCE and refuses a code
    without its verifier), its login and consent pages in Chromium, back to the console signed
    in as the issuer's user; an answer for a sign-in the browser did not start is refused."""
    assert (NODE_DIR / "node_modules" / "oidc-provider").exists(), f"oidc-provider is not installed in {NODE_DIR}"
    server = Server(tmp_path, [], secured_env({}))
    issuer_port = free_port()
    script = NODE_DIR / "issuer.mjs"
    shutil.copy(Path(__file__).with_name("issuer.mjs"), script)
    issuer_log = open(tmp_path / "issuer.log", "w")
    issuer = subprocess.Popen(["node", str(script), str(issuer_port), f"{server.uri}/ui/oidc/callback/idp"],
                              stdout=issuer_log, stderr=subprocess.STDOUT)
    try:
        discovery = f"http://127.0.0.1:{issuer_port}/.well-known/openid-configuration"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(discovery, timeout=1) as r:
                    assert json.load(r)["issuer"] == f"http://127.0.0.1:{issuer_port}"
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "issuer.log").read_text()
                time.sleep(0.2)
        start_with_issuer(server, tmp_path, f"http://127.0.0.1:{issuer_port}", "idp", "openid icegate")
        out = tmp_path / "screenshots"
        out.mkdir()
        mallory = admin_call(server, admin_token(server), "POST", "/management/v1/principals", {"name": "mallory"})
        attacker = attacker_site(server, mallory)
        try:
            results = drive(server, out, {"mode": "oidc", "sso_button": "Sign in with idp", "oidc_user": "alice",
                                          "attacker_page": attacker.url})
        finally:
            attacker.close()
        steps = results["steps"]
        assert "Signed in as alice@idp" in steps["oidc_signed_in"], steps["oidc_signed_in"]
        assert steps["oidc_flow_cookie"] == 0, "the flow's cookie is gone once used"
        cookie = steps["oidc_session_cookie"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert steps["oidc_forged_status"] == 400 and steps["oidc_foreign_status"] == 400
        # Another origin of the same site cannot sign alice's browser in as mallory: neither with
        # a planted sign-in nonce (the form's origin is checked) nor a planted flow cookie, a
        # junk session cookie and a kept answer (a signed-in browser is never switched).
        assert "not this console's page" in steps["tossed_login_text"] or "expired" in steps["tossed_login_text"], steps["tossed_login_text"]
        assert "Signed in as alice@idp" in steps["after_tossed_login"]
        assert steps["kept_answer"]
        assert steps["planted_status"] == 409 and "signed in as alice@idp already" in steps["planted_text"]
        # The planted session cookie beside hers made the answer expire both (sign in again):
        # her browser is signed out, never mallory's.
        assert steps["after_planted"].startswith(f"{server.uri}/ui/login") and "mallory" not in steps["after_planted"]
        # The console's session acts as the issuer's user: the API provisioned exactly that one.
        names = {p["name"] for p in admin_call(server, admin_token(server), "GET", "/management/v1/principals")["principals"]}
        assert "alice@idp" in names
        for name in ["login-oidc", "oidc-home"]:
            assert (out / f"{name}.png").stat().st_size > 1000, name
    finally:
        server.stop()
        issuer.terminate()
        issuer.wait(timeout=10)


def raw(server, method, path, headers=None, body=None):
    """One request, redirects not followed: (status, headers, text)."""
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    answer = (response.status, response.getheaders(), response.read().decode(errors="replace"))
    connection.close()
    return answer


def set_cookies(headers):
    return {v.split("=", 1)[0]: v.split("=", 1)[1].split(";", 1)[0] for k, v in headers if k.lower() == "set-cookie"}


def sign_in(server, client_id, secret, extra=None):
    """The sign-in form as a browser posts it: (status, the session cookie or None)."""
    _, headers, _ = raw(server, "GET", "/ui/login")
    nonce = set_cookies(headers)["icegate_login"]
    form = urllib.parse.urlencode({"nonce": nonce, "client_id": client_id, "client_secret": secret})
    status, headers, _ = raw(server, "POST", "/ui/login", {
        "Content-Type": "application/x-www-form-urlencoded", "Cookie": f"icegate_login={nonce}", **(extra or {})}, form)
    return status, set_cookies(headers).get("icegate_session")


def test_what_the_second_console_attack_round_found_stays_fixed(tmp_path):
    """The console's second attack round (docs/security.md): a form posted from another origin of
    the same site, a planted duplicate session cookie, an identity provider handing over a token
    that is not its own, an answer returned to another issuer's path, and "who can access" for a
    namespace level holding a dot."""
    token_box = {}

    class Evil(http.server.BaseHTTPRequestHandler):
        """A configured issuer that sends the browser straight back (no `iss`) and answers the
        code with a token of icegate's own (mallory's), with an endless lifetime."""

        def do_GET(self):
            if self.path.startswith("/.well-known/openid-configuration"):
                doc = {"issuer": evil.url.rstrip("/"), "authorization_endpoint": f"{evil.url}auth",
                       "token_endpoint": f"{evil.url}token"}
                self.reply(200, json.dumps(doc).encode(), "application/json")
            else:
                self.reply(404, b"{}", "application/json")

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = {"access_token": token_box["mallory"], "token_type": "Bearer", "expires_in": 2**64 - 1}
            self.reply(200, json.dumps(body).encode(), "application/json")

        def reply(self, status, body, kind):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    evil = Site(Evil)
    server = Server(tmp_path, [], secured_env({}))
    start_with_issuer(server, tmp_path, evil.url.rstrip("/"), "evil")
    try:
        token = admin_token(server)
        mallory = admin_call(server, token, "POST", "/management/v1/principals", {"name": "mallory"})
        token_box["mallory"] = token_for(server, mallory["client-id"], mallory["client-secret"])

        # The sign-in form posted from another origin of the same site is refused; the same form
        # from the console's own origin, or from no browser at all, signs in.
        other = f"http://127.0.0.1:{free_port()}"
        status, session = sign_in(server, ADMIN_ID, ADMIN_SECRET, {"Origin": other, "Sec-Fetch-Site": "same-site"})
        assert status == 403 and session is None
        status, session = sign_in(server, ADMIN_ID, ADMIN_SECRET, {"Sec-Fetch-Site": "cross-site"})
        assert status == 403 and session is None
        status, session = sign_in(server, ADMIN_ID, ADMIN_SECRET, {"Origin": other})  # a browser without Sec-Fetch-*
        assert status == 403 and session is None
        status, session = sign_in(server, ADMIN_ID, ADMIN_SECRET, {"Origin": server.uri, "Sec-Fetch-Site": "same-origin"})
        assert status == 303 and session
        status, plain = sign_in(server, ADMIN_ID, ADMIN_SECRET)
        assert status == 303 and plain

        # A signed-in form posted from another origin is refused, and nothing is created.
        page = raw(server, "GET", "/ui/principals", {"Cookie": f"icegate_session={session}"})[2]
        csrf = page.split('name="csrf" value="')[1].split('"')[0]
        form = urllib.parse.urlencode({"csrf": csrf, "action": "create", "name": "planted"})
        posted = raw(server, "POST", "/ui/principals", {"Content-Type": "application/x-www-form-urlencoded",
                     "Cookie": f"icegate_session={session}", "Origin": other}, form)
        assert posted[0] == 403
        names = {p["name"] for p in admin_call(server, token, "GET", "/management/v1/principals")["principals"]}
        assert "planted" not in names
        # Two session cookies (one planted for a longer path) are trusted neither.
        mallory_session = sign_in(server, mallory["client-id"], mallory["client-secret"])[1]
        both = raw(server, "GET", "/ui/principals",
                   {"Cookie": f"icegate_session={mallory_session}; icegate_session={session}"})
        assert both[0] == 303 and dict(both[1])["location"] == "/ui/login"
        # ... and the answer expires that name on the page's path and those above it, so a
        # planted cookie blocks the page no longer.
        expired = {v.split(";")[1].strip() for k, v in both[1] if k.lower() == "set-cookie"
                   and v.startswith("icegate_session=;") and "Max-Age=0" in v}
        assert {"Path=/ui/principals", "Path=/ui", "Path=/"} <= expired, expired
        # A sign-in nonce planted for /ui/login beside the form's own blocks no one.
        _, headers, _ = raw(server, "GET", "/ui/login")
        nonce = set_cookies(headers)["icegate_login"]
        form = urllib.parse.urlencode({"nonce": nonce, "client_id": ADMIN_ID, "client_secret": ADMIN_SECRET})
        status, headers, _ = raw(server, "POST", "/ui/login", {"Content-Type": "application/x-www-form-urlencoded",
                                 "Cookie": f"icegate_login=planted; icegate_login={nonce}"}, form)
        assert status == 303 and set_cookies(headers).get("icegate_session")

        # The evil issuer's answer: a token that is not its own opens no session.
        status, headers, _ = raw(server, "GET", "/ui/oidc/start?i=0")
        assert status == 303
        location = dict(headers)["location"]
        state = urllib.parse.parse_qs(urllib.parse.urlparse(location).query)["state"][0]
        assert urllib.parse.parse_qs(urllib.parse.urlparse(location).query)["code_challenge_method"] == ["S256"]
        flow = set_cookies(headers)["icegate_oidc"]
        status, headers, text = raw(server, "GET", f"/ui/oidc/callback/evil?code=x&state={state}",
                                    {"Cookie": f"icegate_oidc={flow}"})
        assert status == 401 and "icegate_session" not in set_cookies(headers), text
        assert "not one it issued" in text
        # An answer brought back to another issuer's path is refused before any code is redeemed.
        status, _, _ = raw(server, "GET", f"/ui/oidc/callback/idp?code=x&state={state}", {"Cookie": f"icegate_oidc={flow}"})
        assert status == 400

        # "Who can access" for the one level `a.b` is not the table of levels `a`, `b`.
        catalog = admin_catalog(server)
        catalog.create_namespace(("a.b",))
        catalog.create_namespace(("a",))
        catalog.create_namespace(("a", "b"))
        catalog.create_table(("a.b", "t"), schema=SCHEMA)
        catalog.create_table(("a", "b", "t"), schema=SCHEMA)
        principal(server, token, "nested-writer", "nested-writers", "write",
                  {"type": "table", "warehouse": "default", "namespace": ["a", "b"], "name": "t"})
        dotted_page = raw(server, "GET", "/ui/table?w=default&ns=a.b&t=t", {"Cookie": f"icegate_session={session}"})[2]
        nested_page = raw(server, "GET", "/ui/table?w=default&ns=a%1Fb&t=t", {"Cookie": f"icegate_session={session}"})[2]
        assert "Table &quot;a.b&quot;.t" in dotted_page or 'Table "a.b".t' in dotted_page
        assert "nested-writer" not in dotted_page.split("Who can access it")[1]
        assert "nested-writer" in nested_page.split("Who can access it")[1]
    finally:
        server.stop()
        evil.close()
