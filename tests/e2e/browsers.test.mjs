// Browser sessions through the official SDK: create, retrieve, list, update, delete, errors,
// tenancy. Every test cleans up its browsers; at most 4 are alive at once.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import Kernel, {
  AuthenticationError,
  BadRequestError,
  ConflictError,
  NotFoundError,
  PermissionDeniedError,
} from '@onkernel/sdk';

import { CdpClient } from './lib/cdp.mjs';
import { startServer } from './lib/server.mjs';

let server;
let client;
const created = new Set();

async function create(params) {
  const b = await client.browsers.create(params);
  created.add(b.session_id);
  return b;
}

async function destroy(idOrName) {
  try {
    await client.browsers.deleteByID(idOrName);
  } catch (err) {
    if (!(err instanceof NotFoundError)) throw err;
  }
  created.delete(idOrName);
}

/** Evaluates `expression` in the browser's first page over a raw CDP connection to cdp_ws_url. */
async function evaluate(browser, expression) {
  const cdp = await CdpClient.connect(browser.cdp_ws_url);
  try {
    const sessionId = await cdp.attachToPage();
    const { result, exceptionDetails } = await cdp.send(
      'Runtime.evaluate',
      { expression, returnByValue: true, awaitPromise: true },
      sessionId,
    );
    assert.equal(exceptionDetails, undefined, `evaluate threw: ${JSON.stringify(exceptionDetails)}`);
    return result.value;
  } finally {
    await cdp.close();
  }
}

/** Asserts an SDK error's class and wire body: {code, message, details?}. */
async function rejectsWith(promise, Class, code) {
  const err = await promise.then(
    (v) => assert.fail(`expected ${Class.name}, got ${JSON.stringify(v)}`),
    (e) => e,
  );
  assert.ok(err instanceof Class, `expected ${Class.name}, got ${err?.constructor?.name}: ${err?.message}`);
  assert.equal(typeof err.error, 'object', 'error body must be JSON');
  assert.equal(err.error.code, code);
  assert.equal(typeof err.error.message, 'string');
  assert.ok(err.error.message.length > 0);
  return err;
}

/** Every active session id, through the SDK's own auto-pagination. */
async function allIds(query = {}) {
  const ids = [];
  for await (const b of client.browsers.list({ limit: 100, ...query })) ids.push(b.session_id);
  return ids;
}

before(async () => {
  server = await startServer();
  client = server.client;
});

after(async () => {
  for (const id of [...created]) await destroy(id).catch(() => {});
  await server?.stop();
});

