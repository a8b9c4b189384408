// Third-party plugins: the SDK example (sdk/examples/hello), built out of tree against the SDK
// headers alone by tests/sdk/build_example.sh, loads into a real server; so does a plugin built
// against the frozen ABI v1 header as first released (tests/sdk/abi_v1); a plugin built for
// another ABI is refused with a log line and the server starts anyway.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { examplePlugins, startServer } from './lib/server.mjs';

let plugins;

before(async () => {
  plugins = await examplePlugins();
});

describe('hello (the SDK example) next to a wrong-ABI plugin and a plugin built for ABI v1 as first released', () => {
  let server;

  before(async () => {
    server = await startServer({
      extraPluginDir: `${plugins.hello}:${plugins.wrongAbi}:${plugins.abiV1}`,
      enablePlugins: ['hello', 'wrong_abi', 'abi_v1'],
    });
  });

  after(async () => {
    await server?.stop();
  });

  test('the wrong-ABI plugin is refused with a log line naming it and the ABI', () => {
    const lines = server.output().split('\n');
    const line = lines.find((l) => l.includes('wrong_abi') && l.includes('ABI'));
    assert.ok(line, `a log line mentioning wrong_abi and ABI in:\n${server.output()}`);
    assert.equal(server.exited(), null, 'the server is still running');
  });

  test('the plugin built from the frozen v1 header loads and uses routes, store, services, config', async () => {
    for (const n of [1, 2]) {
      const res = await server.fetch('/abi-v1');
      assert.equal(res.status, 200, await res.clone().text());
      const body = await res.json();
      assert.equal(body.abi, 1);
      assert.deepEqual(body.rows, [{ n }], 'its migration made the table and the store counts its rows');
      assert.deepEqual(body.echo, { echoed: { ping: true } }, 'its service answered through the registry');
      assert.match(body.caller.project_id, /\S/);
      assert.equal(body.greeting, 'hello');
    }
    assert.equal((await fetch(new URL('/abi-v1', server.baseURL))).status, 401, 'its route is authenticated');
  });

  test('the server works normally beside it', async () => {
    const res = await server.fetch('/browsers');
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), []);
  });

  test('GET /hello answers with the authenticated caller', async () => {
    const res = await server.fetch('/hello');
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.equal(body.message, 'hello from a plugin');
    assert.equal(typeof body.caller, 'object');
    assert.match(body.caller.org_id, /\S/);
    assert.match(body.caller.project_id, /\S/);
  });

  test('plugin routes pass through the same auth middleware', async () => {
    const none = await fetch(new URL('/hello', server.baseURL));
    assert.equal(none.status, 401);
    assert.equal((await none.json()).code, 'unauthorized');
    const bad = await server.fetch('/hello', { headers: { authorization: 'Bearer nope' } });
    assert.equal(bad.status, 401);
  });

  test('the SDK client reaches plugin routes too', async () => {
    const body = await server.client.get('/hello');
    assert.equal(body.message, 'hello from a plugin');
  });

  test('greetings: migration-made table, store, offset pagination, validation', async () => {
    for (const text of ['one', 'two', 'three']) {
      const res = await server.fetch('/hello/greetings', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ text }),
      });
      assert.equal(res.status, 201);
      const g = await res.json();
      assert.equal(g.text, text);
      assert.match(g.id, /\S/);
    }
    const p1 = await server.fetch('/hello/greetings?limit=2');
    assert.equal(p1.status, 200);
    assert.equal(p1.headers.get('x-has-more'), 'true');
    assert.equal(p1.headers.get('x-next-offset'), '2');
    assert.deepEqual((await p1.json()).map((g) => g.text), ['one', 'two']);
    const p2 = await server.fetch('/hello/greetings?limit=2&offset=2');
    assert.equal(p2.headers.get('x-has-more'), 'false');
    assert.deepEqual((await p2.json()).map((g) => g.text), ['three']);

    const bad = await server.fetch('/hello/greetings', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ text: 42 }),
    });
    assert.equal(bad.status, 400);
    const err = await bad.json();
    assert.equal(err.code, 'bad_request');
    assert.ok(err.details.some((d) => d.code === 'invalid_input' && d.message.includes('text')));
  });

  test('greetings belong to the caller\'s project', async () => {
    const proj = await server.admin('project', 'create', 'hello-other');
    const res = await server.fetch('/hello/greetings', { headers: { 'x-kernel-project-id': proj } });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), []);
  });

  test('the hello.greet service, called through the host registry', async () => {
    const res = await server.fetch('/hello/greet/world');
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { greeting: 'hello, world' });
  });
});

test('migrations run once: a restarted server keeps the plugin data', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-keep-'));
  const apiKey = 'sk_test_restart_' + Date.now();
  const opts = { extraPluginDir: plugins.hello, enablePlugins: ['hello'], dataDir, apiKey };
  try {
    let server = await startServer(opts);
    try {
      const res = await server.fetch('/hello/greetings', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ text: 'still here' }),
      });
      assert.equal(res.status, 201);
    } finally {
      const stopped = await server.stop();
      assert.equal(stopped.code, 0, `clean exit: ${JSON.stringify(stopped)}`);
    }
    server = await startServer(opts);
    try {
      const res = await server.fetch('/hello/greetings');
      assert.equal(res.status, 200, 'the second start did not fail re-running the migration');
      assert.deepEqual((await res.json()).map((g) => g.text), ['still here']);
    } finally {
      await server.stop();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

// A path inside a known area that no plugin route serves (every 0.131 area has a plugin now, so
// an unrouted path under one stands in) answers 501 naming the area, not a bare 404; the README's
// table lists the 501s left inside areas.
test('an area path no plugin serves answers 501 naming it; an installed but disabled plugin 404', async () => {
  const server = await startServer({ extraPluginDir: plugins.hello });
  try {
    for (const [method, path, area] of [
      ['POST', '/config-registry/not-a-route', 'config_registry'],
      ['GET', '/config-registry/analyses/an_1/trail', 'config_registry'],
    ]) {
      const unbuilt = await server.fetch(path, { method, headers: { 'content-type': 'application/json' }, body: method === 'POST' ? '{}' : undefined });
      assert.equal(unbuilt.status, 501, `${method} ${path}`);
      const err = await unbuilt.json();
      assert.equal(err.code, 'not_implemented');
      assert.match(err.message, new RegExp(`area: ${area}`));
    }
    const res = await server.fetch('/hello');
    assert.equal(res.status, 404);
    const body = await res.json();
    assert.equal(body.code, 'not_found');
    assert.match(body.message, /'hello' plugin is disabled/);
  } finally {
    await server.stop();
  }
});
