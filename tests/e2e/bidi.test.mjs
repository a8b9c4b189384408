// WebDriver BiDi through `webdriver_ws_url`: WebdriverIO's BiDi client (npm `webdriver`, what a
// WebdriverIO session speaks on its webSocketUrl) navigates and reads a title; a raw BiDi client
// (the spec's wire format over the `ws` package) creates a session with session.new, finds the browsing context, navigates to a
// local page and reads its title through script.evaluate; a bad token is refused before anything
// runs in the instance; a Chromium restart closes open BiDi sessions and the URL reaches the new
// one; an open BiDi connection keeps the session from its idle timeout.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import logger from '@wdio/logger';
import { BidiHandler } from 'webdriver';

import { BidiClient } from './lib/bidi.mjs';
import { CdpClient, openWebSocket } from './lib/cdp.mjs';
import {
  descendants,
  sessionExists,
  startServer,
  startTestPages,
  TEST_PAGE_TITLE,
  waitFor,
  withBrowser as sharedWithBrowser,
} from './lib/server.mjs';
import { slow } from './lib/tier.mjs';

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

const withBrowser = (params, fn) => sharedWithBrowser(client, params, fn);
const exists = (id) => sessionExists(client, id);

/** The BiDi mapper processes (node mapper.mjs) under this server. */
const mappers = () => descendants(server.pid).filter((p) => /mapper\.mjs/.test(p.cmd));

/**
 * The pids holding the server's end of the TCP connection from local port `clientPort` to
 * `serverPort`: who serves that client.
 */
function holdersOfServerEnd(serverPort, clientPort) {
  const hex = (port) => port.toString(16).toUpperCase().padStart(4, '0');
  const inodes = new Set();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length > 9 && f[1].endsWith(':' + hex(serverPort)) && f[2].endsWith(':' + hex(clientPort))) inodes.add(f[9]);
    }
  }
  const pids = [];
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    let fds = [];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // gone, or not ours to read
    }
    for (const fd of fds) {
      let link = '';
      try {
        link = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {}
      const m = /^socket:\[(\d+)\]$/.exec(link);
      if (m && inodes.has(m[1])) {
        pids.push(Number(pid));
        break;
      }
    }
  }
  return pids;
}

/** The URL is refused with a 4xx before any upgrade. */
async function assertRefused(url, what) {
  const err = await openWebSocket(url, { timeoutMs: 10_000 }).then(
    (ws) => {
      ws.terminate();
      assert.fail(`${what}: the WebSocket opened`);
    },
    (e) => e,
  );
  assert.ok(err.statusCode >= 400 && err.statusCode < 500, `${what}: refused with a 4xx, got ${err.statusCode ?? err.message}`);
  return err;
}

