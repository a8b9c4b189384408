// curl through the browser with the official SDK: client.browsers.curl (which the SDK sends to
// the session's base_url with the jwt of cdp_ws_url, as it does against Kernel) and
// client.browsers.fetch (base_url/curl/raw). A local HTTP server sees what the browser sent: the
// cookie a page set, the browser's User-Agent, the caller's headers and body; a Set-Cookie in a
// curl answer lands in the browser's jar; multi-valued headers, base64 bodies, redirects, a
// timeout, bad input, and the base_url routes' jwt checks.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import { BadRequestError, NotFoundError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';

import { listenAllowed, rejectsWith, startServer, waitFor } from './lib/server.mjs';

let server;
let client;
let target;
let origin;
const seen = [];

before(async () => {
  server = await startServer();
  client = server.client;
  target = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const url = new URL(req.url, 'http://x');
      seen.push({ method: req.method, path: url.pathname, headers: req.headers, body });
      switch (url.pathname) {
        case '/page':
          res.writeHead(200, { 'content-type': 'text/html' });
          return res.end('<!doctype html><script>document.cookie = "page_cookie=from-page; path=/";</script>');
        case '/echo':
          res.writeHead(200, { 'content-type': 'application/json', 'x-echo': 'yes' });
          return res.end(JSON.stringify({ method: req.method, headers: req.headers, body }));
        case '/two-cookies':
          res.writeHead(201, [
            ['Set-Cookie', 'first=1; Path=/'],
            ['Set-Cookie', 'second=2; Path=/'],
            ['Content-Type', 'text/plain'],
          ]);
          return res.end('two');
        case '/binary':
          res.writeHead(200, { 'content-type': 'application/octet-stream' });
          return res.end(Buffer.from([0, 1, 2, 254, 255, 128, 10]));
        case '/redirect':
          res.writeHead(302, { location: '/echo' });
          return res.end();
        case '/slow':
          return setTimeout(() => res.end('late'), 5000);
        case '/missing':
          res.writeHead(404, { 'content-type': 'text/plain' });
          return res.end('no such thing');
        default:
          res.writeHead(500);
          return res.end();
      }
    });
  });
  origin = `http://127.0.0.1:${await listenAllowed(target)}`;
});

after(async () => {
  await server?.stop();
  await new Promise((r) => target?.close(r));
});

