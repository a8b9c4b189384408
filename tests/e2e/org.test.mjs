// Organisation (plugin `org` and the host's auth and audit middleware) through the official SDK:
// API keys (create once-shown, masked reads, list rules, rename, soft delete, rotate with grace,
// immediate revoke, bad input), project-scoped keys, projects (by id or name, soft delete rules),
// isolation of every resource type across two projects, limits (override ▸ org default ▸ none,
// capped by the operator, 429 with Retry-After), audit logs (entries of a call sequence, the SDK's
// page iteration over more than 100, export chunks, bodies never recorded) and the operator's
// per-project feature switch (403 on the extension upload). At most one browser runs at a time.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync, copyFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { createHash } from 'node:crypto';

import Kernel, {
  AuthenticationError,
  BadRequestError,
  ConflictError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
  toFile,
} from '@onkernel/sdk';

import { startServer, rejectsWith, repoRoot, waitFor } from './lib/server.mjs';

const scratch = mkdtempSync(join(tmpdir(), 'hangar-org-test-'));
const ORG_LIMIT = 3;

function extensionZip(mark) {
  const dir = mkdtempSync(join(scratch, 'ext-'));
  writeFileSync(
    join(dir, 'manifest.json'),
    JSON.stringify({ manifest_version: 3, name: `org test ${mark}`, version: '1.0' }),
  );
  const out = join(scratch, `${mark}-${Date.now()}.zip`);
  execFileSync('zip', ['-qr', out, '.'], { cwd: dir });
  return readFileSync(out);
}

let server;
let admin; // the bootstrap key: org-wide
const clientFor = (apiKey, extra = {}) => new Kernel({ apiKey, baseURL: server.baseURL, maxRetries: 0, ...extra });
const inProject = (projectId) => server.newClient({ maxRetries: 0, defaultHeaders: { 'X-Kernel-Project-Id': projectId } });

before(async () => {
  server = await startServer({ env: { HANGAR_MAX_BROWSERS_PER_PROJECT: String(ORG_LIMIT) } });
  admin = server.newClient({ maxRetries: 0 });
});

