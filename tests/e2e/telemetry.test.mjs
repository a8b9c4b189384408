// Browser telemetry through the official SDK (client.browsers.telemetry.*, `telemetry` on
// create/update/acquire): every CDP category from a real page driven by Playwright, nothing
// typed into a password field recorded, the live stream (Last-Event-ID, replay=all), the archive
// after delete, filters and paging, the configuration rules, and the acquire overrides.
// At most two browsers are alive at once.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { BadRequestError, NotFoundError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';

import { openWebSocket } from './lib/cdp.mjs';
import { listenAllowed, rejectsWith, startServer, waitFor } from './lib/server.mjs';
import { slow } from './lib/tier.mjs';

let server;
let client;
let site;
let origin;

const SECRET = 'hunter2-do-not-record';
const BIG = JSON.stringify({ items: Array.from({ length: 600 }, (_, i) => ({ i, name: `item-${i}` })) });

const PAGE = `<!doctype html><html><head><title>telemetry page</title></head><body>
<div id="top"></div>
<p>Some text to lay out.</p>
<button id="btn" class="primary">Press me</button>
<input id="name"> <input id="pw" type="password">
<div style="height: 3000px"></div>
<script>
  console.log('hello-log', 42);
  console.error('boom-error');
  setTimeout(() => { throw new Error('uncaught-boom'); }, 10);
  fetch('/api/data').then((r) => r.json()).then((j) => console.log('items', j.items.length));
  // A layout shift: a block pushed in above the content after first paint.
  setTimeout(() => {
    const d = document.createElement('div');
    d.style.height = '300px';
    d.textContent = 'late banner';
    document.getElementById('top').appendChild(d);
  }, 300);
</script></body></html>`;

before(async () => {
  server = await startServer();
  client = server.client;
  const srv = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (url.pathname === '/api/data') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(BIG);
    } else if (url.pathname === '/next') {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<!doctype html><title>next</title><p>second page</p>');
    } else {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(PAGE);
    }
  });
  const port = await listenAllowed(srv);
  origin = `http://127.0.0.1:${port}`;
  site = srv;
});

after(async () => {
  site?.closeAllConnections?.();
  site?.close();
  await server?.stop();
});

async function allEvents(id, query = {}) {
  const out = [];
  for await (const e of client.browsers.telemetry.events(id, { since: '10m', limit: 1000, ...query })) out.push(e);
  return out;
}

/** Reads a telemetry stream until `enough(seen)` or the timeout, then aborts it. */
async function readStream(id, params, enough, timeoutMs = 15_000) {
  const stream = await client.browsers.telemetry.stream(id, params);
  const seen = [];
  const timer = setTimeout(() => stream.controller.abort(), timeoutMs);
  try {
    for await (const env of stream) {
      seen.push(env);
      if (enough(seen)) break;
    }
  } catch (e) {
    if (e.name !== 'AbortError' && !String(e).includes('abort')) throw e;
  } finally {
    clearTimeout(timer);
    stream.controller.abort();
  }
  return seen;
}

