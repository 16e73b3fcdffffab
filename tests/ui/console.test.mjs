// SPDX-License-Identifier: Apache-2.0
// The web console in a real browser (Debian's chromium, driven by
// playwright-core) against a real airlockd: tests/integration/test_ui.py
// starts the daemon and runs this with AIRLOCK_URL (its TCP listener) and
// AIRLOCK_TOKEN (a tenant token). AIRLOCK_UI_SCREENSHOTS=DIR: also saves
// screenshots of the main pages there (docs/img/console-*.png).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const BASE = process.env.AIRLOCK_URL;
const TOKEN = process.env.AIRLOCK_TOKEN;
const SHOTS = process.env.AIRLOCK_UI_SCREENSHOTS;
const BOOT_MS = 240_000; // a create under TCG on a loaded 2-core host
const DENIED_IP = '198.51.100.7'; // TEST-NET-2: no policy allows it

let browser;
let page;
let sandboxId;
// Errors in the page: CSP violations, exceptions (a refused token's 401, a
// 404 of an optional route and the terminal's WebSocket are the browser's
// reports of answers the console handles, not errors of its own).
const problems = [];
const EXPECTED = [/^Failed to load resource: the server responded with a status of (401|404)/,
  /^WebSocket connection to .*\/attach' failed/];

async function shot(name, fullPage = false) {
  if (!SHOTS) return;
  await page.evaluate(() => document.querySelectorAll('.toast:not(.progress)').forEach((t) => t.remove()));
  await page.screenshot({ path: join(SHOTS, `console-${name}.png`), fullPage });
}

async function api(method, path, body) {
  const r = await fetch(BASE + path, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  return { status: r.status, json: text ? JSON.parse(text) : null };
}

before(async () => {
  assert.ok(BASE && TOKEN, 'AIRLOCK_URL and AIRLOCK_TOKEN must be set (tests/integration/test_ui.py does)');
  browser = await chromium.launch({
    executablePath: process.env.AIRLOCK_CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await ctx.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error' && !EXPECTED.some((re) => re.test(m.text()))) problems.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('dialog', (d) => d.accept());
});

after(async () => {
  if (sandboxId) await api('DELETE', `/v1/sandboxes/${sandboxId}`).catch(() => {});
  await browser?.close();
});

test('/ui redirects to the sign-in page; a wrong token is refused', async () => {
  await page.goto(`${BASE}/ui`);
  assert.equal(new URL(page.url()).pathname, '/ui/');
  await page.locator('#token').fill('alk_not-a-token');
  await page.locator('#signin button[type=submit]').click();
  await page.locator('#signin-error').filter({ hasText: /Refused/ }).waitFor({ timeout: 10_000 });
  await shot('signin');
});

test('signs in with the tenant token', async () => {
  await page.locator('#token').fill(TOKEN);
  await page.locator('#signin button[type=submit]').click();
  await page.locator('#create').waitFor({ timeout: 10_000 });
  await page.locator('#live').filter({ hasText: 'live' }).waitFor({ timeout: 10_000 });
  const stored = await page.evaluate(() => sessionStorage.getItem('airlock.token'));
  assert.equal(stored, TOKEN);
});

test('creates a sandbox from the minimal template, with progress, listed live', async () => {
  await page.locator('#create input[name=template]').fill('minimal');
  await page.locator('#create input[name=vcpus]').fill('1');
  await page.locator('#create input[name=memory_mib]').fill('256');
  await page.locator('#create button[type=submit]').click();
  await page.locator('[data-progress^="Create"]').waitFor({ timeout: 5_000 });
  const row = page.locator('#sandboxes tr[data-state=running]').first();
  await row.waitFor({ timeout: BOOT_MS });
  sandboxId = await row.getAttribute('data-id');
  assert.match(sandboxId, /^sb-[0-9a-f]{16}$/);
  await page.locator('[data-progress^="Create"]').waitFor({ state: 'detached', timeout: 30_000 });
  const text = await row.innerText();
  assert.match(text, /minimal/);
  assert.match(text, /1 vCPU/);
  assert.match(text, /256 MiB/);
  await shot('sandboxes');
});

test("opens the sandbox's page", async () => {
  await page.locator(`#sandboxes a[href="#/sandbox/${sandboxId}"]`).click();
  await page.locator('#sandbox-head .state-running').waitFor({ timeout: 15_000 });
  assert.match(await page.locator('#sandbox-head').innerText(), new RegExp(sandboxId));
  // Files: the guest's root is listed.
  await page.locator('#files tr[data-name=etc]').waitFor({ timeout: 30_000 });
  // Ports: the section is there, whether or not this daemon serves them yet.
  await page.locator('#ports').filter({ hasNotText: 'Loading' }).waitFor({ timeout: 15_000 });
});

test('sets a network policy', async () => {
  await page.locator('#policy-allow').fill('example.com');
  await page.locator('#policy-deny').fill('');
  await page.locator('#policy-save').click();
  await page.locator('.toast.ok', { hasText: 'Network policy saved' }).waitFor({ timeout: 15_000 });
  const n = await api('GET', `/v1/sandboxes/${sandboxId}/network`);
  assert.deepEqual(n.json.policy.allow, ['example.com']);
});

test('a denied egress request shows on the page as it happens', async () => {
  // The guest asks for an address no rule allows (busybox's nc: the minimal
  // template has no curl); the gateway denies it on the Host header.
  const request = `GET / HTTP/1.0\\r\\nHost: ${DENIED_IP}\\r\\n\\r\\n`;
  const r = await api('POST', `/v1/sandboxes/${sandboxId}/exec`, {
    cmd: ['/bin/sh', '-c', `printf '${request}' | nc -w 10 ${DENIED_IP} 80; true`], timeout_s: 60,
  });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  const row = page.locator(`#egress tr[data-verdict=deny][data-host="${DENIED_IP}"]`).first();
  await row.waitFor({ timeout: 60_000 });
  assert.match(await row.innerText(), /deny/);
});

test('exposes a port: listed with its links, which open the server in the guest', async () => {
  // A server in the guest (busybox's httpd) for the link to reach.
  const r = await api('POST', `/v1/sandboxes/${sandboxId}/processes`, {
    cmd: ['/bin/sh', '-c', 'mkdir -p /tmp/www && echo "hello from the sandbox" > /tmp/www/index.html && '
      + 'exec httpd -f -p 8000 -h /tmp/www'],
    tag: 'httpd',
  });
  assert.equal(r.status, 201, JSON.stringify(r.json));
  await page.locator('#expose-port').fill('8000');
  await page.locator('#expose button[type=submit]').click();
  const row = page.locator('#ports tr[data-port="8000"]');
  await row.waitFor({ timeout: 15_000 });
  const p = await api('GET', `/v1/sandboxes/${sandboxId}/ports`);
  const port = p.json.ports.find((x) => x.port === 8000);
  assert.ok(port && port.url && port.path_url, JSON.stringify(p.json));
  const links = await row.locator('a').evaluateAll((as) => as.map((a) => a.getAttribute('href')));
  const token = `airlock_token=${p.json.traffic_token}`;
  assert.deepEqual(links, [`${port.url}?${token}`, `${port.path_url}?${token}`]);
  // The host form's link, clicked: a new tab, the token turned into a cookie, the guest's page.
  const [tab] = await Promise.all([page.context().waitForEvent('page'), row.locator('a').first().click()]);
  await tab.waitForLoadState();
  await tab.waitForFunction(() => /hello from the sandbox/.test(document.body?.innerText ?? ''), null,
    { timeout: 60_000 }).catch(async () => {
    // The guest's httpd may still be starting: load it again once.
    await tab.reload();
    await tab.waitForFunction(() => /hello from the sandbox/.test(document.body?.innerText ?? ''), null,
      { timeout: 60_000 });
  });
  assert.ok(!tab.url().includes('airlock_token'), tab.url());
  await tab.close();
});

test('a terminal into the sandbox: echo hi', async () => {
  await page.locator('#processes tr[data-pid]').first().waitFor({ timeout: 15_000 });
  await shot('sandbox', true);
  await page.locator('#open-terminal').click();
  const status = page.locator('#terminal-status');
  await status.filter({ hasText: /attached|failed|disconnected|cannot/ }).waitFor({ timeout: 60_000 });
  const s = await status.innerText();
  assert.match(s, /attached/);
  // The shell's prompt first: keys typed before it would be echoed twice.
  await page.waitForFunction(() => [...document.querySelectorAll('.xterm-rows > div')]
    .some((row) => /[#$]$/.test(row.textContent.replace(/\u00a0/g, ' ').trim())), null, { timeout: 30_000 });
  await page.locator('.xterm-helper-textarea').focus();
  await page.keyboard.type('echo hi\n');
  await page.waitForFunction(() => [...document.querySelectorAll('.xterm-rows > div')]
    .some((row) => row.textContent.trim() === 'hi'), null, { timeout: 30_000 });
  await shot('terminal');
});

test('uploads a file into the guest and downloads it back', async () => {
  await page.locator('#file-path').fill('/tmp');
  await page.locator('#files-card button[type=submit]').click();
  await page.locator('#file-upload').setInputFiles({ name: 'hello.txt', mimeType: 'text/plain',
    buffer: Buffer.from('hello from the console\n') });
  const row = page.locator('#files tr[data-name="hello.txt"]');
  await row.waitFor({ timeout: 30_000 });
  const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 30_000 }),
    row.locator('button', { hasText: 'Download' }).click()]);
  assert.equal(dl.suggestedFilename(), 'hello.txt');
  const chunks = [];
  for await (const c of await dl.createReadStream()) chunks.push(c);
  assert.equal(Buffer.concat(chunks).toString(), 'hello from the console\n');
});

test('pauses, resumes and snapshots it, with progress', async () => {
  const head = page.locator('#sandbox-head');
  await head.locator('button[data-action=pause]').click();
  await head.locator('.state-paused').waitFor({ timeout: 60_000 });
  await head.locator('button[data-action=resume]').click();
  await head.locator('.state-running').waitFor({ timeout: 60_000 });
  await head.locator('button[data-action=snapshot]').click();
  await page.locator('[data-progress^="Snapshot"]').waitFor({ timeout: 10_000 });
  await page.locator('.toast.ok', { hasText: /^Snapshot of .*: done/ }).waitFor({ timeout: 180_000 });
  const snaps = await api('GET', `/v1/snapshots?sandbox=${sandboxId}`);
  assert.equal(snaps.json.snapshots.length, 1);
  await api('DELETE', `/v1/snapshots/${snaps.json.snapshots[0].id}`);
});

test('deletes the sandbox', async () => {
  await page.locator('#sandbox-head button[data-action=delete]').click();
  await page.locator('#sandbox-head .state-deleted').waitFor({ timeout: 60_000 });
  const r = await api('GET', `/v1/sandboxes/${sandboxId}`);
  assert.equal(r.json.state, 'deleted');
  sandboxId = null;
});

test('no error in the page (CSP violations included)', () => {
  assert.deepEqual(problems, []);
});