describe('create', () => {
  test('headless: full BrowserSession shape and a live Chromium behind cdp_ws_url', async () => {
    const b = await create({ headless: true });
    try {
      assert.match(b.session_id, /^[A-Za-z0-9_-]+$/);
      const cdp = new URL(b.cdp_ws_url);
      assert.equal(cdp.protocol, 'ws:');
      assert.equal(cdp.host, `127.0.0.1:${server.port}`);
      assert.equal(cdp.pathname, '/browser/cdp');
      assert.ok(cdp.searchParams.get('jwt'), 'cdp_ws_url carries a jwt');
      assert.equal(typeof b.webdriver_ws_url, 'string');
      assert.match(b.webdriver_ws_url, /^wss?:\/\//);
      assert.ok(!Number.isNaN(Date.parse(b.created_at)), `created_at parses: ${b.created_at}`);
      assert.ok(Math.abs(Date.now() - Date.parse(b.created_at)) < 120_000, 'created_at is now');
      assert.equal(b.headless, true);
      assert.equal(b.stealth, false);
      assert.equal(b.timeout_seconds, 60, 'default timeout_seconds');
      assert.equal(b.deleted_at, undefined);

      const cdpClient = await CdpClient.connect(b.cdp_ws_url);
      try {
        const version = await cdpClient.send('Browser.getVersion');
        assert.match(version.product, /Chrome\//);
        const { targetInfos } = await cdpClient.send('Target.getTargets');
        assert.equal(targetInfos.filter((t) => t.type === 'page').length, 1, 'one page');
      } finally {
        await cdpClient.close();
      }
    } finally {
      await destroy(b.session_id);
    }
  });

  test('headful: an X display at the requested viewport', async () => {
    const b = await create({ headless: false, viewport: { width: 1280, height: 800 } });
    try {
      assert.equal(b.headless, false);
      assert.deepEqual({ width: b.viewport?.width, height: b.viewport?.height }, { width: 1280, height: 800 });
      const screen = await evaluate(b, '[screen.width, screen.height]');
      assert.deepEqual(screen, [1280, 800], 'Xvfb screen matches the viewport');
      const ua = await evaluate(b, 'navigator.userAgent');
      assert.doesNotMatch(ua, /HeadlessChrome/, 'a headful browser is not headless');
    } finally {
      await destroy(b.session_id);
    }
  });

  test('options are echoed: name, tags, timeout_seconds, stealth, start_url', async () => {
    const b = await create({
      headless: true,
      name: 'echo-me',
      tags: { team: 'qa', env: 'e2e' },
      timeout_seconds: 120,
      stealth: true,
      start_url: 'about:blank',
    });
    try {
      assert.equal(b.name, 'echo-me');
      assert.deepEqual(b.tags, { team: 'qa', env: 'e2e' });
      assert.equal(b.timeout_seconds, 120);
      assert.equal(b.stealth, true);
      assert.equal(b.start_url, 'about:blank');
    } finally {
      await destroy(b.session_id);
    }
  });
});

describe('retrieve', () => {
  test('by id and by name give the same session; unknown ones are 404 not_found', async () => {
    const b = await create({ headless: true, name: 'retrieve.by_name-1' });
    try {
      const byId = await client.browsers.retrieve(b.session_id);
      const byName = await client.browsers.retrieve('retrieve.by_name-1');
      assert.equal(byId.session_id, b.session_id);
      assert.equal(byName.session_id, b.session_id);
      assert.equal(byName.name, 'retrieve.by_name-1');
      assert.equal(byId.cdp_ws_url.split('?')[0], b.cdp_ws_url.split('?')[0]);
      assert.equal(typeof byId.usage?.uptime_ms, 'number', 'usage.uptime_ms');
      assert.ok(byId.usage.uptime_ms >= 0);
      await rejectsWith(client.browsers.retrieve('no-such-browser'), NotFoundError, 'not_found');
    } finally {
      await destroy(b.session_id);
    }
  });
});

describe('list', () => {
  test('bare array with X-Has-More / X-Next-Offset, pages of one via the SDK', async () => {
    const mine = [];
    try {
      for (let i = 0; i < 3; i++) mine.push((await create({ headless: true, tags: { suite: 'paging' } })).session_id);

      // Raw: the body is a bare array and the headers are there.
      const raw = await server.fetch('/browsers?limit=1&tags%5Bsuite%5D=paging');
      assert.equal(raw.status, 200);
      assert.equal(raw.headers.get('x-has-more'), 'true');
      assert.equal(raw.headers.get('x-next-offset'), '1');
      const body = await raw.json();
      assert.ok(Array.isArray(body), 'list body is a bare array');
      assert.equal(body.length, 1);

      // SDK: page by page, following X-Next-Offset.
      const first = await client.browsers.list({ limit: 1, tags: { suite: 'paging' } }).withResponse();
      assert.equal(first.response.headers.get('x-has-more'), 'true');
      assert.equal(first.response.headers.get('x-next-offset'), '1');
      const seen = [];
      let page = first.data;
      let pages = 0;
      for (;;) {
        pages++;
        assert.equal(page.getPaginatedItems().length, 1, `page ${pages} has one item`);
        seen.push(page.getPaginatedItems()[0].session_id);
        if (!page.hasNextPage()) break;
        page = await page.getNextPage();
        assert.ok(pages < 10, 'pagination terminates');
      }
      assert.equal(pages, 3);
      assert.deepEqual([...seen].sort(), [...mine].sort(), 'each session exactly once');

      const last = await client.browsers.list({ limit: 1, offset: 2, tags: { suite: 'paging' } }).asResponse();
      assert.equal(last.headers.get('x-has-more'), 'false');

      // Auto-pagination over everything finds them too.
      const all = await allIds();
      for (const id of mine) assert.ok(all.includes(id));
    } finally {
      for (const id of mine) await destroy(id);
    }
  });

  test('tags[k]=v filter: all pairs must match', async () => {
    const a = await create({ headless: true, tags: { team: 'red', env: 'prod' } });
    const b = await create({ headless: true, tags: { team: 'blue', env: 'prod' } });
    try {
      const red = (await client.browsers.list({ tags: { team: 'red' } })).getPaginatedItems().map((x) => x.session_id);
      assert.deepEqual(red, [a.session_id]);
      const prod = (await client.browsers.list({ tags: { env: 'prod' } })).getPaginatedItems().map((x) => x.session_id);
      assert.deepEqual([...prod].sort(), [a.session_id, b.session_id].sort());
      const both = (await client.browsers.list({ tags: { env: 'prod', team: 'blue' } })).getPaginatedItems();
      assert.deepEqual(both.map((x) => x.session_id), [b.session_id]);
      const none = (await client.browsers.list({ tags: { env: 'prod', team: 'green' } })).getPaginatedItems();
      assert.deepEqual(none, []);
    } finally {
      await destroy(a.session_id);
      await destroy(b.session_id);
    }
  });
});

describe('update', () => {
  test('name, tags (replace, then clear) and viewport', async () => {
    const b = await create({ headless: true, name: 'before-update', tags: { a: '1', b: '2' } });
    try {
      let u = await client.browsers.update(b.session_id, { name: 'after-update', tags: { c: '3' } });
      assert.equal(u.session_id, b.session_id);
      assert.equal(u.name, 'after-update');
      assert.deepEqual(u.tags, { c: '3' }, 'tags are replaced, not merged');

      const r = await client.browsers.retrieve('after-update');
      assert.equal(r.session_id, b.session_id);
      await rejectsWith(client.browsers.retrieve('before-update'), NotFoundError, 'not_found');

      u = await client.browsers.update('after-update', { viewport: { width: 1024, height: 768 } });
      assert.deepEqual({ width: u.viewport?.width, height: u.viewport?.height }, { width: 1024, height: 768 });
      const width = await evaluate(u, 'innerWidth');
      assert.equal(width, 1024, 'the page sees the new viewport width');

      u = await client.browsers.update(b.session_id, { tags: {} });
      assert.ok(u.tags === undefined || Object.keys(u.tags).length === 0, `{} clears tags: ${JSON.stringify(u.tags)}`);
      u = await client.browsers.update(b.session_id, { name: '' });
      assert.ok(!u.name, '"" clears the name');
      await rejectsWith(client.browsers.update('no-such-browser', { name: 'x' }), NotFoundError, 'not_found');
    } finally {
      await destroy(b.session_id);
    }
  });
});

describe('delete', () => {
  test('204, then 404; include_deleted and status=deleted still show it, with deleted_at', async () => {
    const b = await create({ headless: true, name: 'to-delete' });
    const raw = await server.fetch(`/browsers/${encodeURIComponent(b.session_id)}`, { method: 'DELETE' });
    assert.equal(raw.status, 204);
    created.delete(b.session_id);

    await rejectsWith(client.browsers.retrieve(b.session_id), NotFoundError, 'not_found');
    await rejectsWith(client.browsers.deleteByID(b.session_id), NotFoundError, 'not_found');

    const d = await client.browsers.retrieve(b.session_id, { include_deleted: true });
    assert.equal(d.session_id, b.session_id);
    assert.ok(d.deleted_at, 'deleted_at is set');
    assert.ok(Date.parse(d.deleted_at) >= Date.parse(d.created_at));

    assert.ok(!(await allIds()).includes(b.session_id), 'not in the default (active) list');
    assert.ok((await allIds({ status: 'deleted' })).includes(b.session_id), 'in status=deleted');
    assert.ok((await allIds({ status: 'all' })).includes(b.session_id), 'in status=all');

    // Its Chromium is gone: the CDP URL no longer leads anywhere.
    await assert.rejects(CdpClient.connect(b.cdp_ws_url, { timeoutMs: 10_000 }));
  });

  test('delete by name', async () => {
    const b = await create({ headless: true, name: 'delete-by-name' });
    await client.browsers.deleteByID('delete-by-name');
    created.delete(b.session_id);
    await rejectsWith(client.browsers.retrieve(b.session_id), NotFoundError, 'not_found');
  });
});

describe('names', () => {
  test('409 conflict for a duplicate active name; reusable once deleted', async () => {
    const b = await create({ headless: true, name: 'dupe' });
    try {
      const before = (await allIds({ status: 'all' })).length;
      await rejectsWith(client.browsers.create({ headless: true, name: 'dupe' }, { maxRetries: 0 }), ConflictError, 'conflict');
      assert.equal((await allIds({ status: 'all' })).length, before, 'nothing was created');
      const other = await create({ headless: true });
      try {
        await rejectsWith(client.browsers.update(other.session_id, { name: 'dupe' }, { maxRetries: 0 }), ConflictError, 'conflict');
      } finally {
        await destroy(other.session_id);
      }
    } finally {
      await destroy(b.session_id);
    }
    const again = await create({ headless: true, name: 'dupe' });
    assert.equal(again.name, 'dupe');
    await destroy(again.session_id);
  });
});

describe('bad input', () => {
  const cases = [
    ['viewport: negative width', { headless: true, viewport: { width: -5, height: 600 } }, 'viewport'],
    ['viewport: width not a number', { headless: true, viewport: { width: 'wide', height: 600 } }, 'viewport'],
    ['timeout_seconds below 10', { headless: true, timeout_seconds: 5 }, 'timeout_seconds'],
    ['timeout_seconds above 259200', { headless: true, timeout_seconds: 259201 }, 'timeout_seconds'],
    ['headless not a boolean', { headless: 'yes' }, 'headless'],
  ];
  for (const [label, body, field] of cases) {
    test(`400 with details naming the field: ${label}`, async () => {
      const before = (await allIds({ status: 'all' })).length;
      const err = await rejectsWith(client.browsers.create(body), BadRequestError, 'bad_request');
      assert.ok(Array.isArray(err.error.details) && err.error.details.length > 0, 'details present');
      assert.ok(
        err.error.details.some((d) => d.code === 'invalid_input' && String(d.message).includes(field)),
        `a details entry names ${field}: ${JSON.stringify(err.error.details)}`,
      );
      assert.equal((await allIds({ status: 'all' })).length, before, 'nothing was created');
    });
  }

  test('400 for malformed JSON, with details', async () => {
    const res = await server.fetch('/browsers', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"headless": tru',
    });
    assert.equal(res.status, 400);
    const body = await res.json();
    assert.equal(body.code, 'bad_request');
    assert.equal(typeof body.message, 'string');
    assert.ok(Array.isArray(body.details) && body.details.length > 0);
    assert.ok(body.details.every((d) => typeof d.code === 'string'));
  });

  test('400 for a bad viewport on update; the session is unchanged', async () => {
    const b = await create({ headless: true, viewport: { width: 1200, height: 800 } });
    try {
      const err = await rejectsWith(
        client.browsers.update(b.session_id, { viewport: { width: 0, height: 800 } }),
        BadRequestError,
        'bad_request',
      );
      assert.ok(err.error.details?.some((d) => String(d.message).includes('viewport')));
      const r = await client.browsers.retrieve(b.session_id);
      assert.equal(r.viewport?.width, 1200);
    } finally {
      await destroy(b.session_id);
    }
  });
});

describe('auth and tenancy', () => {
  test('401 AuthenticationError for a bad key and for no key', async () => {
    const bad = new Kernel({ apiKey: 'sk_not_a_real_key', baseURL: server.baseURL, maxRetries: 0 });
    await rejectsWith(bad.browsers.list(), AuthenticationError, 'unauthorized');
    await rejectsWith(bad.browsers.create({ headless: true }), AuthenticationError, 'unauthorized');
    const none = await fetch(new URL('/browsers', server.baseURL));
    assert.equal(none.status, 401);
    assert.equal((await none.json()).code, 'unauthorized');
  });

  test('project-scoped keys: 403 naming another project; X-Kernel-Project-Id selects the project', async () => {
    const projA = await server.admin('project', 'create', 'team-a');
    const projB = await server.admin('project', 'create', 'team-b');
    assert.match(projA, /^proj_\S+$/);
    assert.match(projB, /^proj_\S+$/);
    assert.notEqual(projA, projB);
    const keyA = await server.admin('key', 'create', '--project', projA);
    assert.ok(keyA.length >= 16 && !/\s/.test(keyA), `a key on one line: ${keyA}`);

    const aInB = new Kernel({ apiKey: keyA, baseURL: server.baseURL, projectID: projB, maxRetries: 0 });
    await rejectsWith(aInB.browsers.list(), PermissionDeniedError, 'forbidden');
    await rejectsWith(aInB.browsers.create({ headless: true }), PermissionDeniedError, 'forbidden');

    const aInA = new Kernel({ apiKey: keyA, baseURL: server.baseURL, projectID: projA });
    const aPlain = new Kernel({ apiKey: keyA, baseURL: server.baseURL });
    const b = await aInA.browsers.create({ headless: true, name: 'shared-name' });
    try {
      assert.equal((await aPlain.browsers.retrieve(b.session_id)).session_id, b.session_id,
        'a scoped key without the header acts in its own project');

      // The org-wide bootstrap key selects project B: A's session is not there, and names are
      // unique per project only.
      const orgInB = server.newClient({ projectID: projB });
      await rejectsWith(orgInB.browsers.retrieve(b.session_id), NotFoundError, 'not_found');
      const ids = [];
      for await (const x of orgInB.browsers.list()) ids.push(x.session_id);
      assert.ok(!ids.includes(b.session_id));
      const orgInA = server.newClient({ projectID: projA });
      assert.equal((await orgInA.browsers.retrieve('shared-name')).session_id, b.session_id);
      const inB = await orgInB.browsers.create({ headless: true, name: 'shared-name' });
      try {
        assert.notEqual(inB.session_id, b.session_id);
        assert.equal((await orgInB.browsers.retrieve('shared-name')).session_id, inB.session_id);
      } finally {
        await orgInB.browsers.deleteByID(inB.session_id);
      }
    } finally {
      await aInA.browsers.deleteByID(b.session_id);
    }
  });
});
