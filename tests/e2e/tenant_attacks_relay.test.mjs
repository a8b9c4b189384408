// Tenant boundaries around relays (issue 40), with project-scoped keys only: what runs in a
// browser's sandbox cannot steer where the server sends a caller's request (a fake agent's 421
// with an owner_url reaches nobody), a client cannot pose as a node relay (X-Hangar-Relayed-By),
// an instance's answer streams through the server in bounded memory (a 512 MiB sparse file read),
// one project's long requests cannot take the threads another needs (429 with Retry-After at
// the cap), anonymous routes read small bodies only, and capability tokens stay out of the log.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { readFileSync } from 'node:fs';

import Kernel from '@onkernel/sdk';

import { startServer, listenAllowed, waitFor } from './lib/server.mjs';
import { openWebSocket, closeWebSocket } from './lib/cdp.mjs';

const CAP = 3; // HANGAR_MAX_LONG_REQUESTS_PER_PROJECT for this server

let server;
let keyA;
let keyB;
let clientA;
let clientB;
let browserA;
let browserB;

const clientFor = (apiKey) => new Kernel({ apiKey, baseURL: server.baseURL, maxRetries: 0, timeout: 120_000 });
const as = (key, path, init = {}) =>
  fetch(new URL(path, server.baseURL), { ...init, headers: { authorization: `Bearer ${key}`, ...(init.headers || {}) } });

function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}

// A loopback listener that records every request it gets.
async function recorder(allowed = false) {
  const seen = [];
  const srv = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      seen.push({ method: req.method, url: req.url, headers: req.headers, body });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ leaked: true }));
    });
  });
  let port;
  if (allowed) port = await listenAllowed(srv);
  else await new Promise((r) => srv.listen(0, '127.0.0.1', () => r((port = srv.address().port))));
  return {
    port,
    seen,
    close: () => new Promise((r) => (srv.closeAllConnections?.(), srv.close(() => r()))),
  };
}

before(async () => {
  server = await startServer({ env: { HANGAR_MAX_LONG_REQUESTS_PER_PROJECT: String(CAP) } });
  const admin = server.newClient({ maxRetries: 0 });
  const projectA = await admin.projects.create({ name: 'tenant-a' });
  const projectB = await admin.projects.create({ name: 'tenant-b' });
  keyA = (await admin.apiKeys.create({ name: 'a', project_id: projectA.id })).key;
  keyB = (await admin.apiKeys.create({ name: 'b', project_id: projectB.id })).key;
  clientA = clientFor(keyA);
  clientB = clientFor(keyB);
  browserA = await clientA.browsers.create({ headless: true });
  browserB = await clientB.browsers.create({ headless: true });
});

after(async () => {
  for (const [c, b] of [
    [clientA, browserA],
    [clientB, browserB],
  ])
    if (c && b) await c.browsers.deleteByID(b.session_id).catch(() => {});
  await server?.stop();
});

test('a client cannot pose as a node relay: X-Hangar-Relayed-By without a valid proof is 400', async () => {
  for (const headers of [
    { 'x-hangar-relayed-by': 'node-b' },
    { 'x-hangar-relayed-by': 'node-b', 'x-hangar-relay-proof': `v1.${Date.now()}.${'0'.repeat(64)}` },
  ]) {
    const res = await as(keyA, '/browsers', { headers });
    assert.equal(res.status, 400, JSON.stringify(headers));
    const body = await res.json();
    assert.equal(body.code, 'bad_request');
    assert.match(body.message, /X-Hangar-Relayed-By/);
  }
  // Placement is not steered either: a create carrying it is refused before anything starts.
  const res = await as(keyB, '/browsers', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-hangar-relayed-by': 'node-b' },
    body: JSON.stringify({ headless: true }),
  });
  assert.equal(res.status, 400);
});