describe('webdriver_ws_url', () => {
  test('WebdriverIO\'s own BiDi client (the `webdriver` package): a session, a navigation, the title, a load event', async () => {
    await withBrowser({}, async (b) => {
      // The client WebdriverIO opens on a session's webSocketUrl, given Hangar's URL directly.
      logger.setLevel('webdriver', 'warn'); // its info lines print the URL, token included
      const wdio = new BidiHandler(b.webdriver_ws_url);
      assert.equal(await wdio.connect(), true, 'connected');
      try {
        const session = await wdio.sessionNew({ capabilities: {} });
        assert.equal(typeof session.sessionId, 'string');
        const { contexts } = await wdio.browsingContextGetTree({});
        const context = contexts[0].context;
        const loads = [];
        wdio.socket.on('message', (data) => {
          const msg = JSON.parse(String(data));
          if (msg.method === 'browsingContext.load') loads.push(msg.params.url);
        });
        await wdio.sessionSubscribe({ events: ['browsingContext.load'] });
        const url = pages.url + 'page?title=wdio-was-here';
        const nav = await wdio.browsingContextNavigate({ context, url, wait: 'complete' });
        assert.equal(nav.url, url);
        const title = await wdio.scriptEvaluate({ expression: 'document.title', target: { context }, awaitPromise: false });
        assert.deepEqual(title.result, { type: 'string', value: 'wdio-was-here' });
        await waitFor(() => loads.includes(url), { what: 'the load event', timeoutMs: 5000 });
        // A BiDi error reaches WebdriverIO as one.
        await assert.rejects(wdio.browsingContextNavigate({ context: 'no-such-context', url }), /no such frame|no such/i);
        await wdio.sessionEnd({});
      } finally {
        wdio.close();
      }
    });
  });

  test('session.new, getTree, navigate to a local page, title through script.evaluate', async () => {
    await withBrowser({}, async (b) => {
      assert.match(b.webdriver_ws_url, /^ws:\/\/127\.0\.0\.1:\d+\/browser\/webdriver\?jwt=/);
      const bidi = await BidiClient.connect(b.webdriver_ws_url);
      try {
        const session = await bidi.send('session.new', { capabilities: { alwaysMatch: { acceptInsecureCerts: true } } });
        assert.equal(typeof session.sessionId, 'string');
        assert.equal(session.capabilities.acceptInsecureCerts, true, 'the requested capability is granted');
        assert.match(session.capabilities.userAgent, /Chrome/);

        const { contexts } = await bidi.send('browsingContext.getTree', {});
        assert.equal(contexts.length, 1, 'a fresh browser has one top-level context');
        const context = contexts[0].context;

        await bidi.send('session.subscribe', { events: ['browsingContext.load'] });
        const nav = await bidi.send('browsingContext.navigate', { context, url: pages.url, wait: 'complete' });
        assert.equal(nav.url, pages.url);
        assert.ok(pages.hits.some((h) => h.url === '/'), 'the page came from our test server');
        assert.ok(
          bidi.events.some((e) => e.method === 'browsingContext.load' && e.params.url === pages.url),
          'the subscribed load event arrived',
        );

        const title = await bidi.send('script.evaluate', {
          expression: 'document.title',
          target: { context },
          awaitPromise: false,
        });
        assert.equal(title.type, 'success');
        assert.deepEqual(title.result, { type: 'string', value: TEST_PAGE_TITLE });

        // The client's own connection is served by the mapper, with no relay in between: the
        // server handed it over (plugins/bidi/README.md) and holds no copy.
        const holders = holdersOfServerEnd(Number(new URL(b.webdriver_ws_url).port), bidi.ws._socket.localPort);
        assert.deepEqual(holders, mappers().map((p) => p.pid), 'only the mapper holds the connection');

        // The mapper validates commands as a BiDi remote end does, also commands it already
        // parsed once (its schemas are built once and kept, mapper.mjs).
        await assert.rejects(bidi.send('browsingContext.navigate', { context }), (err) => {
          assert.equal(err.bidi.error, 'invalid argument');
          return true;
        });
        await assert.rejects(
          bidi.send('script.evaluate', { expression: 42, target: { context }, awaitPromise: false }),
          (err) => {
            assert.equal(err.bidi.error, 'invalid argument');
            assert.match(err.bidi.message, /expression/);
            return true;
          },
        );
        await assert.rejects(
          bidi.send('script.evaluate', { expression: '1', target: { context: 7 }, awaitPromise: false }),
          (err) => err.bidi.error === 'invalid argument',
        );
        await assert.rejects(bidi.send('no.such.command', {}), (err) => {
          assert.equal(err.bidi.error, 'unknown command');
          return true;
        });
        bidi.ws.send('not json');
        await waitFor(async () => bidi.unmatched, { timeoutMs: 5_000, what: 'an error for a message that is not JSON' });
        assert.equal(bidi.unmatched.error, 'invalid argument');

        // The same browser over CDP, at the same time, sees the navigation; BiDi adds no target.
        const cdp = await CdpClient.connect(b.cdp_ws_url);
        try {
          const { targetInfos } = await cdp.send('Target.getTargets');
          const tabs = targetInfos.filter((t) => t.type === 'page');
          assert.deepEqual(tabs.map((t) => t.url), [pages.url]);
        } finally {
          await cdp.close();
        }

        // session.end closes this connection and leaves the browser running.
        await bidi.send('session.end', {});
        const closed = await bidi.closedPromise;
        assert.equal(closed.code, 1000);
      } finally {
        await bidi.close();
      }
      assert.ok(await exists(b.session_id), 'the Hangar session outlives the BiDi session');

      // A second BiDi session on the same browser finds the page the first one left.
      const again = await BidiClient.connect(b.webdriver_ws_url);
      try {
        const { context } = await again.start();
        const r = await again.send('script.evaluate', { expression: 'location.href', target: { context }, awaitPromise: false });
        assert.equal(r.result.value, pages.url);
      } finally {
        await again.close();
      }
    });
  });

  test('a command sent with the upgrade request, before the answer, is relayed and answered', async () => {
    // A client may send its first frame right behind the upgrade request. The server has then read
    // bytes of the connection, which must not be lost: it relays the connection (a splice to the
    // mapper's socket) instead of handing it over.
    await withBrowser({}, async (b) => {
      const u = new URL(b.webdriver_ws_url);
      const socket = net.connect(Number(u.port), u.hostname);
      await new Promise((resolve, reject) => socket.once('connect', resolve).once('error', reject));
      try {
        const command = Buffer.from(JSON.stringify({ id: 1, method: 'session.new', params: { capabilities: {} } }));
        const mask = randomBytes(4);
        const frame = Buffer.concat([
          Buffer.from([0x81, 0x80 | command.length]), // a final text frame, masked, length < 126
          mask,
          Buffer.from(command.map((byte, i) => byte ^ mask[i % 4])),
        ]);
        assert.ok(command.length < 126);
        const upgrade =
          `GET ${u.pathname}${u.search} HTTP/1.1\r\nHost: ${u.host}\r\nUpgrade: websocket\r\n` +
          `Connection: Upgrade\r\nSec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\n` +
          'Sec-WebSocket-Version: 13\r\n\r\n';
        socket.write(Buffer.concat([Buffer.from(upgrade), frame])); // one write: one segment
        let got = Buffer.alloc(0);
        socket.on('data', (d) => (got = Buffer.concat([got, d])));
        // The 101, then one unmasked text frame with the answer to command 1.
        const answer = await waitFor(
          () => {
            const end = got.indexOf('\r\n\r\n');
            if (end < 0) return null;
            const body = got.subarray(end + 4);
            if (body.length < 2) return null;
            let length = body[1] & 0x7f;
            let offset = 2;
            if (length === 126) {
              if (body.length < 4) return null;
              length = body.readUInt16BE(2);
              offset = 4;
            }
            if (body.length < offset + length) return null;
            return { head: got.subarray(0, end).toString(), message: JSON.parse(body.subarray(offset, offset + length)) };
          },
          { timeoutMs: 20_000, what: 'the answer to a command sent with the upgrade' },
        );
        assert.match(answer.head, /^HTTP\/1\.1 101 /);
        assert.equal(answer.message.id, 1);
        assert.equal(answer.message.type, 'success', JSON.stringify(answer.message));
        assert.equal(typeof answer.message.result.sessionId, 'string');
        // Relayed, not handed over: the server holds the client's connection.
        assert.deepEqual(holdersOfServerEnd(Number(u.port), socket.localPort), [server.pid]);
      } finally {
        socket.destroy();
      }
    });
  });

  test('a bad or missing token is refused before anything runs in the instance', async () => {
    await withBrowser({}, async (b) => {
      const u = new URL(b.webdriver_ws_url);
      const jwt = u.searchParams.get('jwt');
      const tampered = new URL(u);
      tampered.searchParams.set('jwt', jwt.slice(0, -4) + (jwt.endsWith('AAAA') ? 'BBBB' : 'AAAA'));
      const err = await assertRefused(tampered.toString(), 'a tampered jwt');
      assert.equal(err.statusCode, 401);
      const missing = new URL(u);
      missing.search = '';
      assert.equal((await assertRefused(missing.toString(), 'no jwt')).statusCode, 401);
      // The CDP token of the same session is not a WebDriver token.
      const cdpJwt = new URL(b.cdp_ws_url).searchParams.get('jwt');
      const wrongType = new URL(u);
      wrongType.searchParams.set('jwt', cdpJwt);
      assert.equal((await assertRefused(wrongType.toString(), 'a cdp jwt')).statusCode, 401);

      // Nothing ran in the instance: the mapper starts only for an accepted connection.
      assert.equal(mappers().length, 0, 'no BiDi mapper started for refused connections');
      const bidi = await BidiClient.connect(b.webdriver_ws_url);
      try {
        await bidi.start();
        assert.equal(mappers().length, 1, 'one mapper for an accepted connection');
      } finally {
        await bidi.close();
      }
    });
    // It ends with its browser.
    await waitFor(async () => mappers().length === 0, { timeoutMs: 15_000, what: 'the mapper to end with its browser' });
  });

  test('a Chromium restart closes open BiDi sessions; the same URL reaches the new Chromium', async () => {
    await withBrowser({}, async (b) => {
      const before = await BidiClient.connect(b.webdriver_ws_url);
      try {
        await before.start();
        await client.browsers.update(b.session_id, { viewport: { width: 1024, height: 768 } });
        const closed = await before.closedPromise;
        assert.equal(closed.code, 1011, `closed with ${JSON.stringify(closed)}`);
        assert.match(closed.reason, /Chromium restarted|session ended/);
      } finally {
        await before.close();
      }
      const after = await BidiClient.connect(b.webdriver_ws_url);
      try {
        const { context } = await after.start();
        const r = await after.send('script.evaluate', { expression: 'innerWidth', target: { context }, awaitPromise: false });
        assert.equal(r.result.value, 1024, 'the new Chromium, at the new viewport');
      } finally {
        await after.close();
      }
    });
  });

  test('an open BiDi connection keeps the session from its idle timeout', slow, async () => {
    const held = await client.browsers.create({ headless: true, timeout_seconds: 10 });
    try {
      const bidi = await BidiClient.connect(held.webdriver_ws_url);
      const t0 = Date.now();
      try {
        const { context } = await bidi.start();
        // Twice its timeout with no API call and no other connection.
        await new Promise((r) => setTimeout(r, 22_000));
        if (!(await exists(held.session_id))) {
          const ended = await client.browsers.retrieve(held.session_id, { include_deleted: true });
          assert.fail(`ended while a BiDi connection was open (socket ${JSON.stringify(bidi.closed ?? 'open')}, ` +
            `deleted_at ${ended.deleted_at}, ${Date.now() - t0} ms after connecting)`);
        }
        const r = await bidi.send('script.evaluate', { expression: '6 * 7', target: { context }, awaitPromise: false });
        assert.equal(r.result.value, 42);
        assert.ok(Date.now() - t0 >= 20_000);
      } finally {
        await bidi.close();
      }
      // Once it closes, the idle clock runs again.
      const closedAt = Date.now();
      await waitFor(async () => !(await exists(held.session_id)), {
        timeoutMs: 25_000,
        intervalMs: 500,
        what: 'the session to be deleted after its BiDi connection closed',
      });
      const gone = Date.now() - closedAt;
      assert.ok(gone >= 8_000, `deleted ${gone} ms after the connection closed, not before its timeout`);
    } finally {
      await client.browsers.deleteByID(held.session_id).catch(() => {});
    }
  });
});
