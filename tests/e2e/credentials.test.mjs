// Credentials and credential providers (plugin `credentials`) through the official SDK: CRUD by
// id and name, write-only values, TOTP codes equal to oathtool's, update merge rules, bad input,
// nothing readable in the SQLite file or its WAL, key rotation on a running server, 1Password
// providers against a Connect test double (tests/e2e/lib/connect-double.mjs), the managed-auth
// services (through the ut_services test plugin) and project isolation. No browser is started.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import net from 'node:net';

import Kernel, { BadRequestError, ConflictError, NotFoundError, PermissionDeniedError } from '@onkernel/sdk';

import { listenAllowed, startServer, rejectsWith, repoRoot } from './lib/server.mjs';
import { startConnectDouble } from './lib/connect-double.mjs';
import { onPostgres, storeFilesAtRest } from './lib/pg.mjs';
import { slow } from './lib/tier.mjs';

const execFileP = promisify(execFile);
const SECRET = 'JBSWY3DPEHPK3PXP';

/** oathtool's code for `secret` at the middle of the 30 s window that ends at `expiresAt`. */
async function oathtool(secret, expiresAt) {
  const at = new Date(Date.parse(expiresAt) - 15_000).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
  const { stdout } = await execFileP('oathtool', ['--totp', '-b', '--now', at, secret]);
  return stdout.trim();
}

/** A port on loopback where nothing listens, among those the server may dial (HANGAR_FETCH_ALLOW). */
async function closedPort() {
  const srv = net.createServer();
  const port = await listenAllowed(srv);
  await new Promise((r) => srv.close(r));
  return port;
}

