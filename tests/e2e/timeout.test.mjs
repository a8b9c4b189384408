// Idle timeout: a session with no connection is deleted once idle `timeout_seconds` (checked at
// least every 5 s), exactly as DELETE would; an open CDP connection keeps it alive.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { NotFoundError } from '@onkernel/sdk';

import { CdpClient } from './lib/cdp.mjs';
import { startServer, waitFor } from './lib/server.mjs';

let server;
let client;

before(async () => {
  server = await startServer();
  client = server.client;
});

after(async () => {
  await server?.stop();
});

async function exists(id) {
  try {
    await client.browsers.retrieve(id);
    return true;
  } catch (err) {
    if (err instanceof NotFoundError) return false;
    throw err;
  }
}

test('timeout_seconds 10: idle one is deleted, one with an open CDP connection is kept', async () => {
  // The idle clock starts when the session is created: t0 before the creates (a slow second
  // create on a busy machine once made the first look deleted early).
  const t0 = Date.now();
  const idle = await client.browsers.create({ headless: true, timeout_seconds: 10 });
  const held = await client.browsers.create({ headless: true, timeout_seconds: 10 });
  assert.equal(idle.timeout_seconds, 10);
  const cdp = await CdpClient.connect(held.cdp_ws_url);
  try {
    // Not before its time (allowing for the 5 s check interval the other way only).
    await new Promise((r) => setTimeout(r, 5_000));
    assert.ok(await exists(idle.session_id), 'still there 5 s in');

    await waitFor(async () => !(await exists(idle.session_id)), {
      timeoutMs: 25_000 - (Date.now() - t0),
      intervalMs: 500,
      what: 'the idle session to be deleted within ~20 s',
    });
    const gone = Date.now() - t0;
    assert.ok(gone >= 8_000, `deleted after ${gone} ms, not before its 10 s timeout`);
    const d = await client.browsers.retrieve(idle.session_id, { include_deleted: true });
    assert.ok(d.deleted_at, 'soft-deleted like DELETE, with deleted_at');

    // The held one outlives 2× its timeout while the connection is open, and still works.
    const wait = 22_000 - (Date.now() - t0);
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    assert.ok(await exists(held.session_id), 'an open CDP connection keeps the session alive');
    const v = await cdp.send('Browser.getVersion');
    assert.match(v.product, /Chrome/);
  } finally {
    await cdp.close();
  }

  // Once the connection closes, the idle clock starts again.
  const closedAt = Date.now();
  await waitFor(async () => !(await exists(held.session_id)), {
    timeoutMs: 25_000,
    intervalMs: 500,
    what: 'the held session to be deleted after its connection closed',
  });
  const after = Date.now() - closedAt;
  assert.ok(after >= 8_000, `deleted ${after} ms after the connection closed, not before its timeout`);
});
