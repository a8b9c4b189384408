// Live view through the official SDK: a headful browser's browser_live_view_url opened in a real
// headless Chromium (playwright-core) as a user would. The viewer shows the remote page's colour,
// follows a change and full-page navigations, and a click in the viewer reaches the remote page
// (checked over CDP); with ?readOnly=true the same click is dropped by the server. The link needs
// no API key, a forged token is refused, an open viewer keeps the session alive, and the page
// says when it ended.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { ConflictError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';
import { PNG } from 'pngjs';

import { chromiumBaseArgs, chromiumPath, servePage, startServer, waitFor } from './lib/server.mjs';

const VIEWPORT = { width: 1024, height: 768 };
const PAGE = `<!doctype html><html><head><title>live</title><style>
  html, body { margin: 0; height: 100%; background: rgb(255, 0, 0); }
</style></head><body><script>
  window.clicks = 0;
  document.addEventListener('mousedown', () => window.clicks++);
</script></body></html>`;

let server;
let client;
let pageServer;
let pageUrl;
let viewerBrowser;

before(async () => {
  server = await startServer();
  client = server.client;
  pageServer = await servePage(PAGE);
  pageUrl = pageServer.url;
  viewerBrowser = await chromium.launch({ executablePath: chromiumPath, args: chromiumBaseArgs });
});

after(async () => {
  await viewerBrowser?.close();
  await server?.stop();
  await pageServer?.close();
});

/** The remote browser's page over CDP (the session's first page), showing the test page. */
async function remotePage(session) {
  const cdp = await chromium.connectOverCDP(session.cdp_ws_url, { timeout: 30_000 });
  const page = cdp.contexts()[0].pages()[0] ?? (await cdp.contexts()[0].newPage());
  await page.goto(pageUrl);
  return { cdp, page };
}

/**
 * Opens a live-view URL in a viewer page and waits until noVNC shows the remote screen at its
 * size: input before that would land on a canvas that is not laid out yet.
 */
async function openViewer(url, page) {
  page ??= await viewerBrowser.newPage({ viewport: VIEWPORT });
  await page.goto(url);
  await page.waitForFunction(
    (w) => document.getElementById('status')?.textContent === '' && document.querySelector('#screen canvas')?.width === w,
    VIEWPORT.width,
    { timeout: 30_000 },
  );
  return page;
}

/** The colour at the middle of the viewer's canvas (the remote page's middle). */
async function viewerColour(viewer) {
  const canvas = await viewer.$('#screen canvas');
  const box = await canvas.boundingBox();
  const png = PNG.sync.read(
    await viewer.screenshot({ clip: { x: box.x + box.width / 2, y: box.y + box.height / 2, width: 1, height: 1 } }),
  );
  return [png.data[0], png.data[1], png.data[2]];
}

const near = (a, b) => a.every((v, i) => Math.abs(v - b[i]) <= 24);

async function clickMiddle(viewer) {
  const canvas = await viewer.$('#screen canvas');
  const box = await canvas.boundingBox();
  await viewer.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
}

