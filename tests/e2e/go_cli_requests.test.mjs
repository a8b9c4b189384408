// Requests the Kernel Go SDK (kernel-go-sdk 0.24) and the Kernel CLI (`kernel`, built on it) send
// that the TypeScript and Python SDKs do not, replayed byte for byte as raw HTTP: neither installs
// on these machines (no Go toolchain from the registries here), so their requests are rebuilt from
// their sources. tests/e2e/README.md lists what is checked and where each request comes from.
// One headless browser at a time.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { startServer } from './lib/server.mjs';

// What requestconfig.go puts on every request (getPlatformProperties + NewRequestConfig), and the
// header the CLI adds (cmd/root.go).
const GO_HEADERS = {
  accept: 'application/json',
  'user-agent': 'Kernel/Go 0.24.0',
  'x-stainless-lang': 'go',
  'x-stainless-package-version': '0.24.0',
  'x-stainless-os': 'Linux',
  'x-stainless-arch': 'x64',
  'x-stainless-runtime': 'go',
  'x-stainless-runtime-version': 'go1.22.12',
  'x-stainless-retry-count': '0',
  'x-kernel-cli-version': '0.12.4',
};

/**
 * A multipart body the way Go's apiform encoder writes one: fields in order, a file part named
 * "anonymous_file" (an io.Reader without a name) with application/octet-stream.
 */
