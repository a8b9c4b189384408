// Faults inside an instance: a sandbox that dies by itself (the agent killed, as the OOM killer
// would) ends its session within seconds, with nothing of it left running; a Chromium that dies
// is brought back for the next CDP client. One browser at a time.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { chromium } from 'playwright-core';

import { descendants, startServer, startTestPages, stillAlive, waitFor } from './lib/server.mjs';

let server;
let pages;

before(async () => {
  server = await startServer();
  pages = await startTestPages();
});

after(async () => {
  await pages?.close();
  await server?.stop();
});

test('an instance killed from outside: its session is deleted within 5 s and nothing of it survives', async () => {
  const s = await server.client.browsers.create({ headless: true });
  const [bwrapPid] = readFileSync(join(server.dataDir, 'instances', `${s.session_id}.pids`), 'utf8').trim().split(' ').map(Number);
  const tree = [{ pid: bwrapPid, cmd: '' }, ...descendants(bwrapPid)];
  assert.ok(tree.some((p) => /chromium/.test(p.cmd)), 'Chromium runs under the sandbox');
  const killedAt = Date.now();
  process.kill(bwrapPid, 'SIGKILL');
  await waitFor(async () => {
    const got = await server.client.browsers.retrieve(s.session_id, { include_deleted: true });
    return Boolean(got.deleted_at);
  }, { timeoutMs: 5000, intervalMs: 100, what: 'the session to be marked deleted' });
  assert.ok(Date.now() - killedAt <= 5000);
  await waitFor(() => stillAlive(tree.slice(1)).length === 0, { timeoutMs: 5000, what: 'the instance processes to end' });
  await assert.rejects(server.client.browsers.retrieve(s.session_id), /404/);
  // The server goes on serving new browsers.
  const next = await server.client.browsers.create({ headless: true });
  await server.client.browsers.deleteByID(next.session_id);
});

// The killed process shows as gone a moment before its last thread has exited and the agent can
// see it: a client connecting in that moment is refused, and its retry gets the new Chromium.
async function connectAfterCrash(session) {
  return chromium
    .connectOverCDP(session.cdp_ws_url)
    .catch(() => new Promise((r) => setTimeout(r, 500)).then(() => chromium.connectOverCDP(session.cdp_ws_url)));
}

async function killChromium(session) {
  const [bwrapPid] = readFileSync(join(server.dataDir, 'instances', `${session.session_id}.pids`), 'utf8').trim().split(' ').map(Number);
  const browserProc = descendants(bwrapPid).find((p) => /chromium\/chromium /.test(p.cmd) && !/--type=/.test(p.cmd));
  assert.ok(browserProc, 'found the Chromium browser process');
  process.kill(browserProc.pid, 'SIGKILL');
  await waitFor(() => stillAlive([browserProc]).length === 0, { what: 'Chromium to be gone' });
}

test('Chromium killed twice: brought back once, then the session ends', async () => {
  const s = await server.client.browsers.create({ headless: true });
  await killChromium(s);
  const browser = await connectAfterCrash(s);
  await browser.close();
  await killChromium(s);
  // A client keeps trying to reconnect; the agent sees the second crash and ends.
  await waitFor(async () => {
    await chromium.connectOverCDP(s.cdp_ws_url, { timeout: 2000 }).then((b) => b.close(), () => {});
    return Boolean((await server.client.browsers.retrieve(s.session_id, { include_deleted: true })).deleted_at);
  }, {
    timeoutMs: 8000,
    intervalMs: 100,
    what: 'the session to end after the second crash',
  });
});

test('Chromium killed inside a live session comes back for the next CDP client', async () => {
  const s = await server.client.browsers.create({ headless: true });
  try {
    const [bwrapPid] = readFileSync(join(server.dataDir, 'instances', `${s.session_id}.pids`), 'utf8').trim().split(' ').map(Number);
    const browserProc = descendants(bwrapPid).find((p) => /chromium\/chromium /.test(p.cmd) && !/--type=/.test(p.cmd));
    assert.ok(browserProc, 'found the Chromium browser process');
    process.kill(browserProc.pid, 'SIGKILL');
    await waitFor(() => stillAlive([browserProc]).length === 0, { what: 'Chromium to be gone' });
    const browser = await connectAfterCrash(s);
    const page = browser.contexts()[0].pages()[0] ?? (await browser.contexts()[0].newPage());
    await page.goto(pages.url);
    assert.equal(await page.title(), 'Hangar test page');
    await browser.close();
  } finally {
    await server.client.browsers.deleteByID(s.session_id);
  }
});
