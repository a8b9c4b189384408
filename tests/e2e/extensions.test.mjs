// Extensions through the official SDK: a small MV3 extension built here (a content script that
// marks every page) uploaded into a running headful browser, seen on a page served by the test
// after reconnecting over CDP; every 400/401/403/404 rule of the upload; the extensions library
// and attaching from it at create; the Chrome Web Store answering 502 without internet; browsers
// starting without the plugin.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';

import Kernel, {
  AuthenticationError,
  BadRequestError,
  ConflictError,
  NotFoundError,
  PermissionDeniedError,
  toFile,
} from '@onkernel/sdk';
import { chromium } from 'playwright-core';

import { rejectsWith, startServer, startTestPages } from './lib/server.mjs';

let server;
let client;
let pages;
let browser;
const scratch = mkdtempSync(join(tmpdir(), 'hangar-ext-test-'));

function zipOf(files, { folder } = {}) {
  const dir = mkdtempSync(join(scratch, 'src-'));
  const root = folder ? join(dir, folder) : dir;
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(join(root, name, '..'), { recursive: true });
    writeFileSync(join(root, name), content);
  }
  const out = join(scratch, `${Math.random().toString(36).slice(2)}.zip`);
  execFileSync('zip', ['-qr', out, '.'], { cwd: dir });
  return readFileSync(out);
}

// A content script that marks every page it runs in.
const mv3 = (mark) =>
  zipOf({
    'manifest.json': JSON.stringify({
      manifest_version: 3,
      name: `hangar test ${mark}`,
      version: '1.0',
      content_scripts: [{ matches: ['<all_urls>'], js: ['content.js'], run_at: 'document_start' }],
    }),
    'content.js': `document.documentElement.dataset.${mark} = 'yes';`,
  });

async function mark(b, name) {
  const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
  try {
    const page = await cdp.contexts()[0].newPage();
    await page.goto(pages.url);
    return await page.evaluate((n) => document.documentElement.dataset[n] ?? null, name);
  } finally {
    await cdp.close();
  }
}

before(async () => {
  server = await startServer();
  client = server.client;
  pages = await startTestPages();
  browser = await client.browsers.create({ headless: false });
});

after(async () => {
  if (browser) await client.browsers.deleteByID(browser.session_id).catch(() => {});
  await server?.stop();
  await pages?.close();
  rmSync(scratch, { recursive: true, force: true });
});

test('an uploaded MV3 extension runs in the browser after the restart, from its own folder', async () => {
  assert.equal(await mark(browser, 'extone'), null);
  const res = await client.browsers
    .loadExtensions(browser.session_id, {
      extensions: [
        { name: 'ext-one', zip_file: await toFile(mv3('extone'), 'one.zip') },
        { name: 'ext-two', zip_file: await toFile(mv3('exttwo'), 'two.zip') },
      ],
    })
    .asResponse();
  assert.equal(res.status, 201);
  assert.equal(res.headers.get('content-length'), '0');
  assert.equal(await mark(browser, 'extone'), 'yes');
  assert.equal(await mark(browser, 'exttwo'), 'yes');
  const listed = await client.browsers.fs.listFiles(browser.session_id, { path: '/home/kernel/extensions' });
  assert.deepEqual(listed.map((f) => f.name).sort(), ['ext-one', 'ext-two']);
  // The same name again replaces the folder; a zip with its files in one top-level folder works too.
  await client.browsers.loadExtensions(browser.session_id, {
    extensions: [{ name: 'ext-one', zip_file: await toFile(zipOf({
      'manifest.json': JSON.stringify({ manifest_version: 3, name: 'nested', version: '2.0',
        content_scripts: [{ matches: ['<all_urls>'], js: ['c.js'], run_at: 'document_start' }] }),
      'c.js': "document.documentElement.dataset.extnested = 'yes';",
    }, { folder: 'top' }), 'nested.zip') }],
  });
  assert.equal(await mark(browser, 'extnested'), 'yes');
  assert.equal(await mark(browser, 'extone'), null, 'ext-one was replaced');
});

