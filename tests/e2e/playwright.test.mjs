// Playwright execution through the official SDK (client.browsers.playwright.execute): results,
// TypeScript, errors, timeouts, console capture, validation, and per-browser serialization.
// One headless browser for everything.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, before, test } from 'node:test';

import { BadRequestError, NotFoundError } from '@onkernel/sdk';

import { startServer, startTestPages, TEST_PAGE_TITLE } from './lib/server.mjs';

let server;
let client;
let pages;
let id;

before(async () => {
  server = await startServer();
  client = server.client;
  pages = await startTestPages();
  id = (await client.browsers.create({ headless: true })).session_id;
});

after(async () => {
  if (id) await client.browsers.deleteByID(id).catch(() => {});
  await server?.stop();
  await pages?.close();
});

const execute = (body, sid = id) => client.browsers.playwright.execute(sid, body);

test('navigates the session page and returns its title', async () => {
  const r = await execute({ code: `await page.goto(${JSON.stringify(pages.url)}); return await page.title();` });
  // `tab` (0.131) names the tab `page` was bound to: the browser's first, which existed already.
  assert.match(r.tab?.target_id ?? '', /^[0-9A-F]{32}$/);
  assert.deepEqual(r, { success: true, result: TEST_PAGE_TITLE, stdout: '', stderr: '', tab: { target_id: r.tab.target_id, created: false } });
  // The snippet drove the session's own first page: a CDP client sees the same URL.
  const again = await execute({ code: 'return { url: page.url(), pages: context.pages().length, contexts: browser.contexts().length };' });
  assert.equal(again.result.url, pages.url);
  assert.equal(again.result.contexts, 1);
});

test('TypeScript with type annotations runs', async () => {
  const code = `
    interface Pair { a: number; b: number }
    const add = (p: Pair): number => p.a + p.b;
    const heading: string = (await page.textContent('#greeting')) as string;
    return { sum: add({ a: 2, b: 3 } as Pair), heading };`;
  const r = await execute({ code });
  assert.equal(r.success, true, r.error);
  assert.deepEqual(r.result, { sum: 5, heading: 'Hello from the test page' });
});

test('a thrown error is success:false with its message', async () => {
  const r = await execute({ code: `throw new Error('boom from the snippet');` });
  assert.equal(r.success, false);
  assert.match(r.error, /boom from the snippet/);
  const rejected = await execute({ code: `await Promise.reject(new TypeError('rejected here'));` });
  assert.equal(rejected.success, false);
  assert.match(rejected.error, /rejected here/);
  const syntax = await execute({ code: `return (;` });
  assert.equal(syntax.success, false);
  assert.match(syntax.error, /SyntaxError/);
});

test('stdout and stderr are captured', async () => {
  const r = await execute({ code: `console.log('hello', 42, { a: 1 }); console.error('oops'); return 1;` });
  assert.equal(r.success, true);
  assert.equal(r.result, 1);
  assert.equal(r.stdout, "hello 42 { a: 1 }\n");
  assert.equal(r.stderr, 'oops\n');
  // Output is capped per call, so a chatty loop cannot exhaust the executor.
  const chatty = await execute({ code: `for (let i = 0; i < 200000; i++) console.log('x'.repeat(100)); return 'done';` });
  assert.equal(chatty.result, 'done');
  assert.ok(chatty.stdout.length <= (1 << 20) + 100, `stdout ${chatty.stdout.length} bytes`);
  assert.match(chatty.stdout, /output truncated/);
});

test('an undefined result is null', async () => {
  const r = await execute({ code: `await page.title();` });
  assert.equal(r.success, true);
  assert.equal(r.result, null);
});