describe('capture from a real page', () => {
  let id;
  let session;
  let browser;
  let page;

  before(async () => {
    const b = await client.browsers.create({
      headless: true,
      telemetry: { browser: { console: {}, network: {}, page: {}, interaction: {} } },
    });
    id = b.session_id;
    session = b;
    assert.equal(b.telemetry.browser.console.enabled, true);
    assert.equal(b.telemetry.browser.control.enabled, true, 'categories are layered onto the defaults');
    assert.equal(b.telemetry.browser.screenshot.enabled, false);
    browser = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
    page = browser.contexts()[0].pages()[0];
    await page.goto(`${origin}/`);
    await page.waitForTimeout(1500); // the layout shift, the fetch, layout_settled
    await page.click('#btn');
    await page.type('#name', 'ab');
    await page.type('#pw', SECRET);
    await page.mouse.wheel(0, 800);
    await page.waitForTimeout(700);
    await page.goto(`${origin}/next`);
    await client.browsers.fs.writeFile(id, 'x', { path: '/tmp/telemetry.txt' });
  });

  after(async () => {
    await browser?.close().catch(() => {});
    if (id) await client.browsers.deleteByID(id).catch(() => {});
  });

  test('console, network, page and interaction events arrive, shaped as the contract says', async () => {
    let events = [];
    const types = () => new Set(events.map((e) => e.event.type));
    await waitFor(
      async () => {
        events = await allEvents(id);
        return ['page_navigation_settled', 'interaction_scroll_settled', 'network_idle'].every((t) => types().has(t));
      },
      { what: 'the events of the page', timeoutMs: 20_000 },
    );
    for (const t of ['console_log', 'console_error', 'network_request', 'network_response', 'network_idle',
      'page_navigation', 'page_dom_content_loaded', 'page_load', 'page_layout_shift', 'page_layout_settled',
      'page_navigation_settled', 'interaction_click', 'interaction_key', 'interaction_scroll_settled']) {
      assert.ok(types().has(t), `no ${t} in ${[...types()].join(', ')}`);
    }
    for (const { seq, event } of events) {
      assert.ok(Number.isInteger(seq) && seq > 0);
      assert.ok(event.ts > 1.6e15 && event.ts < 1e16, `ts in microseconds: ${event.ts}`);
      assert.ok(event.category && event.source?.kind, JSON.stringify(event));
    }
    const seqs = events.map((e) => e.seq);
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), 'oldest first');

    const errors = events.filter((e) => e.event.type === 'console_error').map((e) => e.event.data);
    assert.ok(errors.some((d) => d.text === 'boom-error' && d.level === 'error'), JSON.stringify(errors));
    const uncaught = errors.find((d) => d.text.includes('uncaught-boom'));
    assert.ok(uncaught && uncaught.line >= 0 && uncaught.source_url?.startsWith(origin), JSON.stringify(errors));
    const log = events.find((e) => e.event.type === 'console_log' && e.event.data.text.startsWith('hello-log'));
    assert.deepEqual(log.event.data.args, ['hello-log', '42']);
    assert.equal(log.event.source.event, 'Runtime.consoleAPICalled');

    const api = events.find((e) => e.event.type === 'network_response' && e.event.data.url === `${origin}/api/data`);
    assert.ok(api, 'the fetch is recorded');
    assert.equal(api.event.data.status, 200);
    assert.equal(api.event.data.mime_type, 'application/json');
    assert.equal(api.event.truncated, true, 'a JSON body over 8 KB is cut');
    assert.equal(api.event.data.body.length, 8192);
    assert.ok(BIG.startsWith(api.event.data.body));
    const req = events.find((e) => e.event.type === 'network_request' && e.event.data.url === `${origin}/api/data`);
    assert.equal(req.event.data.method, 'GET');
    assert.equal(req.event.data.resource_type, 'Fetch');

    const shift = events.find((e) => e.event.type === 'page_layout_shift');
    assert.ok(shift.event.data.layout_shift_details.value > 0);
    const nav = events.filter((e) => e.event.type === 'page_navigation').map((e) => e.event.data.url);
    assert.ok(nav.includes(`${origin}/`) && nav.includes(`${origin}/next`), JSON.stringify(nav));

    const click = events.find((e) => e.event.type === 'interaction_click');
    assert.equal(click.event.data.selector, '#btn');
    assert.equal(click.event.data.tag, 'BUTTON');
    assert.equal(click.event.data.text, 'Press me');
    const keys = events.filter((e) => e.event.type === 'interaction_key').map((e) => e.event.data);
    assert.deepEqual(keys.filter((k) => k.selector === '#name').map((k) => k.key), ['a', 'b']);
  });

  test('control: every per-browser API call as api_call with its operation, status and duration', async () => {
    // An API call is recorded after its answer is sent (the caller never waits for telemetry),
    // so the event may land a moment after writeFile returned.
    let all = [];
    let control = [];
    await waitFor(
      async () => {
        all = await allEvents(id, { category: ['control'] });
        control = all.filter((e) => e.event.type === 'api_call');
        return control.some((e) => e.event.data.operation_id === 'fsWriteFile');
      },
      { what: 'the api_call event of fsWriteFile', timeoutMs: 10_000 },
    );
    // The user's Playwright commands are control events too (cdp_command, tested below).
    assert.ok(all.some((e) => e.event.type === 'cdp_command'));
    const write = control.find((e) => e.event.data.operation_id === 'fsWriteFile');
    assert.equal(write.event.type, 'api_call');
    assert.equal(write.event.source.kind, 'kernel_api');
    assert.ok(write.event.data.status >= 200 && write.event.data.status < 300);
    assert.ok(write.event.data.duration_ms >= 0 && write.event.data.request_id);
    assert.ok(!control.some((e) => e.event.data.route.includes('/telemetry/')), 'reading telemetry is not recorded');
  });

  test('nothing typed into a password field is recorded', async () => {
    const events = await allEvents(id);
    const text = JSON.stringify(events);
    assert.ok(!text.includes(SECRET), 'the password text appears nowhere');
    assert.ok(!events.some((e) => e.event.type === 'interaction_key' && e.event.data.selector === '#pw'));
    // Not even as single keys: "hunter2-do-not-record" has a "-" no other field received.
    assert.ok(!events.some((e) => e.event.type === 'interaction_key' && e.event.data.key === '-'));
  });

  test('the user\'s Playwright connection is unaffected by the collector', async () => {
    assert.equal(await page.title(), 'next');
    assert.equal(browser.contexts().length, 1);
    assert.equal(browser.contexts()[0].pages().length, 1, 'no page of the collector is visible');
    assert.equal(await page.evaluate(() => 1 + 1), 2);
  });

  test('stream: new events only, replay=all from the oldest, Last-Event-ID resumes after it', async () => {
    const archived = await allEvents(id);
    const newest = archived.at(-1).seq;

    const replay = await readStream(id, { replay: 'all' }, (s) => s.length >= 5);
    assert.equal(replay.length, 5);
    assert.equal(replay[0].seq, archived[0].seq, 'replay starts at the oldest retained event');
    for (let i = 1; i < replay.length; i++) assert.ok(replay[i].seq > replay[i - 1].seq);

    const resumed = await readStream(id, { 'Last-Event-ID': String(replay[2].seq) }, (s) => s.length >= 2);
    assert.deepEqual(resumed.map((e) => e.seq), [replay[3].seq, replay[4].seq]);

    // A fresh connection sees only what happens after it opened.
    const live = readStream(id, {}, (s) => s.some((e) => e.event.data?.text === 'live-line'));
    await new Promise((r) => setTimeout(r, 500));
    await page.evaluate(() => console.log('live-line'));
    const got = await live;
    assert.ok(got.length > 0 && got.every((e) => e.seq > newest), JSON.stringify(got.map((e) => e.seq)));
    assert.ok(got.some((e) => e.event.data?.text === 'live-line'));

    // A plain GET (no Accept: text/event-stream) gets what is held, as SSE frames, and an end.
    const jwt = new URL(session.cdp_ws_url).searchParams.get('jwt');
    const plain = await fetch(`${session.base_url}/telemetry/stream?replay=all&jwt=${jwt}`);
    assert.equal(plain.status, 200);
    const frames = (await plain.text()).split('\n\n').filter((f) => f.startsWith('id: '));
    assert.ok(frames.length >= archived.length, `${frames.length} frames`);
    const [idLine, dataLine] = frames[0].split('\n');
    assert.equal(JSON.parse(dataLine.slice('data: '.length)).seq, Number(idLine.slice('id: '.length)));
  });

  test('filters and paging: category, order, until, limit/offset; bad queries are 400', async () => {
    const all = await allEvents(id);
    const consoleOnly = await allEvents(id, { category: ['console'] });
    assert.ok(consoleOnly.length > 0 && consoleOnly.every((e) => e.event.category === 'console'));
    assert.equal(consoleOnly.length, all.filter((e) => e.event.category === 'console').length);

    // The auto-pager walks 3 at a time through the same events (the page may add some meanwhile:
    // compared up to the newest one `all` saw).
    const lastSeen = all.at(-1).seq;
    const paged = (await allEvents(id, { category: ['console', 'page'], limit: 3 })).filter((e) => e.seq <= lastSeen);
    const both = all.filter((e) => ['console', 'page'].includes(e.event.category));
    assert.deepEqual(paged.map((e) => e.seq), both.map((e) => e.seq));

    const first = await client.browsers.telemetry.events(id, { since: '10m', limit: 2 });
    assert.equal(first.getPaginatedItems().length, 2);
    assert.ok(first.hasNextPage());

    const newest = [];
    for await (const e of client.browsers.telemetry.events(id, { order: 'desc', limit: 4 })) {
      newest.push(e.seq);
      if (newest.length === 6) break;
    }
    const upToNewest = (await allEvents(id)).filter((e) => e.seq <= newest[0]);
    assert.deepEqual(newest, upToNewest.slice(-6).map((e) => e.seq).reverse(), 'desc pages walk back from the newest');

    const cutoff = new Date(all[3].event.ts / 1000 + 1).toISOString();
    const early = await allEvents(id, { until: cutoff });
    assert.ok(early.length >= 1 && early.every((e) => e.event.ts < Date.parse(cutoff) * 1000));

    await rejectsWith(client.browsers.telemetry.events(id, { order: 'desc', since: '5m' }), BadRequestError);
    const bad = await rejectsWith(client.browsers.telemetry.events(id, { since: 'yesterday' }), BadRequestError);
    assert.match(bad.message, /since/);
    await rejectsWith(client.browsers.telemetry.events(id, { until: '5 minutes' }), BadRequestError);
    await rejectsWith(client.browsers.telemetry.events(id, { category: ['keyboard'] }), BadRequestError);
    await rejectsWith(client.browsers.telemetry.events(id, { order: 'sideways' }), BadRequestError);
  });

  test('after delete: the archive still answers, the stream is 404', async () => {
    const before = await allEvents(id);
    await browser.close().catch(() => {});
    browser = null;
    await client.browsers.deleteByID(id);
    const archived = await allEvents(id);
    assert.ok(archived.length >= before.length);
    assert.deepEqual(archived.slice(0, before.length).map((e) => e.seq), before.map((e) => e.seq));
    await rejectsWith(client.browsers.telemetry.stream(id, {}), NotFoundError);
    await rejectsWith(client.browsers.telemetry.events('no-such-session', {}), NotFoundError);
    id = null;
  });
});

