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

try {
  // The admin: sign in, browse to the table, see its columns and snapshot plot.
  const admin = await session(1280, 900);
  let page = admin.page;
  const csp = (await (await page.goto(`${url}/ui/login`)).headers())["content-security-policy"];
  results.steps.csp = csp;
  await shot(page, "login");
  await signIn(page, params.admin_id, params.admin_secret);
  const cookies = await admin.context.cookies();
  results.steps.cookie = cookies.find((c) => c.name === "icegate_session");
  await shot(page, "warehouses");
  await page.getByRole("link", { name: "default", exact: true }).click();
  await shot(page, "warehouse");
  results.steps.namespaces = await page.locator("ul.tree a").allTextContents();
  await page.getByRole("link", { name: "sales", exact: true }).click();
  results.steps.namespace_text = await page.locator("main").innerText();
  await page.getByRole("link", { name: "orders", exact: true }).click();
  await shot(page, "table");
  results.steps.columns = await page.locator("main table").first().locator("tbody td:nth-child(2)").allTextContents();
  results.steps.plot_points = await page.locator("figure.timeline circle").count();
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
  await page.getByRole("button", { name: "Grant", exact: true }).click();
  await page.waitForURL(`${url}/ui/access`);
  results.steps.grant_note = await page.locator("p.note").innerText();
  await shot(page, "access");
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

  // Tasks, with their progress.
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
  await narrow.context.close();
} catch (error) {
  results.error = String(error && error.stack || error);
} finally {
  await browser.close();
  writeFileSync(`${outdir}/results.json`, JSON.stringify(results, null, 2));
}