after(async () => {
  await server?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

describe('API keys', () => {
  test('create shows the key once; reads are masked; the key works', async () => {
    const created = await admin.apiKeys.create({ name: 'ci', days_to_expire: 30 });
    assert.match(created.key, /^hgr_/);
    assert.equal(created.masked_key, `hgr_****${created.key.slice(-4)}`);
    assert.equal(created.name, 'ci');
    assert.equal(created.project_id, null);
    assert.equal(created.project_name, null);
    assert.equal(created.deleted_at, null);
    const days = (Date.parse(created.expires_at) - Date.parse(created.created_at)) / 86_400_000;
    assert.ok(Math.abs(days - 30) < 0.01, `expires in ${days} days`);
    assert.equal(created.created_by.name, 'bootstrap (HANGAR_API_KEY)');
    assert.equal(typeof created.created_by.email, 'string');

    const read = await admin.apiKeys.retrieve(created.id);
    assert.equal(read.key, undefined);
    assert.equal(read.masked_key, created.masked_key);
    assert.ok(!JSON.stringify(await admin.apiKeys.list({ limit: 100 })).includes(created.key));

    // Works at once, and only its hash is stored.
    await clientFor(created.key).browsers.list();
    const files = readdirSync(server.dataDir).filter((f) => f.startsWith('hangar.db'));
    for (const f of files) assert.ok(!readFileSync(join(server.dataDir, f)).includes(created.key), f);
  });

  test('list: status, sort_by, query, name, paging', async () => {
    const made = [];
    for (const name of ['list-b', 'list-a', 'list-c']) made.push(await admin.apiKeys.create({ name, days_to_expire: null }));
    const byName = await admin.apiKeys.list({ query: 'list-', sort_by: 'name', sort_direction: 'asc' });
    assert.deepEqual(byName.items.map((k) => k.name), ['list-a', 'list-b', 'list-c']);
    const newest = await admin.apiKeys.list({ query: 'LIST-' });
    assert.deepEqual(newest.items.map((k) => k.name), ['list-c', 'list-a', 'list-b']);
    assert.deepEqual((await admin.apiKeys.list({ name: 'List-A' })).items.map((k) => k.id), [made[1].id]);
    const page = await admin.apiKeys.list({ query: 'list-', limit: 2 });
    assert.equal(page.items.length, 2);
    assert.ok(page.hasNextPage());
    const all = [];
    for await (const k of admin.apiKeys.list({ query: 'list-', limit: 2 })) all.push(k.name);
    assert.equal(all.length, 3);

    await admin.apiKeys.delete(made[0].id);
    assert.ok(!(await admin.apiKeys.list({ query: 'list-' })).items.some((k) => k.id === made[0].id));
    const deleted = await admin.apiKeys.list({ status: 'deleted', query: 'list-' });
    assert.deepEqual(deleted.items.map((k) => k.id), [made[0].id]);
    assert.ok(deleted.items[0].deleted_at);
    assert.equal((await admin.apiKeys.list({ status: 'all', query: 'list-' })).items.length, 3);
    // Expiry sort: never-expiring keys last when ascending.
    const soon = await admin.apiKeys.create({ name: 'list-soon', days_to_expire: 1 });
    const byExpiry = await admin.apiKeys.list({ query: 'list-', sort_by: 'expires_at', sort_direction: 'asc' });
    assert.equal(byExpiry.items[0].id, soon.id);
  });

  test('rename, and bad input answers 400 naming the field', async () => {
    const k = await admin.apiKeys.create({ name: 'old name' });
    assert.equal((await admin.apiKeys.update(k.id, { name: 'new name' })).name, 'new name');
    const cases = [
      [{ name: '' }, 'name'],
      [{ name: 'x'.repeat(256) }, 'name'],
      [{ name: 'ok', days_to_expire: 0 }, 'days_to_expire'],
      [{ name: 'ok', days_to_expire: 3651 }, 'days_to_expire'],
      [{ name: 'ok', days_to_expire: 1.5 }, 'days_to_expire'],
      [{ name: 'ok', project_id: 'proj_nope' }, 'project_id'],
    ];
    for (const [body, field] of cases) {
      const err = await rejectsWith(admin.apiKeys.create(body), BadRequestError);
      assert.ok(err.message.includes(field), `${JSON.stringify(body).slice(0, 60)} → ${err.message}`);
    }
    assert.equal((await admin.apiKeys.create({ name: 'x'.repeat(255) })).name.length, 255);
    const err = await rejectsWith(admin.apiKeys.list({ sort_by: 'id' }), BadRequestError);
    assert.match(err.message, /sort_by/);
    await rejectsWith(admin.apiKeys.update(k.id, { name: '' }), BadRequestError);
    await rejectsWith(admin.apiKeys.retrieve('key_missing'), NotFoundError);
  });

  test('delete: soft, immediate 401, a key cannot delete itself', async () => {
    const k = await admin.apiKeys.create({ name: 'to delete' });
    const c = clientFor(k.key);
    await c.browsers.list();
    const self = await rejectsWith(c.apiKeys.delete(k.id), BadRequestError, 'cannot_delete_current_key');
    assert.match(self.message, /itself/);
    await admin.apiKeys.delete(k.id);
    await rejectsWith(c.browsers.list(), AuthenticationError, 'unauthorized');
    await rejectsWith(admin.apiKeys.retrieve(k.id), NotFoundError);
    const gone = await admin.apiKeys.retrieve(k.id, { include_deleted: true });
    assert.ok(gone.deleted_at);
    await rejectsWith(admin.apiKeys.delete(k.id), NotFoundError);
  });

  test('rotate: same name and scope, old key lives for the grace period (or dies at once)', async () => {
    const project = await admin.projects.create({ name: 'rotate-proj' });
    const k = await admin.apiKeys.create({ name: 'rotating', project_id: project.id, days_to_expire: 90 });
    const rotated = await admin.apiKeys.rotate(k.id, {});
    assert.notEqual(rotated.id, k.id);
    assert.equal(rotated.name, 'rotating');
    assert.equal(rotated.project_id, project.id);
    assert.equal(rotated.project_name, 'rotate-proj');
    const lifetime = (Date.parse(rotated.expires_at) - Date.parse(rotated.created_at)) / 86_400_000;
    assert.ok(Math.abs(lifetime - 90) < 0.01, `new key lives ${lifetime} days`);
    const old = await admin.apiKeys.retrieve(k.id);
    const grace = (Date.parse(old.expires_at) - Date.now()) / 86_400_000;
    assert.ok(grace > 6.9 && grace <= 7, `grace ${grace} days`);
    await clientFor(k.key).browsers.list(); // still valid in the grace period
    await clientFor(rotated.key).browsers.list();

    const now = await admin.apiKeys.rotate(rotated.id, { expire_in_days: 0 });
    await rejectsWith(clientFor(rotated.key).browsers.list(), AuthenticationError, 'unauthorized');
    await clientFor(now.key).browsers.list();

    const err = await rejectsWith(admin.apiKeys.rotate(now.id, { days_to_expire: 3, expire_in_days: 5 }), BadRequestError);
    assert.match(err.message, /days_to_expire/);
    await rejectsWith(admin.apiKeys.rotate(now.id, { expire_in_days: 3651 }), BadRequestError);
  });

  test('an expired key is refused on its next request', async () => {
    const k = await admin.apiKeys.create({ name: 'expiring', days_to_expire: 30 });
    await clientFor(k.key).browsers.list();
    // Rotating with no grace is the API's way to make a key expire now.
    await admin.apiKeys.rotate(k.id, { expire_in_days: 0 });
    await rejectsWith(clientFor(k.key).browsers.list(), AuthenticationError);
  });

  test('a project-scoped key manages only its own project keys; org endpoints answer 403', async () => {
    const p = await admin.projects.create({ name: 'scoped-proj' });
    const scopedKey = await admin.apiKeys.create({ name: 'scoped', project_id: 'scoped-proj' });
    assert.equal(scopedKey.project_id, p.id);
    const orgKey = await admin.apiKeys.create({ name: 'org-wide' });
    const scoped = clientFor(scopedKey.key);

    const mine = await scoped.apiKeys.create({ name: 'made by scoped' });
    assert.equal(mine.project_id, p.id);
    assert.equal(mine.created_by.id, scopedKey.id);
    assert.equal(mine.created_by.name, 'scoped');
    const listed = (await scoped.apiKeys.list({ limit: 100 })).items;
    assert.ok(listed.every((k) => k.project_id === p.id), JSON.stringify(listed.map((k) => k.project_id)));
    assert.ok(listed.some((k) => k.id === mine.id));
    await rejectsWith(scoped.apiKeys.retrieve(orgKey.id), NotFoundError);
    await rejectsWith(scoped.apiKeys.delete(orgKey.id), NotFoundError);
    const defaultProject = (await admin.projects.list({ name: 'default' })).items[0];
    await rejectsWith(scoped.apiKeys.create({ name: 'x', project_id: defaultProject.id }), PermissionDeniedError, 'forbidden');

    await rejectsWith(scoped.organization.limits.retrieve(), PermissionDeniedError, 'forbidden');
    await rejectsWith(scoped.projects.create({ name: 'nope' }), PermissionDeniedError, 'forbidden');
    await rejectsWith(scoped.projects.limits.retrieve(p.id), PermissionDeniedError, 'forbidden');
    const now = new Date();
    await rejectsWith(
      scoped.auditLogs.list({ start: new Date(now - 3_600_000).toISOString(), end: now.toISOString() }),
      PermissionDeniedError,
      'forbidden',
    );
    // Its own project: readable and renamable; others do not exist for it.
    assert.equal((await scoped.projects.retrieve(p.id)).name, 'scoped-proj');
    assert.equal((await scoped.projects.update(p.id, { name: 'scoped-proj-2' })).name, 'scoped-proj-2');
    assert.deepEqual((await scoped.projects.list()).items.map((x) => x.id), [p.id]);
    await rejectsWith(scoped.projects.retrieve(defaultProject.id), NotFoundError);
  });
});

describe('projects', () => {
  test('create, get by id or name, update, list, conflicts and bad names', async () => {
    const p = await admin.projects.create({ name: 'Alpha' });
    assert.match(p.id, /^proj_/);
    assert.equal(p.status, 'active');
    assert.equal((await admin.projects.retrieve('alpha')).id, p.id);
    assert.equal((await admin.projects.retrieve(p.id)).name, 'Alpha');
    await rejectsWith(admin.projects.create({ name: 'ALPHA' }), ConflictError);
    for (const name of ['', 'x'.repeat(256)]) await rejectsWith(admin.projects.create({ name }), BadRequestError);
    assert.equal((await admin.projects.create({ name: 'ü'.repeat(255) })).name.length, 255);
    const updated = await admin.projects.update(p.id, { name: 'Alpha 2', status: 'archived' });
    assert.equal(updated.name, 'Alpha 2');
    assert.equal(updated.status, 'archived');
    assert.ok(Date.parse(updated.updated_at) >= Date.parse(p.updated_at));
    await rejectsWith(admin.projects.update(p.id, { status: 'gone' }), BadRequestError);
    assert.deepEqual((await admin.projects.list({ query: 'lpha 2' })).items.map((x) => x.id), [p.id]);
    assert.deepEqual((await admin.projects.list({ name: 'alpha 2' })).items.map((x) => x.id), [p.id]);
  });

  test('delete: soft; 409 project_not_empty while it holds resources; 409 last_active_project', async () => {
    const p = await admin.projects.create({ name: 'to-delete' });
    const c = inProject(p.id);
    const profile = await c.profiles.create({ name: 'keeps-it' });
    await rejectsWith(admin.projects.delete(p.id), ConflictError, 'project_not_empty');
    await c.profiles.delete(profile.id);
    await admin.projects.delete(p.id);
    await rejectsWith(admin.projects.retrieve(p.id), NotFoundError);
    // A deleted project can no longer be selected.
    await rejectsWith(c.browsers.list(), NotFoundError);

    // Archive every other project, then the last active one cannot go.
    const keep = await admin.projects.create({ name: 'last-one' });
    const others = [];
    for await (const x of admin.projects.list()) if (x.id !== keep.id && x.status === 'active') others.push(x);
    for (const x of others) await admin.projects.update(x.id, { status: 'archived' });
    try {
      await rejectsWith(admin.projects.delete(keep.id), ConflictError, 'last_active_project');
      await rejectsWith(admin.projects.update(keep.id, { status: 'archived' }), ConflictError, 'last_active_project');
    } finally {
      for (const x of others) await admin.projects.update(x.id, { status: 'active' });
    }
  });
});

// Every resource type this server has, created in project A and looked for from project B: never
// listed there, and 404 by id (a 403 would reveal it exists). A new resource type joins the table.
describe('project isolation', () => {
  test('nothing of project A is visible or usable from project B', async () => {
    const a = await admin.projects.create({ name: 'iso-a' });
    const b = await admin.projects.create({ name: 'iso-b' });
    const A = inProject(a.id);
    const bKey = await admin.apiKeys.create({ name: 'iso-b key', project_id: b.id });
    const viewsFromB = [inProject(b.id), clientFor(bKey.key)];

    const browser = await A.browsers.create({ headless: true, name: 'iso-browser' });
    try {
      const resources = [
        {
          type: 'browser',
          id: browser.session_id,
          get: (c, id) => c.browsers.retrieve(id),
          list: async (c) => (await c.browsers.list()).items.map((x) => x.session_id),
          use: (c, id) => c.browsers.deleteByID(id),
        },
        {
          type: 'browser by name',
          id: 'iso-browser',
          get: (c, id) => c.browsers.retrieve(id),
        },
        {
          type: 'pool',
          id: (await A.browserPools.create({ name: 'iso-pool', size: 0 })).id,
          get: (c, id) => c.browserPools.retrieve(id),
          list: async (c) => (await c.browserPools.list()).items.map((x) => x.id),
          use: (c, id) => c.browserPools.acquire(id, { acquire_timeout_seconds: 1 }),
        },
        {
          type: 'profile',
          id: (await A.profiles.create({ name: 'iso-profile' })).id,
          get: (c, id) => c.profiles.retrieve(id),
          list: async (c) => (await c.profiles.list()).items.map((x) => x.id),
          use: (c, id) => c.profiles.delete(id),
        },
        {
          type: 'extension',
          id: (await A.extensions.upload({ name: 'iso-ext', file: await toFile(extensionZip('iso'), 'iso.zip') })).id,
          get: (c, id) => c.extensions.download(id),
          list: async (c) => (await c.extensions.list()).items.map((x) => x.id),
          use: (c, id) => c.extensions.delete(id),
        },
        {
          type: 'credential',
          id: (await A.credentials.create({ name: 'iso-cred', domain: 'example.com', values: { password: 'hunter2' } })).id,
          get: (c, id) => c.credentials.retrieve(id),
          list: async (c) => (await c.credentials.list()).items.map((x) => x.id),
          use: (c, id) => c.credentials.totpCode(id),
        },
        {
          type: 'proxy',
          id: (await A.proxies.create({ name: 'iso-proxy', type: 'custom', config: { host: '127.0.0.1', port: 21099 } })).id,
          get: (c, id) => c.proxies.retrieve(id),
          list: async (c) => (await c.proxies.list({ limit: 100 })).getPaginatedItems().map((x) => x.id),
          use: (c, id) => c.proxies.check(id),
        },
        {
          type: 'proxy on a browser',
          id: browser.session_id,
          get: (c, id) => c.browsers.update(id, { proxy_id: '' }),
        },
        {
          type: 'telemetry of the browser',
          id: browser.session_id,
          get: (c, id) => c.browsers.telemetry.events(id),
        },
        {
          type: 'replay of the browser',
          id: browser.session_id,
          get: (c, id) => c.browsers.replays.list(id),
        },
        {
          type: 'files of the browser',
          id: browser.session_id,
          get: (c, id) => c.browsers.fs.listFiles(id, { path: '/home/kernel' }),
        },
      ];
      for (const r of resources) {
        for (const B of viewsFromB) {
          await rejectsWith(r.get(B, r.id), NotFoundError).catch((e) => {
            throw new Error(`${r.type}: ${e.message}`);
          });
          if (r.list) assert.ok(!(await r.list(B)).includes(r.id), `${r.type} listed in project B`);
          if (r.use) await rejectsWith(r.use(B, r.id), NotFoundError);
        }
        // Still there for A.
        await r.get(A, r.id);
      }
    } finally {
      await A.browsers.deleteByID(browser.session_id).catch(() => {});
    }
  });
});

describe('limits', () => {
  test('org limit is the operator\'s and read-only; project cap = override ▸ org default ▸ none', async () => {
    const limits = await admin.organization.limits.retrieve();
    assert.equal(limits.max_concurrent_sessions, ORG_LIMIT);
    assert.equal(limits.default_project_max_concurrent_sessions, null);
    await rejectsWith(admin.organization.limits.update({ default_project_max_concurrent_sessions: ORG_LIMIT + 1 }), BadRequestError);
    const readOnly = await server.fetch('/org/limits', {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: '{"max_concurrent_sessions":9}',
    });
    assert.equal(readOnly.status, 400);
    assert.match((await readOnly.json()).message, /max_concurrent_sessions/);

    const p = await admin.projects.create({ name: 'capped' });
    assert.deepEqual(await admin.projects.limits.retrieve(p.id), {
      max_concurrent_sessions: null,
      max_concurrent_invocations: null,
      max_pooled_sessions: null,
    });
    await rejectsWith(admin.projects.limits.update(p.id, { max_pooled_sessions: 2 }), BadRequestError);
    await rejectsWith(admin.projects.limits.update(p.id, { max_concurrent_sessions: -1 }), BadRequestError);
    await rejectsWith(admin.projects.limits.update(p.id, { max_concurrent_sessions: ORG_LIMIT + 1 }), BadRequestError);

    // Org default 2, then a project override of 1.
    assert.equal((await admin.organization.limits.update({ default_project_max_concurrent_sessions: 2 })).default_project_max_concurrent_sessions, 2);
    const c = inProject(p.id);
    const pool = await c.browserPools.create({ name: 'cap-pool', size: 2, fill_rate_per_minute: 0 }).catch((e) => e);
    assert.ok(!(pool instanceof Error), `a pool of 2 fits the org default: ${pool?.message}`);
    const over = await c.browserPools.update(pool.id, { size: 3 }).then(() => null, (e) => e);
    assert.ok(over instanceof RateLimitError, `size 3 is over the default of 2: ${over}`);
    await c.browserPools.delete(pool.id);

    assert.equal((await admin.projects.limits.update(p.id, { max_concurrent_sessions: 1, max_concurrent_invocations: 4 })).max_concurrent_sessions, 1);
    const first = await c.browsers.create({ headless: true });
    try {
      const res = await server.fetch('/browsers', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'X-Kernel-Project-Id': p.id },
        body: '{"headless":true}',
      });
      assert.equal(res.status, 429);
      assert.equal((await res.json()).code, 'rate_limited');
      assert.ok(Number(res.headers.get('retry-after')) > 0);
      await rejectsWith(c.browserPools.create({ size: 1, fill_rate_per_minute: 0 }), RateLimitError, 'rate_limited');
    } finally {
      await c.browsers.deleteByID(first.session_id);
    }
    // 0 clears the override and the default: back to the operator's limit.
    const cleared = await admin.projects.limits.update(p.id, { max_concurrent_sessions: 0, max_concurrent_invocations: null });
    assert.equal(cleared.max_concurrent_sessions, null);
    assert.equal(cleared.max_concurrent_invocations, null);
    assert.equal((await admin.organization.limits.update({ default_project_max_concurrent_sessions: 0 })).default_project_max_concurrent_sessions, null);
    const pool3 = await c.browserPools.create({ size: ORG_LIMIT, fill_rate_per_minute: 0 });
    await rejectsWith(c.browserPools.update(pool3.id, { size: ORG_LIMIT + 1 }), RateLimitError);
    await c.browserPools.delete(pool3.id);
  });
});