test('a timeout stops the snippet and the next call works', async () => {
  let t = Date.now();
  const busy = await execute({ code: `while (true) {}`, timeout_sec: 1 });
  assert.equal(busy.success, false);
  assert.match(busy.error, /timed out/);
  assert.ok(Date.now() - t < 10_000, 'answered soon after the timeout');

  t = Date.now();
  const waiting = await execute({ code: `await page.waitForTimeout(30_000); return 'late';`, timeout_sec: 1 });
  assert.equal(waiting.success, false);
  assert.match(waiting.error, /timed out/);
  assert.ok(Date.now() - t < 10_000);

  const next = await execute({ code: `return await page.title();` });
  assert.equal(next.success, true, next.error);
  assert.equal(next.result, TEST_PAGE_TITLE);
});

test('a snippet that kills the executor fails alone; the next call gets a new executor', async () => {
  const r = await execute({ code: `const proc = page.constructor.constructor('return process')(); proc.kill(proc.pid, 'SIGKILL'); await new Promise(() => {});` });
  assert.equal(r.success, false);
  assert.match(r.error, /executor exited/);
  const next = await execute({ code: 'return await page.title();' });
  assert.equal(next.success, true, next.error);
  assert.equal(next.result, TEST_PAGE_TITLE);
});

test('two concurrent calls on one browser run one after the other', async () => {
  const code = (tag) => `
    const start = Date.now();
    await page.evaluate(() => new Promise((r) => setTimeout(r, 700)));
    return { tag: '${tag}', start, end: Date.now() };`;
  const [a, b] = await Promise.all([execute({ code: code('a') }), execute({ code: code('b') })]);
  assert.equal(a.success, true, a.error);
  assert.equal(b.success, true, b.error);
  const [first, second] = [a.result, b.result].sort((x, y) => x.start - y.start);
  assert.ok(second.start >= first.end, `overlapped: ${JSON.stringify([first, second])}`);
});

test('after Chromium restarts (viewport change) the next call reconnects', async () => {
  const before = await execute({ code: 'return await page.evaluate(() => window.innerWidth);' });
  assert.equal(before.success, true, before.error);
  await client.browsers.update(id, { viewport: { width: 1024, height: 768 } });
  const r = await execute({ code: 'return await page.evaluate(() => [window.innerWidth, window.innerHeight]);' });
  assert.equal(r.success, true, r.error);
  assert.deepEqual(r.result, [1024, 768]);
});

test('snippets run inside the browser sandbox, not in the server', async () => {
  // vm contexts are no boundary (a host object's constructor reaches Node itself); the sandbox is.
  const secret = `${server.dataDir}/secrets.key`;
  assert.ok(existsSync(secret), 'the server has its secrets key');
  const code = `
    const proc = page.constructor.constructor('return process')();
    const fs = proc.getBuiltinModule('fs');
    return { hostname: proc.getBuiltinModule('os').hostname(), dataDir: fs.existsSync(${JSON.stringify(secret)}) };`;
  const r = await execute({ code });
  assert.equal(r.success, true, r.error);
  assert.deepEqual(r.result, { hostname: 'hangar', dataDir: false });
});

test('invalid timeout_sec and code answer 400 naming the field', async () => {
  for (const timeout_sec of [0, -1, 301, 'ten']) {
    const err = await execute({ code: 'return 1;', timeout_sec }).then(
      () => assert.fail(`timeout_sec ${timeout_sec} accepted`),
      (e) => e,
    );
    assert.ok(err instanceof BadRequestError, String(err));
    assert.equal(err.error.code, 'bad_request');
    assert.match(JSON.stringify(err.error.details), /timeout_sec/);
  }
  const err = await execute({ code: 42 }).then(() => assert.fail('code 42 accepted'), (e) => e);
  assert.ok(err instanceof BadRequestError);
  assert.match(JSON.stringify(err.error.details), /code/);
});

test('an unknown session is 404', async () => {
  const err = await execute({ code: 'return 1;' }, 'nosuchsessionxxxxxxxxxxx').then(
    () => assert.fail('accepted'),
    (e) => e,
  );
  assert.ok(err instanceof NotFoundError, String(err));
});
