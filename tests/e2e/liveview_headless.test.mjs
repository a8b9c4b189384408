// Live view of a headless session: browser_live_view_url serves a page that draws the instance's
// CDP screencast (relayed through the agent; the viewer never gets CDP) on a canvas, and sends
// mouse and keys back. Opened in a real headless Chromium (playwright-core) as a user would: it
// shows the remote page's colour and a change, a click on the canvas reaches a button's handler
// and typed text an input; a copy or cut there reaches the viewer's clipboard; a read-only link's
// input is dropped by the server; it follows a new tab and falls back when that closes; a resize is
// refused while it watches unless forced, and then it shows the new size; an open viewer counts as
// activity; the page says when the session ended.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { ConflictError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';

import { chromiumBaseArgs, chromiumPath, servePage, startServer, waitFor } from './lib/server.mjs';
import { slow } from './lib/tier.mjs';

const REMOTE = { width: 1024, height: 768 };
const VIEWER = { width: 800, height: 700 }; // smaller than the remote page: the canvas is scaled
const BUTTON = { x: 150, y: 125 }; // the button's middle on the remote page
const FIELD = { x: 250, y: 320 }; // the input's middle
const PAGE = `<!doctype html><html><head><title>live</title><style>
  html, body { margin: 0; height: 100%; background: rgb(255, 0, 0); }
  #b { position: absolute; left: 50px; top: 75px; width: 200px; height: 100px; }
  #t { position: absolute; left: 50px; top: 300px; width: 400px; height: 40px; }
</style></head><body><button id="b">press</button><input id="t"><script>
  window.clicks = 0;
  document.getElementById('b').addEventListener('click', () => window.clicks++);
</script></body></html>`;

let server;
let client;
let pageServer;
let viewerBrowser;

before(async () => {
  server = await startServer();
  client = server.client;
  pageServer = await servePage(PAGE);
  viewerBrowser = await chromium.launch({ executablePath: chromiumPath, args: chromiumBaseArgs });
});

after(async () => {
  await viewerBrowser?.close();
  await server?.stop();
  await pageServer?.close();
});

/** Opens the link (in `page`, or a page of its own) and waits until the canvas shows the first frame. */
async function openViewer(url, page = null) {
  page ??= await viewerBrowser.newPage({ viewport: VIEWER });
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById('status')?.textContent === '' &&
    document.querySelector('#screen canvas')?.width > 0, null, { timeout: 30_000 });
  return page;
}

/** The colour the canvas shows at the remote page's middle. */
const viewerColour = (viewer) =>
  viewer.evaluate(() => {
    const c = document.querySelector('#screen canvas');
    return [...c.getContext('2d').getImageData(c.width >> 1, c.height >> 1, 1, 1).data.slice(0, 3)];
  });

const near = (a, b) => a.every((v, i) => Math.abs(v - b[i]) <= 24);

/** Where a point of the remote page is on the viewer's screen. */
async function onViewer(viewer, p) {
  const box = await (await viewer.$('#screen canvas')).boundingBox();
  return { x: box.x + (p.x / REMOTE.width) * box.width, y: box.y + (p.y / REMOTE.height) * box.height };
}