describe('curl through the browser', () => {
  let session;
  let cdp;
  let page;

  before(async () => {
    session = await client.browsers.create({ headless: true });
    cdp = await chromium.connectOverCDP(session.cdp_ws_url, { timeout: 30_000 });
    page = cdp.contexts()[0].pages()[0];
    await page.goto(`${origin}/page`);
  });

  after(async () => {
    await cdp?.close().catch(() => {});
    if (session) await client.browsers.deleteByID(session.session_id).catch(() => {});
  });

  test('browser objects carry base_url', () => {
    assert.equal(session.base_url, `${server.baseURL}/browser/vm/${session.session_id}`);
  });

  test("the request carries the browser's cookies and User-Agent, and the caller's headers", async () => {
    const res = await client.browsers.curl(session.session_id, { url: `${origin}/echo` });
    assert.equal(res.status, 200);
    assert.deepEqual(res.headers['X-Echo'], ['yes']);
    assert.ok(res.duration_ms > 0);
    const echoed = JSON.parse(res.body);
    assert.equal(echoed.method, 'GET');
    assert.match(echoed.headers.cookie ?? '', /page_cookie=from-page/);
    // The SDK sent it to base_url with the jwt, as it would to Kernel's VM. (The access log line
    // follows the answer, which the relay streams out before the request ends on the server.)
    const logged = new RegExp(`POST /browser/vm/${session.session_id}/curl 200`);
    await waitFor(() => logged.test(server.output()), { timeoutMs: 5_000, what: 'the access log line' });
    const browserUA = await page.evaluate(() => navigator.userAgent);
    assert.equal(echoed.headers['user-agent'], browserUA);

    const post = await client.browsers.curl(session.session_id, {
      url: `${origin}/echo`,
      method: 'POST',
      headers: { 'X-Custom': 'abc', 'Content-Type': 'application/json', 'User-Agent': 'my-agent/1.0' },
      body: '{"hello":"world"}',
    });
    const p = JSON.parse(post.body);
    assert.equal(p.method, 'POST');
    assert.equal(p.body, '{"hello":"world"}');
    assert.equal(p.headers['x-custom'], 'abc');
    assert.equal(p.headers['content-type'], 'application/json');
    assert.equal(p.headers['user-agent'], 'my-agent/1.0');
  });

  test('Set-Cookie from a curl answer lands in the browser; repeated headers stay apart', async () => {
    const res = await client.browsers.curl(session.session_id, { url: `${origin}/two-cookies` });
    assert.equal(res.status, 201);
    assert.equal(res.body, 'two');
    assert.deepEqual(res.headers['Set-Cookie'], ['first=1; Path=/', 'second=2; Path=/']);
    const cookies = await cdp.contexts()[0].cookies(origin);
    const names = cookies.map((c) => c.name);
    assert.ok(names.includes('first') && names.includes('second'), `cookies: ${names}`);
  });

  test('base64 bodies, redirects, HEAD and error statuses', async () => {
    const bin = await client.browsers.curl(session.session_id, { url: `${origin}/binary`, response_encoding: 'base64' });
    assert.deepEqual([...Buffer.from(bin.body, 'base64')], [0, 1, 2, 254, 255, 128, 10]);
    const redirected = await client.browsers.curl(session.session_id, { url: `${origin}/redirect` });
    assert.equal(redirected.status, 200);
    assert.equal(JSON.parse(redirected.body).method, 'GET');
    const head = await client.browsers.curl(session.session_id, { url: `${origin}/echo`, method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(head.body, '');
    const missing = await client.browsers.curl(session.session_id, { url: `${origin}/missing` });
    assert.equal(missing.status, 404);
    assert.equal(missing.body, 'no such thing');
  });

  test('a slow target runs into timeout_ms; an unreachable one is a clear error', async () => {
    const t0 = Date.now();
    const slow = await client.browsers.curl(session.session_id, { url: `${origin}/slow`, timeout_ms: 800 }).then(
      () => null,
      (e) => e,
    );
    assert.equal(slow?.status, 504, String(slow));
    assert.ok(Date.now() - t0 < 4000, 'no retries of a timeout');
    const closed = await client.browsers.curl(session.session_id, { url: 'http://127.0.0.1:9/' }).then(
      () => null,
      (e) => e,
    );
    assert.equal(closed?.status, 502);
    assert.match(closed.error.message, /ConnectionRefused|Failed|refused/i);
  });

  test('bad input is a 400 naming the field', async () => {
    const cases = [
      [{ url: 'file:///etc/passwd' }, 'url'],
      [{ url: 'ftp://example.com/' }, 'url'],
      [{ url: `${origin}/echo`, method: 'BREW' }, 'method'],
      [{ url: `${origin}/echo`, response_encoding: 'hex' }, 'response_encoding'],
      [{ url: `${origin}/echo`, timeout_ms: 0 }, 'timeout_ms'],
      [{ url: `${origin}/echo`, body: 'x' }, 'body'],
    ];
    for (const [body, field] of cases) {
      const err = await rejectsWith(client.browsers.curl(session.session_id, body), BadRequestError, 'bad_request');
      assert.match(err.error.details[0].message, new RegExp(`^${field}`), JSON.stringify(err.error));
    }
  });

  test('browsers.fetch returns the raw answer through the browser', async () => {
    const res = await client.browsers.fetch(session.session_id, `${origin}/echo`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', 'x-raw': '1' },
      body: 'raw body',
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-echo'), 'yes');
    const echoed = await res.json();
    assert.equal(echoed.body, 'raw body');
    assert.equal(echoed.headers['x-raw'], '1');
    assert.match(echoed.headers.cookie ?? '', /page_cookie=from-page/);
    assert.notEqual(echoed.headers['user-agent'], undefined);
    assert.doesNotMatch(echoed.headers['user-agent'], /Kernel|Stainless/i, 'the browser, not the SDK, is the client');
    assert.equal(echoed.headers.authorization, undefined);
  });

  test('the base_url routes take the jwt of cdp_ws_url, and nothing else', async () => {
    const jwt = new URL(session.cdp_ws_url).searchParams.get('jwt');
    const call = (query, headers = {}) =>
      fetch(`${session.base_url}/curl${query}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ url: `${origin}/echo` }),
      });
    const ok = await call(`?jwt=${jwt}`);
    assert.equal(ok.status, 200);
    assert.equal((await ok.json()).status, 200);
    assert.equal((await call('')).status, 401);
    assert.equal((await call('', { authorization: `Bearer ${server.apiKey}` })).status, 401, 'the API key is not a jwt');

    const other = await client.browsers.create({ headless: true });
    try {
      const otherJwt = new URL(other.cdp_ws_url).searchParams.get('jwt');
      assert.equal((await call(`?jwt=${otherJwt}`)).status, 401, "another session's jwt");
    } finally {
      await client.browsers.deleteByID(other.session_id);
    }
    // The jwt is not passed into the sandbox.
    const before = seen.length;
    const raw = await fetch(`${session.base_url}/curl/raw?url=${encodeURIComponent(`${origin}/echo`)}&jwt=${jwt}`);
    assert.equal(raw.status, 200);
    assert.equal(seen.length, before + 1);
    // The telemetry stream is served there too (plugins/telemetry); only the right jwt opens it.
    const sse = { headers: { accept: 'text/event-stream' } }; // as the SDK asks for it
    const telemetry = await fetch(`${session.base_url}/telemetry/stream?jwt=${jwt}`, sse);
    assert.equal(telemetry.status, 200);
    assert.match(telemetry.headers.get('content-type'), /text\/event-stream/);
    await telemetry.body.cancel();
    assert.equal((await fetch(`${session.base_url}/telemetry/stream`, sse)).status, 401);
  });
});

describe('curl and the session lifecycle', () => {
  test('kept tabs: other origins, requests at once, a timeout, a Chromium restart; never seen by the session', async () => {
    const s = await client.browsers.create({ headless: true });
    try {
      const other = origin.replace('127.0.0.1', 'localhost'); // another origin, the same server
      const echo = async (base, path = '/echo') => {
        const res = await client.browsers.curl(s.session_id, { url: `${base}${path}` });
        assert.equal(res.status, 200, `${base}${path}`);
        return JSON.parse(res.body);
      };
      assert.equal((await echo(origin)).method, 'GET');
      assert.equal((await echo(other)).headers.host, other.slice('http://'.length));
      assert.equal((await echo(origin)).headers.host, origin.slice('http://'.length));

      const before = seen.length;
      const many = await Promise.all(
        Array.from({ length: 6 }, (_, i) =>
          client.browsers.curl(s.session_id, { url: `${i % 2 ? origin : other}/echo`, method: 'POST', body: `n${i}` }),
        ),
      );
      assert.deepEqual(
        many.map((r) => JSON.parse(r.body).body),
        ['n0', 'n1', 'n2', 'n3', 'n4', 'n5'],
      );
      assert.equal(seen.length, before + 6, 'each request sent once');

      const slow = await client.browsers.curl(s.session_id, { url: `${origin}/slow`, timeout_ms: 300 }).catch((e) => e);
      assert.equal(slow?.status, 504);
      await echo(origin);

      const cdp = await chromium.connectOverCDP(s.cdp_ws_url, { timeout: 30_000 });
      try {
        const pages = cdp.contexts().flatMap((c) => c.pages());
        assert.deepEqual(
          pages.map((p) => p.url()),
          ['about:blank'],
          "curl's tabs are hidden from the session's own CDP clients",
        );
      } finally {
        await cdp.close();
      }

      // A restart replaces Chromium: tabs of the old one are not used.
      await client.browsers.update(s.session_id, { viewport: { width: 1024, height: 768 } });
      assert.equal((await echo(origin)).method, 'GET');
      assert.equal((await echo(other)).method, 'GET');
    } finally {
      await client.browsers.deleteByID(s.session_id).catch(() => {});
    }
  });

  test('a headful browser curls too; an ended session is 404', async () => {
    const s = await client.browsers.create({ headless: false });
    const res = await client.browsers.curl(s.session_id, { url: `${origin}/echo` });
    assert.equal(res.status, 200);
    const jwt = new URL(s.cdp_ws_url).searchParams.get('jwt');
    await client.browsers.deleteByID(s.session_id);
    await rejectsWith(client.browsers.curl(s.session_id, { url: `${origin}/echo` }), NotFoundError, 'not_found');
    const direct = await fetch(`${s.base_url}/curl?jwt=${jwt}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ url: `${origin}/echo` }),
    });
    assert.equal(direct.status, 404);
  });
});