describe('credentials', () => {
  let server;
  let kernel; // no retries: a 409 must reach the test, not be re-sent
  let connect;

  const service = async (name, input) => {
    const res = await server.fetch(`/ut/services/${name}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(input),
    });
    assert.equal(res.status, 200);
    return res.json();
  };

  before(async () => {
    server = await startServer({
      extraPluginDir: join(repoRoot, 'build/test-plugins'),
      enablePlugins: ['ut_services'],
    });
    kernel = server.newClient({ maxRetries: 0 });
    connect = await startConnectDouble({
      token: 'connect-token-1',
      vaults: [
        {
          id: 'vault-personal',
          name: 'Personal',
          items: [
            {
              id: 'item-example',
              title: 'Example',
              category: 'LOGIN',
              urls: [{ href: 'https://login.example.com/signin', primary: true }],
              fields: [
                { id: 'username', type: 'STRING', purpose: 'USERNAME', label: 'username', value: 'ann@example.com' },
                { id: 'password', type: 'CONCEALED', purpose: 'PASSWORD', label: 'password', value: 'from-1password' },
                { id: 'otp', type: 'OTP', label: 'one-time password', value: `otpauth://totp/Example:ann?secret=${SECRET}&issuer=Example` },
              ],
            },
            {
              id: 'item-wild',
              title: 'Wild',
              category: 'LOGIN',
              urls: [{ href: 'https://*.wild.test' }],
              fields: [{ id: 'username', type: 'STRING', purpose: 'USERNAME', value: 'wild-user' }],
            },
            { id: 'item-card', title: 'Card', category: 'CREDIT_CARD', urls: [{ href: 'https://bank.test' }], fields: [] },
          ],
        },
        {
          id: 'vault-work',
          name: 'Work',
          items: [
            {
              id: 'item-intranet',
              title: 'Intranet',
              category: 'LOGIN',
              urls: [{ href: 'intranet.corp.test/login' }],
              fields: [{ id: 'password', type: 'CONCEALED', purpose: 'PASSWORD', value: 'work-pass' }],
            },
          ],
        },
      ],
    });
  });

  after(async () => {
    await server?.stop();
    await connect?.close();
  });

  test('CRUD by id and by name; values and the TOTP secret are never returned', async () => {
    const created = await kernel.credentials.create({
      name: 'netflix-login',
      domain: 'Netflix.com',
      values: { username: 'user@example.com', password: 'hunter2-not-shown' },
      totp_secret: 'jbsw y3dp ehpk 3pxp',
      sso_provider: 'google',
    });
    assert.match(created.id, /^[a-z0-9]{24}$/);
    assert.equal(created.name, 'netflix-login');
    assert.equal(created.domain, 'netflix.com');
    assert.equal(created.has_values, true);
    assert.equal(created.has_totp_secret, true);
    assert.equal(created.sso_provider, 'google');
    assert.deepEqual([...created.value_keys].sort(), ['password', 'username']);
    assert.match(created.totp_code, /^\d{6}$/);
    assert.ok(Date.parse(created.totp_code_expires_at) > Date.now() - 1000);
    assert.ok(!JSON.stringify(created).includes('hunter2'));
    assert.ok(!JSON.stringify(created).toUpperCase().includes(SECRET));

    for (const key of [created.id, 'netflix-login']) {
      const got = await kernel.credentials.retrieve(key);
      assert.equal(got.id, created.id);
      assert.deepEqual([...got.value_keys].sort(), ['password', 'username']);
      assert.equal(got.totp_code, undefined, 'a plain read carries no code');
      assert.ok(!JSON.stringify(got).includes('hunter2'));
    }

    const listed = [];
    for await (const c of kernel.credentials.list()) listed.push(c);
    const item = listed.find((c) => c.id === created.id);
    assert.ok(item);
    assert.equal(item.value_keys, undefined, 'lists omit value_keys');
    assert.equal(item.has_values, true);

    const renamed = await kernel.credentials.update('netflix-login', { name: 'netflix-2' });
    assert.equal(renamed.name, 'netflix-2');
    assert.equal(renamed.totp_code, undefined, 'no code unless the secret was just set');
    assert.equal((await kernel.credentials.retrieve('netflix-2')).id, created.id);
    await rejectsWith(kernel.credentials.retrieve('netflix-login'), NotFoundError, 'not_found');

    await kernel.credentials.delete('netflix-2');
    await rejectsWith(kernel.credentials.retrieve(created.id), NotFoundError, 'not_found');
    await rejectsWith(kernel.credentials.delete(created.id), NotFoundError, 'not_found');
  });

  test('TOTP codes equal oathtool --totp -b for the same secret and time', async () => {
    const created = await kernel.credentials.create({
      name: 'totp-check',
      domain: 'example.com',
      values: {},
      totp_secret: SECRET,
    });
    assert.equal(created.totp_code, await oathtool(SECRET, created.totp_code_expires_at));
    assert.equal(created.has_values, false);
    for (const key of [created.id, 'totp-check']) {
      const { code, expires_at } = await kernel.credentials.totpCode(key);
      assert.match(code, /^\d{6}$/);
      const left = Date.parse(expires_at) - Date.now();
      assert.ok(left > -1000 && left <= 30_000, `expires in ${left} ms`);
      assert.equal(Date.parse(expires_at) % 30_000, 0, 'windows start on the epoch');
      assert.equal(code, await oathtool(SECRET, expires_at));
    }
    // A secret set by update also answers with the current code.
    const other = 'GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ';
    const updated = await kernel.credentials.update('totp-check', { totp_secret: other.toLowerCase() });
    assert.equal(updated.totp_code, await oathtool(other, updated.totp_code_expires_at));
  });

  test('update: removals before merges, sso_provider and totp_secret removal', async () => {
    await kernel.credentials.create({
      name: 'merge-me',
      domain: 'merge.test',
      values: { a: '1', b: '2', keep: 'k' },
      totp_secret: SECRET,
      sso_provider: 'github',
    });
    const u = await kernel.credentials.update('merge-me', {
      remove_value_keys: ['a', 'b'],
      values: { b: 'new-b', c: '3' },
    });
    assert.deepEqual([...u.value_keys].sort(), ['b', 'c', 'keep']);
    assert.equal(u.sso_provider, 'github', 'untouched when absent');
    const resolved = await service('credentials.resolve', { credential: { name: 'merge-me' } });
    assert.equal(resolved.status, 200, JSON.stringify(resolved.body));
    assert.deepEqual(resolved.body.values, { b: 'new-b', c: '3', keep: 'k' });

    assert.equal((await kernel.credentials.update('merge-me', { sso_provider: '' })).sso_provider, null);
    assert.equal((await kernel.credentials.update('merge-me', { sso_provider: 'microsoft' })).sso_provider, 'microsoft');
    assert.equal((await kernel.credentials.update('merge-me', { sso_provider: null })).sso_provider, null);

    const noTotp = await kernel.credentials.update('merge-me', { totp_secret: '' });
    assert.equal(noTotp.has_totp_secret, false);
    assert.equal(noTotp.totp_code, undefined);
    await rejectsWith(kernel.credentials.totpCode('merge-me'), BadRequestError, 'bad_request');

    const emptied = await kernel.credentials.update('merge-me', { remove_value_keys: ['b', 'c', 'keep'] });
    assert.equal(emptied.has_values, false);
    assert.deepEqual(emptied.value_keys, []);
  });

  test('bad input: 409 duplicate, 400 naming the field, 404 unknown', async () => {
    await kernel.credentials.create({ name: 'dup', domain: 'dup.test', values: { u: 'x' } });
    await rejectsWith(kernel.credentials.create({ name: 'dup', domain: 'other.test', values: {} }), ConflictError, 'conflict');
    await rejectsWith(kernel.credentials.create({ name: 'DUP', domain: 'other.test', values: {} }), ConflictError, 'conflict');
    await kernel.credentials.create({ name: 'dup-2', domain: 'dup.test', values: {} });
    await rejectsWith(kernel.credentials.update('dup-2', { name: 'dup' }), ConflictError, 'conflict');

    const field = async (promise, name) => {
      const err = await rejectsWith(promise, BadRequestError, 'bad_request');
      assert.ok(err.error.details?.some((d) => d.message.startsWith(`${name}:`)), JSON.stringify(err.error));
      return err;
    };
    const bad32 = await field(
      kernel.credentials.create({ name: 'b32', domain: 'x.test', values: {}, totp_secret: 'not-base32!1' }),
      'totp_secret',
    );
    assert.ok(!bad32.message.includes('not-base32'), 'the secret is not echoed');
    await field(kernel.credentials.update('dup', { totp_secret: '0189' }), 'totp_secret');
    await field(kernel.credentials.create({ name: '', domain: 'x.test', values: {} }), 'name');
    await field(kernel.credentials.create({ name: 'has space', domain: 'x.test', values: {} }), 'name');
    await field(kernel.credentials.create({ name: 'scheme', domain: 'https://x.test', values: {} }), 'domain');
    await field(kernel.credentials.create({ name: 'path', domain: 'x.test/login', values: {} }), 'domain');
    await field(kernel.credentials.create({ name: 'nodomain', values: {} }), 'domain');
    await field(kernel.credentials.create({ name: 'novalues', domain: 'x.test' }), 'values');
    await field(kernel.credentials.create({ name: 'numval', domain: 'x.test', values: { pin: 1234 } }), 'values.pin');
    await field(kernel.credentials.update('dup', { remove_value_keys: 'u' }), 'remove_value_keys');
    await rejectsWith(kernel.credentials.retrieve('no-such-credential'), NotFoundError, 'not_found');
    await rejectsWith(kernel.credentials.update('no-such-credential', { name: 'x' }), NotFoundError, 'not_found');
    await rejectsWith(kernel.credentials.totpCode('no-such-credential'), NotFoundError, 'not_found');
    // Nothing half-written: the refused update left the name and values alone.
    const dup = await kernel.credentials.retrieve('dup');
    assert.deepEqual(dup.value_keys, ['u']);
  });

  test('list: paging, domain filter and query', async () => {
    for (let i = 0; i < 3; i++) await kernel.credentials.create({ name: `page-a-${i}`, domain: 'paging-a.test', values: {} });
    for (let i = 0; i < 2; i++) await kernel.credentials.create({ name: `page-b-${i}`, domain: 'paging-b.test', values: {} });
    const first = await kernel.credentials.list({ domain: 'paging-a.test', limit: 2 });
    assert.equal(first.getPaginatedItems().length, 2);
    assert.ok(first.hasNextPage());
    const all = [];
    for await (const c of kernel.credentials.list({ domain: 'paging-a.test', limit: 2 })) all.push(c.name);
    assert.deepEqual(all.sort(), ['page-a-0', 'page-a-1', 'page-a-2']);
    const byQuery = [];
    for await (const c of kernel.credentials.list({ query: 'PAGING-B' })) byQuery.push(c.name);
    assert.deepEqual(byQuery.sort(), ['page-b-0', 'page-b-1']);
    const none = await kernel.credentials.list({ domain: 'nothing.test' });
    assert.equal(none.getPaginatedItems().length, 0);
    assert.equal(none.hasNextPage(), false);
  });

  test('at rest: neither the SQLite file nor its WAL holds a value, a TOTP secret or a token; rotation keeps them usable', async () => {
    const password = 'pw-' + 'Zq8v'.repeat(6);
    const secret = 'MFRGGZDFMZTWQ2LKNNWG23TPOBYXE43U';
    const token = 'connect-token-' + 'x7'.repeat(8);
    await kernel.credentials.create({ name: 'at-rest', domain: 'rest.test', values: { password }, totp_secret: secret });
    const provider = await kernel.credentialProviders.create({ name: 'at-rest-provider', provider_type: 'onepassword', token, url: connect.url });
    const files = await storeFilesAtRest(server); // on PostgreSQL (make test-postgres): its dump
    if (!onPostgres) assert.ok(files.some((f) => f.endsWith('-wal')), 'the WAL exists while the server runs');
    // grep -a over each file, and the same search in Node so a missing grep cannot pass it.
    const found = async (needle) => {
      let hit = false;
      for (const f of files) {
        const r = await execFileP('grep', ['-c', '-a', '-F', needle, f]).then(() => 0, (e) => e.code);
        assert.ok(r === 0 || r === 1, `grep failed on ${f}`);
        hit ||= r === 0 || readFileSync(f).includes(Buffer.from(needle));
      }
      return hit;
    };
    assert.equal(await found('at-rest-provider'), true, 'control: a name is stored in clear, so the search works');
    assert.equal(await found(password), false, 'a credential value');
    assert.equal(await found(secret), false, 'a TOTP secret');
    assert.equal(await found(token), false, 'a provider token');

    const key = readFileSync(join(server.dataDir, 'secrets.key'));
    assert.equal(key.length, 32);
    const before = await kernel.credentials.totpCode('at-rest');
    const out = await server.admin('rotate-secrets-key');
    assert.match(out, /^re-sealed \d+ secret values under key [0-9a-f]{8}$/);
    assert.ok(Number(out.split(' ')[1]) >= 3);
    assert.notDeepEqual(readFileSync(join(server.dataDir, 'secrets.key')), key);
    // The running server follows the new key.
    const after = await kernel.credentials.totpCode('at-rest');
    assert.equal(after.code, await oathtool(secret, after.expires_at));
    assert.ok(before.code);
    const resolved = await service('credentials.resolve', { credential: { name: 'at-rest' } });
    assert.equal(resolved.body.values.password, password);
    await kernel.credentials.update('at-rest', { values: { extra: 'e' } });
    const again = await service('credentials.resolve', { credential: { name: 'at-rest' } });
    assert.deepEqual(again.body.values, { password, extra: 'e' });
    await kernel.credentialProviders.delete(provider.id); // its token is not the test double's
  });

  test('providers: CRUD, test, items, org level only; the token is never returned', async () => {
    const p = await kernel.credentialProviders.create({
      name: 'onepassword-main',
      provider_type: 'onepassword',
      token: 'connect-token-1',
      url: connect.url,
    });
    assert.match(p.id, /^[a-z0-9]{24}$/);
    assert.equal(p.provider_type, 'onepassword');
    assert.equal(p.enabled, true);
    assert.equal(p.priority, 0);
    assert.equal(p.cache_ttl_seconds, 300);
    assert.ok(!JSON.stringify(p).includes('connect-token-1'));
    assert.deepEqual(await kernel.credentialProviders.retrieve(p.id), p);

    const result = await kernel.credentialProviders.test(p.id);
    assert.deepEqual(result, {
      success: true,
      vaults: [
        { id: 'vault-personal', name: 'Personal' },
        { id: 'vault-work', name: 'Work' },
      ],
    });
    const { items } = await kernel.credentialProviders.listItems(p.id);
    assert.deepEqual(
      items.map((i) => i.path),
      ['Personal/Example', 'Personal/Wild', 'Work/Intranet'],
      'login items only',
    );
    assert.deepEqual(items[0], {
      id: 'item-example',
      title: 'Example',
      path: 'Personal/Example',
      vault_id: 'vault-personal',
      vault_name: 'Personal',
      urls: ['https://login.example.com/signin'],
    });

    const wrong = await kernel.credentialProviders.create({
      name: 'wrong-token', provider_type: 'onepassword', token: 'nope', url: connect.url,
    });
    const bad = await kernel.credentialProviders.test(wrong.id);
    assert.equal(bad.success, false);
    assert.deepEqual(bad.vaults, []);
    assert.match(bad.error, /token/);
    assert.ok(!bad.error.includes('nope'));
    const nowhere = await kernel.credentialProviders.create({
      name: 'unreachable', provider_type: 'onepassword', token: 't', url: `http://127.0.0.1:${await closedPort()}`,
    });
    const down = await kernel.credentialProviders.test(nowhere.id);
    assert.equal(down.success, false);
    assert.match(down.error, /reach|refused/i);

    const updated = await kernel.credentialProviders.update(wrong.id, { token: 'connect-token-1', priority: 5, enabled: false });
    assert.equal(updated.priority, 5);
    assert.equal(updated.enabled, false);
    assert.equal((await kernel.credentialProviders.test(wrong.id)).success, true, 'the new token is used');

    const names = [];
    for await (const x of kernel.credentialProviders.list()) names.push(x.name);
    assert.ok(['onepassword-main', 'wrong-token', 'unreachable'].every((n) => names.includes(n)));
    const q = await kernel.credentialProviders.list({ query: 'WRONG' });
    assert.deepEqual(q.getPaginatedItems().map((x) => x.name), ['wrong-token']);

    await rejectsWith(
      kernel.credentialProviders.create({ name: 'onepassword-main', provider_type: 'onepassword', token: 't', url: connect.url }),
      ConflictError, 'conflict');
    const field = async (body, name) => {
      const err = await rejectsWith(kernel.credentialProviders.create(body), BadRequestError, 'bad_request');
      assert.ok(err.error.details?.some((d) => d.message.startsWith(`${name}:`)), JSON.stringify(err.error));
    };
    await field({ name: 'x1', provider_type: 'lastpass', token: 't', url: connect.url }, 'provider_type');
    await field({ name: 'x2', provider_type: 'onepassword', token: '', url: connect.url }, 'token');
    await field({ name: 'x3', provider_type: 'onepassword', token: 't', url: 'ftp://x' }, 'url');
    await field({ name: 'x4', provider_type: 'onepassword', token: 't' }, 'url');
    await field({ name: 'x5', provider_type: 'onepassword', token: 't', url: connect.url, cache_ttl_seconds: -1 }, 'cache_ttl_seconds');
    await rejectsWith(kernel.credentialProviders.retrieve('nope'), NotFoundError, 'not_found');

    // Org level: a project-scoped key is refused everywhere under /org/credential_providers.
    const proj = await server.admin('project', 'create', 'providers-scoped');
    const scoped = new Kernel({ apiKey: await server.admin('key', 'create', '--project', proj), baseURL: server.baseURL, maxRetries: 0 });
    await rejectsWith(scoped.credentialProviders.list(), PermissionDeniedError, 'forbidden');
    await rejectsWith(scoped.credentialProviders.retrieve(p.id), PermissionDeniedError, 'forbidden');
    await rejectsWith(scoped.credentialProviders.test(p.id), PermissionDeniedError, 'forbidden');
    await rejectsWith(
      scoped.credentialProviders.create({ name: 'scoped', provider_type: 'onepassword', token: 't', url: connect.url }),
      PermissionDeniedError, 'forbidden');

    await kernel.credentialProviders.delete(nowhere.id);
    await rejectsWith(kernel.credentialProviders.retrieve(nowhere.id), NotFoundError, 'not_found');
  });

  test('services: resolve by name, by provider path and by auto-match (priority, wildcards, cache); merge', async () => {
    const main = (await kernel.credentialProviders.list({ query: 'onepassword-main' })).getPaginatedItems()[0];
    const wrong = (await kernel.credentialProviders.list({ query: 'wrong-token' })).getPaginatedItems()[0];

    const byPath = await service('credentials.resolve', { credential: { provider: main.id, path: 'Personal/Example' } });
    assert.equal(byPath.status, 200, JSON.stringify(byPath.body));
    assert.deepEqual(byPath.body.values, { username: 'ann@example.com', password: 'from-1password' });
    assert.equal(byPath.body.item.path, 'Personal/Example');
    assert.equal(byPath.body.totp_code, await oathtool(SECRET, byPath.body.totp_code_expires_at));

    const hits = connect.hits.length;
    const auto = await service('credentials.resolve', { credential: { auto: true, domain: 'LOGIN.example.com' } });
    assert.equal(auto.status, 200, JSON.stringify(auto.body));
    assert.equal(auto.body.provider.id, main.id, 'the enabled provider (the other is disabled)');
    assert.equal(auto.body.values.password, 'from-1password');
    assert.equal(connect.hits.length, hits, 'served from the cache within cache_ttl_seconds');

    const wild = await service('credentials.resolve', { credential: { provider: 'onepassword-main', auto: true, domain: 'app.wild.test' } });
    assert.equal(wild.body.item.title, 'Wild');
    assert.equal(wild.body.totp_code, undefined);
    const noPath = await service('credentials.resolve', { credential: { provider: main.id, auto: true, domain: 'intranet.corp.test' } });
    assert.equal(noPath.body.values.password, 'work-pass', 'an item URL without a scheme matches too');
    const miss = await service('credentials.resolve', { credential: { auto: true, domain: 'example.com' } });
    assert.equal(miss.status, 404, 'login.example.com does not cover example.com');

    // Priority: a second enabled provider consulted first gets the match.
    await kernel.credentialProviders.update(wrong.id, { enabled: true, priority: -1 });
    const first = await service('credentials.resolve', { credential: { auto: true, domain: 'login.example.com' } });
    assert.equal(first.body.provider.id, wrong.id);
    await kernel.credentialProviders.update(wrong.id, { priority: 10 });
    assert.equal((await service('credentials.resolve', { credential: { auto: true, domain: 'login.example.com' } })).body.provider.id, main.id);
    await kernel.credentialProviders.update(wrong.id, { enabled: false });
    // A provider whose server refuses it is skipped; with no match at all the failure is told.
    const broken = await kernel.credentialProviders.create({
      name: 'broken', provider_type: 'onepassword', token: 'bad', url: connect.url, priority: -5,
    });
    const skipped = await service('credentials.resolve', { credential: { auto: true, domain: 'login.example.com' } });
    assert.equal(skipped.body.provider?.id, main.id, JSON.stringify(skipped.body));
    const failed = await service('credentials.resolve', { credential: { auto: true, domain: 'nowhere.test' } });
    assert.equal(failed.status, 502, JSON.stringify(failed.body));
    await kernel.credentialProviders.delete(broken.id);
    const disabled = await service('credentials.resolve', { credential: { provider: wrong.id, path: 'Personal/Example' } });
    assert.equal(disabled.status, 409);

    const merged = await service('credentials.merge', { name: 'learned', domain: 'learned.test', values: { username: 'u1' } });
    assert.equal(merged.status, 200, JSON.stringify(merged.body));
    assert.equal(merged.body.created, true);
    const merged2 = await service('credentials.merge', { name: 'learned', values: { password: 'p1' } });
    assert.equal(merged2.body.created, false);
    assert.deepEqual([...merged2.body.credential.value_keys].sort(), ['password', 'username']);
    const learned = await service('credentials.resolve', { credential: { name: 'learned' } });
    assert.deepEqual(learned.body.values, { username: 'u1', password: 'p1' });
    const noDomain = await service('credentials.merge', { name: 'learned-2', values: {} });
    assert.equal(noDomain.status, 400);
    const unknown = await service('credentials.resolve', { credential: { name: 'never-made' } });
    assert.equal(unknown.status, 404);
  });

  test('project isolation: a project-scoped key sees only its project', async () => {
    await kernel.credentials.create({ name: 'iso-default', domain: 'iso.test', values: { u: 'default' } });
    const proj = await server.admin('project', 'create', 'credentials-b');
    const keyB = await server.admin('key', 'create', '--project', proj);
    const b = new Kernel({ apiKey: keyB, baseURL: server.baseURL, maxRetries: 0 });
    await rejectsWith(b.credentials.retrieve('iso-default'), NotFoundError, 'not_found');
    const listedB = [];
    for await (const c of b.credentials.list()) listedB.push(c);
    assert.deepEqual(listedB, []);
    // Names are unique per project only.
    const mine = await b.credentials.create({ name: 'iso-default', domain: 'iso.test', values: { u: 'b' } });
    await rejectsWith(kernel.credentials.retrieve(mine.id), NotFoundError, 'not_found');
    await rejectsWith(b.credentials.delete((await kernel.credentials.retrieve('iso-default')).id), NotFoundError, 'not_found');
    // The org-wide key selects project B with the header.
    const orgInB = server.newClient({ projectID: proj, maxRetries: 0 });
    assert.equal((await orgInB.credentials.retrieve('iso-default')).id, mine.id);
  });
});

