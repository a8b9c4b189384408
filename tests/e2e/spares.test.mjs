// Warm spares: with HANGAR_WARM_SPARES=1 the server keeps one started headless and one headful
// instance that nobody has used. A create that needs nothing else takes one (its instance id
// becomes the session id), a replacement starts in the background, and options a spare cannot
// serve get a cold start that leaves the spare alone. How many are kept follows demand: a burst
// raises the count up to HANGAR_WARM_SPARES_MAX, and it falls back once the burst leaves the window.
// Stealth spares exist only once stealth creates come, and a profile with no saved state (a
// first login) takes a spare; one with saved state gets a cold start on it.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { chromium } from 'playwright-core';

import { TEST_PAGE_TITLE, readyInstances, startServer, startTestPages, waitFor } from './lib/server.mjs';

let server;
const instancesOf = (srv) => readyInstances(srv.dataDir);
const instances = () => instancesOf(server);
// A DELETE answers before the instance is gone; these tests count instances, so they wait for it.
async function endSession(id, srv = server) {
  await srv.client.browsers.deleteByID(id);
  await waitFor(() => !instancesOf(srv).includes(id), { timeoutMs: 30_000, what: `session ${id}'s instance to go` });
}

before(async () => {
  // Exactly one spare per kind here; the test at the end lets the count follow demand.
  server = await startServer({ env: { HANGAR_WARM_SPARES: '1', HANGAR_WARM_SPARES_MAX: '1' } });
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
    await endSession(b.session_id);
  }
});

test('options a spare cannot serve get a cold start and leave the spares alone', async () => {
  const before = await waitFor(() => (instances().length === 2 ? instances() : null), { timeoutMs: 60_000, what: 'two spares' });
  const b = await server.client.browsers.create({ headless: true, viewport: { width: 1280, height: 800 } });
  try {
    assert.ok(!before.includes(b.session_id), 'a new instance, not a spare');
    assert.deepEqual(instances().filter((id) => id !== b.session_id), before);
  } finally {
    await endSession(b.session_id);
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
    await endSession(b.session_id);
    await pages.close();
  }
});

test('stealth spares follow stealth creates; an empty profile takes one, a saved profile starts cold on its state', async () => {
  const pages = await startTestPages();
  const profile = await server.client.profiles.create({ name: `first-login-${Date.now()}` });
  const plain = await waitFor(() => (instances().length === 2 ? instances() : null), { timeoutMs: 60_000, what: 'two spares' });
  const isStealth = async (b) => {
    const browser = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
    try {
      return await browser.contexts()[0].pages()[0].evaluate(() => navigator.webdriver === false && !/Headless/.test(navigator.userAgent));
    } finally {
      await browser.close();
    }
  };
  try {
    // No stealth spare before any stealth create: this one starts cold.
    const first = await server.client.browsers.create({ headless: true, stealth: true });
    assert.ok(!plain.includes(first.session_id), 'a cold start');
    assert.ok(await isStealth(first));
    await endSession(first.session_id);
    const withStealth = await waitFor(() => {
      const now = instances();
      return now.length === 3 && !now.includes(first.session_id) ? now : null;
    }, { timeoutMs: 60_000, what: 'a stealth spare beside the two plain ones' });
    const stealthSpare = withStealth.find((id) => !plain.includes(id));

    // A first login: the profile has no saved state, so the stealth spare serves it.
    const login = await server.client.browsers.create({ headless: true, stealth: true, profile: { id: profile.id, save_changes: true } });
    assert.equal(login.session_id, stealthSpare, 'the stealth spare was handed out');
    assert.equal(login.profile?.id, profile.id);
    assert.ok(await isStealth(login), 'the spare is a stealth browser');
    const browser = await chromium.connectOverCDP(login.cdp_ws_url, { timeout: 30_000 });
    try {
      const page = browser.contexts()[0].pages()[0];
      await page.goto(pages.url);
      await page.evaluate(() => localStorage.setItem('who', 'first-login'));
    } finally {
      await browser.close();
    }
    await endSession(login.session_id); // saves the profile

    // Saved state now: a cold start on it, even with a stealth spare ready.
    const ready = await waitFor(() => {
      const now = instances();
      return now.length === 3 && !now.includes(login.session_id) ? now : null;
    }, { timeoutMs: 60_000, what: 'the stealth spare replaced' });
    const again = await server.client.browsers.create({ headless: true, stealth: true, profile: { id: profile.id } });
    try {
      assert.ok(!ready.includes(again.session_id), 'a cold start, not a spare');
      const b2 = await chromium.connectOverCDP(again.cdp_ws_url, { timeout: 30_000 });
      try {
        const page = b2.contexts()[0].pages()[0];
        await page.goto(pages.url);
        assert.equal(await page.evaluate(() => localStorage.getItem('who')), 'first-login', 'the saved state is there');
      } finally {
        await b2.close();
      }
    } finally {
      await endSession(again.session_id);
    }
  } finally {
    await pages.close();
    await server.client.profiles.delete(profile.id).catch(() => {});
  }
});

test('spares follow demand: a burst raises their number to the maximum, and it falls back after', async () => {
  const busy = await startServer({
    env: { HANGAR_WARM_SPARES: '1', HANGAR_WARM_SPARES_MAX: '3', HANGAR_WARM_SPARES_WINDOW_SECONDS: '30' },
  });
  try {
    const count = () => instancesOf(busy).length;
    await waitFor(() => count() === 2, { timeoutMs: 60_000, what: 'one spare of each kind' });
    // Three headless creates at once: more than one start-up time's worth of one spare.
    const burst = await Promise.all([1, 2, 3].map(() => busy.client.browsers.create({ headless: true })));
    for (const b of burst) await busy.client.browsers.deleteByID(b.session_id);
    // A DELETE answers before its instance is gone: the burst's own instances must leave first.
    await waitFor(() => {
      const now = instancesOf(busy);
      return now.length === 4 && burst.every((b) => !now.includes(b.session_id));
    }, { timeoutMs: 60_000, what: 'three headless spares and the headful one' });
    // A burst like the first is now served from spares, each its own.
    const ready = instancesOf(busy);
    const again = await Promise.all([1, 2, 3].map(() => busy.client.browsers.create({ headless: true })));
    try {
      for (const b of again) assert.ok(ready.includes(b.session_id), `${b.session_id} was a spare (${ready})`);
    } finally {
      for (const b of again) await busy.client.browsers.deleteByID(b.session_id);
    }
    // Once the bursts leave the window, back to the minimum.
    await waitFor(() => count() === 2, { timeoutMs: 60_000, what: 'spares back to one of each kind' });
  } finally {
    await busy.stop();
  }
});
