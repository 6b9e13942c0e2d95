// The operator page in a real browser: Debian's Chromium, headless, driven by playwright-core.
// Run by test_operator_page.py against `switchyard serve`, with GATEWAY (its URL), ADMIN_KEY,
// GATEWAY_KEY (when clients need one) and SCREENSHOT (where to write the picture) in the
// environment. SCENARIO picks what is checked: `drill` (the default, on the embedded demo: a
// fault drill followed live) or `details` (on details_config() of test_operator_page.py: the
// events panel's first events, a broken stream, sub-millisecond latencies, a request by id) or
// `fleet` (three replicas on one Redis, the page opened on one, OTHER the URL of another: the
// replicas listed, a request the other served shown live and its trail opened, the picker).
// Exits non-zero, naming the step, when the page does not do what an operator needs.
const { chromium } = require('playwright-core');

const gateway = process.env.GATEWAY;
const adminKey = process.env.ADMIN_KEY;
const gatewayKey = process.env.GATEWAY_KEY;
const STEP_MS = 15000;

async function post(path, body, key) {
  const headers = { 'content-type': 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  const response = await fetch(gateway + path, { method: 'POST', headers, body: JSON.stringify(body) });
  const text = await response.text();
  let json = text;
  try { json = JSON.parse(text); } catch { /* a stream, or an error page */ }
  return { status: response.status, body: json, id: response.headers.get('x-request-id') };
}

function chat(model, extra) {
  return post('/v1/chat/completions', Object.assign({ model, messages: [{ role: 'user', content: 'hello' }] }, extra || {}), gatewayKey);
}

async function get(path) {
  const response = await fetch(gateway + path, { headers: { authorization: `Bearer ${adminKey}` } });
  return response.json();
}

async function logIn(page) {
  await page.locator('#login').waitFor({ state: 'visible' });
  await page.fill('#key', adminKey);
  await page.click('#login button[type=submit]');
  await page.locator('#login').waitFor({ state: 'hidden' });
}

// The details an operator's first hour needs, each a step.
async function details(page, report) {
  // Before the page opens: a failure and its fallback, a stream that breaks after its 200,
  // and quick requests.
  const fellBack = await chat('default');
  if (fellBack.status !== 200) throw new Error(`the fallback answered ${fellBack.status}`);
  const broken = await chat('broken', { stream: true });
  report.broken_status = broken.status;
  for (let i = 0; i < 10; i++) { await chat('steady:m'); await chat('no-such-model'); }
  // gpt-a answers 429: the key rests for gpt-a only, and gpt-b on the same key answers.
  report.limited_status = (await chat('limited')).status;

  await page.goto(gateway + '/admin/');
  await step('the page asks for the admin key', () => logIn(page));
  await step('the event stream is live', () => page.locator('#live', { hasText: 'live' }).waitFor());
  await step('a reload the gateway refused is shown with its problem', () =>
    page.locator('#config .broken', { hasText: 'reload refused' }).waitFor());
  report.config_text = await page.locator('#config').textContent();
  await step('the events panel opens with what happened before the page', () =>
    page.locator('#events li[data-event="attempt_failed"]').first().waitFor());
  report.first_events = await page.locator('#events li').evaluateAll((items) => items.map((i) => i.dataset.event));

  await step('a broken stream shows as broken, not as a plain 200', async () => {
    const row = page.locator(`#requests tr[data-request="${broken.id}"]`);
    await row.waitFor();
    report.broken_row = { broken: await row.getAttribute('data-broken'), status: (await row.locator('td.status-code').innerText()).trim() };
  });
  await step('the fallback carries its marker', () =>
    page.locator(`#requests tr[data-request="${fellBack.id}"][data-fallback="true"] .fallback`).waitFor());

  await step('a sub-millisecond latency is not shown as 0', async () => {
    const { requests } = await get('/admin/requests?limit=100');
    const quick = requests.filter((r) => r.duration_ms < 1);
    if (quick.length === 0) throw new Error('no request took under a millisecond: ' + requests.map((r) => r.duration_ms).join(', '));
    report.quick = [];
    for (const r of quick) {
      const cell = page.locator(`#requests tr[data-request="${r.request_id}"] td.latency`);
      report.quick.push({ ms: r.duration_ms, text: (await cell.innerText()).trim() });
    }
  });

  await step('a request id in the address opens its trail, at load too', async () => {
    await page.goto(gateway + '/admin/#' + broken.id);
    await page.locator('#trail-panel').waitFor({ state: 'visible' });
    await page.locator('#trail-id', { hasText: broken.id }).waitFor();
    await page.reload();
    await page.locator('#trail-panel').waitFor({ state: 'visible' });
    await page.locator('#trail-id', { hasText: broken.id }).waitFor();
    await page.locator('#trail tbody tr').first().waitFor();
    report.broken_summary = await page.locator('#trail-summary').innerText();
  });
  await step('the search box opens a request by id and links it', async () => {
    await page.fill('#find-id', fellBack.id);
    await page.click('#find button[type=submit]');
    await page.locator('#trail-id', { hasText: fellBack.id }).waitFor();
    await page.locator('#trail-summary', { hasText: 'after a fallback' }).waitFor();
    report.hash = await page.evaluate(() => location.hash);
    await page.fill('#find-id', 'req_nowhere');
    await page.click('#find button[type=submit]');
    await page.locator('#trail-summary', { hasText: 'no recent request' }).waitFor();
  });
  await step('the client keys show their usage against their limits and budget', async () => {
    const row = page.locator('#keys tr[data-key="team-a"]');
    await row.waitFor();
    const cell = async (name) => (await row.locator('td.' + name).innerText()).trim();
    report.key_row = {
      name: (await row.locator('td').first().innerText()).trim(),
      routes: (await row.locator('td').nth(1).innerText()).trim(),
      requests: await cell('requests'),
      in_flight: await cell('in-flight'),
      budget: await cell('budget'),
    };
  });
  await step('a key resting for one model is shown on that target', async () => {
    const rest = page.locator('#targets tr[data-target="limited:gpt-a"] .key-rest');
    await rest.waitFor();
    report.key_rest = (await rest.innerText()).trim();
    report.keys_of_limited = (await page.locator('#providers tr[data-provider="limited"]').innerText()).trim();
  });
  await step("a key's usage follows its requests live", async () => {
    const before = parseInt(report.key_row.requests, 10);
    await chat('steady:m');
    await page.waitForFunction((n) => {
      const cell = document.querySelector('#keys tr[data-key="team-a"] td.requests');
      return cell && parseInt(cell.innerText, 10) > n;
    }, before);
    report.key_requests_after = (await page.locator('#keys tr[data-key="team-a"] td.requests').innerText()).trim();
  });
  await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
}

// The page opened on one replica of three shows the fleet.
async function fleet(page, report) {
  const other = process.env.OTHER;
  await page.goto(gateway + '/admin/');
  await step('the page asks for the admin key', () => logIn(page));
  await step('all three replicas are listed', () =>
    page.waitForFunction(() => document.querySelectorAll('#replicas tbody tr[data-replica]').length === 3));
  report.replicas = await page.locator('#replicas tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.replica));
  await step('each target says how the other replicas see it', () =>
    page.waitForFunction(() => [...document.querySelectorAll('#targets td.fleet-view')].some((c) => c.innerText.trim() === 'same')));
  report.fleet_view = await page.locator('#targets td.fleet-view').evaluateAll((cells) => cells.map((c) => c.innerText.trim()));
  await step('the event stream is live', () => page.locator('#live', { hasText: 'live' }).waitFor());
  const response = await fetch(other + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${gatewayKey}` },
    body: JSON.stringify({ model: 'default', messages: [{ role: 'user', content: 'hello' }] }),
  });
  const id = response.headers.get('x-request-id');
  if (response.status !== 200) throw new Error(`the other replica answered ${response.status}`);
  const row = page.locator(`#requests tr[data-request="${id}"]`);
  await step('a request another replica served appears, live', () => row.waitFor());
  report.other_row_replica = (await row.locator('td.replica').innerText()).trim();
  await step('its trail opens from the page', async () => {
    await row.click();
    await page.locator('#trail-panel').waitFor({ state: 'visible' });
    await page.locator('#trail tbody tr[data-outcome="ok"]').first().waitFor();
  });
  report.trail_summary = await page.locator('#trail-summary').innerText();
  await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
  await step('the picker shows one replica\'s requests', async () => {
    await page.selectOption('#scope', 'b');
    await page.waitForFunction(() => [...document.querySelectorAll('#requests tbody tr td.replica')].every((c) => c.innerText.trim() === 'b'));
  });
  report.picked = await page.locator('#requests tbody tr td.replica').evaluateAll((cells) => cells.map((c) => c.innerText.trim()));
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
    if (process.env.SCENARIO === 'details' || process.env.SCENARIO === 'fleet') {
      await (process.env.SCENARIO === 'fleet' ? fleet : details)(page, report);
      report.page_errors = failures;
      console.log(JSON.stringify(report));
      return;
    }

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
