// Warm spares: with HANGAR_WARM_SPARES=1 the server keeps one started headless and one headful
// instance that nobody has used. A create that needs nothing else takes one (its instance id
// becomes the session id), a replacement starts in the background, and options a spare cannot
// serve get a cold start that leaves the spare alone.
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { chromium } from 'playwright-core';

import { TEST_PAGE_TITLE, startServer, startTestPages, waitFor } from './lib/server.mjs';

let server;
// Instance folders whose agent is up (its socket exists once every plugin started).
const instances = () =>
  readdirSync(join(server.dataDir, 'instances'))
    .filter((id) => existsSync(join(server.dataDir, 'instances', id, 'agent.sock')))
    .sort();

before(async () => {
  server = await startServer({ env: { HANGAR_WARM_SPARES: '1' } });
});

after(async () => {
  await server?.stop();
});

test('a spare of each kind is started, and a create takes the matching one', async () => {
  const spares = await waitFor(() => (instances().length === 2 ? instances() : null), {
    timeoutMs: 60_000,
    what: 'two warm spares',
  });
  const b = await server.client.browsers.create({ headless: true, name: 'from-a-spare', tags: { k: 'v' }, timeout_seconds: 30 });
  try {
    assert.ok(spares.includes(b.session_id), `session ${b.session_id} is one of the spares ${spares}`);
    assert.equal(b.name, 'from-a-spare');
    assert.deepEqual(b.tags, { k: 'v' });
    assert.equal(b.timeout_seconds, 30);
    assert.equal(b.headless, true);
    // A replacement starts: three instances, the new one never seen before.
    const now = await waitFor(() => (instances().length === 3 ? instances() : null), { timeoutMs: 60_000, what: 'a replacement spare' });
    assert.equal(now.filter((id) => !spares.includes(id)).length, 1);

    // Never used before: one context, one blank page, no history.
    const browser = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
    try {
      const [ctx] = browser.contexts();
      assert.equal(browser.contexts().length, 1);
      assert.equal(ctx.pages().length, 1);
      assert.equal(ctx.pages()[0].url(), 'about:blank');
      assert.equal(await ctx.pages()[0].evaluate(() => history.length), 1);
    } finally {
      await browser.close();
    }
  } finally {
    await server.client.browsers.deleteByID(b.session_id);
  }
});

test('options a spare cannot serve get a cold start and leave the spares alone', async () => {
  const before = await waitFor(() => (instances().length === 2 ? instances() : null), { timeoutMs: 60_000, what: 'two spares' });
  const b = await server.client.browsers.create({ headless: true, viewport: { width: 1280, height: 800 } });
  try {
    assert.ok(!before.includes(b.session_id), 'a new instance, not a spare');
    assert.deepEqual(instances().filter((id) => id !== b.session_id), before);
  } finally {
    await server.client.browsers.deleteByID(b.session_id);
  }
});

test('a start_url is opened in the spare at hand-over: one page, at that URL, history of one', async () => {
  const pages = await startTestPages();
  const spares = await waitFor(() => (instances().length === 2 ? instances() : null), { timeoutMs: 60_000, what: 'two spares' });
  const b = await server.client.browsers.create({ headless: true, start_url: pages.url });
  try {
    assert.ok(spares.includes(b.session_id), 'handed out a spare');
    assert.equal(b.start_url, pages.url);
    const browser = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
    try {
      const [ctx] = browser.contexts();
      assert.equal(ctx.pages().length, 1);
      const [page] = ctx.pages();
      await waitFor(async () => (await page.title()) === TEST_PAGE_TITLE, { what: 'the start page to load' });
      assert.equal(page.url(), pages.url);
      assert.equal(await page.evaluate(() => history.length), 1);
    } finally {
      await browser.close();
    }
  } finally {
    await server.client.browsers.deleteByID(b.session_id);
    await pages.close();
  }
});
