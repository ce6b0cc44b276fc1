// The dashboard in a real browser (Debian's chromium through playwright-core). Started by
// pgflow-dashboard/tests/browser.rs, which serves the dashboard and runs the workers and passes
// what to look at in the environment. Each check throws with what it saw; the exit code says
// whether all passed.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (tests/browser.rs sets it)`);
  return value;
};
const base = env("DASHBOARD_URL");
const queue = env("QUEUE");
const runningRun = env("RUN_RUNNING");
const failedRun = env("RUN_FAILED");
const cancelRun = env("RUN_TO_CANCEL");
const signalRun = env("RUN_TO_SIGNAL");
const failedError = env("FAILED_ERROR");
const flow = env("FLOW");
const failedRuns = Number(env("FAILED_RUNS"));
const token = env("ACTION_TOKEN");
const shots = env("SCREENSHOT_DIR");
mkdirSync(shots, { recursive: true });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking"],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
const failures = [];
async function check(name, body) {
  try {
    await body();
    console.log(`ok    ${name}`);
  } catch (error) {
    failures.push(name);
    console.log(`FAIL  ${name}: ${error.message}`);
    await page.screenshot({ path: `${shots}/failed-${name.replace(/\W+/g, "-")}.png`, fullPage: true })
      .catch(() => {});
  }
}
function expect(condition, message) {
  if (!condition) throw new Error(message);
}

await check("the overview lists the queue and its live worker", async () => {
  await page.goto(`${base}/`);
  const row = page.locator(`#queues tr[data-queue="${queue}"]`);
  await row.waitFor({ timeout: 10000 });
  const workers = page.locator(`#workers tr[data-worker]`, { hasText: queue });
  expect(await workers.count() >= 1, `no worker row for queue ${queue}`);
  const liveness = await workers.first().locator("[data-status]").getAttribute("data-status");
  expect(liveness === "alive", `the worker is ${liveness}, not alive`);
  await page.screenshot({ path: `${shots}/overview.png`, fullPage: true });
});

await check("the trend charts show the burst of failures", async () => {
  await page.goto(`${base}/`);
  const failed = page.locator(`#run-trends tr[data-flow="${flow}"] figure[data-chart="runs-failed"]`);
  await failed.waitFor({ timeout: 10000 });
  // Every failure of the test ended within a minute or two: the peak holds nearly all of them.
  const line = failed.locator("[data-series]");
  const peak = Number(await line.getAttribute("data-max"));
  expect(peak >= failedRuns / 2 && peak <= failedRuns,
         `the failed chart's peak is ${peak}, expected about ${failedRuns}`);
  const box = await failed.locator("svg").boundingBox();
  expect(box && box.width > 100 && box.height > 20, `the chart is drawn ${JSON.stringify(box)}`);
  // The peak is drawn at the top of the chart: a point of the line has y = 0.
  const top = await line.evaluate((el) => el.tagName === "circle"
    ? Number(el.getAttribute("cy")) === 0
    : el.getAttribute("points").split(" ").some((p) => Number(p.split(",")[1]) === 0));
  expect(top, "no point of the failed line reaches the top of its chart");
  const caption = await failed.locator("figcaption").innerText();
  expect(caption.startsWith(`max ${peak}/min`), `the caption reads "${caption}"`);
  await page.locator("#trends").screenshot({ path: `${shots}/trends.png` });

  await Promise.all([page.waitForURL(/trends=day/), page.click('#trends nav a[href="/?trends=day"]')]);
  const daily = page.locator(`#run-trends tr[data-flow="${flow}"] figure[data-chart="runs-failed"] [data-series]`);
  const perMinute = Number(await daily.getAttribute("data-max"));
  // Ten minutes a point (a burst across two periods splits between them).
  expect(perMinute >= failedRuns / 20 && perMinute <= failedRuns / 10 + 1e-9,
         `over ten minutes the failures are ${perMinute} a minute, expected up to ${failedRuns / 10}`);
  await page.screenshot({ path: `${shots}/overview-day.png`, fullPage: true });
});

await check("a running run's page turns completed without a reload", async () => {
  await page.goto(`${base}/runs/${runningRun}`);
  const status = await page.locator("#run-body").getAttribute("data-status");
  expect(status === "started", `the run is ${status} when the page opens, expected started`);
  await page.evaluate(() => { window.__sameDocument = true; });
  await page.locator('#run-body[data-status="completed"]').waitFor({ timeout: 30000 });
  const same = await page.evaluate(() => window.__sameDocument === true);
  expect(same, "the page was reloaded (its script state is gone)");
  const steps = await page.locator("#steps tr[data-step]").evaluateAll(
    (rows) => rows.map((row) => row.getAttribute("data-status")));
  expect(steps.every((s) => s === "completed"), `steps are ${steps.join(", ")}`);
  await page.screenshot({ path: `${shots}/run.png`, fullPage: true });
});

