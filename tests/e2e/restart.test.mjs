// Sessions survive a planned restart: SIGTERM leaves the instances running, and the next start on
// the same data dir and port adopts every one whose agent answers. The same cdp_ws_url reconnects
// to the same page, the live view URL streams the same screen, fs and process calls work, and a
// delete leaves nothing. An instance that died while no server ran is cleaned, its session ended
// with a reason. `hangar doctor` lists what waits for adoption and what was adopted.
// Two browsers at most.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { NotFoundError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';
import WebSocket from 'ws';

import { descendants, doctor, startServer, startTestPages, stillAlive, waitFor } from './lib/server.mjs';

// The test harness ends sessions on SIGTERM (HANGAR_KEEP_SESSIONS_ON_STOP=0); here the default
// of a real server is under test.
const KEEP = { HANGAR_KEEP_SESSIONS_ON_STOP: '1' };

// After a failure, instances may still be running with their folders mounted: those are
// unmounted (lazily) so the data dir can go, and the failure shows instead of EBUSY.
function removeDataDir(dataDir) {
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const point = line.split(' ')[4];
    if (point?.startsWith(join(dataDir, 'instances'))) try { execFileSync('umount', ['-l', point]); } catch {}
  }
  rmSync(dataDir, { recursive: true, force: true });
}

const sandboxPid = (dataDir, id) => Number(readFileSync(join(dataDir, 'instances', `${id}.pids`), 'utf8').trim().split(' ')[0]);

// The instance's processes: its sandbox and everything under it (Chromium included).
function instanceTree(dataDir, id) {
  const pid = sandboxPid(dataDir, id);
  const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
  return [{ pid, cmd }, ...descendants(pid)];
}

// The instance's processes once two looks 500 ms apart agree: a process Chromium is still
// starting (a helper mid-exec, a short-lived fork) would otherwise seem to die under the test.
async function settledTree(dataDir, id) {
  let last = instanceTree(dataDir, id);
  return waitFor(async () => {
    await new Promise((r) => setTimeout(r, 500));
    const now = instanceTree(dataDir, id);
    const same = JSON.stringify(now) === JSON.stringify(last);
    last = now;
    return same && now;
  }, { timeoutMs: 15_000, intervalMs: 0, what: `the processes of instance ${id} to settle` });
}

