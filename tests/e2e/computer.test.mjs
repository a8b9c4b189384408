// Computer controls through the official SDK (client.browsers.computer.*), on a real headful
// browser (XTest on its Xvfb) and a real headless one (CDP input): find a red target at a random
// spot in an API screenshot, click it and check through CDP that the page saw exactly one click;
// typing, key combos, scrolling, the mouse position, batches, the clipboard, and bad input.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { BadRequestError, InternalServerError, NotFoundError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';
import { PNG } from 'pngjs';

import { rejectsWith, servePage, startServer } from './lib/server.mjs';

const target = { left: 100 + Math.floor(Math.random() * 500), top: 80 + Math.floor(Math.random() * 300) };
const PAGE = `<!doctype html><html><head><title>computer</title><style>
  body { margin: 0; background: #fff; height: 4000px; }
  #target { position: absolute; left: ${target.left}px; top: ${target.top}px; width: 60px; height: 60px; background: rgb(255, 0, 0); }
  #field { position: absolute; left: 10px; top: 10px; width: 300px; }
</style></head><body>
  <input id="field"><div id="target"></div>
  <script>
    window.clicks = 0; window.keys = [];
    document.getElementById('target').addEventListener('click', () => window.clicks++);
    document.addEventListener('keydown', (e) => window.keys.push((e.ctrlKey ? 'Ctrl+' : '') + e.key));
  </script></body></html>`;

let server;
let client;
let pageServer;
let pageUrl;

before(async () => {
  server = await startServer();
  client = server.client;
  pageServer = await servePage(PAGE);
  pageUrl = pageServer.url;
});

after(async () => {
  await server?.stop();
  await pageServer?.close();
});

async function screenshot(id, body) {
  const res = await client.browsers.computer.captureScreenshot(id, body);
  return PNG.sync.read(Buffer.from(await res.arrayBuffer()));
}

/**
 * XTest input reaches the X server before the call returns, but Chromium reads its X events a
 * moment later (as with xdotool): poll for the page's view of it, then check it stays put.
 */
