// Drives icegate's console in Debian's headless Chromium with playwright-core (no browser
// download): node console.mjs URL OUTDIR PARAMS_JSON. Writes OUTDIR/results.json with what it
// saw, and a screenshot of each page; the pytest side judges both and the effects at the API.
import { chromium } from "playwright-core";
import { writeFileSync } from "node:fs";

const [url, outdir, paramsJson] = process.argv.slice(2);
const params = JSON.parse(paramsJson);
const results = { dialogs: [], steps: {} };
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"],
});
const shot = async (page, name) => page.screenshot({ path: `${outdir}/${name}.png`, fullPage: true });

async function session(width, height) {
  const context = await browser.newContext({ viewport: { width, height } });
  const page = await context.newPage();
  page.on("dialog", async (d) => { results.dialogs.push(d.message()); await d.dismiss(); });
  return { context, page };
}

async function signIn(page, id, secret) {
  await page.goto(`${url}/ui`);
  await page.getByLabel("Client id").fill(id);
  await page.getByLabel("Client secret").fill(secret);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(`${url}/ui`);
}

// Reads a page that reloads itself (work in progress) until `done` says its text is final,
// without ever reloading it here; answers every text seen.
async function follow(page, selector, done, seconds = 90) {
  const seen = [];
  const deadline = Date.now() + seconds * 1000;
  while (Date.now() < deadline) {
    const text = (await page.locator(selector).first().innerText().catch(() => "")).trim();
    if (text && seen[seen.length - 1] !== text) seen.push(text);
    if (done(text)) break;
    await page.waitForTimeout(300);
  }
  return seen;
}

async function signInThroughTheIssuer() {
  const { context, page } = await session(1280, 900);
  await page.goto(`${url}/ui/login`);
  await shot(page, "login-oidc");
  await page.getByRole("link", { name: params.sso_button }).click();
  await page.locator("input[name=login]").fill(params.oidc_user);
  await page.locator("input[name=password]").fill("any");
  await page.locator("button[type=submit]").click();
  // The provider's consent page, then back to the console.
  await page.locator("button[type=submit]").click();
  await page.waitForURL(`${url}/ui`);
  results.steps.oidc_signed_in = await page.locator("form.signout").innerText();
  results.steps.oidc_flow_cookie = (await context.cookies()).filter((c) => c.name === "icegate_oidc").length;
  results.steps.oidc_session_cookie = (await context.cookies()).find((c) => c.name === "icegate_session");
  results.steps.oidc_home = await page.locator("main").innerText();
  await shot(page, "oidc-home");
  // A page of another origin on the same site plants its own sign-in form's nonce and posts
  // mallory's credentials to the console: refused, alice stays signed in.
  await page.goto(params.attacker_page);
  await page.waitForLoadState("load");
  await page.waitForTimeout(500);
  results.steps.tossed_login_url = page.url();
  results.steps.tossed_login_text = await page.locator("body").innerText();
  await page.goto(`${url}/ui`);
  results.steps.after_tossed_login = await page.locator("form.signout").innerText();
  // Another browser (the attacker's) runs its own sign-in up to the issuer's answer, which it
  // keeps; its flow cookie is planted in alice's browser (as a same-site page can) and her
  // browser sent to the kept answer: her session is not replaced.
  const attacker = await session(1280, 900);
  await attacker.page.goto(`${url}/ui/login`);
  await attacker.page.getByRole("link", { name: params.sso_button }).click();
  await attacker.page.locator("input[name=login]").fill("mallory");
  await attacker.page.locator("input[name=password]").fill("any");
  await attacker.page.locator("button[type=submit]").click();
  // The consent form posted by hand, and the provider's redirects followed up to the answer,
  // which is kept rather than delivered.
  await attacker.page.waitForLoadState("load");
  const action = new URL(await attacker.page.locator("form").first().getAttribute("action"), attacker.page.url()).href;
  const fields = await attacker.page.evaluate(() => Object.fromEntries(new FormData(document.forms[0])));
  let answer = await attacker.page.request.post(action, { form: fields, maxRedirects: 0 });
  results.steps.consent_answer = answer.status();
  let kept = answer.headers()["location"];
  for (let i = 0; i < 5 && kept && !kept.includes("/ui/oidc/callback/"); i++) {
    answer = await attacker.page.request.get(new URL(kept, action).href, { maxRedirects: 0 });
    kept = answer.headers()["location"];
  }
  const attackerCookies = await attacker.context.cookies();
  results.steps.attacker_cookies = attackerCookies.map((c) => `${c.name}@${c.path}`);
  results.steps.attacker_url = attacker.page.url();
  const flow = attackerCookies.find((c) => c.name === "icegate_oidc");
  await attacker.context.close();
  results.steps.kept_answer = Boolean(kept && flow);
  // (With a junk session cookie planted beside alice's, for the answer's path.)
  await context.addCookies([
    { name: "icegate_oidc", value: flow.value, domain: "127.0.0.1", path: "/ui/oidc/callback/idp", httpOnly: true, sameSite: "Lax" },
    { name: "icegate_session", value: "junk", domain: "127.0.0.1", path: "/ui/oidc/callback/idp", sameSite: "Lax" },
  ]);
  const planted = await page.goto(kept);
  results.steps.planted_status = planted.status();
  results.steps.planted_text = await page.locator("main").innerText();
  await page.goto(`${url}/ui`);
  results.steps.after_planted = `${page.url()} ${await page.locator("body").innerText()}`;
  // An answer for a sign-in this browser did not start (another state) is refused.
  const forged = await page.request.get(`${url}/ui/oidc/callback/idp?code=stolen&state=forged`, { maxRedirects: 0 });
  results.steps.oidc_forged_status = forged.status();
  await context.close();
  // A browser that started no sign-in cannot finish one (login CSRF).
  const other = await session(1280, 900);
  const foreign = await other.page.request.get(`${url}/ui/oidc/callback/idp?code=stolen&state=anything`, { maxRedirects: 0 });
  results.steps.oidc_foreign_status = foreign.status();
  await other.context.close();
}