test('an anonymous route with a large body is refused (413) before the body is read', async () => {
  const path = '/auth/connections/conn_x/exchange';
  // Announced size: answered at once, while nothing of the body has been sent.
  const announced = await new Promise((resolve, reject) => {
    const req = http.request(`${server.baseURL}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': String(32 << 20) },
    });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode);
    });
    req.on('error', (e) => (e.code === 'EPIPE' || e.code === 'ECONNRESET' ? resolve('closed') : reject(e)));
    req.flushHeaders();
    setTimeout(() => {
      resolve('no answer');
      req.destroy();
    }, 5_000).unref();
  });
  assert.equal(announced, 413);
  // Chunked: refused once past the small limit, long before the client is done sending. The
  // server closes a connection whose body it will not read, so the client may see the reset
  // before the 413.
  const chunked = await new Promise((resolve) => {
    let sent = 0;
    let answered = null;
    const req = http.request(`${server.baseURL}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
    });
    req.on('response', (res) => {
      res.resume();
      answered = { status: res.statusCode, sent };
      resolve(answered);
    });
    req.on('error', () => resolve(answered ?? { status: 'closed', sent }));
    const pump = () => {
      if (answered || sent >= 16 << 20) return answered || req.end();
      sent += 64 * 1024;
      if (req.write(Buffer.alloc(64 * 1024, 0x20))) setImmediate(pump);
      else req.once('drain', pump);
    };
    pump();
  });
  assert.ok(chunked.status === 413 || chunked.status === 'closed', JSON.stringify(chunked));
  assert.ok(chunked.sent < 16 << 20, `answered after ${chunked.sent} bytes`);
});

test('a 512 MiB file read streams through the server in bounded memory', async () => {
  const id = browserB.session_id;
  const size = 512 << 20;
  const made = await clientB.browsers.process.exec(id, { command: `truncate -s ${size} /tmp/big.bin` });
  assert.equal(made.exit_code, 0);
  const before = rssKiB(server.pid);
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, rssKiB(server.pid))), 50);
  let received = 0;
  try {
    const res = await as(keyB, `/browsers/${id}/fs/read_file?path=/tmp/big.bin`);
    assert.equal(res.status, 200);
    for await (const chunk of res.body) received += chunk.length;
  } finally {
    clearInterval(sampler);
  }
  peak = Math.max(peak, rssKiB(server.pid));
  assert.equal(received, size);
  const grewMiB = (peak - before) / 1024;
  assert.ok(grewMiB < 64, `the server grew by ${grewMiB.toFixed(0)} MiB reading a ${size >> 20} MiB file`);
  await clientB.browsers.process.exec(id, { command: 'rm -f /tmp/big.bin' });
});

test('one project at its cap of long requests gets 429; another project is served', async () => {
  const held = Array.from({ length: CAP }, () =>
    clientA.browsers.process.exec(browserA.session_id, { command: 'sleep 4' }),
  );
  await new Promise((r) => setTimeout(r, 1_500)); // each has reached the instance
  const over = await as(keyA, `/browsers/${browserA.session_id}/process/exec`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ command: 'true' }),
  });
  assert.equal(over.status, 429);
  assert.match(over.headers.get('retry-after') ?? '', /^\d+$/);
  assert.equal((await over.json()).code, 'rate_limited');
  // Tenant B is not held up by A's load.
  const t0 = Date.now();
  const b = await clientB.browsers.process.exec(browserB.session_id, { command: 'echo', args: ['b'] });
  assert.equal(b.exit_code, 0);
  assert.ok(Date.now() - t0 < 3_000, `B waited ${Date.now() - t0} ms`);
  // Quick calls that hold no long place still work for A, and its places come back.
  assert.equal((await as(keyA, `/browsers/${browserA.session_id}`)).status, 200);
  for (const r of await Promise.all(held)) assert.equal(r.exit_code, 0);
  const again = await clientA.browsers.process.exec(browserA.session_id, { command: 'true' });
  assert.equal(again.exit_code, 0);
});

