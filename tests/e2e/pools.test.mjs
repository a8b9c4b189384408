// Browser pools through the official SDK (client.browserPools.*): create → fill → acquire →
// release with reuse (the same session comes back) and without (a new one) → flush → delete
// with and without force; an empty pool's acquire times out to null; pool capacity counts toward
// the project's browser limit; pools survive a server restart and refill.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { BadRequestError, ConflictError, NotFoundError, RateLimitError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';

import { rejectsWith, startServer, startTestPages, waitFor } from './lib/server.mjs';
import { slow } from './lib/tier.mjs';

let server;
let client;

before(async () => {
  server = await startServer({ env: { HANGAR_MAX_BROWSERS_PER_PROJECT: '4' } });
  client = server.client;
});

after(async () => {
  await server?.stop();
});

const filled = (name, n) =>
  waitFor(async () => (await client.browserPools.retrieve(name)).available_count === n, {
    timeoutMs: 60_000,
    what: `pool ${name} to have ${n} idle browsers`,
  });

test('a pool fills, leases, takes browsers back, flushes and is deleted', async () => {
  // 6000 %/min of 2 browsers = one start every 0.5 s: fast enough for a test.
  const pool = await client.browserPools.create({ name: 'p1', size: 2, headless: true, fill_rate_per_minute: 6000 });
  assert.equal(pool.name, 'p1');
  assert.equal(pool.browser_pool_config.size, 2);
  assert.deepEqual(pool.extension_ids, []);
  await rejectsWith(client.browserPools.create({ name: 'p1', size: 1 }), ConflictError);
  await filled('p1', 2);

  const b = await client.browserPools.acquire('p1', { name: 'leased-one', tags: { team: 'qa' } });
  assert.ok(b.session_id && b.cdp_ws_url);
  assert.deepEqual(b.pool, { id: pool.id, name: 'p1' });
  assert.equal(b.name, 'leased-one');
  assert.equal(b.timeout_seconds, 600);
  let state = await client.browserPools.retrieve(pool.id);
  assert.deepEqual([state.available_count, state.acquired_count], [1, 1]);
  assert.equal((await client.browsers.retrieve(b.session_id)).session_id, b.session_id);

  // The lease is a real browser.
  const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
  assert.equal(cdp.contexts()[0].pages().length, 1);
  await cdp.close();

  // reuse: the same browser (and session id) goes back and comes out again.
  await client.browserPools.release('p1', { session_id: b.session_id });
  state = await client.browserPools.retrieve('p1');
  assert.deepEqual([state.available_count, state.acquired_count], [2, 0]);
  const ended = await client.browsers.retrieve(b.session_id, { include_deleted: true });
  assert.ok(ended.deleted_at, 'the lease ended');
  const again = [await client.browserPools.acquire('p1', {}), await client.browserPools.acquire('p1', {})];
  assert.ok(again.some((x) => x.session_id === b.session_id), 'the reused browser came back');
  const reused = again.find((x) => x.session_id === b.session_id);
  const other = again.find((x) => x.session_id !== b.session_id);

  // Empty pool: the acquire waits, then answers null.
  const t0 = Date.now();
  assert.equal(await client.browserPools.acquire('p1', { acquire_timeout_seconds: 1 }), null);
  assert.ok(Date.now() - t0 >= 900);

  // Leased browsers stop a plain delete.
  await rejectsWith(client.browserPools.delete('p1'), ConflictError);

  // reuse: false destroys it; the pool builds a new one.
  await client.browserPools.release('p1', { session_id: reused.session_id, reuse: false });
  await filled('p1', 1);
  const fresh = await client.browserPools.acquire('p1', {});
  assert.notEqual(fresh.session_id, reused.session_id);
  await client.browserPools.release('p1', { session_id: fresh.session_id });

  // Deleting a leased browser is like its idle timeout: the pool forgets it and refills.
  await client.browsers.deleteByID(other.session_id);
  await filled('p1', 2);
  await rejectsWith(client.browserPools.release('p1', { session_id: other.session_id }), NotFoundError);

  // Flush destroys the idle browsers (the one released above among them); fresh ones replace them.
  await client.browserPools.flush('p1');
  await filled('p1', 2);
  const afterFlush = [await client.browserPools.acquire('p1', {}), await client.browserPools.acquire('p1', {})];
  assert.ok(!afterFlush.some((x) => x.session_id === fresh.session_id), 'flushed browsers never come back');
  await client.browserPools.release('p1', { session_id: afterFlush[1].session_id });

  const leased = afterFlush[0];
  await client.browserPools.delete('p1', { force: true });
  await rejectsWith(client.browserPools.retrieve('p1'), NotFoundError);
  const gone = await client.browsers.retrieve(leased.session_id, { include_deleted: true });
  assert.ok(gone.deleted_at, 'force ended the leased browser');
});