describe('audit logs', () => {
  const window = () => {
    const end = new Date(Date.now() + 60_000);
    return { start: new Date(end - 3_600_000).toISOString(), end: end.toISOString() };
  };

  test('a sequence of calls is recorded with route, status, key and no body', async () => {
    const k = await admin.apiKeys.create({ name: 'audited' });
    const c = clientFor(k.key, { defaultHeaders: { 'User-Agent': 'org-test-agent' } });
    const cred = await c.credentials.create({ name: 'audit-cred', domain: 'example.com', values: { password: 'sw0rdfish-secret' } });
    await c.credentials.retrieve(cred.id);
    await rejectsWith(c.credentials.retrieve('missing'), NotFoundError);
    await c.credentials.delete(cred.id);

    const entries = await waitFor(async () => {
      const page = await admin.auditLogs.list({ ...window(), search_user_id: [k.id] });
      return page.items.length >= 4 ? page.items : null;
    }, { what: 'four audit entries' });
    assert.deepEqual(entries.map((e) => `${e.method} ${e.route} ${e.status}`), [
      'DELETE /credentials/{id_or_name} 204',
      'GET /credentials/{id_or_name} 404',
      `GET /credentials/{id_or_name} 200`,
      'POST /credentials 200',
    ]);
    const e = entries[2];
    assert.equal(e.path, `/credentials/${cred.id}`);
    assert.equal(e.user_id, k.id);
    assert.equal(e.auth_strategy, 'api_key');
    assert.equal(e.client_ip, '127.0.0.1');
    assert.equal(e.user_agent, 'org-test-agent');
    assert.equal(e.domain, new URL(server.baseURL).host);
    assert.ok(e.duration_ms >= 0);
    assert.ok(Math.abs(Date.parse(e.timestamp) - Date.now()) < 60_000);

    const filtered = await admin.auditLogs.list({ ...window(), search_user_id: [k.id], method: 'GET' });
    assert.equal(filtered.items.length, 2);
    const excluded = await admin.auditLogs.list({ ...window(), search_user_id: [k.id], exclude_method: ['GET', 'DELETE'] });
    assert.deepEqual(excluded.items.map((x) => x.method), ['POST']);
    const searched = await admin.auditLogs.list({ ...window(), search: '404', search_user_id: [] });
    assert.ok(searched.items.some((x) => x.user_id === k.id && x.status === 404));

    // Bodies are never recorded: the secret is nowhere in an export.
    const chunk = await admin.auditLogs.exportChunk({ ...window(), format: 'jsonl' });
    assert.ok(!(await chunk.text()).includes('sw0rdfish-secret'));
  });

  test('the SDK iterates more than 100 entries; export chunks walk with X-Next-Cursor', async () => {
    const k = await admin.apiKeys.create({ name: 'busy' });
    const c = clientFor(k.key);
    const p = (await admin.projects.list({ name: 'default' })).items[0];
    for (let i = 0; i < 130; i++) await c.projects.retrieve(p.id);
    await waitFor(async () => {
      const rows = [];
      for await (const e of admin.auditLogs.list({ ...window(), search_user_id: [k.id] })) rows.push(e);
      return rows.length === 130;
    }, { what: '130 audit entries through the SDK iterator' });
    const first = await admin.auditLogs.list({ ...window(), search_user_id: [k.id] });
    assert.equal(first.items.length, 100);
    assert.ok(first.hasNextPage());
    const second = await first.getNextPage();
    assert.equal(second.items.length, 30);
    assert.ok(!second.hasNextPage());

    // Chunks of 50: 50, 50, 30; each checksummed, gzip by default.
    const raw = await admin.auditLogs.exportChunk({ ...window(), search_user_id: [k.id], limit: 50 }).asResponse();
    assert.equal(raw.headers.get('x-has-more'), 'true');
    assert.equal(raw.headers.get('x-row-count'), '50');
    const body = Buffer.from(await raw.arrayBuffer());
    assert.equal(raw.headers.get('x-content-sha256'), createHash('sha256').update(body).digest('hex'));
    const lines = gunzipSync(body).toString().trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(lines.length, 50);
    assert.ok(lines.every((l) => l.route === '/org/projects/{id}' && l.user_id === k.id));
    const cursor = raw.headers.get('x-next-cursor');
    assert.ok(cursor);

    const chunks = [];
    const sink = { write: (b) => void chunks.push(Buffer.from(b)) };
    const result = await admin.auditLogs.download({ ...window(), search_user_id: [k.id], limit: 50 }, sink);
    assert.equal(result.rows, 130);
    assert.equal(result.chunks, 3);
    const all = chunks.map((b) => gunzipSync(b).toString()).join('');
    assert.equal(all.trim().split('\n').length, 130);
  });

  test('bad windows answer 400 naming the field', async () => {
    const now = Date.now();
    for (const [query, field] of [
      [{ start: new Date(now - 31 * 86_400_000).toISOString(), end: new Date(now).toISOString() }, 'end'],
      [{ start: 'yesterday', end: new Date(now).toISOString() }, 'start'],
      [{ start: new Date(now).toISOString(), end: new Date(now - 1000).toISOString() }, 'end'],
    ]) {
      const err = await rejectsWith(admin.auditLogs.list(query), BadRequestError);
      assert.ok(err.message.includes(field), err.message);
    }
    await rejectsWith(admin.auditLogs.list({ ...window(), page_token: 'garbage' }), BadRequestError);
    await rejectsWith(admin.auditLogs.exportChunk({ ...window(), format: 'csv' }), BadRequestError);
  });
});

