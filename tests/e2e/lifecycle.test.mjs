// Process hygiene: SIGTERM ends every browser instance and exits 0; after a crash (SIGKILL) the
// next start finds the leftover instances and cleans them up. No orphan processes, ever.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { NotFoundError } from '@onkernel/sdk';

import { descendants, startServer, stillAlive, waitFor } from './lib/server.mjs';

const isChromium = (p) => /chrom/i.test(p.cmd);

test('SIGTERM stops the server cleanly and ends every instance', async () => {
  const server = await startServer();
  let procs = [];
  try {
    await server.client.browsers.create({ headless: true });
    await server.client.browsers.create({ headless: false, viewport: { width: 1024, height: 768 } });
    procs = descendants(server.pid);
    assert.ok(procs.filter(isChromium).length >= 2, `Chromium runs under the server:\n${procs.map((p) => p.cmd).join('\n')}`);
  } finally {
    const t0 = Date.now();
    const stopped = await server.stop();
    assert.equal(stopped.killed, false, 'exited on SIGTERM within 10 s');
    assert.equal(stopped.code, 0, `exit status: ${JSON.stringify(stopped)}`);
    assert.ok(Date.now() - t0 < 10_000);
  }
  // Every process the server had started is gone (allowing a moment for reaping).
  await waitFor(() => stillAlive(procs).length === 0, {
    timeoutMs: 5_000,
    what: 'instance processes to end',
  }).catch(() => {
    const left = stillAlive(procs);
    for (const p of left) try { process.kill(p.pid, 'SIGKILL'); } catch {}
    assert.fail(`orphans after SIGTERM:\n${left.map((p) => `${p.pid} ${p.cmd}`).join('\n')}`);
  });
});

test('after a crash the next start cleans up leftover instances', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-crash-'));
  const apiKey = 'sk_test_crash_' + Date.now();
  let leftovers = [];
  try {
    const first = await startServer({ dataDir, apiKey });
    const b = await first.client.browsers.create({ headless: true });
    const procs = descendants(first.pid);
    assert.ok(procs.some(isChromium));
    await first.kill();

    const second = await startServer({ dataDir, apiKey });
    try {
      await waitFor(() => stillAlive(procs).length === 0, { timeoutMs: 30_000, what: 'leftover instance processes to end' })
        .catch((err) => {
          leftovers = stillAlive(procs);
          throw new Error(`${err.message}:\n${leftovers.map((p) => `${p.pid} ${p.cmd}`).join('\n')}`);
        });
      // The crashed session is no longer active.
      await assert.rejects(second.client.browsers.retrieve(b.session_id), NotFoundError);
      const d = await second.client.browsers.retrieve(b.session_id, { include_deleted: true });
      assert.ok(d.deleted_at, 'marked ended');
    } finally {
      await second.stop();
    }
  } finally {
    for (const p of leftovers) try { process.kill(p.pid, 'SIGKILL'); } catch {}
    rmSync(dataDir, { recursive: true, force: true });
  }
});
