// The API under load, bounded to 30 s: 200 concurrent clients reading and writing must see no
// error and the server must not crash (it did: a per-call OpenSSL init/cleanup raced across
// threads). Creates beyond the project's limit get 429 with Retry-After, never a 5xx or a leak.
// Speed goals live in bench/load.mjs; here only correctness.
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { apiLoad } from './lib/load.mjs';
import { startServer } from './lib/server.mjs';

let server;
const ids = [];

before(async () => {
  server = await startServer({ env: { HANGAR_MAX_BROWSERS_PER_PROJECT: '2' } });
  for (let i = 0; i < 2; i++) ids.push((await server.client.browsers.create({ headless: true })).session_id);
});

after(async () => {
  await server?.stop();
});

test('200 concurrent clients for 30 s: no error, the server stays up', async () => {
  const { count, byOp, failures } = await apiLoad({
    port: server.port,
    apiKey: server.apiKey,
    sessionIds: ids,
    clients: 200,
    seconds: Number(process.env.LOAD_SECONDS || 30),
  });
  assert.deepEqual(failures.slice(0, 5), [], `${failures.length} of ${count} requests failed`);
  assert.ok(byOp.get.length > 1000 && byOp.update.length > 100, `too few requests served: ${count}`);
  assert.equal(server.exited(), null, 'the server is still running');
  const got = await server.client.browsers.retrieve(ids[0]);
  assert.equal(got.session_id, ids[0]);
});

test('20 creates at once beyond the limit: 429 with Retry-After, no 5xx, nothing leaked', async () => {
  const results = await Promise.all(
    Array.from({ length: 20 }, () =>
      fetch(`${server.baseURL}/browsers`, {
        method: 'POST',
        headers: { authorization: `Bearer ${server.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ headless: true }),
      }).then(async (r) => ({ status: r.status, retryAfter: r.headers.get('retry-after'), body: await r.json() })),
    ),
  );
  for (const r of results) {
    assert.equal(r.status, 429, JSON.stringify(r.body));
    assert.equal(r.body.code, 'rate_limited');
    assert.match(r.retryAfter ?? '', /^\d+$/);
  }
  const listed = await server.client.browsers.list();
  const active = [];
  for await (const b of listed) active.push(b.session_id);
  assert.deepEqual(active.sort(), [...ids].sort());
  assert.equal(readdirSync(join(server.dataDir, 'instances')).filter((n) => !n.includes('.')).length, 2);
});