function goMultipart(parts) {
  const boundary = randomBytes(30).toString('hex');
  const chunks = [];
  for (const [name, value] of parts) {
    chunks.push(Buffer.from(`--${boundary}\r\n`));
    if (Buffer.isBuffer(value)) {
      chunks.push(Buffer.from(`Content-Disposition: form-data; name="${name}"; filename="anonymous_file"\r\n` +
        'Content-Type: application/octet-stream\r\n\r\n'));
      chunks.push(value);
    } else {
      chunks.push(Buffer.from(`Content-Disposition: form-data; name="${name}"\r\n\r\n${value}`));
    }
    chunks.push(Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(chunks), contentType: `multipart/form-data; boundary=${boundary}` };
}

function extensionZip(dir, mark) {
  const zip = join(dir, `${mark}.zip`);
  execFileSync('python3', ['-c', `import zipfile,json,sys
z=zipfile.ZipFile(sys.argv[1],'w')
z.writestr('manifest.json', json.dumps({'manifest_version':3,'name':'go ${mark}','version':'1.0'}))
z.close()`, zip]);
  return readFileSync(zip);
}

describe('Kernel Go SDK and CLI requests', () => {
  let server;
  let tmp;
  let go;
  let session;

  before(async () => {
    server = await startServer();
    tmp = mkdtempSync(join(tmpdir(), 'hangar-go-'));
    go = (path, init = {}) =>
      server.fetch(path, { ...init, headers: { ...GO_HEADERS, ...(init.headers || {}) } });
    const res = await go('/browsers', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ headless: true, timeout_seconds: 120, stealth: false }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    session = await res.json();
  });
  after(async () => {
    await server?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  test('list: include_deleted=true, limit and offset as Go encodes them; X-Next-Offset always an integer', async () => {
    // Go's OffsetPagination.GetNextPage parses X-Next-Offset with strconv.ParseInt and stops at 0:
    // a page without the header (or with a non-number) breaks `kernel browsers list` paging.
    const first = await go('/browsers?include_deleted=true&limit=1');
    assert.equal(first.status, 200);
    assert.match(first.headers.get('x-next-offset'), /^\d+$/);
    const page = await first.json();
    assert.equal(page.length, 1);
    const last = await go('/browsers?include_deleted=true&limit=50&offset=0');
    assert.equal(last.headers.get('x-has-more'), 'false');
    assert.equal(last.headers.get('x-next-offset'), '0', 'the last page ends Go paging with 0');
    for (const path of ['/credentials?limit=1&offset=0', '/profiles', '/extensions', '/proxies', '/browser_pools']) {
      const r = await go(path);
      assert.equal(r.status, 200, path);
      assert.ok(Array.isArray(await r.json()), `${path}: Go decodes a bare array`);
    }
  });

  test('DELETE /browsers?persistent_id= (the CLI`s second delete): 404, and 400 without the id', async () => {
    const gone = await go('/browsers?persistent_id=' + session.session_id, { method: 'DELETE', headers: { accept: '*/*' } });
    assert.equal(gone.status, 404);
    assert.equal((await gone.json()).code, 'not_found');
    const bad = await go('/browsers', { method: 'DELETE', headers: { accept: '*/*' } });
    assert.equal(bad.status, 400);
    // The session itself was not touched.
    assert.equal((await go(`/browsers/${session.session_id}`)).status, 200);
  });

  test('create with `persistence` (CLI --persistent-id), retired by Kernel, answers 400 naming what replaced it', async () => {
    const res = await go('/browsers', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ headless: true, persistence: { id: 'my-persistent' } }),
    });
    assert.equal(res.status, 400);
    const body = await res.json();
    assert.equal(body.code, 'bad_request');
    assert.match(body.message, /persistence: was retired by Kernel/);
    assert.match(body.message, /timeout_seconds/);
    assert.match(body.message, /profile/);
  });

  test('fs: write_file as application/octet-stream with Accept */*, read with Accept application/octet-stream', async () => {
    const put = await go(`/browsers/${session.session_id}/fs/write_file?path=%2Fhome%2Fkernel%2Fgo.txt`, {
      method: 'PUT',
      headers: { accept: '*/*', 'content-type': 'application/octet-stream' },
      body: 'from go',
    });
    assert.ok(put.status === 201 || put.status === 204 || put.status === 200, `write_file ${put.status}`);
    const get = await go(`/browsers/${session.session_id}/fs/read_file?path=%2Fhome%2Fkernel%2Fgo.txt`, {
      headers: { accept: 'application/octet-stream' },
    });
    assert.equal(get.status, 200);
    assert.equal(await get.text(), 'from go');
  });

  test('fs upload in Go`s default multipart form: files.dest_path / files.file, repeated, no index', async () => {
    const { body, contentType } = goMultipart([
      ['files.dest_path', '/home/kernel/go/one.txt'],
      ['files.file', Buffer.from('ONE')],
      ['files.dest_path', '/home/kernel/go/two.txt'],
      ['files.file', Buffer.from('TWO')],
    ]);
    const res = await go(`/browsers/${session.session_id}/fs/upload`, {
      method: 'POST',
      headers: { accept: '*/*', 'content-type': contentType },
      body,
    });
    assert.ok(res.status < 300, `upload ${res.status}: ${await res.clone().text()}`);
    for (const [name, want] of [['one', 'ONE'], ['two', 'TWO']]) {
      const r = await go(`/browsers/${session.session_id}/fs/read_file?path=/home/kernel/go/${name}.txt`);
      assert.equal(await r.text(), want);
    }
    // Go's indices:dots form names the index: files.0.dest_path.
    const dots = goMultipart([
      ['files.0.dest_path', '/home/kernel/go/three.txt'],
      ['files.0.file', Buffer.from('THREE')],
    ]);
    const r3 = await go(`/browsers/${session.session_id}/fs/upload`, {
      method: 'POST',
      headers: { 'content-type': dots.contentType },
      body: dots.body,
    });
    assert.ok(r3.status < 300);
    // A file without its destination is a 400 naming the element, not a silent half-write.
    const half = goMultipart([['files.file', Buffer.from('x')]]);
    const bad = await go(`/browsers/${session.session_id}/fs/upload`, {
      method: 'POST',
      headers: { 'content-type': half.contentType },
      body: half.body,
    });
    assert.equal(bad.status, 400);
    assert.match(JSON.stringify(await bad.json()), /files\[0\]\[dest_path\]/);
  });

  test('extensions: library upload with an anonymous_file part; load into a browser as extensions.name / extensions.zip_file', async () => {
    const lib = goMultipart([['file', extensionZip(tmp, 'golib')], ['name', 'go-lib']]);
    const up = await go('/extensions', { method: 'POST', headers: { 'content-type': lib.contentType }, body: lib.body });
    assert.equal(up.status, 200, await up.clone().text());
    assert.equal((await up.json()).name, 'go-lib');
    // The Go SDK's ExtensionService.Download: GET /extensions/{id} with Accept application/octet-stream.
    const dl = await go('/extensions/go-lib', { headers: { accept: 'application/octet-stream' } });
    assert.equal(dl.status, 200);
    assert.equal((await dl.arrayBuffer()).byteLength > 0, true);

    const load = goMultipart([
      ['extensions.name', 'go-one'],
      ['extensions.zip_file', extensionZip(tmp, 'goone')],
      ['extensions.name', 'go-two'],
      ['extensions.zip_file', extensionZip(tmp, 'gotwo')],
    ]);
    const res = await go(`/browsers/${session.session_id}/extensions`, {
      method: 'POST',
      headers: { accept: '*/*', 'content-type': load.contentType },
      body: load.body,
    });
    assert.ok(res.status < 300, `load ${res.status}: ${await res.clone().text()}`);
    const listed = await go(`/browsers/${session.session_id}/fs/list_files?path=/home/kernel/extensions`);
    assert.deepEqual((await listed.json()).map((f) => f.name).sort(), ['go-one', 'go-two']);
  });

  test('logs stream with Go`s query: source=supervisor&supervisor_process=chromium&follow=false', async () => {
    const res = await go(`/browsers/${session.session_id}/logs/stream?source=supervisor&supervisor_process=chromium&follow=false`, {
      headers: { accept: 'text/event-stream' },
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const text = await res.text();
    // Go's eventStreamDecoder reads "event:" and "data:" lines; every event has JSON data.
    const datas = text.split('\n').filter((l) => l.startsWith('data:'));
    assert.ok(datas.length > 0, 'Chromium logged something');
    for (const d of datas) JSON.parse(d.slice(5));
  });

  test('X-Kernel-Project-Id sent by option.WithHeader: any case, padded; an unknown project is 404', async () => {
    const project = await server.admin('project', 'create', 'go-project');
    const r = await go('/browsers', { headers: { 'X-KERNEL-PROJECT-ID': ` ${project} ` } });
    assert.equal(r.status, 200);
    assert.deepEqual(await r.json(), [], 'the other project has none of the default project`s browsers');
    const missing = await go('/browsers', { headers: { 'x-kernel-project-id': 'proj_nope' } });
    assert.equal(missing.status, 404);
    // The Python SDK's `project=` option: X-Kernel-Project, by name.
    const byName = await go(`/browsers/${session.session_id}`, { headers: { 'x-kernel-project': 'go-project' } });
    assert.equal(byName.status, 404, 'the session is in the default project, not go-project');
  });

  test('DELETE /browsers/{id} with Accept */*: 204 and an empty body', async () => {
    const res = await go(`/browsers/${session.session_id}`, { method: 'DELETE', headers: { accept: '*/*' } });
    assert.equal(res.status, 204);
    assert.equal(await res.text(), '');
  });
});
