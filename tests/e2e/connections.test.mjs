// 200 long-lived CDP connections must not starve ordinary requests: Poco parks one thread per
// connection, so the host hands upgraded connections to its event loop. With them all open,
// GET /browsers (each on a fresh TCP connection) still answers in under 50 ms (median).
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';

import { CdpClient, WebSocket } from './lib/cdp.mjs';
import { median, startServer } from './lib/server.mjs';

const CONNECTIONS = 200;
const BATCH = 20;

let server;

before(async () => {
  server = await startServer();
});

after(async () => {
  await server?.stop();
});

/** One GET /browsers on a new TCP connection (no keep-alive): resolves to {status, ms}. */
function timedList() {
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const req = http.request(
      new URL('/browsers', server.baseURL),
      { agent: false, headers: { authorization: `Bearer ${server.apiKey}`, connection: 'close' }, timeout: 10_000 },
      (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode, ms: Number(process.hrtime.bigint() - t0) / 1e6 }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('GET /browsers timed out while connections were open')));
    req.on('error', reject);
    req.end();
  });
}

async function sample(n) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const r = await timedList();
    assert.equal(r.status, 200);
    out.push(r.ms);
  }
  return out;
}

test(`${CONNECTIONS} open CDP connections do not block GET /browsers`, async (t) => {
  const b = await server.client.browsers.create({ headless: true, timeout_seconds: 600 });
  const clients = [];
  try {
    await sample(3); // warm-up
    const baseline = median(await sample(9));

    for (let i = 0; i < CONNECTIONS; i += BATCH) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(BATCH, CONNECTIONS - i) }, () => CdpClient.connect(b.cdp_ws_url, { timeoutMs: 30_000 })),
      );
      clients.push(...batch);
    }
    assert.equal(clients.length, CONNECTIONS);

    // They are real, working CDP connections, not just accepted sockets.
    const probe = [0, 57, 123, CONNECTIONS - 1].map((i) => clients[i].send('Browser.getVersion'));
    for (const v of await Promise.all(probe)) assert.match(v.product, /Chrome/);

    const loaded = await sample(15);
    const m = median(loaded);
    t.diagnostic(`GET /browsers median ${m.toFixed(1)} ms with ${CONNECTIONS} CDP connections open ` +
      `(baseline ${baseline.toFixed(1)} ms; max ${Math.max(...loaded).toFixed(1)} ms)`);
    assert.ok(m < 50, `median ${m.toFixed(1)} ms must be under 50 ms`);

    const open = clients.filter((c) => c.ws.readyState === WebSocket.OPEN).length;
    assert.equal(open, CONNECTIONS, 'every connection is still open');
    const last = await clients[CONNECTIONS - 1].send('Browser.getVersion');
    assert.match(last.product, /Chrome/);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await server.client.browsers.deleteByID(b.session_id).catch(() => {});
  }
});