test('bad uploads: 400 with one detail per problem, and nothing installed', async () => {
  const before = await client.browsers.fs.listFiles(browser.session_id, { path: '/home/kernel/extensions' });
  const err = await rejectsWith(
    client.browsers.loadExtensions(browser.session_id, {
      extensions: [
        { name: 'bad name!', zip_file: await toFile(mv3('x'), 'x.zip') },
        { name: 'not-a-zip', zip_file: await toFile(Buffer.from('hello'), 'x.zip') },
        { name: 'no-manifest', zip_file: await toFile(zipOf({ 'readme.txt': 'hi' }), 'x.zip') },
        { name: 'good', zip_file: await toFile(mv3('good'), 'x.zip') },
      ],
    }),
    BadRequestError,
    'bad_request',
  );
  const msgs = err.error.details.map((d) => d.message);
  assert.ok(err.error.details.every((d) => d.code === 'invalid_input'));
  assert.ok(msgs.some((m) => m.startsWith('extensions[0].name')), msgs.join(' | '));
  assert.ok(msgs.some((m) => m.startsWith('extensions[1].zip_file')), msgs.join(' | '));
  assert.ok(msgs.some((m) => m.startsWith('extensions[2].zip_file') && m.includes('manifest.json')), msgs.join(' | '));
  const afterList = await client.browsers.fs.listFiles(browser.session_id, { path: '/home/kernel/extensions' });
  assert.deepEqual(afterList.map((f) => f.name).sort(), before.map((f) => f.name).sort());
  const empty = await server.fetch(`/browsers/${browser.session_id}/extensions`, {
    method: 'POST',
    headers: { 'content-type': 'multipart/form-data; boundary=x' },
    body: '--x--\r\n',
  });
  assert.equal(empty.status, 400);
  // An entry that would land outside its folder.
  const evil = join(scratch, 'evil.zip');
  execFileSync('python3', ['-c', `import zipfile
z = zipfile.ZipFile(${JSON.stringify(evil)}, 'w')
z.writestr('manifest.json', '{}')
z.writestr('../evil.txt', 'x')
z.close()`]);
  const escaped = await rejectsWith(
    client.browsers.loadExtensions(browser.session_id, { extensions: [{ name: 'a', zip_file: await toFile(readFileSync(evil), 'x.zip') }] }),
    BadRequestError,
  );
  assert.ok(escaped.error.details.some((d) => d.message.includes('escapes')), JSON.stringify(escaped.error));
});

test('401 without a valid key, 403 when not allowed, 404 for an unknown browser', async () => {
  const zip = await toFile(mv3('z'), 'z.zip');
  const stranger = new Kernel({ apiKey: 'sk_wrong', baseURL: server.baseURL, maxRetries: 0 });
  await rejectsWith(stranger.browsers.loadExtensions(browser.session_id, { extensions: [{ name: 'z', zip_file: zip }] }), AuthenticationError);
  await rejectsWith(client.browsers.loadExtensions('aaaaaaaaaaaaaaaaaaaaaaaa', { extensions: [{ name: 'z', zip_file: await toFile(mv3('z'), 'z.zip') }] }), NotFoundError);

  // (a) a key scoped to one project naming another project
  const other = await server.admin('project', 'create', 'other');
  const mine = await server.admin('project', 'create', 'mine');
  const scopedKey = await server.admin('key', 'create', '--project', mine);
  const scoped = new Kernel({ apiKey: scopedKey, baseURL: server.baseURL, maxRetries: 0, defaultHeaders: { 'X-Kernel-Project-Id': other } });
  await rejectsWith(scoped.browsers.loadExtensions(browser.session_id, { extensions: [{ name: 'z', zip_file: await toFile(mv3('z'), 'z.zip') }] }), PermissionDeniedError, 'forbidden');

  // (b) the administrator turns extensions off for a project
  await server.admin('entitlement', mine, 'extensions', 'off');
  const limited = new Kernel({ apiKey: scopedKey, baseURL: server.baseURL, maxRetries: 0 });
  const b = await limited.browsers.create({ headless: true });
  try {
    const err = await rejectsWith(limited.browsers.loadExtensions(b.session_id, { extensions: [{ name: 'z', zip_file: await toFile(mv3('z'), 'z.zip') }] }), PermissionDeniedError, 'forbidden');
    assert.match(err.message, /turned off/);
    await rejectsWith(limited.extensions.upload({ file: await toFile(mv3('z'), 'z.zip') }), PermissionDeniedError);
    await server.admin('entitlement', mine, 'extensions', 'on');
    await limited.extensions.upload({ file: await toFile(mv3('z'), 'z.zip'), name: 'allowed-again' });
  } finally {
    await limited.browsers.deleteByID(b.session_id);
  }
});