describe('connections and CDP commands (headful)', () => {
  const PARAM_SECRET = 'param-secret-never-recorded';

  test('cdp_connect, cdp_command names without params, cdp_disconnect with reason, live view connect/disconnect', async () => {
    const b = await client.browsers.create({ headless: false, telemetry: { enabled: true } });
    const id = b.session_id;
    try {
      // Playwright, then a raw CDP client with a command whose parameters carry a secret.
      const pw = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      const pg = pw.contexts()[0].pages()[0];
      assert.equal(await pg.evaluate((s) => s.length, PARAM_SECRET), PARAM_SECRET.length);
      await pw.close();
      const ws = await openWebSocket(b.cdp_ws_url);
      const answered = new Promise((resolve) => ws.once('message', resolve));
      ws.send(JSON.stringify({ id: 1, method: 'Browser.getVersion', params: { note: PARAM_SECRET } }));
      await answered;
      ws.close();

      // A live viewer: the noVNC WebSocket of the session's live view link.
      const viewer = await openWebSocket(`${b.browser_live_view_url.replace(/^http/, 'ws')}/ws`);
      await new Promise((resolve) => viewer.once('message', resolve)); // the RFB greeting
      await new Promise((r) => setTimeout(r, 300));
      viewer.close();

      let events = [];
      const of = (type) => events.filter((e) => e.event.type === type).map((e) => e.event);
      await waitFor(
        async () => {
          events = await allEvents(id, { category: ['connection', 'control'] });
          return of('cdp_disconnect').length >= 2 && of('live_view_disconnect').length >= 1 &&
            of('cdp_command').some((e) => e.data.method === 'Browser.getVersion');
        },
        { what: 'connection events', timeoutMs: 20_000 },
      );
      assert.equal(of('cdp_connect').length, 2, JSON.stringify(of('cdp_connect')));
      for (const e of of('cdp_connect')) assert.equal(e.category, 'connection');
      const disconnects = of('cdp_disconnect');
      assert.equal(disconnects.length, 2);
      for (const d of disconnects) {
        assert.equal(d.data.reason, 'client_close', JSON.stringify(d));
        assert.ok(d.data.message_count > 0 && d.data.duration_ms >= 0, JSON.stringify(d));
      }
      assert.equal(disconnects[1].data.message_count, 2, 'the raw client: one command, one answer');
      const commands = of('cdp_command');
      assert.ok(commands.length > 2, `${commands.length} commands`);
      for (const c of commands) {
        assert.equal(c.category, 'control');
        assert.deepEqual(Object.keys(c.data), ['method'], 'names only, never parameters');
      }
      const methods = commands.map((c) => c.data.method);
      assert.ok(methods.includes('Runtime.callFunctionOn'), methods.join(', '));
      // Connect, the commands, then the disconnect, in that order for each client.
      const order = events.map((e) => e.event.type).filter((t) => t.startsWith('cdp_'));
      assert.equal(order[0], 'cdp_connect');
      assert.equal(order.at(-1), 'cdp_disconnect');
      assert.ok(!JSON.stringify(events).includes(PARAM_SECRET), 'no parameter is recorded');

      const [lvc] = of('live_view_connect');
      const [lvd] = of('live_view_disconnect');
      assert.match(lvc.data.session_id, /^lv_[0-9a-f]{16}$/);
      assert.equal(lvd.data.session_id, lvc.data.session_id);
      assert.ok(lvd.data.duration_ms >= 300, JSON.stringify(lvd));
      assert.ok(!JSON.stringify(events).includes(new URL(b.browser_live_view_url).pathname.split('/').at(-1)),
        'the live view link is not shown');
    } finally {
      await client.browsers.deleteByID(id).catch(() => {});
    }
  });

  test('a session deleted under an open connection: its last API call and the disconnect are archived', async () => {
    const b = await client.browsers.create({ headless: true, telemetry: { enabled: true } });
    const ws = await openWebSocket(b.cdp_ws_url);
    const answered = new Promise((resolve) => ws.once('message', resolve));
    ws.send(JSON.stringify({ id: 1, method: 'Browser.getVersion' }));
    await answered;
    const closed = new Promise((resolve) => ws.once('close', resolve));
    // The server's own event for this call waits in its outbox when the delete comes right after.
    await client.browsers.fs.writeFile(b.session_id, Buffer.from('last'), { path: '/tmp/last.txt' });
    await client.browsers.deleteByID(b.session_id);
    await closed;
    let events = [];
    const of = (type) => events.filter((e) => e.event.type === type).map((e) => e.event);
    await waitFor(async () => {
      events = await allEvents(b.session_id, { category: ['connection', 'control'] });
      return of('cdp_disconnect').length === 1;
    }, { what: 'the disconnect of the connection the end cut', timeoutMs: 15_000 }).catch(() => {});
    assert.equal(of('cdp_disconnect').length, 1, JSON.stringify(events.map((e) => e.event.type)));
    assert.equal(of('cdp_disconnect')[0].data.reason, 'upstream_changed');
    assert.ok(of('api_call').some((e) => e.data.operation_id === 'fsWriteFile'), 'the last API call before the delete');
    const seqs = events.map((e) => e.seq);
    assert.deepEqual(seqs, [...seqs].sort((x, y) => x - y), 'in seq order');
    assert.equal(new Set(seqs).size, seqs.length, 'no seq twice');
  });

  test('a session capturing neither connection nor control is relayed without observation', async () => {
    const b = await client.browsers.create({ headless: true, telemetry: { browser: { console: {} } } });
    try {
      await client.browsers.update(b.session_id, { telemetry: { browser: { connection: { enabled: false }, control: { enabled: false } } } });
      const ws = await openWebSocket(b.cdp_ws_url);
      const answered = new Promise((resolve) => ws.once('message', resolve));
      ws.send(JSON.stringify({ id: 1, method: 'Browser.getVersion' }));
      await answered;
      ws.close();
      await new Promise((r) => setTimeout(r, 1500));
      const events = await allEvents(b.session_id, { category: ['connection', 'control'] });
      assert.deepEqual(events.map((e) => e.event.type).filter((t) => t.startsWith('cdp_')), []);
    } finally {
      await client.browsers.deleteByID(b.session_id).catch(() => {});
    }
  });
});