describe('headless live view', () => {
  let session;
  let cdp;
  let remote;

  before(async () => {
    session = await client.browsers.create({ headless: true, viewport: REMOTE });
    cdp = await chromium.connectOverCDP(session.cdp_ws_url, { timeout: 30_000 });
    remote = cdp.contexts()[0].pages()[0] ?? (await cdp.contexts()[0].newPage());
    await remote.goto(pageServer.url);
  });

  after(async () => {
    await cdp?.close().catch(() => {});
    if (session) await client.browsers.deleteByID(session.session_id).catch(() => {});
  });

  test('headless sessions carry a live-view link', async () => {
    assert.match(session.browser_live_view_url, /^http:\/\/127\.0\.0\.1:\d+\/browser\/live\/[^/?]+$/);
    const again = await client.browsers.retrieve(session.session_id);
    assert.ok(again.browser_live_view_url, 'retrieve returns the link too');
  });

  test('the canvas shows the page and follows a change; a click and typing reach the page', async () => {
    const viewer = await openViewer(session.browser_live_view_url);
    try {
      const box = await (await viewer.$('#screen canvas')).boundingBox();
      assert.ok(box.width <= VIEWER.width && box.height <= VIEWER.height, 'the canvas is scaled to fit');
      // Frames come no larger than the viewer's window (the screencast's cost is their pixels);
      // the canvas keeps the page's size, which mouse positions are mapped to.
      await waitFor(async () => {
        const [w, h] = (await viewer.evaluate(() => document.querySelector('#screen canvas').dataset.frame)).split('x').map(Number);
        return w <= VIEWER.width && h <= VIEWER.height;
      }, { what: "frames sized to the viewer's window" });
      assert.equal(await viewer.evaluate(() => document.querySelector('#screen canvas').width), REMOTE.width);
      await waitFor(async () => near(await viewerColour(viewer), [255, 0, 0]), { what: 'red in the viewer' });
      await remote.evaluate(() => (document.body.style.background = 'rgb(0, 0, 255)'));
      await waitFor(async () => near(await viewerColour(viewer), [0, 0, 255]), { what: 'blue in the viewer' });

      const at = await onViewer(viewer, BUTTON);
      await viewer.mouse.click(at.x, at.y);
      await waitFor(async () => (await remote.evaluate(() => window.clicks)) === 1, { what: 'the click on the button' });

      const field = await onViewer(viewer, FIELD);
      await viewer.mouse.click(field.x, field.y);
      await waitFor(async () => remote.evaluate(() => document.activeElement?.id === 't'), { what: 'the input focused' });
      await viewer.keyboard.type('Hi there!');
      await viewer.keyboard.press('Backspace');
      await waitFor(async () => (await remote.evaluate(() => document.getElementById('t').value)) === 'Hi there', {
        what: 'the typed text in the remote input',
      });
    } finally {
      await viewer.close();
    }
  });

  test("a copy or cut in the viewer puts what the page selected on the viewer's clipboard", async () => {
    const context = await viewerBrowser.newContext({ viewport: VIEWER });
    await context.grantPermissions(['clipboard-read', 'clipboard-write']);
    const viewer = await openViewer(session.browser_live_view_url, await context.newPage());
    const clipboard = () => viewer.evaluate(() => navigator.clipboard.readText());
    try {
      // Text selected in the page (not in a field).
      await remote.evaluate(() => {
        document.activeElement?.blur();
        getSelection().selectAllChildren(document.getElementById('b'));
      });
      await viewer.focus('#screen canvas');
      await viewer.keyboard.press('Control+c');
      await waitFor(async () => (await clipboard()) === 'press', { what: "the page's selection on the viewer's clipboard" });

      // Part of a field's text, cut: the viewer gets it, the field loses it.
      const word = `cut-${Date.now()}`;
      await remote.evaluate((w) => {
        const t = document.getElementById('t');
        t.value = `keep ${w}`;
        t.focus();
        t.setSelectionRange(5, t.value.length);
      }, word);
      await viewer.keyboard.press('Control+x');
      await waitFor(async () => (await clipboard()) === word, { what: "the field's selection on the viewer's clipboard" });
      await waitFor(async () => (await remote.evaluate(() => document.getElementById('t').value)) === 'keep ', {
        what: 'the cut text gone from the remote field',
      });
    } finally {
      await context.close();
    }
  });

  test('a read-only link shows the page but the server drops its input', async () => {
    const viewer = await openViewer(session.browser_live_view_url + '?readOnly=true');
    try {
      await remote.evaluate(() => (document.body.style.background = 'rgb(0, 255, 0)'));
      await waitFor(async () => near(await viewerColour(viewer), [0, 255, 0]), { what: 'green in the read-only viewer' });
      const before = await remote.evaluate(() => window.clicks);
      const at = await onViewer(viewer, BUTTON);
      await viewer.mouse.click(at.x, at.y);

      // A modified page gains nothing: the same input lines, sent straight to each socket, act
      // through the normal link only. The viewer's page moved to a read-only token, so its own
      // socket drops them even without ?readOnly.
      const readOnlyPath = new URL(viewer.url()).pathname;
      const fullPath = new URL(session.browser_live_view_url).pathname;
      assert.notEqual(readOnlyPath, fullPath);
      const click = ['down', 'up'].map((action) => JSON.stringify({ type: 'mouse', action, ...BUTTON, button: 'left', buttons: action === 'down' ? 1 : 0, clickCount: 1 }) + '\n').join('');
      const sendRaw = (path, query) => viewer.evaluate(async ({ path, query, click }) => {
        const url = new URL(path + '/ws' + query, location.href);
        url.protocol = 'ws:';
        const ws = new WebSocket(url);
        ws.binaryType = 'arraybuffer';
        // Input counts once the bridge streams (the first frame arrived).
        await new Promise((resolve, reject) => { ws.onmessage = resolve; ws.onerror = reject; });
        ws.send(click);
        await new Promise((r) => setTimeout(r, 1000));
        ws.close();
      }, { path, query, click });
      await sendRaw(fullPath, '?readOnly=true');
      assert.equal(await remote.evaluate(() => window.clicks), before, 'read-only input was dropped');
      await sendRaw(readOnlyPath, '');
      assert.equal(await remote.evaluate(() => window.clicks), before, 'a read-only token drops input without the query');
      await sendRaw(fullPath, '');
      await waitFor(async () => (await remote.evaluate(() => window.clicks)) === before + 1, {
        what: 'the same click through the normal link',
      });
    } finally {
      await viewer.close();
    }
  });

  test('the viewer follows a new tab, and the remaining page once that tab closes', async () => {
    const viewer = await openViewer(session.browser_live_view_url);
    try {
      await remote.evaluate(() => (document.body.style.background = 'rgb(255, 0, 255)'));
      await waitFor(async () => near(await viewerColour(viewer), [255, 0, 255]), { what: 'magenta in the viewer' });
      const tab = await cdp.contexts()[0].newPage();
      await tab.setContent('<body style="margin:0;height:100vh;background:rgb(255,255,0)"></body>');
      await waitFor(async () => near(await viewerColour(viewer), [255, 255, 0]), { what: 'the new tab in the viewer' });
      await tab.close();
      await waitFor(async () => near(await viewerColour(viewer), [255, 0, 255]), { what: 'the first page again' });
    } finally {
      await viewer.close();
    }
  });

  test('a resize is refused while a viewer watches, unless forced; the viewer then shows the new size', async () => {
    const other = await client.browsers.create({ headless: true, viewport: REMOTE });
    const viewer = await openViewer(other.browser_live_view_url);
    const canvasWidth = () => viewer.evaluate(() => document.querySelector('#screen canvas').width);
    const wider = { width: 1280, height: 800 };
    try {
      await waitFor(async () => (await canvasWidth()) === REMOTE.width, { what: 'the first size in the viewer' });
      const refused = await client.browsers.update(other.session_id, { viewport: wider }).catch((e) => e);
      assert.ok(refused instanceof ConflictError, String(refused));
      assert.match(refused.message, /live view/);
      assert.equal((await client.browsers.retrieve(other.session_id)).viewport.width, REMOTE.width, 'nothing changed');
      const resized = await client.browsers.update(other.session_id, { viewport: { ...wider, force: true } });
      assert.equal(resized.viewport.width, wider.width);
      await waitFor(async () => (await canvasWidth()) === wider.width, { timeoutMs: 30_000, what: 'the new size in the viewer' });
    } finally {
      await viewer.close();
    }
    // With nobody watching any more, a resize needs no force.
    await waitFor(async () => client.browsers.update(other.session_id, { viewport: REMOTE }).then(() => true, () => false), {
      timeoutMs: 10_000,
      what: 'a resize once the viewer left',
    });
    await client.browsers.deleteByID(other.session_id);
  });

  test('an open viewer keeps an idle session alive; the page says when the session ended', slow, async () => {
    const other = await client.browsers.create({ headless: true, viewport: REMOTE, timeout_seconds: 10 });
    const viewer = await openViewer(other.browser_live_view_url);
    try {
      await new Promise((r) => setTimeout(r, 14_000));
      const still = await client.browsers.retrieve(other.session_id);
      assert.equal(still.deleted_at, undefined, 'the open viewer counts as activity');

      await client.browsers.deleteByID(other.session_id);
      await waitFor(async () => (await viewer.textContent('#status')) === 'This browser session has ended.', {
        what: 'the viewer to say the session ended',
      });
      const reload = await fetch(other.browser_live_view_url);
      assert.equal(reload.status, 404);
    } finally {
      await viewer.close();
      await client.browsers.deleteByID(other.session_id).catch(() => {});
    }
  });
});