// The first message of the live view's VNC stream (the RFB version banner).
function liveViewBanner(liveViewUrl) {
  const url = liveViewUrl.replace(/^http/, 'ws').replace(/\?.*$/, '') + '/ws';
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    const timer = setTimeout(() => {
      ws.terminate();
      reject(new Error('no VNC banner within 10 s'));
    }, 10_000);
    ws.on('message', (data) => {
      clearTimeout(timer);
      ws.close();
      resolve(Buffer.from(data).toString('latin1'));
    });
    ws.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

test('SIGTERM keeps every session; the next start adopts them at the same URLs', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-restart-'));
  const apiKey = 'sk_test_restart_' + Date.now();
  const pages = await startTestPages();
  let trees = [];
  let second;
  try {
    const first = await startServer({ dataDir, apiKey, env: KEEP });
    const headless = await first.client.browsers.create({
      headless: true, timeout_seconds: 120, telemetry: { browser: { page: {} } },
    });
    const headful = await first.client.browsers.create({ headless: false, viewport: { width: 1024, height: 768 } });
    assert.ok(headful.browser_live_view_url, 'a headful session has a live view');
    assert.match(await liveViewBanner(headful.browser_live_view_url), /^RFB \d{3}\.\d{3}/);

    const cdp = await chromium.connectOverCDP(headless.cdp_ws_url, { timeout: 30_000 });
    const page = cdp.contexts()[0].pages()[0] ?? (await cdp.contexts()[0].newPage());
    await page.goto(`${pages.url}page?title=before-restart`);
    await page.evaluate(() => {
      window.kept = 42;
    });
    await first.client.browsers.fs.writeFile(headless.session_id, Buffer.from('kept across the restart'), { path: '/home/kernel/kept.txt' });
    trees = [...(await settledTree(dataDir, headless.session_id)), ...(await settledTree(dataDir, headful.session_id))];
    assert.ok(trees.filter((p) => /chromium/.test(p.cmd)).length >= 2, 'both Chromiums run');
    const pids = [sandboxPid(dataDir, headless.session_id), sandboxPid(dataDir, headful.session_id)];

    // The client's connection is open when the server stops: it is cut, the browser is not.
    const cut = new Promise((resolve) => cdp.on('disconnected', resolve));
    const stopped = await first.stop();
    assert.equal(stopped.killed, false, 'exited on SIGTERM within the harness grace period');
    assert.equal(stopped.code, 0);
    await cut;
    assert.deepEqual(stillAlive(trees), trees, 'every instance process outlives the server');

    const waiting = doctor(dataDir);
    for (const s of [headless, headful])
      assert.match(waiting.out, new RegExp(`instance ${s.session_id} waits for the next start to adopt it`), waiting.out);

    second = await startServer({ dataDir, apiKey, env: { ...KEEP, HANGAR_LISTEN: `127.0.0.1:${first.port}` } });
    assert.equal(second.baseURL, first.baseURL);
    assert.match(second.output(), new RegExp(`adopted instance ${headless.session_id}`));

    const active = [];
    for await (const s of second.client.browsers.list()) active.push(s.session_id);
    assert.ok(active.includes(headless.session_id) && active.includes(headful.session_id), JSON.stringify(active));
    assert.equal((await second.client.browsers.retrieve(headless.session_id)).deleted_at ?? null, null);
    assert.deepEqual([sandboxPid(dataDir, headless.session_id), sandboxPid(dataDir, headful.session_id)], pids, 'the same sandboxes');

    // The URL handed out before the restart reaches the same page, state and all.
    const again = await chromium.connectOverCDP(headless.cdp_ws_url, { timeout: 30_000 });
    const samePage = again.contexts()[0].pages().find((p) => p.url().includes('before-restart'));
    assert.ok(samePage, `the page is still open: ${again.contexts()[0].pages().map((p) => p.url())}`);
    assert.equal(await samePage.title(), 'before-restart');
    assert.equal(await samePage.evaluate(() => window.kept), 42);
    await samePage.goto(`${pages.url}page?title=after-restart`);
    assert.equal(await samePage.title(), 'after-restart');
    await again.close();

    const view = await fetch(headful.browser_live_view_url);
    assert.equal(view.status, 200);
    assert.match(await liveViewBanner(headful.browser_live_view_url), /^RFB \d{3}\.\d{3}/);

    const file = await second.client.browsers.fs.readFile(headless.session_id, { path: '/home/kernel/kept.txt' });
    assert.equal(Buffer.from(await file.arrayBuffer()).toString(), 'kept across the restart');

    // Telemetry goes on: the instance's own capture (the navigation after the restart) is pulled
    // by the new server, which adds its own events (the API call just made) without an update.
    let seen = [];
    const captured = () =>
      seen.some((e) => e.event.type === 'page_navigation' && e.event.data?.url?.includes('after-restart')) &&
      seen.some((e) => e.event.type === 'api_call' && e.event.data?.operation_id === 'fsReadFile');
    await waitFor(async () => {
      seen = [];
      for await (const e of second.client.browsers.telemetry.events(headless.session_id, { since: '10m', limit: 1000 })) seen.push(e);
      return captured();
    }, { timeoutMs: 15_000, what: 'telemetry captured after the restart' }).catch(() => {});
    assert.ok(captured(), JSON.stringify(seen.map((e) => [e.event.type, e.event.data?.url ?? e.event.data?.operation_id])));
    const r = await second.client.browsers.process.exec(headful.session_id, { command: 'echo', args: ['still', 'here'] });
    assert.equal(r.exit_code, 0);
    assert.equal(Buffer.from(r.stdout_b64, 'base64').toString(), 'still here\n');

    const adopted = doctor(dataDir);
    for (const s of [headless, headful])
      assert.match(adopted.out, new RegExp(`instance ${s.session_id} adopted by server ${second.pid}`), adopted.out);
    assert.doesNotMatch(adopted.out, /runs without a server/, adopted.out);

    await second.client.browsers.deleteByID(headless.session_id);
    await second.client.browsers.deleteByID(headful.session_id);
    await assert.rejects(second.client.browsers.retrieve(headless.session_id), NotFoundError);
    await waitFor(() => stillAlive(trees).length === 0, { timeoutMs: 10_000, what: 'the adopted instances to end' });
    // Its folder, pid file and disk go right after its processes (the teardown runs after the DELETE).
    await waitFor(() => readdirSync(join(dataDir, 'instances')).length === 0, { timeoutMs: 10_000, what: 'no folder, pid file or disk image left' })
      .catch((err) => assert.fail(`${err.message}: ${readdirSync(join(dataDir, 'instances'))}`));
  } finally {
    await second?.stop();
    for (const p of stillAlive(trees)) try { process.kill(p.pid, 'SIGKILL'); } catch {}
    await pages.close();
    removeDataDir(dataDir);
  }
});

