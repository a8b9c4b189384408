// The browser filesystem API through the official SDK (client.browsers.fs.*): round trips,
// permissions, zip upload/download, watch events, and escape attempts that must fail.
// One headless browser is shared by every test.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { BadRequestError, NotFoundError, toFile } from '@onkernel/sdk';

import { rejectsWith, startServer, waitFor } from './lib/server.mjs';

let server;
let client;
let browser;
let id;
const scratch = mkdtempSync(join(tmpdir(), 'hangar-fs-test-'));

before(async () => {
  server = await startServer();
  client = server.client;
  browser = await client.browsers.create({ headless: true });
  id = browser.session_id;
});

after(async () => {
  if (id) await client.browsers.deleteByID(id).catch(() => {});
  await server?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

async function read(path) {
  const res = await client.browsers.fs.readFile(id, { path });
  return Buffer.from(await res.arrayBuffer());
}

function makeZip(entries) {
  const dir = mkdtempSync(join(scratch, 'zip-'));
  for (const [name, content] of Object.entries(entries)) {
    execFileSync('mkdir', ['-p', join(dir, name, '..')]);
    writeFileSync(join(dir, name), content);
  }
  const out = join(scratch, `z-${Math.random().toString(36).slice(2)}.zip`);
  execFileSync('zip', ['-qr', out, '.'], { cwd: dir });
  return readFileSync(out);
}

test('write_file then read_file round trip is binary-safe', async () => {
  const bytes = Buffer.alloc(70_000);
  for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7 + (i >> 8)) & 0xff;
  await client.browsers.fs.writeFile(id, bytes, { path: '/home/kernel/rt/bin.dat' });
  assert.deepEqual(await read('/home/kernel/rt/bin.dat'), bytes);
  await client.browsers.fs.writeFile(id, 'hello\n', { path: '/tmp/hello.txt', mode: '600' });
  assert.equal((await read('/tmp/hello.txt')).toString(), 'hello\n');
});

test('file_info and list_files', async () => {
  await client.browsers.fs.writeFile(id, 'abc', { path: '/home/kernel/info/a.txt' });
  await client.browsers.fs.createDirectory(id, { path: '/home/kernel/info/sub' });
  const info = await client.browsers.fs.fileInfo(id, { path: '/home/kernel/info/a.txt' });
  assert.equal(info.name, 'a.txt');
  assert.equal(info.path, '/home/kernel/info/a.txt');
  assert.equal(info.is_dir, false);
  assert.equal(info.size_bytes, 3);
  assert.equal(info.mode, '-rw-r--r--');
  assert.ok(!Number.isNaN(Date.parse(info.mod_time)));
  const list = await client.browsers.fs.listFiles(id, { path: '/home/kernel/info' });
  assert.ok(Array.isArray(list));
  const names = list.map((f) => f.name).sort();
  assert.deepEqual(names, ['a.txt', 'sub']);
  const sub = list.find((f) => f.name === 'sub');
  assert.equal(sub.is_dir, true);
  assert.equal(sub.size_bytes, 0);
  assert.equal(sub.mode, 'drwxr-xr-x');
});

test('create/delete directory, delete file, move', async () => {
  await client.browsers.fs.createDirectory(id, { path: '/home/kernel/d1/d2', mode: '700' });
  assert.equal((await client.browsers.fs.fileInfo(id, { path: '/home/kernel/d1/d2' })).mode, 'drwx------');
  await client.browsers.fs.writeFile(id, 'x', { path: '/home/kernel/d1/d2/f' });
  await client.browsers.fs.move(id, { src_path: '/home/kernel/d1/d2/f', dest_path: '/home/kernel/d1/g' });
  await rejectsWith(client.browsers.fs.fileInfo(id, { path: '/home/kernel/d1/d2/f' }), NotFoundError, 'not_found');
  assert.equal((await read('/home/kernel/d1/g')).toString(), 'x');
  await client.browsers.fs.deleteFile(id, { path: '/home/kernel/d1/g' });
  await rejectsWith(client.browsers.fs.fileInfo(id, { path: '/home/kernel/d1/g' }), NotFoundError);
  await client.browsers.fs.deleteDirectory(id, { path: '/home/kernel/d1' });
  await rejectsWith(client.browsers.fs.fileInfo(id, { path: '/home/kernel/d1' }), NotFoundError);
});

test('set_file_permissions shows in file_info', async () => {
  await client.browsers.fs.writeFile(id, '#!/bin/sh\n', { path: '/home/kernel/perm.sh' });
  await client.browsers.fs.setFilePermissions(id, { path: '/home/kernel/perm.sh', mode: '751' });
  assert.equal((await client.browsers.fs.fileInfo(id, { path: '/home/kernel/perm.sh' })).mode, '-rwxr-x--x');
  await rejectsWith(
    client.browsers.fs.setFilePermissions(id, { path: '/home/kernel/perm.sh', mode: 'rwx' }),
    BadRequestError,
    'bad_request',
  );
});

test('upload several files', async () => {
  await client.browsers.fs.upload(id, {
    files: [
      { dest_path: '/home/kernel/up/one.txt', file: await toFile(Buffer.from('one'), 'one.txt') },
      { dest_path: '/home/kernel/up/deep/two.bin', file: await toFile(Buffer.from([0, 1, 2, 255]), 'two.bin') },
    ],
  });
  assert.equal((await read('/home/kernel/up/one.txt')).toString(), 'one');
  assert.deepEqual([...(await read('/home/kernel/up/deep/two.bin'))], [0, 1, 2, 255]);
});

test('upload_zip extracts; download_dir_zip contains what was written', async () => {
  const zip = makeZip({ 'a.txt': 'AAA', 'nested/b.txt': 'BBB' });
  await client.browsers.fs.uploadZip(id, { dest_path: '/home/kernel/unz', zip_file: await toFile(zip, 'x.zip') });
  assert.equal((await read('/home/kernel/unz/a.txt')).toString(), 'AAA');
  assert.equal((await read('/home/kernel/unz/nested/b.txt')).toString(), 'BBB');

  await client.browsers.fs.writeFile(id, 'CCC', { path: '/home/kernel/unz/c.txt' });
  const res = await client.browsers.fs.downloadDirZip(id, { path: '/home/kernel/unz' });
  assert.match(res.headers.get('content-type') || '', /application\/zip/);
  const file = join(scratch, 'down.zip');
  writeFileSync(file, Buffer.from(await res.arrayBuffer()));
  const out = mkdtempSync(join(scratch, 'down-'));
  execFileSync('unzip', ['-q', file, '-d', out]);
  assert.equal(readFileSync(join(out, 'a.txt'), 'utf8'), 'AAA');
  assert.equal(readFileSync(join(out, 'nested/b.txt'), 'utf8'), 'BBB');
  assert.equal(readFileSync(join(out, 'c.txt'), 'utf8'), 'CCC');
});

// The zip is built in memory: a folder past upload_zip's caps (10,000 entries, 256 MiB) is refused
// before anything of it is read. Found by tests/api (a `/` the fuzzer sent kept the agent reading
// past the 70 s request timeout).
test('download_dir_zip of a folder past the zip caps answers 400 at once', async () => {
  const started = Date.now();
  const err = await rejectsWith(client.browsers.fs.downloadDirZip(id, { path: '/' }), BadRequestError, 'bad_request');
  assert.match(err.error.message, /holds more than a zip may/);
  assert.ok(Date.now() - started < 10_000, `took ${Date.now() - started} ms`);
});

test('a zip entry escaping its folder is refused and nothing is written', async () => {
  const dir = mkdtempSync(join(scratch, 'evil-'));
  execFileSync('mkdir', ['-p', join(dir, 'in')]);
  writeFileSync(join(dir, 'in', 'ok.txt'), 'fine');
  writeFileSync(join(dir, 'evil'), 'evil');
  const zipPath = join(scratch, 'evil.zip');
  // zip stores "../evil" verbatim when given that relative name from inside in/.
  execFileSync('zip', ['-q', zipPath, 'ok.txt', '../evil'], { cwd: join(dir, 'in') });
  const listing = execFileSync('unzip', ['-Z1', zipPath]).toString();
  assert.match(listing, /\.\.\/evil/);
  const err = await rejectsWith(
    client.browsers.fs.uploadZip(id, {
      dest_path: '/home/kernel/evil/target',
      zip_file: await toFile(readFileSync(zipPath), 'evil.zip'),
    }),
    BadRequestError,
    'bad_request',
  );
  assert.match(err.error.message, /\.\.\/evil/);
  await rejectsWith(client.browsers.fs.fileInfo(id, { path: '/home/kernel/evil' }), NotFoundError);
});

test('a zip with a symlink entry is refused', async () => {
  const dir = mkdtempSync(join(scratch, 'link-'));
  execFileSync('ln', ['-s', '/etc/passwd', join(dir, 'link')]);
  const zipPath = join(scratch, 'link.zip');
  execFileSync('zip', ['-qy', zipPath, 'link'], { cwd: dir });
  const err = await rejectsWith(
    client.browsers.fs.uploadZip(id, { dest_path: '/home/kernel/linkz', zip_file: await toFile(readFileSync(zipPath), 'l.zip') }),
    BadRequestError,
    'bad_request',
  );
  assert.match(err.error.message, /link/);
  await rejectsWith(client.browsers.fs.fileInfo(id, { path: '/home/kernel/linkz' }), NotFoundError);
});

test('a failed write leaves no partial or temp file', async () => {
  await client.browsers.fs.createDirectory(id, { path: '/home/kernel/fail/target' });
  // the destination is a folder: refused
  await rejectsWith(
    client.browsers.fs.writeFile(id, Buffer.alloc(100_000, 1), { path: '/home/kernel/fail/target' }),
    BadRequestError,
  );
  await rejectsWith(
    client.browsers.fs.writeFile(id, 'x', { path: '/home/kernel/fail/f', mode: '999' }),
    BadRequestError,
    'bad_request',
  );
  const names = (await client.browsers.fs.listFiles(id, { path: '/home/kernel/fail' })).map((f) => f.name);
  assert.deepEqual(names, ['target']);
});

test('paths cannot escape the sandbox', async () => {
  await rejectsWith(
    client.browsers.fs.readFile(id, { path: '/home/kernel/../../etc/shadow' }),
    BadRequestError,
    'bad_request',
  );
  await rejectsWith(client.browsers.fs.readFile(id, { path: 'relative.txt' }), BadRequestError, 'bad_request');
  // The host's data dir (and a marker in it) is not visible inside the instance.
  const marker = join(server.dataDir, 'fs-marker.txt');
  writeFileSync(marker, 'host secret');
  await rejectsWith(client.browsers.fs.readFile(id, { path: marker }), NotFoundError, 'not_found');
  // ...nor through another process's root (pid 1 inside the sandbox is the sandbox's own)
  const viaProc = await client.browsers.fs.readFile(id, { path: `/proc/1/root${marker}` }).then(
    () => null,
    (err) => err,
  );
  assert.ok(viaProc && viaProc.status >= 400 && viaProc.status < 500, `expected a 4xx, got ${viaProc?.status}`);
  // The sandbox may show the data dir's path as an empty mount-point parent, never its contents.
  const listing = await client.browsers.fs.listFiles(id, { path: server.dataDir }).catch((err) => {
    assert.ok(err instanceof NotFoundError, `expected 404 or a listing, got ${err}`);
    return [];
  });
  assert.ok(!listing.some((f) => f.name === 'fs-marker.txt'), JSON.stringify(listing));
  // Writing outside the writable roots fails and leaves nothing.
  const e = await client.browsers.fs.writeFile(id, 'x', { path: '/etc/hangar-evil' }).then(
    () => null,
    (err) => err,
  );
  assert.ok(e && e.status >= 400 && e.status < 500, `expected a 4xx, got ${e?.status}`);
  // A symlink inside /home/kernel pointing out is not followed when writing.
  // (No API creates symlinks; upload_zip refuses them, so the write path is the check.)
  await rejectsWith(
    client.browsers.fs.writeFile(id, 'x', { path: '/home/kernel/../tmp/x' }),
    BadRequestError,
    'bad_request',
  );
});

test('missing path is 404; bad input is 400', async () => {
  await rejectsWith(client.browsers.fs.readFile(id, { path: '/home/kernel/nope' }), NotFoundError, 'not_found');
  await rejectsWith(client.browsers.fs.listFiles(id, { path: '/home/kernel/nope' }), NotFoundError, 'not_found');
  await rejectsWith(client.browsers.fs.deleteFile(id, { path: '/home/kernel/nope' }), NotFoundError, 'not_found');
  const err = await rejectsWith(client.browsers.fs.createDirectory(id, {}), BadRequestError, 'bad_request');
  assert.ok(Array.isArray(err.error.details) && err.error.details.length > 0);
});

test('watch gets a create event, stop ends the stream', async () => {
  await client.browsers.fs.createDirectory(id, { path: '/home/kernel/w' });
  const { watch_id } = await client.browsers.fs.watch.start(id, { path: '/home/kernel/w', recursive: true });
  assert.ok(watch_id);
  const stream = await client.browsers.fs.watch.events(watch_id, { id });
  const seen = [];
  const done = (async () => {
    for await (const ev of stream) seen.push(ev);
  })();
  await client.browsers.fs.writeFile(id, 'hi', { path: '/home/kernel/w/new.txt' });
  await waitFor(() => seen.some((e) => e.type === 'CREATE' && e.path === '/home/kernel/w/new.txt'), {
    what: 'a CREATE event for new.txt',
    timeoutMs: 10_000,
  });
  const create = seen.find((e) => e.type === 'CREATE');
  assert.equal(create.name, 'new.txt');
  assert.equal(create.is_dir, false);
  await client.browsers.fs.writeFile(id, 'again', { path: '/home/kernel/w/new.txt' });
  await waitFor(() => seen.some((e) => e.type === 'WRITE' && e.path === '/home/kernel/w/new.txt'), {
    what: 'a WRITE event for new.txt',
    timeoutMs: 10_000,
  });
  await client.browsers.fs.createDirectory(id, { path: '/home/kernel/w/sub' });
  await waitFor(() => seen.some((e) => e.type === 'CREATE' && e.path === '/home/kernel/w/sub' && e.is_dir), {
    what: 'a CREATE event for the folder',
    timeoutMs: 10_000,
  });
  await waitFor(
    async () => {
      // recursive: a file in the new sub-folder is seen too (the sub-watch is added asynchronously)
      await client.browsers.fs.writeFile(id, 'z', { path: '/home/kernel/w/sub/z.txt' });
      return seen.some((e) => e.path === '/home/kernel/w/sub/z.txt');
    },
    { what: 'an event inside the sub-folder', timeoutMs: 10_000 },
  );
  await client.browsers.fs.deleteFile(id, { path: '/home/kernel/w/new.txt' });
  await waitFor(() => seen.some((e) => e.type === 'DELETE' && e.path === '/home/kernel/w/new.txt'), {
    what: 'a DELETE event',
    timeoutMs: 10_000,
  });
  assert.ok(!seen.some((e) => e.name.includes('hangar-tmp')), `temp files leaked: ${JSON.stringify(seen)}`);
  await client.browsers.fs.watch.stop(watch_id, { id });
  await Promise.race([
    done,
    new Promise((_, reject) => setTimeout(() => reject(new Error('stream did not end after stop')), 10_000)),
  ]);
});

test('a stopped or unknown watch is 404', async () => {
  await rejectsWith(client.browsers.fs.watch.stop('watch_nope', { id }), NotFoundError, 'not_found');
});

test('unknown session is 404', async () => {
  await rejectsWith(client.browsers.fs.listFiles('nonexistent123', { path: '/home/kernel' }), NotFoundError);
  await rejectsWith(
    client.browsers.fs.writeFile('nonexistent123', 'x', { path: '/home/kernel/x' }),
    NotFoundError,
  );
});