test('list, update, bad input', async () => {
  const a = await client.browserPools.create({ name: 'list-a', size: 0, headless: true });
  const b = await client.browserPools.create({ name: 'list-b', size: 0, headless: true });
  const all = await client.browserPools.list();
  assert.deepEqual(all.items.map((p) => p.name).filter((n) => n.startsWith('list-')).sort(), ['list-a', 'list-b']);
  assert.deepEqual((await client.browserPools.list({ name: 'LIST-A' })).items.map((p) => p.id), [a.id]);
  const updated = await client.browserPools.update('list-b', { timeout_seconds: 120, start_url: 'about:blank' });
  assert.equal(updated.browser_pool_config.timeout_seconds, 120);
  const cleared = await client.browserPools.update('list-b', { start_url: '', discard_all_idle: true });
  assert.equal(cleared.browser_pool_config.start_url, undefined);
  // null leaves a field as it was, and what no pool takes is not kept (schemathesis found both
  // echoed back in browser_pool_config, nulls breaking its types).
  const kept = await client.browserPools.update('list-b', { headless: null, timeout_seconds: null, 'not-a-field': [1] });
  assert.equal(kept.browser_pool_config.headless, true);
  assert.equal(kept.browser_pool_config.timeout_seconds, 120);
  assert.equal('not-a-field' in kept.browser_pool_config, false);
  const made = await client.browserPools.create({ name: 'list-c', size: 0, headless: null, junk: { a: 1 } });
  assert.deepEqual(Object.keys(made.browser_pool_config).sort(), ['name', 'size']);
  await client.browserPools.delete('list-c');
  await rejectsWith(client.browserPools.create({ headless: true }), BadRequestError, 'bad_request');
  await rejectsWith(client.browserPools.create({ size: -1 }), BadRequestError);
  await rejectsWith(client.browserPools.create({ size: 1, timeout_seconds: 5 }), BadRequestError);
  await rejectsWith(client.browserPools.create({ size: 1, viewport: { width: 10, height: 10 } }), BadRequestError);
  await rejectsWith(client.browserPools.acquire('no-such-pool', {}), NotFoundError);
  await rejectsWith(client.browserPools.release('list-a', {}), BadRequestError);
  await client.browserPools.delete(a.id);
  await client.browserPools.delete(b.id);
});

test('a browser built before a PATCH keeps, and reports, the settings it was built with', async () => {
  const pool = await client.browserPools.create({
    name: 'stale', size: 1, headless: true, fill_rate_per_minute: 6000, viewport: { width: 1024, height: 768 },
  });
  await filled('stale', 1);
  await client.browserPools.update('stale', { viewport: { width: 1280, height: 800 } }); // no discard_all_idle
  const b = await client.browserPools.acquire('stale', {});
  assert.deepEqual([b.viewport.width, b.viewport.height], [1024, 768]);
  await client.browserPools.release('stale', { session_id: b.session_id, reuse: false });
  await filled('stale', 1);
  const fresh = await client.browserPools.acquire('stale', {});
  assert.deepEqual([fresh.viewport.width, fresh.viewport.height], [1280, 800]);
  await client.browserPools.delete(pool.id, { force: true });
});

test('pool capacity counts toward the project limit (4 here): 429, never a hang', slow, async () => {
  const pool = await client.browserPools.create({ name: 'cap', size: 3, headless: true, fill_rate_per_minute: 0 });
  const one = await client.browsers.create({ headless: true });
  const err = await rejectsWith(client.browsers.create({ headless: true }), RateLimitError);
  assert.match(err.message, /limit/);
  await rejectsWith(client.browserPools.update('cap', { size: 4 }), RateLimitError);
  await rejectsWith(client.browserPools.create({ size: 1 }), RateLimitError);
  await client.browsers.deleteByID(one.session_id);
  await client.browserPools.delete(pool.id);
});

test('pools survive a restart of the server and refill', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-pools-restart-'));
  try {
    const first = await startServer({ dataDir });
    try {
      await first.client.browserPools.create({ name: 'durable', size: 1, headless: true, fill_rate_per_minute: 6000 });
    } finally {
      await first.stop();
    }
    const second = await startServer({ dataDir });
    try {
      await waitFor(async () => (await second.client.browserPools.retrieve('durable')).available_count === 1, {
        timeoutMs: 60_000,
        what: 'the pool to refill after the restart',
      });
      const b = await second.client.browserPools.acquire('durable', {});
      assert.ok(b.session_id);
      await second.client.browserPools.delete('durable', { force: true });
    } finally {
      await second.stop();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('refresh_on_profile_update: a lease starts on the profile as last saved, not as it was when the pool filled', async () => {
  const pages = await startTestPages();
  const profile = await client.profiles.create({ name: 'pooled-profile' });
  try {
    await client.browserPools.create({
      name: 'fresh', size: 1, headless: true, fill_rate_per_minute: 6000,
      profile: { name: 'pooled-profile' }, refresh_on_profile_update: true,
    });
    await filled('fresh', 1); // started on the empty profile
    const before = (await client.browserPools.retrieve('fresh')).available_count;
    assert.equal(before, 1);

    // A session saves the profile with a cookie (as a managed-auth login would).
    const s = await client.browsers.create({ headless: true, profile: { name: 'pooled-profile', save_changes: true } });
    const cdp = await chromium.connectOverCDP(s.cdp_ws_url, { timeout: 30_000 });
    const saving = cdp.contexts()[0].pages()[0];
    await saving.goto(`${pages.url}page?title=saved-after-fill`);
    await saving.evaluate(() => {
      document.cookie = 'pooled=saved-after-fill; max-age=3600; path=/';
    });
    await cdp.close();
    await client.browsers.deleteByID(s.session_id);

    const b = await client.browserPools.acquire('fresh', { acquire_timeout_seconds: 30 });
    const leased = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
    const page = leased.contexts()[0].pages()[0];
    const urls = leased.contexts()[0].pages().map((p) => p.url());
    await page.goto(`${pages.url}page?title=lease`);
    const cookie = await page.evaluate(() => document.cookie);
    await leased.close();
    assert.deepEqual(urls, ['about:blank'], 'a profile brings no tab back');
    assert.match(cookie, /pooled=saved-after-fill/, 'the lease has the profile as last saved');
    await client.browserPools.release('fresh', { session_id: b.session_id, reuse: false });
  } finally {
    await client.browserPools.delete('fresh', { force: true }).catch(() => {});
    await client.profiles.delete(profile.id).catch(() => {});
    await pages.close();
  }
});