describe('live view', () => {
  let session;
  let remote;

  before(async () => {
    session = await client.browsers.create({ headless: false, viewport: VIEWPORT });
    remote = await remotePage(session);
  });

  after(async () => {
    await remote?.cdp.close().catch(() => {});
    if (session) await client.browsers.deleteByID(session.session_id).catch(() => {});
  });

  test('headful sessions carry a live-view link (headless ones too: liveview_headless.test.mjs)', async () => {
    assert.match(session.browser_live_view_url, /^http:\/\/127\.0\.0\.1:\d+\/browser\/live\/[^/?]+$/);
    const again = await client.browsers.retrieve(session.session_id);
    assert.ok(again.browser_live_view_url, 'retrieve returns the link too');
  });

  test('the viewer shows the remote page, follows changes, and clicks reach it', async () => {
    const viewer = await openViewer(session.browser_live_view_url);
    try {
      await waitFor(async () => near(await viewerColour(viewer), [255, 0, 0]), { what: 'red in the viewer' });
      await remote.page.evaluate(() => (document.body.style.background = 'rgb(0, 0, 255)'));
      await waitFor(async () => near(await viewerColour(viewer), [0, 0, 255]), { what: 'blue in the viewer' });

      const before = await remote.page.evaluate(() => window.clicks);
      await clickMiddle(viewer);
      await waitFor(async () => (await remote.page.evaluate(() => window.clicks)) === before + 1, {
        what: 'the click on the remote page',
      });

      // A second viewer at the same time sees the same screen and changes.
      const second = await openViewer(session.browser_live_view_url);
      try {
        await remote.page.evaluate(() => (document.body.style.background = 'rgb(255, 255, 0)'));
        for (const v of [viewer, second])
          await waitFor(async () => near(await viewerColour(v), [255, 255, 0]), { what: 'yellow in both viewers' });
      } finally {
        await second.close();
      }
    } finally {
      await viewer.close();
    }
  });

  test('the viewer follows full-page navigations, also to another site', async () => {
    // A second page on another site (localhost vs 127.0.0.1): the remote browser swaps its
    // renderer, the commonest navigation; the viewer must show each new page.
    const green = await servePage(PAGE.replace('rgb(255, 0, 0)', 'rgb(0, 255, 0)'));
    const viewer = await openViewer(session.browser_live_view_url);
    try {
      await remote.page.goto(pageUrl, { waitUntil: 'load' }); // red again, whatever came before
      await waitFor(async () => near(await viewerColour(viewer), [255, 0, 0]), { what: 'red in the viewer' });
      await remote.page.goto(green.url.replace('127.0.0.1', 'localhost'), { waitUntil: 'load' });
      await waitFor(async () => near(await viewerColour(viewer), [0, 255, 0]), { what: 'the new page in the viewer' });
      await remote.page.goto(pageUrl, { waitUntil: 'load' });
      await waitFor(async () => near(await viewerColour(viewer), [255, 0, 0]), { what: 'the first page again' });
    } finally {
      await viewer.close();
      await remote.page.goto(pageUrl).catch(() => {});
      await green.close();
    }
  });

  test('text pasted into the viewer reaches the remote clipboard', async () => {
    const viewer = await openViewer(session.browser_live_view_url);
    try {
      const text = `pasted-${Date.now()}`;
      await viewer.evaluate((t) => {
        const data = new DataTransfer();
        data.setData('text/plain', t);
        document.dispatchEvent(new ClipboardEvent('paste', { clipboardData: data }));
      }, text);
      await waitFor(async () => (await client.browsers.computer.readClipboard(session.session_id)).text === text, {
        what: 'the remote clipboard to hold the pasted text',
      });
      // A read-only viewer cannot paste.
      const refused = await fetch(`${session.browser_live_view_url}/clipboard?readOnly=true`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ text: 'nope' }),
      });
      assert.equal(refused.status, 403);
      assert.equal((await client.browsers.computer.readClipboard(session.session_id)).text, text);
    } finally {
      await viewer.close();
    }
  });

  test("keys typed in the viewer reach the remote page; a copy there reaches the viewer's clipboard", async () => {
    const context = await viewerBrowser.newContext({ viewport: VIEWPORT });
    await context.grantPermissions(['clipboard-read', 'clipboard-write']);
    const viewer = await openViewer(session.browser_live_view_url, await context.newPage());
    try {
      const text = `copied-${Date.now()}`;
      await remote.page.evaluate((t) => {
        const input = document.createElement('input');
        input.id = 'copy';
        input.value = 'something else';
        input.style.cssText = 'position:fixed;left:10%;top:10%;width:80%;height:80%;font-size:40px';
        document.body.append(input);
      }, text);
      await clickMiddle(viewer); // focuses the remote page and its input, as a person would
      // Keys typed in the viewer reach the focused input.
      await viewer.keyboard.press('Control+a');
      await viewer.keyboard.type(text);
      await waitFor(async () => (await remote.page.evaluate(() => document.getElementById('copy').value)) === text, {
        what: 'the typed text in the remote input',
      });
      await viewer.keyboard.press('Control+a');
      await viewer.keyboard.press('Control+c');
      await waitFor(async () => (await viewer.evaluate(() => navigator.clipboard.readText())) === text, {
        what: "the copied text on the viewer's clipboard",
      });
    } finally {
      await remote.page.evaluate(() => document.getElementById('copy')?.remove());
      await context.close();
    }
  });

  test('readOnly=true shows the screen but the server drops its input', async () => {
    for (const query of ['?readOnly=true', '?ro=1']) {
      const viewer = await openViewer(session.browser_live_view_url + query);
      try {
        await remote.page.evaluate(() => (document.body.style.background = 'rgb(0, 160, 0)'));
        await waitFor(async () => near(await viewerColour(viewer), [0, 160, 0]), { what: 'green in the viewer' });
        const before = await remote.page.evaluate(() => window.clicks);
        await clickMiddle(viewer);
        await new Promise((r) => setTimeout(r, 1000));
        assert.equal(await remote.page.evaluate(() => window.clicks), before);
      } finally {
        await viewer.close();
      }
    }
  });

  test('a read-only socket drops input even from a client that sends it', async () => {
    // Talk RFB directly over the read-only WebSocket, as a modified page could, and click. The
    // page moved to a read-only token: its socket is read-only with no query at all.
    const viewer = await viewerBrowser.newPage({ viewport: VIEWPORT });
    try {
      await viewer.goto(session.browser_live_view_url + '?readOnly=true');
      const before = await remote.page.evaluate(() => window.clicks);
      await viewer.evaluate(async (wsBase) => {
        const ws = new WebSocket(wsBase + '/ws', 'binary');
        ws.binaryType = 'arraybuffer';
        const chunks = [];
        let waiting = null;
        ws.onmessage = (e) => {
          chunks.push(new Uint8Array(e.data));
          waiting?.();
        };
        const total = () => chunks.reduce((n, c) => n + c.length, 0);
        const read = async (n) => {
          while (total() < n) await new Promise((r) => (waiting = r));
          const all = new Uint8Array(total());
          let o = 0;
          for (const c of chunks) all.set(c, (o += c.length) - c.length);
          chunks.length = 0;
          if (all.length > n) chunks.push(all.slice(n));
          return all.slice(0, n);
        };
        await new Promise((r) => (ws.onopen = r));
        await read(12); // version
        ws.send(new TextEncoder().encode('RFB 003.008\n'));
        const count = (await read(1))[0];
        await read(count); // security types; None (1) is offered without a password
        ws.send(new Uint8Array([1]));
        await read(4); // security result
        ws.send(new Uint8Array([1])); // shared
        const init = await read(24);
        const nameLength = new DataView(init.buffer).getUint32(20);
        await read(nameLength);
        const w = new DataView(init.buffer).getUint16(0);
        const h = new DataView(init.buffer).getUint16(2);
        const pointer = (mask) => {
          const m = new Uint8Array(6);
          const v = new DataView(m.buffer);
          v.setUint8(0, 5);
          v.setUint8(1, mask);
          v.setUint16(2, w / 2);
          v.setUint16(4, h / 2);
          ws.send(m);
        };
        pointer(1);
        pointer(0);
        await new Promise((r) => setTimeout(r, 1000));
        ws.close();
      }, viewer.url().split('?')[0].replace(/^http/, 'ws'));
      assert.notEqual(viewer.url().split('?')[0], session.browser_live_view_url, 'a read-only token');
      assert.equal(await remote.page.evaluate(() => window.clicks), before);
    } finally {
      await viewer.close();
    }
  });

  test('the link needs no API key, but a forged or foreign token is refused', async () => {
    const page = await fetch(session.browser_live_view_url);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type'), /text\/html/);
    assert.equal(page.headers.get('x-frame-options'), null, 'the page can be embedded');
    const asset = await fetch(new URL('/liveview/novnc/core/rfb.js', session.browser_live_view_url));
    assert.equal(asset.status, 200);
    assert.match(asset.headers.get('content-type'), /javascript/);
    assert.equal((await fetch(`${server.baseURL}/liveview/novnc/core/..%2f..%2f..%2f..%2fetc%2fpasswd`)).status, 404);

    const forged = session.browser_live_view_url.replace(/[^/]{8}$/, 'AAAAAAAA');
    assert.equal((await fetch(forged)).status, 401);
    // The CDP token of the same session is not a live-view token.
    const cdpToken = new URL(session.cdp_ws_url).searchParams.get('jwt');
    assert.equal((await fetch(new URL(`/browser/live/${cdpToken}`, server.baseURL))).status, 401);
  });
});