test('the library: upload, list, metadata, download, attach at create, delete', async () => {
  const zip = mv3('extlib');
  const ext = await client.extensions.upload({ file: await toFile(zip, 'lib.zip'), name: 'marker' });
  assert.match(ext.id, /^[a-z0-9]{24}$/);
  assert.equal(ext.name, 'marker');
  assert.equal(ext.size_bytes, zip.length);
  assert.match(ext.checksum, /^[0-9a-f]{64}$/);
  assert.equal(ext.checksum, createHash('sha256').update(zip).digest('hex'), 'the SHA-256 of the uploaded bytes');
  await rejectsWith(client.extensions.upload({ file: await toFile(zip, 'lib.zip'), name: 'marker' }), ConflictError);
  await rejectsWith(client.extensions.upload({ file: await toFile(Buffer.from('nope'), 'x.zip') }), BadRequestError);
  const listed = await client.extensions.list({ name: 'marker' });
  assert.deepEqual(listed.items.map((e) => e.id), [ext.id]);
  assert.equal((await client.extensions.get('marker')).id, ext.id);
  const downloaded = Buffer.from(await (await client.extensions.download('marker')).arrayBuffer());
  assert.ok(downloaded.equals(zip));

  const b = await client.browsers.create({ headless: false, extensions: [{ name: 'marker' }] });
  try {
    assert.equal(await mark(b, 'extlib'), 'yes');
    assert.ok((await client.extensions.get(ext.id)).last_used_at);
  } finally {
    await client.browsers.deleteByID(b.session_id);
  }
  await rejectsWith(client.browsers.create({ extensions: [{ name: 'no-such-extension' }] }), NotFoundError);
  await client.extensions.delete('marker');
  await rejectsWith(client.extensions.get('marker'), NotFoundError);
});

test('a pool with extensions: its browsers load them, and the pool names them', async () => {
  const ext = await client.extensions.upload({ file: await toFile(mv3('extpool'), 'pool.zip'), name: 'pooled' });
  await rejectsWith(client.browserPools.create({ size: 1, extensions: [{ name: 'no-such-extension' }] }), NotFoundError);
  const pool = await client.browserPools.create({ size: 1, headless: false, extensions: [{ name: 'pooled' }], fill_rate_per_minute: 6000 });
  try {
    assert.deepEqual(pool.extension_ids, [ext.id]);
    const b = await client.browserPools.acquire(pool.id, { acquire_timeout_seconds: 45 });
    assert.ok(b?.session_id, 'a pooled browser');
    assert.equal(await mark(b, 'extpool'), 'yes', 'the pooled browser loaded the extension');
    await client.browserPools.release(pool.id, { session_id: b.session_id, reuse: false });
  } finally {
    await client.browserPools.delete(pool.id, { force: true }).catch(() => {});
    await client.extensions.delete('pooled');
  }
});

test('Chrome Web Store without internet: 502 upstream_unavailable, quickly', async () => {
  const t0 = Date.now();
  const res = await server.fetch('/extensions/from_chrome_store?url=' + encodeURIComponent('https://chromewebstore.google.com/detail/x/abcdefghijklmnopabcdefghijklmnop'));
  assert.equal(res.status, 502);
  assert.equal((await res.json()).code, 'upstream_unavailable');
  assert.ok(Date.now() - t0 < 10_000);
});

test('with the extensions plugin switched off, browsers start with none and its routes answer 404 naming it', async () => {
  // The repository's configuration without plugins.d/extensions.ini: the browsers agent's call to
  // extensions.installed finds no service and Chromium starts with no extension.
  const etc = join(dirname(fileURLToPath(import.meta.url)), '../../etc');
  const conf = mkdtempSync(join(scratch, 'etc-'));
  // The agent reads it too, as the unprivileged sandbox user.
  for (const d of [scratch, conf]) chmodSync(d, 0o755);
  mkdirSync(join(conf, 'plugins.d'));
  copyFileSync(join(etc, 'hangar.ini'), join(conf, 'hangar.ini'));
  for (const f of readdirSync(join(etc, 'plugins.d')))
    if (f !== 'extensions.ini') copyFileSync(join(etc, 'plugins.d', f), join(conf, 'plugins.d', f));
  const off = await startServer({ env: { HANGAR_CONFIG: join(conf, 'hangar.ini') } });
  try {
    const res = await off.fetch('/extensions');
    assert.equal(res.status, 404);
    assert.match((await res.json()).message, /'extensions' plugin is disabled/);
    const b = await off.client.browsers.create({ headless: true });
    const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
    try {
      const page = cdp.contexts()[0].pages()[0];
      await page.goto(pages.url);
      assert.equal(await page.title(), 'Hangar test page');
    } finally {
      await cdp.close();
    }
    await off.client.browsers.deleteByID(b.session_id);
  } finally {
    await off.stop();
  }
});