describe('system_oom_kill', () => {
  test('a process allocating past the instance memory limit is reported with its pid, name and RSS', slow, async () => {
    // Its own server: the memory limit applies to every instance it starts.
    const small = await startServer({ env: { HANGAR_SANDBOX_MEMORY_LIMIT_MB: '768' } });
    try {
      const b = await small.client.browsers.create({ headless: true, telemetry: { enabled: true } });
      const hog = 'import time\nkeep = []\nwhile True:\n    keep.append(b"x" * (16 << 20))\n    time.sleep(0.1)\n';
      const spawned = await small.client.browsers.process.spawn(b.session_id, { command: 'python3', args: ['-c', hog] });
      let oom;
      await waitFor(
        async () => {
          const events = [];
          for await (const e of small.client.browsers.telemetry.events(b.session_id, { since: '10m', category: ['system'] })) {
            events.push(e);
          }
          oom = events.find((e) => e.event.type === 'system_oom_kill');
          return oom;
        },
        { what: 'system_oom_kill', timeoutMs: 60_000 },
      );
      assert.equal(oom.event.category, 'system');
      assert.equal(oom.event.data.process_name, 'python3');
      assert.equal(oom.event.data.pid, spawned.pid, 'the pid as the sandbox sees it');
      assert.ok(oom.event.data.rss_kb > 100_000, JSON.stringify(oom.event.data));
      assert.equal(oom.event.data.constraint, 'memcg');
      await waitFor(
        async () => (await small.client.browsers.process.status(spawned.process_id, { id: b.session_id })).state !== 'running',
        { what: 'the killed process seen as ended', timeoutMs: 10_000 },
      );
      await small.client.browsers.deleteByID(b.session_id);
    } finally {
      await small.stop();
    }
  });
});