describe('credential providers: HTTPS and timeouts', () => {
  let dir;
  let tlsDouble;
  let silentDouble;
  const servers = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hangar-connect-tls-'));
    await execFileP('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1',
      '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')]);
    tlsDouble = await startConnectDouble({
      token: 'tls-token',
      vaults: [{ id: 'vault-tls', name: 'Over TLS', items: [] }],
      tls: { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) },
    });
    silentDouble = await startConnectDouble({ token: 't', vaults: [], silent: true });
  });

  after(async () => {
    for (const s of servers) await s.stop();
    await tlsDouble?.close();
    await silentDouble?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  test('HTTPS: the certificate is checked against the system CAs (OpenSSL honours SSL_CERT_FILE)', async () => {
    const untrusting = await startServer();
    servers.push(untrusting);
    const p = await untrusting.client.credentialProviders.create({
      name: 'tls', provider_type: 'onepassword', token: 'tls-token', url: tlsDouble.url,
    });
    const refused = await untrusting.client.credentialProviders.test(p.id);
    assert.equal(refused.success, false);
    assert.match(refused.error, /certificate|verif/i);

    const trusting = await startServer({ env: { SSL_CERT_FILE: join(dir, 'cert.pem') } });
    servers.push(trusting);
    const q = await trusting.client.credentialProviders.create({
      name: 'tls', provider_type: 'onepassword', token: 'tls-token', url: tlsDouble.url,
    });
    assert.deepEqual(await trusting.client.credentialProviders.test(q.id), {
      success: true,
      vaults: [{ id: 'vault-tls', name: 'Over TLS' }],
    });
  });

  test('a Connect server that never answers: test fails within provider_timeout_ms (10 s)', slow, async () => {
    const server = servers[0] ?? (await startServer());
    if (!servers.includes(server)) servers.push(server);
    const p = await server.client.credentialProviders.create({
      name: 'silent', provider_type: 'onepassword', token: 't', url: silentDouble.url,
    });
    const started = Date.now();
    const result = await server.client.credentialProviders.test(p.id);
    const took = Date.now() - started;
    assert.equal(result.success, false);
    assert.match(result.error, /did not answer within 10000 ms/);
    assert.ok(took >= 9_000 && took < 20_000, `took ${took} ms`);
    const items = await server.fetch(`/org/credential_providers/${p.id}/items`);
    assert.equal(items.status, 502);
    assert.equal((await items.json()).code, 'upstream_unavailable');
  });
});