test('capability tokens (CDP, live view) are not written to the server log', async () => {
  const b = await clientA.browsers.retrieve(browserA.session_id);
  const cdpToken = new URL(b.cdp_ws_url).searchParams.get('jwt');
  assert.ok(cdpToken);
  const ws = await openWebSocket(b.cdp_ws_url);
  await closeWebSocket(ws);
  const tokens = [cdpToken];
  if (b.browser_live_view_url) {
    const page = await fetch(b.browser_live_view_url);
    assert.equal(page.status, 200);
    await page.arrayBuffer();
    tokens.push(new URL(b.browser_live_view_url).pathname.split('/').find((s) => s.startsWith('eyJ')));
  }
  // A wrong token in a path is not logged either.
  await fetch(`${server.baseURL}/browser/live/${cdpToken}x/status`).then((r) => r.arrayBuffer());
  await new Promise((r) => setTimeout(r, 500)); // the access log line follows the answer
  const log = server.output();
  for (const t of tokens.filter(Boolean)) assert.ok(!log.includes(t), `the log holds a token: ${t.slice(0, 16)}…`);
  assert.ok(!/eyJ[\w-]+\.[\w-]+\.[\w-]+/.test(log), 'the log holds something JWT-shaped');
});

// Last: the attack leaves tenant A's browser without its agent.
test("a fake agent's 421 with an owner_url never receives the caller's request or key", async (t) => {
  const evil = await recorder(); // where the fake agent says the browser lives
  const signal = await recorder(true); // how the fake agent reports from the sandbox
  const script = `
    const net = require('net'), fs = require('fs'), http = require('http');
    const report = (m) => { const r = http.request({ host: '127.0.0.1', port: ${signal.port}, method: 'POST', path: '/' }, (s) => s.resume()); r.on('error', () => {}); r.end(m); };
    const sock = '/run/hangar/agent.sock';
    try {
      fs.renameSync(sock, sock + '.real');
      const body = JSON.stringify({ code: 'wrong_node', message: 'moved', details: [
        { code: 'owner_node', message: 'evil' }, { code: 'owner_url', message: 'http://127.0.0.1:${evil.port}' } ] });
      net.createServer((c) => {
        let head = '', done = false;
        c.on('error', () => {});
        c.on('data', (d) => {
          head += d;
          if (done || !head.includes('\\r\\n\\r\\n')) return;
          done = true;
          c.end('HTTP/1.1 421 Misdirected Request\\r\\nContent-Type: application/json\\r\\nContent-Length: ' +
                Buffer.byteLength(body) + '\\r\\nConnection: close\\r\\n\\r\\n' + body);
        });
      }).listen(sock, () => { try { fs.chmodSync(sock, 0o777); } catch {} report('armed'); });
    } catch (e) { report('refused: ' + e.message); }
    setTimeout(() => process.exit(0), 120000);
  `;
  try {
    await clientA.browsers.process.spawn(browserA.session_id, { command: 'node', args: ['-e', script] });
    const outcome = await waitFor(() => signal.seen[0]?.body, { timeoutMs: 20_000, what: 'the fake agent to report' });
    const victims = [
      as(keyA, `/browsers/${browserA.session_id}/fs/file_info?path=/tmp`),
      as(keyA, `/browsers/${browserA.session_id}/process/exec`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ command: 'true' }),
      }),
    ];
    for (const res of await Promise.all(victims)) {
      const text = await res.text();
      assert.ok(!text.includes('leaked'), `the client got the listener's answer: ${text}`);
      if (outcome === 'armed') assert.ok(res.status >= 500, `HTTP ${res.status}: ${text}`);
    }
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(evil.seen.length, 0, `the fake owner got: ${JSON.stringify(evil.seen.map((s) => s.headers))}`);
    assert.ok(!JSON.stringify(signal.seen).includes(keyA), 'the key reached the sandbox');
    if (outcome !== 'armed') t.diagnostic(`the sandbox could not replace the agent socket: ${outcome}`);
  } finally {
    await evil.close();
    await signal.close();
  }
});