await check("a failed step shows its error", async () => {
  await page.goto(`${base}/runs/${failedRun}`);
  const badge = await page.locator("#run-body").getAttribute("data-status");
  expect(badge === "failed", `the run is ${badge}`);
  const error = await page.locator('#steps tr[data-status="failed"] td.error').first().innerText();
  expect(error.includes(failedError), `the failed step's error reads "${error}"`);
  await page.screenshot({ path: `${shots}/failed-run.png`, fullPage: true });
});

await check("the status and flow filters narrow the runs", async () => {
  await page.goto(`${base}/runs`);
  await page.selectOption('select[name="status"]', "failed");
  await Promise.all([page.waitForURL(/status=failed/), page.click('form.filters button[type="submit"]')]);
  const failedRows = await page.locator("#runs tr[data-run]").evaluateAll(
    (rows) => rows.map((row) => [row.getAttribute("data-run"),
                                 row.querySelector("[data-status]").getAttribute("data-status")]));
  expect(failedRows.length >= 1, "no failed run listed");
  expect(failedRows.every(([, s]) => s === "failed"), `statuses: ${failedRows.map(([, s]) => s)}`);
  expect(failedRows.some(([id]) => id === failedRun), "the failed run is missing");
  expect(!failedRows.some(([id]) => id === runningRun), "the completed run is listed as failed");
  await page.selectOption('select[name="status"]', "completed");
  await Promise.all([page.waitForURL(/status=completed/), page.click('form.filters button[type="submit"]')]);
  const completed = await page.locator("#runs tr[data-run]").evaluateAll(
    (rows) => rows.map((row) => row.getAttribute("data-run")));
  expect(completed.includes(runningRun) && !completed.includes(failedRun),
         `completed filter lists ${completed}`);
  await page.screenshot({ path: `${shots}/runs.png`, fullPage: true });
});

await check("cancel refuses a wrong token, then cancels with the right one", async () => {
  await page.goto(`${base}/runs/${cancelRun}`);
  await Promise.all([page.waitForURL(/\/cancel$/), page.click("#cancel")]);
  await page.fill('input[name="token"]', "not-the-token-at-all");
  const refused = page.waitForResponse((r) => r.request().method() === "POST");
  await page.click("form.confirm button[type=submit]");
  const response = await refused;
  expect(response.status() === 403, `a wrong token got ${response.status()}`);
  const message = await page.locator(".error-message").innerText();
  expect(message.includes("wrong action token"), `the refusal reads "${message}"`);
  await page.goto(`${base}/runs/${cancelRun}`);
  const still = await page.locator("#run-body").getAttribute("data-status");
  expect(still === "started", `after the refusal the run is ${still}`);

  await Promise.all([page.waitForURL(/\/cancel$/), page.click("#cancel")]);
  await page.fill('input[name="reason"]', "cancelled from the browser test");
  await page.fill('input[name="token"]', token);
  await Promise.all([page.waitForURL(new RegExp(`/runs/${cancelRun}$`)),
                     page.click("form.confirm button[type=submit]")]);
  await page.locator('#run-body[data-status="cancelled"]').waitFor({ timeout: 10000 });
  await page.screenshot({ path: `${shots}/cancelled-run.png`, fullPage: true });
});

await check("a waiting run shows its signal, refuses bad JSON, and takes the signal", async () => {
  await page.goto(`${base}/runs/${signalRun}`);
  const waiting = await page.locator('#waits tr[data-signal="approval"]').innerText();
  expect(waiting.includes("approval"), `the waits table reads "${waiting}"`);
  const step = await page.locator('#steps tr[data-step="approve"]').getAttribute("data-status");
  expect(step === "waiting", `the step is ${step}`);
  await page.screenshot({ path: `${shots}/waiting-run.png`, fullPage: true });

  await Promise.all([page.waitForURL(/\/signal\/approval$/), page.click("#signal-approval")]);
  await page.fill('textarea[name="payload"]', "{not json");
  await page.fill('input[name="token"]', token);
  const refused = page.waitForResponse((r) => r.request().method() === "POST");
  await page.click("form.confirm button[type=submit]");
  const response = await refused;
  expect(response.status() === 400, `bad JSON got ${response.status()}`);

  await page.goto(`${base}/runs/${signalRun}/signal/approval`);
  await page.fill('textarea[name="payload"]', '{"by": "the browser"}');
  await page.fill('input[name="token"]', token);
  await Promise.all([page.waitForURL(new RegExp(`/runs/${signalRun}$`)),
                     page.click("form.confirm button[type=submit]")]);
  await page.locator('#run-body[data-status="completed"]').waitFor({ timeout: 15000 });
  await page.screenshot({ path: `${shots}/signalled-run.png`, fullPage: true });
});

await browser.close();
if (failures.length > 0) {
  console.log(`${failures.length} browser check(s) failed: ${failures.join("; ")}`);
  process.exit(1);
}
