// CDP through Hangar's relay: Playwright (ws and http forms), Puppeteer, raw clients, reconnect
// after a Chromium restart, the WebDriver BiDi URL's token, stealth.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';
import puppeteer from 'puppeteer-core';

import { BidiClient } from './lib/bidi.mjs';
import { CdpClient, openWebSocket } from './lib/cdp.mjs';
import { startServer, startTestPages, TEST_PAGE_TITLE, withBrowser as sharedWithBrowser } from './lib/server.mjs';

let server;
let pages;
let client;

before(async () => {
  server = await startServer();
  client = server.client;
  pages = await startTestPages();
});

after(async () => {
  await pages?.close();
  await server?.stop();
});

/** Creates a browser for the duration of `fn`, then deletes it. */
const withBrowser = (params, fn) => sharedWithBrowser(client, params, fn);

describe('Playwright connectOverCDP', () => {
  test('ws form: one context, one page; opens a local page and reads its title', async () => {
    await withBrowser({}, async (b) => {
      const browser = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      try {
        assert.equal(browser.contexts().length, 1, 'a fresh browser has one context');
        const context = browser.contexts()[0];
        assert.equal(context.pages().length, 1, 'and one page');
        const page = context.pages()[0];
        await page.goto(pages.url, { waitUntil: 'load' });
        assert.equal(await page.title(), TEST_PAGE_TITLE);
        assert.equal(await page.textContent('#greeting'), 'Hello from the test page');
        assert.ok(pages.hits.some((h) => h.url === '/'), 'the page came from our test server');
      } finally {
        await browser.close();
      }
    });
  });

  test('http form of the same URL: /json/version points back through Hangar', async () => {
    await withBrowser({}, async (b) => {
      const httpUrl = b.cdp_ws_url.replace(/^ws:/, 'http:');
      const u = new URL(httpUrl);
      const versionUrl = new URL(u.pathname.replace(/\/$/, '') + '/json/version' + u.search, u);
      const res = await fetch(versionUrl);
      assert.equal(res.status, 200, `GET ${u.pathname}/json/version`);
      const version = await res.json();
      assert.match(version.Browser, /Chrome|Chromium/);
      const debuggerUrl = new URL(version.webSocketDebuggerUrl);
      assert.equal(debuggerUrl.host, `127.0.0.1:${server.port}`, 'webSocketDebuggerUrl comes back through Hangar');

      const browser = await chromium.connectOverCDP(httpUrl, { timeout: 30_000 });
      try {
        const page = browser.contexts()[0].pages()[0];
        await page.goto(pages.url + 'page?title=via-http-form');
        assert.equal(await page.title(), 'via-http-form');
      } finally {
        await browser.close();
      }
    });
  });
});

describe('Puppeteer', () => {
  test('connect({browserWSEndpoint: cdp_ws_url})', async () => {
    await withBrowser({}, async (b) => {
      const browser = await puppeteer.connect({ browserWSEndpoint: b.cdp_ws_url, protocolTimeout: 30_000 });
      try {
        const [page] = await browser.pages();
        assert.ok(page, 'an existing page');
        await page.goto(pages.url + 'page?title=puppeteer-was-here');
        assert.equal(await page.title(), 'puppeteer-was-here');
        assert.match(await browser.version(), /Chrome|Chromium/);
      } finally {
        await browser.disconnect();
      }
    });
  });
});

