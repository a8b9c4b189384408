// The dashboard (/dashboard, plugin `org`) in a real browser: Playwright (playwright-core with
// Debian's Chromium) signs in with an API key, sees the newest session at the top, opens its
// live view (the embedded viewer reports KERNEL_CONNECTED), sees exactly 100 rows when 105
// sessions exist, pools and keys; a bad key gets a clear sign-in error and nothing else. A
// screenshot of each page is kept in tests/e2e/artifacts/dashboard/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

import { chromium } from 'playwright-core';

import { startServer, chromiumPath, chromiumBaseArgs } from './lib/server.mjs';

const artifacts = join(import.meta.dirname, 'artifacts', 'dashboard');
const SESSIONS = 105;

let server;
let client;
let browser; // Playwright's Chromium
let live; // the newest session: headful, with a live view
let pool; // an empty pool (size 0: no browser), to be listed with its counts

before(async () => {
  mkdirSync(artifacts, { recursive: true });
  server = await startServer();
  // No retries: a create that fails is a failure. (The "nsenter failed" 500s this once retried were
  // pasta racing bwrap's own loopback set-up, fixed at that cause in host/src/runtime.cpp.)
  client = server.newClient({ maxRetries: 0 });
  // 104 short-lived headless sessions, two at a time (the test's limit on live browsers), then the
  // headful one the dashboard must show first. Each costs one cold start (~2 s here).
  let made = 0;
  const worker = async () => {
    while (made < SESSIONS - 1) {
      made++;
      const b = await client.browsers.create({ headless: true });
      await client.browsers.deleteByID(b.session_id);
    }
  };
  await Promise.all([worker(), worker()]);
  live = await client.browsers.create({ headless: false, name: 'dashboard-live' });
  pool = await client.browserPools.create({ name: 'dashboard-pool', size: 0 });
  browser = await chromium.launch({ executablePath: chromiumPath, args: chromiumBaseArgs, headless: true });
});

after(async () => {
  await browser?.close();
  if (live) await client.browsers.deleteByID(live.session_id).catch(() => {});
  if (pool) await client.browserPools.delete(pool.id).catch(() => {});
  await server?.stop();
});

async function signIn(page, key) {
  await page.goto(`${server.baseURL}/dashboard`);
  await page.fill('#api-key', key);
  await page.click('#signin button[type=submit]');
}

test('a bad key gets a clear sign-in error and nothing else', async () => {
  const page = await browser.newPage();
  try {
    await signIn(page, 'hgr_not_a_key');
    await page.waitForSelector('#signin-error:not([hidden])');
    assert.match(await page.textContent('#signin-error'), /not valid/);
    assert.equal(await page.isVisible('#app'), false);
    assert.equal(await page.$$eval('#sessions tr', (rows) => rows.length), 0);
    assert.equal(await page.evaluate(() => sessionStorage.getItem('hangar.key')), null);
    await page.screenshot({ path: join(artifacts, 'signin-error.png'), fullPage: true });
  } finally {
    await page.close();
  }
});

test('signed in: 100 newest sessions, the created one on top, its live view, pools and keys', async () => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  try {
    const listed = await client.browsers.list({ status: 'all', limit: 100 });
    assert.equal(listed.items.length, 100);
    assert.ok(listed.hasNextPage(), 'more than 100 sessions exist');

    await signIn(page, server.apiKey);
    await page.waitForSelector('#sessions tr.session');
    assert.equal(await page.$$eval('#sessions tr.session', (rows) => rows.length), 100);
    const first = await page.$eval('#sessions tr.session', (r) => ({ id: r.dataset.id, text: r.textContent }));
    assert.equal(first.id, live.session_id);
    assert.match(first.text, /active/);
    assert.match(first.text, /dashboard-live/);
    assert.match(first.text, /headful/);
    const second = await page.$eval('#sessions tr.session:nth-child(2)', (r) => r.textContent);
    assert.match(second, /deleted/);
    assert.match(second, /headless/);
    // The key is in this tab's sessionStorage, not in a cookie.
    assert.equal(await page.evaluate(() => sessionStorage.getItem('hangar.key')), server.apiKey);
    assert.equal((await page.context().cookies()).length, 0);
    // Pools with their counts.
    await page.waitForSelector('#pools tr');
    const poolRow = await page.$eval('#pools tr', (r) => [...r.cells].map((c) => c.textContent));
    assert.deepEqual(poolRow, ['dashboard-pool', pool.id, '0', '0', '0']);
    // Keys are shown masked, never in the clear.
    await page.waitForSelector('#keys tr');
    const keysText = await page.textContent('#keys');
    assert.match(keysText, /bootstrap/);
    assert.ok(!keysText.includes(server.apiKey));
    await page.screenshot({ path: join(artifacts, 'sessions.png'), fullPage: true });

    await page.click('#sessions tr.session');
    await page.waitForSelector('#detail:not([hidden])');
    // The page embeds the session's own live view link (re-signed on every read, so compare
    // the session it names).
    const src = await page.getAttribute('#live-view', 'src');
    assert.ok(src.startsWith(`${server.baseURL}/browser/live/`), src);
    const claims = JSON.parse(Buffer.from(src.split('/').pop().split('.')[1], 'base64url').toString());
    assert.equal(claims.sid, live.session_id);
    await page.waitForFunction(() => document.getElementById('live-status').textContent === 'connected', null, {
      timeout: 30_000,
    });
    // The log tail of the live session shows Chromium's output.
    await page.waitForFunction(() => document.getElementById('logs').textContent.length > 0, null, { timeout: 30_000 });
    await page.screenshot({ path: join(artifacts, 'live-view.png'), fullPage: true });

    // Sign out forgets the key.
    await page.click('#signout');
    assert.equal(await page.evaluate(() => sessionStorage.getItem('hangar.key')), null);
    assert.equal(await page.isVisible('#signin'), true);
  } finally {
    await page.close();
  }
});