describe('features switched off by the operator', () => {
  test('403 forbidden naming the feature, incl. the extension upload; other projects unaffected', async () => {
    // A config of our own: the repository's, plus [project.<name>] extensions = off. Switches
    // are the project id's: the name binds to the project that has it when the server starts
    // (host/README.md), so the project exists before the server that reads the section.
    const dataDir = mkdtempSync(join(scratch, 'data-'));
    const apiKey = 'sk_test_org_features_' + Date.now();
    const first = await startServer({ dataDir, apiKey });
    let p;
    let key;
    try {
      const root = first.newClient({ maxRetries: 0 });
      p = await root.projects.create({ name: 'no-ext' });
      key = await root.apiKeys.create({ name: 'no-ext key', project_id: p.id });
    } finally {
      await first.stop();
    }
    const etc = mkdtempSync(join(scratch, 'etc-'));
    const ini = readFileSync(join(repoRoot, 'etc/hangar.ini'), 'utf8');
    writeFileSync(join(etc, 'hangar.ini'), `${ini}\n[project.no-ext]\nextensions = off\n`);
    mkdirSync(join(etc, 'plugins.d'));
    for (const f of readdirSync(join(repoRoot, 'etc/plugins.d'))) copyFileSync(join(repoRoot, 'etc/plugins.d', f), join(etc, 'plugins.d', f));
    const s = await startServer({ dataDir, apiKey, env: { HANGAR_CONFIG: join(etc, 'hangar.ini') } });
    try {
      const root = s.newClient({ maxRetries: 0 });
      const c = new Kernel({ apiKey: key.key, baseURL: s.baseURL, maxRetries: 0 });
      const err = await rejectsWith(c.extensions.upload({ name: 'blocked', file: await toFile(extensionZip('b'), 'b.zip') }), PermissionDeniedError, 'forbidden');
      assert.match(err.message, /extensions feature/);
      assert.match(err.message, /insufficient permissions or plan/);
      // The upload into a running browser is refused before the browser is even looked up.
      await rejectsWith(
        c.browsers.loadExtensions('any-session', { extensions: [{ name: 'z', zip_file: await toFile(extensionZip('z'), 'z.zip') }] }),
        PermissionDeniedError,
        'forbidden',
      );
      await rejectsWith(c.extensions.list(), PermissionDeniedError, 'forbidden');
      await c.profiles.list(); // other features stay on
      // The default project is not switched off.
      await root.extensions.upload({ name: 'allowed', file: await toFile(extensionZip('a'), 'a.zip') });
      assert.match(s.output(), new RegExp(`\\[project\\.no-ext\\] is project ${p.id}`));
    } finally {
      await s.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