describe('configuration rules', () => {
  test('create layers, update merges, enabled:true resets, enabled:false and all-off stop', async () => {
    const off = await client.browsers.create({ headless: true });
    const id = off.session_id;
    try {
      assert.equal(off.telemetry ?? null, null, 'no telemetry object: no capture');

      const cats = (b) => Object.entries(b.telemetry?.browser ?? {}).filter(([, v]) => v.enabled).map(([k]) => k).sort();
      let b = await client.browsers.update(id, { telemetry: { enabled: true } });
      assert.deepEqual(cats(b), ['captcha', 'connection', 'control', 'system']);
      b = await client.browsers.update(id, { telemetry: { browser: { console: {} } } });
      assert.deepEqual(cats(b), ['captcha', 'connection', 'console', 'control', 'system'], 'merged');
      b = await client.browsers.update(id, { telemetry: {} });
      assert.deepEqual(cats(b), ['captcha', 'connection', 'console', 'control', 'system'], '{} leaves it unchanged');
      b = await client.browsers.update(id, { telemetry: { enabled: true, browser: { page: {} } } });
      assert.deepEqual(cats(b), ['captcha', 'connection', 'control', 'page', 'system'], 'enabled:true resets');
      assert.deepEqual(cats(await client.browsers.retrieve(id)), cats(b), 'retrieve echoes it');
      b = await client.browsers.update(id, {
        telemetry: { browser: Object.fromEntries(cats(b).map((c) => [c, { enabled: false }])) },
      });
      assert.equal(b.telemetry, null, 'disabling every category stops capture');
      b = await client.browsers.update(id, { telemetry: { browser: { console: {} } } });
      assert.ok(cats(b).includes('console'));
      b = await client.browsers.update(id, { telemetry: { enabled: false } });
      assert.equal(b.telemetry, null, 'enabled:false stops');

      // While off nothing is recorded; once on, console lines are.
      await client.browsers.update(id, { telemetry: { browser: { console: {} } } });
      const browser = await chromium.connectOverCDP(off.cdp_ws_url, { timeout: 30_000 });
      try {
        const page = browser.contexts()[0].pages()[0];
        await waitFor(async () => {
          await page.evaluate(() => console.log('now-on'));
          return (await allEvents(id, { category: ['console'] })).some((e) => e.event.data.text === 'now-on');
        }, { what: 'the console line', timeoutMs: 15_000 });
      } finally {
        await browser.close().catch(() => {});
      }

      for (const [body, field] of [
        [{ browser: { bogus: {} } }, 'telemetry.browser.bogus'],
        [{ enabled: false, browser: { console: {} } }, 'telemetry'],
        [{ enabled: 'yes' }, 'telemetry.enabled'],
      ]) {
        const err = await rejectsWith(client.browsers.update(id, { telemetry: body }), BadRequestError);
        assert.ok(err.message.includes(field), err.message);
      }
    } finally {
      await client.browsers.deleteByID(id).catch(() => {});
    }
    const err = await rejectsWith(
      client.browsers.create({ headless: true, telemetry: { browser: { keyboard: {} } } }),
      BadRequestError,
    );
    assert.match(err.message, /telemetry\.browser\.keyboard/);
    const allOff = await client.browsers.create({
      headless: true,
      telemetry: { browser: { control: { enabled: false }, connection: { enabled: false },
        system: { enabled: false }, captcha: { enabled: false } } },
    });
    try {
      assert.equal(allOff.telemetry ?? null, null, 'every default disabled on create: no capture');
    } finally {
      await client.browsers.deleteByID(allOff.session_id).catch(() => {});
    }
  });

  test('pool acquire: start_url and telemetry override for the lease only, reset on release', async () => {
    const pool = await client.browserPools.create({
      name: 'telemetry-pool', size: 1, headless: true, telemetry: { enabled: true },
    });
    try {
      await waitFor(async () => (await client.browserPools.retrieve(pool.id)).available_count === 1,
        { what: 'the pool to fill', timeoutMs: 60_000 });
      const url = `${origin}/next`;
      const lease = await client.browserPools.acquire(pool.id, {
        start_url: url, telemetry: { browser: { console: {} } },
      });
      assert.equal(lease.start_url, url);
      assert.equal(lease.telemetry.browser.console.enabled, true);
      assert.equal(lease.telemetry.browser.control.enabled, true, 'merged onto the pool baseline');
      const browser = await chromium.connectOverCDP(lease.cdp_ws_url, { timeout: 30_000 });
      try {
        const pages = browser.contexts()[0].pages();
        assert.equal(pages.length, 1);
        await pages[0].waitForURL(url, { timeout: 10_000 }); // opened before it was handed out
        assert.equal(await pages[0].title(), 'next');
      } finally {
        await browser.close().catch(() => {});
      }
      await client.browserPools.release(pool.id, { session_id: lease.session_id, reuse: true });

      const again = await client.browserPools.acquire(pool.id, {});
      assert.equal(again.session_id, lease.session_id, 'the same browser came back');
      assert.equal(again.start_url, undefined);
      assert.equal(again.telemetry.browser.console.enabled, false, 'the override ended with the lease');
      assert.equal(again.telemetry.browser.control.enabled, true, "the pool's configuration again");
      await client.browserPools.release(pool.id, { session_id: again.session_id, reuse: false });

      await rejectsWith(
        client.browserPools.acquire(pool.id, { telemetry: { browser: { nope: {} } } }),
        BadRequestError,
      );
    } finally {
      await client.browserPools.delete(pool.id, { force: true }).catch(() => {});
    }
  });
});
