// The operator page in a real browser: Debian's Chromium, headless, driven by playwright-core.
// Run by test_operator_page.py against `switchyard serve` on the embedded demo, with
// GATEWAY (its URL), ADMIN_KEY and SCREENSHOT (where to write the picture) in the environment.
// Exits non-zero, naming the step, when the page does not do what an operator needs.
const { chromium } = require('playwright-core');

const gateway = process.env.GATEWAY;
const adminKey = process.env.ADMIN_KEY;
const STEP_MS = 15000;

async function post(path, body, key) {
  const headers = { 'content-type': 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  const response = await fetch(gateway + path, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: response.status, body: await response.json() };
}

function chat(model) {
  return post('/v1/chat/completions', { model, messages: [{ role: 'user', content: 'hello' }] });
}

async function step(name, action) {
  try {
    return await action();
  } catch (error) {
    throw new Error(`${name}: ${error.message.split('\n')[0]}`);
  }
}

(async () => {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  const report = {};
  try {
    const page = await browser.newPage({ viewport: { width: 1360, height: 1100 } });
    page.setDefaultTimeout(STEP_MS);
    const dialogs = [];
    page.on('dialog', (dialog) => { dialogs.push(dialog.message()); dialog.accept(); });
    const failures = [];
    page.on('pageerror', (error) => failures.push(String(error)));

    await page.goto(gateway + '/admin/');
    await step('the page asks for the admin key', async () => {
      await page.locator('#login').waitFor({ state: 'visible' });
      await page.fill('#key', 'not-the-key');
      await page.click('#login button[type=submit]');
      await page.locator('#login-error', { hasText: 'refused' }).waitFor();
      await page.fill('#key', adminKey);
      await page.click('#login button[type=submit]');
      await page.locator('#login').waitFor({ state: 'hidden' });
    });
    await step('the event stream is live', () => page.locator('#live', { hasText: 'live' }).waitFor());
    const targets = ['flaky:fast-model', 'steady:solid-model', 'flaky:embed-small', 'steady:embed-small'];
    await step('every target of the demo is listed', async () => {
      for (const target of targets) await page.locator(`#targets tr[data-target="${target}"]`).waitFor();
    });
    report.targets = await page.locator('#targets tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.target));

    await step('requests appear as they finish', async () => {
      for (let i = 0; i < 3; i++) await chat('default');
      await page.waitForFunction(() => document.querySelectorAll('#requests tbody tr').length >= 3);
    });

    const refused = await post('/admin/simulated/steady', { error_rates: { unavailable: 1.0 } }, null);
    report.drill_without_key = refused.status;
    const drilled = await post('/admin/simulated/steady', { error_rates: { unavailable: 1.0 } }, adminKey);
    report.drill = drilled.body;
    if (drilled.status !== 200) throw new Error(`the fault drill answered ${drilled.status}: ${JSON.stringify(drilled.body)}`);

    const breaker = page.locator('#targets tr[data-target="steady:solid-model"] td.breaker');
    await step('the broken target\'s breaker opens on the page, live', async () => {
      // Named directly, the target is called even while gated: three failures open its circuit.
      for (let i = 0; i < 3; i++) await chat('steady:solid-model');
      await page.locator('#targets tr[data-target="steady:solid-model"] td.breaker[data-breaker="open"]').waitFor();
    });
    report.breaker_text = (await breaker.innerText()).replace(/\s+/g, ' ').trim();
    await step('the drill shows beside its provider', () =>
      page.locator('#providers tr[data-provider="steady"] .drill', { hasText: 'unavailable' }).waitFor());

    await step('a failed request opens its trail', async () => {
      await page.waitForFunction(() => [...document.querySelectorAll('#requests tbody tr')].some((r) => r.classList.contains('failed')));
      await page.locator('#requests tbody tr.failed').first().click();
      await page.locator('#trail-panel').waitFor({ state: 'visible' });
      await page.locator('#trail tbody tr[data-outcome="failed"], #trail tbody tr[data-outcome="retried"]').first().waitFor();
    });
    report.trail = await page.locator('#trail tbody tr').evaluateAll((rows) => rows.map((r) => r.innerText.replace(/\s+/g, ' ').trim()));
    report.events = await page.locator('#events li').evaluateAll((items) => items.map((i) => i.dataset.event));

    await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });

    await step('resetting the target asks first, then closes its breaker', async () => {
      await page.click('#targets tr[data-target="steady:solid-model"] button.reset');
      await page.locator('#targets tr[data-target="steady:solid-model"] td.breaker[data-breaker="closed"]').waitFor();
    });
    report.dialogs = dialogs;
    await post('/admin/simulated/steady', {}, adminKey);
    report.page_errors = failures;
    console.log(JSON.stringify(report));
  } finally {
    await browser.close();
  }
})().catch((error) => { console.error(String(error)); process.exit(1); });
