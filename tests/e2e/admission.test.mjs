// Admission control: a project over its browser limit gets 429 rate_limited with Retry-After at
// once (no queue, no hang); deleting a browser frees the slot; other projects are unaffected.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import Kernel from '@onkernel/sdk';

import { startServer } from './lib/server.mjs';

let server;

before(async () => {
  server = await startServer({ env: { HANGAR_MAX_BROWSERS_PER_PROJECT: '1' } });
});

after(async () => {
  await server?.stop();
});

test('over the per-project limit: 429 with Retry-After, then room again after a delete', async () => {
  const first = await server.client.browsers.create({ headless: true });
  try {
    const started = Date.now();
    const res = await server.fetch('/browsers', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ headless: true, name: 'one-too-many' }),
    });
    assert.equal(res.status, 429);
    assert.ok(Number(res.headers.get('retry-after')) > 0, 'Retry-After is set');
    const body = await res.json();
    assert.equal(body.code, 'rate_limited');
    assert.match(body.message, /limit 1/);
    assert.ok(Date.now() - started < 5000, 'answered at once');
    await assert.rejects(server.client.browsers.create({ headless: true }, { maxRetries: 0 }), (e) => e.status === 429);
    // Nothing was created by the refused requests.
    const all = await server.client.browsers.list({ status: 'all' });
    assert.deepEqual(all.getPaginatedItems().map((b) => b.session_id), [first.session_id]);

    const proj = await server.admin('project', 'create', 'other-team');
    const other = new Kernel({ apiKey: server.apiKey, baseURL: server.baseURL, projectID: proj });
    const b = await other.browsers.create({ headless: true });
    await other.browsers.deleteByID(b.session_id);
  } finally {
    await server.client.browsers.deleteByID(first.session_id);
  }
  const again = await server.client.browsers.create({ headless: true });
  await server.client.browsers.deleteByID(again.session_id);
});