test('an instance that died while the server was down is cleaned and its session ended with a reason', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-restart-'));
  const apiKey = 'sk_test_restart_' + Date.now();
  let trees = [];
  let second;
  try {
    const first = await startServer({ dataDir, apiKey, env: KEEP });
    const s = await first.client.browsers.create({ headless: true });
    trees = await settledTree(dataDir, s.session_id);
    await first.stop();
    assert.deepEqual(stillAlive(trees), trees, 'the instance outlives the server');

    // Its agent dies (as the OOM killer would). What it started runs on (bwrap's init waits for
    // every child), but nobody answers on its socket any more.
    const agent = trees.find((p) => /^\S*hangar agent /.test(p.cmd));
    assert.ok(agent, trees.map((p) => p.cmd).join('\n'));
    process.kill(agent.pid, 'SIGKILL');
    await waitFor(() => stillAlive([agent]).length === 0, { timeoutMs: 10_000, what: 'the agent to die' });
    const rest = trees.filter((p) => p.pid !== agent.pid);
    assert.ok(stillAlive(rest).some((p) => /chromium/.test(p.cmd)), 'Chromium outlives its agent');
    const waiting = doctor(dataDir);
    assert.match(waiting.out, new RegExp(`instance ${s.session_id} runs without a server`), waiting.out);

    second = await startServer({ dataDir, apiKey, env: KEEP });
    await assert.rejects(second.client.browsers.retrieve(s.session_id), NotFoundError);
    const ended = await second.client.browsers.retrieve(s.session_id, { include_deleted: true });
    assert.ok(ended.deleted_at, 'marked deleted');
    assert.match(second.output(), new RegExp(`ending browser session ${s.session_id}: its instance did not survive a server restart`));
    await waitFor(() => stillAlive(trees).length === 0, { timeoutMs: 10_000, what: 'the leftover processes to be killed' })
      .catch((err) => assert.fail(`${err.message}:\n${stillAlive(trees).map((p) => `${p.pid} ${p.cmd.slice(0, 80)}`).join('\n')}`));
    assert.deepEqual(readdirSync(join(dataDir, 'instances')), [], 'its folder, pid file and disk image removed');
    const report = doctor(dataDir);
    assert.match(report.out, /no instance left behind/, report.out);
  } finally {
    await second?.stop();
    for (const p of stillAlive(trees)) try { process.kill(p.pid, 'SIGKILL'); } catch {}
    removeDataDir(dataDir);
  }
});

test('SIGINT ends every session even when stops keep them', async () => {
  const server = await startServer({ env: KEEP });
  let trees = [];
  try {
    const s = await server.client.browsers.create({ headless: true });
    trees = instanceTree(server.dataDir, s.session_id);
    process.kill(server.pid, 'SIGINT');
    await waitFor(() => server.exited(), { timeoutMs: 15_000, what: 'the server to exit on SIGINT' });
    assert.equal(server.exited().code, 0);
    assert.match(server.output(), /ending every session/);
    await waitFor(() => stillAlive(trees).length === 0, { timeoutMs: 10_000, what: 'the instance to end with the server' });
  } finally {
    await server.stop();
    for (const p of stillAlive(trees)) try { process.kill(p.pid, 'SIGKILL'); } catch {}
  }
});