describe('restarts', () => {
  test('PATCH viewport restarts Chromium; the same cdp_ws_url connects again', async () => {
    await withBrowser({ viewport: { width: 1280, height: 800 } }, async (b) => {
      const before = await CdpClient.connect(b.cdp_ws_url);
      const s1 = await before.attachToPage();
      const w1 = await before.send('Runtime.evaluate', { expression: 'innerWidth', returnByValue: true }, s1);
      assert.equal(w1.result.value, 1280);
      await before.close();

      const u = await client.browsers.update(b.session_id, { viewport: { width: 1024, height: 768 } });
      assert.equal(u.viewport?.width, 1024);

      // The call returns once Chromium is back and CDP is ready: connect at once, no sleep.
      const afterRestart = await CdpClient.connect(b.cdp_ws_url);
      try {
        const v = await afterRestart.send('Browser.getVersion');
        assert.match(v.product, /Chrome/);
        const s2 = await afterRestart.attachToPage();
        const r = await afterRestart.send(
          'Runtime.evaluate',
          { expression: '[innerWidth, innerHeight, outerHeight, 6 * 7]', returnByValue: true },
          s2,
        );
        const [w, ih, oh, answer] = r.result.value;
        assert.equal(answer, 42);
        assert.equal(w, 1024, 'new viewport width');
        assert.ok(ih === 768 || oh === 768, `new viewport height (inner ${ih}, outer ${oh})`);
      } finally {
        await afterRestart.close();
      }

      // Playwright too, after the restart.
      const browser = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      try {
        const page = browser.contexts()[0].pages()[0];
        await page.goto(pages.url);
        assert.equal(await page.title(), TEST_PAGE_TITLE);
      } finally {
        await browser.close();
      }
    });
  });
});

/** A CDP URL is refused: a 4xx before the upgrade, or a socket closed without ever answering. */
async function assertRefused(url) {
  let ws;
  try {
    ws = await openWebSocket(url, { timeoutMs: 10_000 });
  } catch (err) {
    assert.ok(err.statusCode >= 400 && err.statusCode < 500, `refused with a 4xx, got ${err.statusCode ?? err.message}`);
    return;
  }
  const cdp = new CdpClient(ws);
  const outcome = await Promise.race([
    cdp.send('Browser.getVersion').then(() => 'answered', () => 'closed'),
    new Promise((r) => setTimeout(() => r('silent'), 5_000)),
  ]);
  await cdp.close();
  assert.equal(outcome, 'closed', 'an invalid token must not reach the browser');
}

describe('capability URLs', () => {
  test('a tampered or missing jwt is refused', async () => {
    await withBrowser({}, async (b) => {
      const u = new URL(b.cdp_ws_url);
      const jwt = u.searchParams.get('jwt');
      const tampered = new URL(u);
      tampered.searchParams.set('jwt', jwt.slice(0, -4) + (jwt.endsWith('AAAA') ? 'BBBB' : 'AAAA'));
      await assertRefused(tampered.toString());
      const missing = new URL(u);
      missing.search = '';
      await assertRefused(missing.toString());
    });
  });

  test('webdriver_ws_url speaks WebDriver BiDi on its own token, not on the CDP one', async () => {
    await withBrowser({}, async (b) => {
      assert.match(b.webdriver_ws_url, /^wss?:\/\//);
      const bidi = await BidiClient.connect(b.webdriver_ws_url, { timeoutMs: 30_000 });
      try {
        const { session, contexts } = await bidi.start();
        assert.equal(typeof session.sessionId, 'string');
        assert.equal(contexts.length, 1);
      } finally {
        await bidi.close();
      }
      const wrong = new URL(b.webdriver_ws_url);
      wrong.searchParams.set('jwt', new URL(b.cdp_ws_url).searchParams.get('jwt'));
      await assert.rejects(openWebSocket(wrong.toString(), { timeoutMs: 10_000 }), (err) => err.statusCode === 401);
    });
  });
});

describe('stealth', () => {
  test('navigator.webdriver is false and the UA has no HeadlessChrome', async () => {
    await withBrowser({ stealth: true }, async (b) => {
      assert.equal(b.stealth, true);
      const browser = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      try {
        const page = browser.contexts()[0].pages()[0];
        await page.goto(pages.url);
        const seen = await page.evaluate(() => ({ webdriver: navigator.webdriver, ua: navigator.userAgent }));
        assert.equal(seen.webdriver, false);
        assert.doesNotMatch(seen.ua, /HeadlessChrome/);
        const hit = pages.hits.filter((h) => h.url === '/').at(-1);
        assert.doesNotMatch(hit.headers['user-agent'], /HeadlessChrome/, 'the UA on the wire too');
      } finally {
        await browser.close();
      }
    });
  });
});