try {
  if (params.mode === "oidc") {
    await signInThroughTheIssuer();
  } else {
    await everything();
  }
} catch (error) {
  results.error = String(error && error.stack || error);
  // Where it stopped: each open page's screenshot and text.
  let i = 0;
  for (const context of browser.contexts()) {
    for (const open of context.pages()) {
      await shot(open, `failure-${i}`).catch(() => {});
      results[`failure_${i++}`] = { url: open.url(), text: await open.locator("body").innerText().catch(() => "") };
    }
  }
} finally {
  await browser.close();
  writeFileSync(`${outdir}/results.json`, JSON.stringify(results, null, 2));
}

async function everything() {
  // The admin: sign in, browse to the table, see its columns and snapshot plot.
  const admin = await session(1280, 900);
  let page = admin.page;
  const csp = (await (await page.goto(`${url}/ui/login`)).headers())["content-security-policy"];
  results.steps.csp = csp;
  await shot(page, "login");
  await signIn(page, params.admin_id, params.admin_secret);
  const cookies = await admin.context.cookies();
  results.steps.cookie = cookies.find((c) => c.name === "icegate_session");
  results.steps.signed_in_as = await page.locator("form.signout").innerText();
  await shot(page, "warehouses");
  await page.getByRole("link", { name: "default", exact: true }).click();
  await shot(page, "warehouse");
  results.steps.namespaces = await page.locator("ul.tree a").allTextContents();
  await page.getByRole("link", { name: "sales", exact: true }).click();
  results.steps.namespace_text = await page.locator("main").innerText();
  await page.getByRole("link", { name: "orders", exact: true }).click();
  await shot(page, "table");
  await page.screenshot({ path: `${outdir}/table-viewport.png` });
  results.steps.columns = await page.locator("main table").first().locator("tbody td:nth-child(2)").allTextContents();
  results.steps.plot_points = await page.locator("figure.timeline circle").count();
  results.steps.plot_bars = await page.locator("figure.timeline rect.added").count();
  results.steps.plot_titles = await page.locator("figure.timeline circle title").allTextContents();
  results.steps.table_text = await page.locator("main").innerText();
  // Keyboard: the first link is reachable with Tab.
  await page.keyboard.press("Tab");
  results.steps.focused = await page.evaluate(() => document.activeElement?.tagName);

  // Grant a role read on the table in the console; its member then shows in "who can access".
  await page.goto(`${url}/ui/access`);
  await page.getByLabel("Role", { exact: true }).fill(params.grant_role);
  await page.getByLabel("Privilege", { exact: true }).selectOption("read");
  await page.getByLabel(/^On/).fill("default.sales.orders");
  await page.getByLabel("Kind", { exact: true }).selectOption("table");
  // The form's request id goes with the API call it makes (one id for the page and its audit).
  await page.setExtraHTTPHeaders({ "x-request-id": params.request_id });
  await page.getByRole("button", { name: "Grant", exact: true }).click();
  await page.waitForURL(`${url}/ui/access`);
  await page.setExtraHTTPHeaders({});
  results.steps.grant_note = await page.locator("p.note").innerText();
  await shot(page, "access");
  // A role made, given a member, the member removed, the role deleted.
  await page.getByLabel("Role name").fill("ops");
  await page.getByRole("button", { name: "Create role" }).click();
  await page.waitForURL(`${url}/ui/access`);
  results.steps.role_created = await page.locator("p.note").innerText();
  await page.getByLabel("Principal to add to ops").fill("eve");
  await page.getByRole("button", { name: "Add to ops" }).click();
  await page.waitForURL(`${url}/ui/access`);
  results.steps.member_added = await page.locator("p.note").innerText();
  results.steps.ops_row = await page.locator("table.roles tbody tr", { has: page.getByRole("button", { name: "Delete role ops" }) }).innerText();
  await page.getByRole("button", { name: "Remove eve from ops" }).click();
  await page.waitForURL(`${url}/ui/access`);
  results.steps.member_removed = await page.locator("p.note").innerText();
  const opsRow = page.locator("table.roles tbody tr", { has: page.getByRole("button", { name: "Delete role ops" }) });
  await opsRow.getByRole("checkbox").first().check();
  await opsRow.getByRole("button", { name: "Delete role ops" }).click();
  await page.waitForURL(`${url}/ui/access`);
  results.steps.role_deleted = await page.locator("p.note").innerText();
  await page.goto(`${url}/ui/table?w=default&ns=sales&t=orders`);
  results.steps.who_can = await page.locator("table.access tbody td:first-child").allTextContents();

  // The audit trail, filtered.
  await page.goto(`${url}/ui/audit?action=loadTable`);
  await shot(page, "audit");
  results.steps.audit_rows = await page.locator("table.audit tbody tr").count();
  results.steps.audit_text = await page.locator("table.audit").innerText();

  // Undrop from the deleted tables' page.
  await page.goto(`${url}/ui/deleted?w=default`);
  await shot(page, "deleted");
  await page.getByRole("button", { name: `Undrop ${params.dropped}` }).click();
  await page.waitForURL(/\/ui\/deleted/);
  results.steps.undrop_note = await page.locator("p.note").innerText();
  await shot(page, "undropped");

  // A status box only says what this session did: a link's text does not land in it.
  await page.goto(`${url}/ui/deleted?w=default&note=${encodeURIComponent("Confirm your secret at https://evil.example")}`);
  results.steps.spoofed_note = await page.locator("p.note").count();

  // Principals: one created (its credentials shown once), its secret rotated, another deleted.
  await page.goto(`${url}/ui/principals`);
  await page.getByLabel("Name", { exact: true }).fill("carol");
  await page.getByRole("button", { name: "Create principal" }).click();
  await shot(page, "principal-created");
  results.steps.created = { id: await page.locator("#client-id").innerText(), secret: await page.locator("#client-secret").innerText() };
  await page.goto(`${url}/ui/principals`);
  await page.getByRole("button", { name: "Rotate the secret of carol" }).click();
  results.steps.rotated = { id: await page.locator("#client-id").innerText(), secret: await page.locator("#client-secret").innerText() };
  // carol signs in; once her secret is rotated again, her console session ends with her token.
  const carol = await session(1280, 900);
  await signIn(carol.page, results.steps.rotated.id, results.steps.rotated.secret);
  results.steps.carol_signed_in = await carol.page.locator("form.signout").innerText();
  await page.goto(`${url}/ui/principals`);
  await page.getByRole("button", { name: "Rotate the secret of carol" }).click();
  await carol.page.goto(`${url}/ui/tasks`);
  results.steps.carol_after_rotation = carol.page.url();
  await carol.page.goto(`${url}/ui/tasks`);
  results.steps.carol_then = carol.page.url();
  await carol.context.close();
  await page.goto(`${url}/ui/principals`);
  await page.getByLabel("Name", { exact: true }).fill("dave");
  await page.getByRole("button", { name: "Create principal" }).click();
  await page.goto(`${url}/ui/principals`);
  const daveRow = page.locator("table.principals tbody tr", { hasText: "dave" });
  await daveRow.getByRole("checkbox").check();
  await daveRow.getByRole("button", { name: "Delete dave" }).click();
  await page.waitForURL(`${url}/ui/principals`);
  results.steps.delete_note = await page.locator("p.note").innerText();
  results.steps.principals = await page.locator("table.principals tbody td:first-child").allTextContents();
  await shot(page, "principals");

  // An access review of the table: the console's grant revoked, the narrow reader attested.
  await page.goto(`${url}/ui/reviews`);
  await page.getByLabel(/^Warehouse/).fill("default");
  await page.getByLabel(/^Namespace/).fill("sales");
  await page.getByLabel("Table", { exact: true }).fill("orders");
  await page.getByLabel("Description").fill("quarterly review <b>Q4</b>");
  await page.getByRole("button", { name: "Start campaign" }).click();
  await page.waitForURL(/\/ui\/review\?id=/);
  results.steps.review_started = await page.locator("p.note").innerText();
  const consoleLine = page.locator("table.lines tbody tr", { hasText: "console-role" }).filter({ has: page.locator("td:nth-child(4)", { hasText: /^read$/ }) });
  await consoleLine.getByRole("button", { name: /^Revoke the grant/ }).click();
  await page.waitForURL(/\/ui\/review\?id=/);
  results.steps.revoke_note = await page.locator("p.note").innerText();
  const narrowLine = page.locator("table.lines tbody tr", { hasText: "narrow-readers" });
  await narrowLine.getByRole("button", { name: /^Attest/ }).click();
  await page.waitForURL(/\/ui\/review\?id=/);
  results.steps.attest_note = await page.locator("p.note").innerText();
  await page.getByRole("button", { name: "Close the campaign" }).click();
  await page.waitForURL(/\/ui\/review\?id=/);
  results.steps.review_summary = await page.locator("p.summary").innerText();
  results.steps.review_text = await page.locator("main").innerText();
  await shot(page, "review");

  // A view: its SQL for each dialect.
  await page.goto(`${url}/ui/namespace?w=default&ns=sales`);
  await page.getByRole("link", { name: params.view, exact: true }).click();
  results.steps.view_dialects = await page.locator("section.sql h3").allTextContents();
  results.steps.view_sql = await page.locator("section.sql pre").allTextContents();
  await shot(page, "view");

  // The warehouse's storage profile, and its adoptions.
  await page.goto(`${url}/ui/warehouse?w=default`);
  results.steps.warehouse_text = await page.locator("main").innerText();
  await page.getByRole("link", { name: "Adoptions into default" }).click();
  await shot(page, "adoptions");
  await page.getByRole("link", { name: params.adopted, exact: true }).click();
  results.steps.adoption_text = await page.locator("main").innerText();
  await shot(page, "adoption");

  // A task watched until it ends, and a migration run followed until it completes, then
  // rolled back from its page.
  await page.goto(`${url}/ui/table?w=default&ns=sales&t=orders`);
  await page.getByRole("button", { name: "Expire snapshots now" }).click();
  await page.waitForURL(/\/ui\/task\?id=/);
  results.steps.task_follows = await page.locator('meta[http-equiv="refresh"]').count();
  results.steps.task_url = page.url();
  results.steps.task_states = await follow(page, "dd.state", (t) => /^(done|failed|cancelled)$/.test(t));
  results.steps.task_follows_after = await page.locator('meta[http-equiv="refresh"]').count();
  await shot(page, "task");
  await page.goto(`${url}/ui/migrations?w=default`);
  await page.getByRole("link", { name: params.migration }).click();
  results.steps.migration_states = await follow(page, "dd.state", (t) => /^(completed|failed)/.test(t));
  results.steps.migration_tables = await page.locator("table.migration-tables tbody td.state").allTextContents();
  await shot(page, "migration");
  await page.getByRole("button", { name: /^Roll back/ }).click();
  await page.waitForURL(/\/ui\/migration\?id=/);
  results.steps.rollback_note = await page.locator("p.note").innerText();

  // Pages at a phone's width: nothing wider than the screen (tables scroll in themselves).
  await page.setViewportSize({ width: 390, height: 800 });
  results.steps.phone_pages = {};
  for (const path of ["/ui/principals", "/ui/access", "/ui/reviews", "/ui/tasks", `/ui/migration?id=${params.migration}`,
                      "/ui/warehouse?w=default", "/ui/audit"]) {
    await page.goto(`${url}${path}`);
    results.steps.phone_pages[path] = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  }
  await page.setViewportSize({ width: 1280, height: 900 });

  // Tasks, with their progress, filtered by kind.
  await page.goto(`${url}/ui/tasks?kind=expire-snapshots`);
  results.steps.filtered_kinds = await page.locator("main table tbody td:nth-child(2)").allTextContents();
  await page.goto(`${url}/ui/tasks`);
  await shot(page, "tasks");
  results.steps.tasks_text = await page.locator("main").innerText();

  // A forged form (no CSRF token) is refused; a request without the session too.
  const forged = await page.request.post(`${url}/ui/undrop`, {
    form: { csrf: "forged", w: "default", ns: "sales", name: params.dropped, id: "x" },
  });
  results.steps.forged_status = forged.status();

  // A phone's width.
  await page.setViewportSize({ width: 390, height: 800 });
  await page.goto(`${url}/ui/table?w=default&ns=sales&t=orders`);
  await shot(page, "table-phone");
  results.steps.phone_overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);

  // Sign out: the old session no longer works.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL(`${url}/ui/login`);
  const after = await page.request.get(`${url}/ui/tasks`, { maxRedirects: 0 });
  results.steps.after_signout_status = after.status();
  await admin.context.close();

  // A narrow principal: read on one table only.
  const narrow = await session(1280, 900);
  page = narrow.page;
  await signIn(page, params.narrow_id, params.narrow_secret);
  await page.goto(`${url}/ui/warehouse?w=default`);
  results.steps.narrow_namespaces = await page.locator("ul.tree a").allTextContents();
  await page.goto(`${url}/ui/warehouse?w=default&q=${encodeURIComponent(params.hidden_namespace)}`);
  results.steps.narrow_search = await page.locator("ul.tree a").allTextContents();
  await page.goto(`${url}/ui/table?w=default&ns=${encodeURIComponent(params.hidden_namespace)}&t=${encodeURIComponent(params.hidden_table)}`);
  results.steps.narrow_hidden_table = await page.locator("main").innerText();
  await page.goto(`${url}/ui/deleted?w=default`);
  results.steps.narrow_deleted = await page.locator("main").innerText();
  await page.goto(`${url}/ui/table?w=default&ns=sales&t=orders`);
  results.steps.narrow_visible_columns = await page.locator("main table").first().locator("tbody td:nth-child(2)").allTextContents();
  results.steps.narrow_html = await page.content();
  await shot(page, "narrow-table");
  // What the narrow principal may not manage: the API's refusal, no one's data.
  await page.goto(`${url}/ui/principals`);
  results.steps.narrow_principals = await page.locator("main").innerText();
  await page.goto(`${url}/ui/migrations?w=default`);
  results.steps.narrow_migrations = await page.locator("main").innerText();
  await page.goto(`${url}/ui/adoptions?w=default`);
  results.steps.narrow_adoptions = await page.locator("main").innerText();
  await page.goto(`${url}/ui/reviews`);
  results.steps.narrow_reviews = await page.locator("main").innerText();
  await narrow.context.close();
}