async function settles(page, fn, expected) {
  const deadline = Date.now() + 5000;
  let v;
  while (Date.now() < deadline) {
    v = await page.evaluate(fn);
    if (JSON.stringify(v) === JSON.stringify(expected)) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  await new Promise((r) => setTimeout(r, 150));
  assert.deepEqual(await page.evaluate(fn), expected);
}

/** Center of the pure red pixels, in screenshot (= screen) coordinates. */
function findRed(png) {
  let minX = Infinity, minY = Infinity, maxX = -1, maxY = -1;
  for (let y = 0; y < png.height; y++)
    for (let x = 0; x < png.width; x++) {
      const i = (y * png.width + x) * 4;
      if (png.data[i] > 240 && png.data[i + 1] < 15 && png.data[i + 2] < 15) {
        minX = Math.min(minX, x); maxX = Math.max(maxX, x); minY = Math.min(minY, y); maxY = Math.max(maxY, y);
      }
    }
  if (maxX < 0) return null;
  return { x: Math.round((minX + maxX) / 2), y: Math.round((minY + maxY) / 2), w: maxX - minX + 1, h: maxY - minY + 1 };
}

for (const headless of [false, true]) {
  describe(headless ? 'headless (CDP input)' : 'headful (XTest on Xvfb)', () => {
    let b;
    let cdp;
    let page;
    let blankTabClipboard; // headless: what writing the clipboard on the blank first tab gave

    before(async () => {
      b = await client.browsers.create({ headless, viewport: { width: 1280, height: 800 } });
      cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      page = cdp.contexts()[0].pages()[0];
      if (headless) {
        blankTabClipboard = await client.browsers.computer
          .writeClipboard(b.session_id, { text: 'x' })
          .then(() => 'written', (err) => err);
      }
      await page.goto(pageUrl);
      // A new window's keyboard focus is in the address bar; a click in the page moves it to the
      // page, as it would for a person.
      await client.browsers.computer.clickMouse(b.session_id, { x: 1000, y: 700 });
    });

    /**
     * Screenshots until the target shows at the same spot twice running: a headful window
     * paints a moment after the page changed (load, scroll).
     */
    async function waitForRed(region) {
      let last = null;
      for (let i = 0; ; i++) {
        const png = await screenshot(b.session_id, region);
        const red = findRed(png);
        if ((red && last && red.x === last.x && red.y === last.y) || i >= 50) return { png, red };
        last = red;
        await new Promise((r) => setTimeout(r, 100));
      }
    }

    after(async () => {
      await cdp?.close();
      if (b) await client.browsers.deleteByID(b.session_id).catch(() => {});
    });

    test('the screenshot is the whole screen; clicking the red target found in it clicks once', async () => {
      const { png, red } = await waitForRed();
      assert.deepEqual([png.width, png.height], [1280, 800]);
      assert.ok(red, 'the red target is in the screenshot');
      assert.ok(Math.abs(red.w - 60) <= 1 && Math.abs(red.h - 60) <= 1, JSON.stringify(red));
      await client.browsers.computer.clickMouse(b.session_id, { x: red.x, y: red.y });
      await settles(page, () => window.clicks, 1);
      // A region comes back at exactly its size, and shows the target.
      const part = await screenshot(b.session_id, { region: { x: red.x - 40, y: red.y - 40, width: 80, height: 80 } });
      assert.deepEqual([part.width, part.height], [80, 80]);
      assert.ok(findRed(part));
      // A double click is two more clicks.
      await client.browsers.computer.clickMouse(b.session_id, { x: red.x, y: red.y, num_clicks: 2 });
      await settles(page, () => window.clicks, 3);
    });

    test('typing into a focused input, Ctrl+a then typing replaces, and the mouse position', async () => {
      await page.focus('#field');
      await client.browsers.computer.typeText(b.session_id, { text: 'Hello, wörld!' });
      await settles(page, () => document.getElementById('field').value, 'Hello, wörld!');
      await client.browsers.computer.pressKey(b.session_id, { keys: ['Ctrl+a'] });
      await client.browsers.computer.typeText(b.session_id, { text: 'replaced', delay: 5 });
      await settles(page, () => document.getElementById('field').value, 'replaced');
      await client.browsers.computer.pressKey(b.session_id, { keys: ['BackSpace', 'BackSpace'] });
      await settles(page, () => document.getElementById('field').value, 'replac');
      assert.ok((await page.evaluate(() => window.keys)).includes('Ctrl+a'));

      await client.browsers.computer.moveMouse(b.session_id, { x: 321, y: 234 });
      assert.deepEqual(await client.browsers.computer.getMousePosition(b.session_id), { x: 321, y: 234 });
      await client.browsers.computer.moveMouse(b.session_id, { x: 500, y: 400, smooth: true, duration_ms: 150 });
      assert.deepEqual(await client.browsers.computer.getMousePosition(b.session_id), { x: 500, y: 400 });
    });

    test('scroll moves the page', async () => {
      await page.evaluate(() => window.scrollTo(0, 0));
      await client.browsers.computer.scroll(b.session_id, { x: 600, y: 500, delta_y: 3 });
      await page.waitForFunction(() => window.scrollY > 0, null, { timeout: 5000 });
      // Let every wheel tick (and smooth scrolling) land before putting the page back.
      let last = -1;
      for (let y = await page.evaluate(() => window.scrollY); y !== last; y = await page.evaluate(() => window.scrollY)) {
        last = y;
        await new Promise((r) => setTimeout(r, 300));
      }
      await page.evaluate(() => window.scrollTo({ top: 0, behavior: 'instant' }));
      await settles(page, () => window.scrollY, 0);
    });

    test('a batch runs in order; a bad one runs nothing and names the action', async () => {
      await page.evaluate(() => { document.getElementById('field').value = ''; window.clicks = 0; });
      const { red } = await waitForRed();
      await client.browsers.computer.batch(b.session_id, {
        actions: [
          { type: 'click_mouse', click_mouse: { x: red.x, y: red.y } },
          { type: 'sleep', sleep: { duration_ms: 10 } },
          { type: 'set_cursor', set_cursor: { hidden: true } },
          { type: 'set_cursor', set_cursor: { hidden: false } },
        ],
      });
      await settles(page, () => window.clicks, 1);
      const err = await rejectsWith(
        client.browsers.computer.batch(b.session_id, {
          actions: [
            { type: 'click_mouse', click_mouse: { x: red.x, y: red.y } },
            { type: 'move_mouse', move_mouse: { x: 99999, y: 10 } },
          ],
        }),
        BadRequestError,
        'bad_request',
      );
      assert.ok(err.error.details.some((d) => d.message.startsWith('actions[1].move_mouse.x')), JSON.stringify(err.error));
      await settles(page, () => window.clicks, 1); // nothing of the bad batch ran
    });

    if (headless) {
      test('the blank first tab has no clipboard: 409 naming the fix, not a 500', () => {
        assert.equal(blankTabClipboard?.status, 409, String(blankTabClipboard));
        assert.match(blankTabClipboard.message, /not a secure context/);
      });
    }

    test('clipboard round trip', async () => {
      await client.browsers.computer.writeClipboard(b.session_id, { text: 'from the API ✓' });
      assert.deepEqual(await client.browsers.computer.readClipboard(b.session_id), { text: 'from the API ✓' });
      // Chromium pastes what the API put there.
      await page.evaluate(() => { document.getElementById('field').value = ''; });
      await page.focus('#field');
      await client.browsers.computer.pressKey(b.session_id, { keys: ['Ctrl+v'] });
      if (!headless) await settles(page, () => document.getElementById('field').value, 'from the API ✓');
      assert.deepEqual(await client.browsers.computer.setCursorVisibility(b.session_id, { hidden: true }), { ok: true });
      await client.browsers.computer.setCursorVisibility(b.session_id, { hidden: false });
    });

    test('coordinates off the screen and bad bodies: 400 naming the field', async () => {
      const e1 = await rejectsWith(client.browsers.computer.clickMouse(b.session_id, { x: 1280, y: 10 }), BadRequestError);
      assert.ok(e1.error.details[0].message.startsWith('x:'), JSON.stringify(e1.error));
      const e2 = await rejectsWith(client.browsers.computer.moveMouse(b.session_id, { x: 5, y: -1 }), BadRequestError);
      assert.ok(e2.error.details[0].message.startsWith('y:'), JSON.stringify(e2.error));
      await rejectsWith(client.browsers.computer.clickMouse(b.session_id, { x: 5, y: 5, button: 'sideways' }), BadRequestError);
      await rejectsWith(client.browsers.computer.pressKey(b.session_id, { keys: ['NoSuchKey'] }), BadRequestError);
      await rejectsWith(client.browsers.computer.typeText(b.session_id, {}), BadRequestError);
      await rejectsWith(
        client.browsers.computer.captureScreenshot(b.session_id, { region: { x: 1200, y: 0, width: 200, height: 10 } }),
        BadRequestError,
      );
      await rejectsWith(
        client.browsers.computer.dragMouse(b.session_id, { path: [[1, 1]] }),
        BadRequestError,
      );
    });
  });
}

test('unknown session: 404', async () => {
  await rejectsWith(client.browsers.computer.clickMouse('aaaaaaaaaaaaaaaaaaaaaaaa', { x: 1, y: 1 }), NotFoundError);
});