describe('live view and the session lifecycle', () => {
  test('a resize is refused while a viewer watches, unless forced; the viewer then follows the new size', async () => {
    const small = { width: 800, height: 600 };
    const session = await client.browsers.create({ headless: false, viewport: small });
    const viewer = await viewerBrowser.newPage({ viewport: VIEWPORT });
    try {
      await viewer.goto(session.browser_live_view_url);
      await viewer.waitForFunction(() => document.querySelector('#screen canvas')?.width === 800, null, { timeout: 30_000 });
      const refused = await client.browsers.update(session.session_id, { viewport: VIEWPORT }).catch((e) => e);
      assert.ok(refused instanceof ConflictError, String(refused));
      assert.match(refused.message, /live view/);
      const resized = await client.browsers.update(session.session_id, { viewport: { ...VIEWPORT, force: true } });
      assert.equal(resized.viewport.width, VIEWPORT.width);
      await viewer.waitForFunction((w) => document.querySelector('#screen canvas')?.width === w, VIEWPORT.width, { timeout: 30_000 });
    } finally {
      await viewer.close();
    }
    // With nobody watching any more, a resize needs no force.
    await waitFor(async () => (await client.browsers.update(session.session_id, { viewport: small }).then(() => true, () => false)),
      { timeoutMs: 10_000, what: 'a resize once the viewer left' });
    await client.browsers.deleteByID(session.session_id);
  });

  test('an open viewer keeps an idle session alive; the page says when the session ended', async () => {
    const session = await client.browsers.create({ headless: false, viewport: VIEWPORT, timeout_seconds: 10 });
    const viewer = await openViewer(session.browser_live_view_url);
    try {
      await new Promise((r) => setTimeout(r, 14_000));
      const still = await client.browsers.retrieve(session.session_id);
      assert.equal(still.deleted_at, undefined, 'the open viewer counts as activity');

      await client.browsers.deleteByID(session.session_id);
      await waitFor(async () => (await viewer.textContent('#status')) === 'This browser session has ended.', {
        what: 'the viewer to say the session ended',
      });
      const reload = await fetch(session.browser_live_view_url);
      assert.equal(reload.status, 404);
      assert.match(await reload.text(), /session has ended/);
    } finally {
      await viewer.close();
      await client.browsers.deleteByID(session.session_id).catch(() => {});
    }
  });
});
