// Request signing (Web Bot Auth, plugin `proxies`) and a proxy's CA bundle in the browser's own
// trust store, through the official SDK and Playwright against real servers started here:
// tinyproxy (the proxy), stunnel4 terminating HTTPS with a certificate of a test CA (the site a
// TLS-intercepting proxy would present), and a plain origin behind both that records every
// request's headers. The signatures are checked by independent verifiers from npm against the
// key the server publishes in its directory, each on the Signature-Agent form it speaks:
// Cloudflare's `web-bot-auth` (what sites checking Kernel's browsers run) on the default form,
// `http-message-sig` (RFC 9421) on the draft-02 dictionary form an operator can choose; the keyid
// by `jsonwebkey-thumbprint` (RFC 7638). None of Hangar's code judges Hangar's headers.
// Also: a pool whose browsers sign; a signing browser that starts cold past ready warm spares
// (they lack the signer extension), and with sign_websockets = false one served from a warm spare
// with a proxy (a live swap at hand-over); idle browsers that make no request of their own.
// At most three browsers run at once (the spares part: one spare per kind, and a cold one).
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { webcrypto as nodeCrypto } from 'node:crypto';
import http from 'node:http';

import { chromium } from 'playwright-core';
import { component, verifySignature, webcrypto } from 'http-message-sig';
import { jwkThumbprint } from 'jsonwebkey-thumbprint';
import { verify as webBotAuthVerify } from 'web-bot-auth';
import { verifierFromJWK } from 'web-bot-auth/crypto';

import { listenAllowed, readyInstances, startServer, repoRoot, waitFor } from './lib/server.mjs';
import { startOrigin, startTinyproxy, startStunnel, testCa } from './lib/proxy-servers.mjs';

const DIRECTORY = '/.well-known/http-message-signatures-directory';

async function fetchDirectory(baseURL) {
  const res = await fetch(baseURL + DIRECTORY); // no API key: the directory is public
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /^application\/http-message-signatures-directory\+json/);
  return res.json();
}

const keyOf = (directory, keyid) => {
  const jwk = directory.keys.find((k) => k.kid === keyid);
  assert.ok(jwk, `the directory lists keyid ${keyid}`);
  return jwk;
};

// The default form, as a site checking Kernel's browsers verifies it: Cloudflare's `web-bot-auth`
// verify() on the recorded request, with the directory's key for its keyid. Returns the
// verified signature's parameters.
async function verifyHit(hit, directory, scheme = 'http') {
  const headers = new Headers();
  for (const [name, value] of Object.entries(hit.headers)) headers.append(name, String(value));
  const request = new Request(`${scheme}://${hit.host}${hit.url}`, { headers });
  try {
    return await webBotAuthVerify(request, async (data, signature, params) => {
      await (await verifierFromJWK(keyOf(directory, params.keyid)))(data, signature, params);
      return params;
    });
  } catch (e) {
    throw new Error(`${hit.url}: ${e.message}`);
  }
}

// What a request signed as Kernel's extension signs it carries: the directory's key, tag
// web-bot-auth, an hour's validity, and Signature-Agent as an sf-string naming the directory's
// origin, covered as a whole, the parameters in that signer's order.
function assertKernelForm(hit, params, kid, baseURL) {
  assert.equal(params.keyid, kid);
  assert.equal(params.tag, 'web-bot-auth');
  assert.equal(params.expires.getTime() - params.created.getTime(), 3_600_000);
  assert.equal(hit.headers['signature-agent'], `"${baseURL}"`);
  assert.match(
    hit.headers['signature-input'],
    /^sig1=\("@authority" "signature-agent"\);created=\d+;keyid="[^"]+";alg="ed25519";expires=\d+;nonce="[^"]+";tag="web-bot-auth"$/,
  );
}

// By the RFC 9421 verifier, covering Signature-Agent as `agentComponent`: the dictionary member
// of draft-02 (`signature_agent_form = dictionary`) by default.
async function verifyRfc9421Hit(hit, directory, agentComponent = component('signature-agent', { key: 'sig1' })) {
  const fields = [];
  for (const [name, value] of Object.entries(hit.headers)) fields.push({ name, value: String(value) });
  const message = { kind: 'request', method: 'GET', targetUri: `http://${hit.host}${hit.url}`, fields };
  const verified = await verifySignature(message, {
    policy: {
      algorithms: ['ed25519'],
      requiredComponents: ['@authority', agentComponent],
      requiredParameters: ['created', 'expires', 'keyid', 'tag'],
      maxAge: 3600,
      clockSkew: 5,
      validate: (sig) => sig.parameters.tag === 'web-bot-auth',
    },
    resolveVerifier: async (candidate) => {
      const jwk = keyOf(directory, candidate.parameters.keyid);
      const key = await nodeCrypto.subtle.importKey('jwk', { kty: jwk.kty, crv: jwk.crv, x: jwk.x }, { name: 'Ed25519' }, true, ['verify']);
      return webcrypto.verifier(key);
    },
  });
  return verified.parameters;
}

const thumbprint = (jwk) =>
  jwkThumbprint(jwk, (b) => nodeCrypto.subtle.digest('SHA-256', b), (b) => Buffer.from(b).toString('base64url'));

const isSigned = (hit) => 'signature' in hit.headers || 'signature-input' in hit.headers || 'signature-agent' in hit.headers;

// The first message a WebSocket the page opens to `url` receives, or 'error' / 'timeout'.
const wsAnswer = (page, url) =>
  page.evaluate(
    (u) =>
      new Promise((resolve) => {
        const ws = new WebSocket(u);
        ws.onmessage = (e) => resolve(e.data);
        ws.onerror = () => resolve('error');
        setTimeout(() => resolve('timeout'), 10_000);
      }),
    url,
  );

describe('request signing and proxy CA bundles', () => {
  let scratch, origin, tiny, site, ca, conf, server, kernel;

  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'hangar-signing-'));
    chmodSync(scratch, 0o755); // the agent reads the configuration as the sandbox user
    origin = await startOrigin();
    tiny = await startTinyproxy(scratch, { originPort: origin.port });
    ca = testCa(scratch);
    site = await startStunnel(scratch, { targetPort: origin.port, cert: ca.cert, key: ca.key });

    conf = join(scratch, 'etc');
    mkdirSync(join(conf, 'plugins.d'), { recursive: true });
    const etc = join(repoRoot, 'etc');
    copyFileSync(join(etc, 'hangar.ini'), join(conf, 'hangar.ini'));
    for (const f of readdirSync(join(etc, 'plugins.d'))) copyFileSync(join(etc, 'plugins.d', f), join(conf, 'plugins.d', f));
    // sign_websockets is on by default: signing browsers get the signer extension.
    writeFileSync(join(conf, 'plugins.d', 'proxies.ini'), '[proxies]\nenabled = true\n');
    for (const d of [conf, join(conf, 'plugins.d')]) chmodSync(d, 0o755);
    server = await startServer({ env: { HANGAR_CONFIG: join(conf, 'hangar.ini') } });
    kernel = server.client;
  });

  after(async () => {
    await server?.stop();
    for (const s of [tiny, site]) await s?.stop();
    await origin?.close();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  // A configuration like the suite's with other proxies.ini lines; answers its hangar.ini.
  const confWith = (name, proxiesLines) => {
    const dir = join(scratch, `etc-${name}`);
    mkdirSync(join(dir, 'plugins.d'), { recursive: true });
    copyFileSync(join(conf, 'hangar.ini'), join(dir, 'hangar.ini'));
    for (const f of readdirSync(join(conf, 'plugins.d'))) copyFileSync(join(conf, 'plugins.d', f), join(dir, 'plugins.d', f));
    writeFileSync(join(dir, 'plugins.d', 'proxies.ini'), `[proxies]\nenabled = true\n${proxiesLines}\n`);
    for (const d of [dir, join(dir, 'plugins.d')]) chmodSync(d, 0o755);
    return join(dir, 'hangar.ini');
  };

  test('the directory is public, typed, and empty before any project signs', async () => {
    const dir = await fetchDirectory(server.baseURL);
    assert.deepEqual(dir, { keys: [] });
  });

  test('a web-bot-auth browser signs every request, its start URL and HTTPS through a proxy with its CA bundle', async () => {
    const proxy = await kernel.proxies.create({
      type: 'custom', protocol: 'http', name: 'intercepting', config: { host: '127.0.0.1', port: tiny.port, ca_bundle: ca.ca },
    });
    const startPath = `/start-${Date.now()}`;
    const b = await kernel.browsers.create({
      headless: true,
      proxy_id: proxy.id,
      extensions: [{ name: 'web-bot-auth' }],
      start_url: `http://127.0.0.1:${origin.port}${startPath}`,
      timeout_seconds: 120,
    });
    const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
    try {
      const dir = await fetchDirectory(server.baseURL);
      assert.equal(dir.keys.length, 1, 'one key for the one project that signs');
      const jwk = dir.keys[0];
      assert.equal(jwk.kty, 'OKP');
      assert.equal(jwk.crv, 'Ed25519');
      assert.equal(jwk.kid, await thumbprint(jwk), 'kid is the RFC 7638 thumbprint');
      assert.ok(!('d' in jwk), 'no private part');

      // The start URL was held back until the signer ran: its request is signed too.
      const start = await waitFor(() => origin.hits.find((h) => h.url === startPath), { what: 'the start URL request' });
      const startParams = await verifyHit(start, dir);
      assert.equal(startParams.keyid, jwk.kid);

      const page = cdp.contexts()[0].pages()[0];
      await page.goto(`http://127.0.0.1:${origin.port}/plain?subs=2`);
      const hits = origin.hits.filter((h) => h.url.startsWith('/plain') || h.url.startsWith('/sub/'));
      assert.ok(hits.length >= 3, 'the page and its two images');
      // fetch() and XMLHttpRequest too.
      await page.evaluate(async () => {
        await fetch('/fetched');
        await new Promise((resolve, reject) => {
          const xhr = new XMLHttpRequest();
          xhr.open('GET', '/xhr');
          xhr.onload = resolve;
          xhr.onerror = reject;
          xhr.send();
        });
      });
      hits.push(...['/fetched', '/xhr'].map((url) => origin.hits.find((h) => h.url === url)));
      for (const hit of hits) {
        assertKernelForm(hit, await verifyHit(hit, dir), jwk.kid, server.baseURL);
      }
      // The RFC 9421 verifier reads this form too.
      assert.equal((await verifyRfc9421Hit(hits[0], dir, 'signature-agent')).keyid, jwk.kid);
      const n1 = hits[0].headers['signature-input'].match(/nonce="([^"]+)"/)?.[1];
      const n2 = hits[1].headers['signature-input'].match(/nonce="([^"]+)"/)?.[1];
      assert.ok(n1 && n2 && n1 !== n2, 'a fresh nonce per request');

      // HTTPS: the site's certificate is from the proxy's CA, trusted in this browser only;
      // the headers were set before Chromium encrypted the request.
      await page.goto(`https://127.0.0.1:${site.port}/secure`);
      assert.equal(await page.title(), 'origin 127.0.0.1/secure');
      const secure = origin.hits.find((h) => h.url === '/secure');
      assert.equal(secure.host, `127.0.0.1:${site.port}`);
      const params = await verifyHit(secure, dir, 'https');
      assert.equal(params.keyid, jwk.kid);

      // A signature does not verify for another authority (the verifier really checks).
      const moved = { ...secure, host: `127.0.0.1:${site.port + 1}` };
      await assert.rejects(verifyHit(moved, dir, 'https'), /invalid signature/i);
    } finally {
      await cdp.close().catch(() => {});
      await kernel.browsers.deleteByID(b.session_id);
    }
  });

  // Fetch interception never pauses a WebSocket handshake: Hangar's signer extension (installed
  // by policy, blocking webRequest) signs it with the key the agent hands it. Fails on a server
  // without it, where the upgrade requests carry no signature.
  test('a web-bot-auth browser signs WebSocket upgrade requests, ws:// and wss:// through a proxy with its CA bundle', async () => {
    const proxy = await kernel.proxies.create({
      type: 'custom', protocol: 'http', name: 'intercepting-ws', config: { host: '127.0.0.1', port: tiny.port, ca_bundle: ca.ca },
    });
    const b = await kernel.browsers.create({ headless: true, proxy_id: proxy.id, extensions: [{ name: 'web-bot-auth' }], timeout_seconds: 120 });
    const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
    try {
      const page = cdp.contexts()[0].pages()[0];
      await page.goto(`http://127.0.0.1:${origin.port}/ws-page`);
      const open = (url) => wsAnswer(page, url);
      assert.equal(await open(`ws://127.0.0.1:${origin.port}/ws-plain`), 'ok');
      assert.equal(await open(`wss://127.0.0.1:${site.port}/ws-secure`), 'ok');
      const dir = await fetchDirectory(server.baseURL);
      const plain = origin.hits.find((h) => h.upgrade && h.url === '/ws-plain');
      const secure = origin.hits.find((h) => h.upgrade && h.url === '/ws-secure');
      assert.ok(plain && secure, 'both upgrade requests reached the origin');
      assert.equal(secure.host, `127.0.0.1:${site.port}`);
      for (const [hit, scheme] of [[plain, 'http'], [secure, 'https']]) {
        assert.ok(isSigned(hit), `${hit.url} carries a signature`);
        assertKernelForm(hit, await verifyHit(hit, dir, scheme), dir.keys[0].kid, server.baseURL);
      }
      // The RFC 9421 verifier reads them too, and each covers its own socket's authority.
      assert.equal((await verifyRfc9421Hit(plain, dir, 'signature-agent')).keyid, dir.keys[0].kid);
      await assert.rejects(verifyHit({ ...secure, host: `127.0.0.1:${site.port + 1}` }, dir, 'https'), /invalid signature/i);

      // The tenant's CDP cannot reach the extension that holds the key: Chromium refuses
      // DevTools on extensions installed by policy.
      const browserSession = await cdp.newBrowserCDPSession();
      const { targetInfos } = await browserSession.send('Target.getTargets');
      const worker = targetInfos.find((t) => t.type === 'service_worker' && t.url.startsWith('chrome-extension://'));
      assert.ok(worker, 'the signer extension runs');
      await assert.rejects(browserSession.send('Target.attachToTarget', { targetId: worker.targetId, flatten: true }), /not allowed/i);
      const extId = new URL(worker.url).host;
      await assert.rejects(browserSession.send('Extensions.getStorageItems', { id: extId, storageArea: 'session' }));
      // Nor can it ask for the key again: the agent hands it over once per browser run.
      const asked = await page.evaluate(async () => {
        try {
          return (await fetch('http://signer.hangar.invalid/key?pk=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA')).status;
        } catch (e) {
          return String(e);
        }
      });
      assert.notEqual(asked, 200);
    } finally {
      await cdp.close().catch(() => {});
      await kernel.browsers.deleteByID(b.session_id);
    }
  });

  // A browser left alone sends nothing through its proxy: the proxy here records every request
  // and tunnel it is asked for. Chromium makes requests of its own even with
  // --disable-background-networking (the network time, the optimization guide's model manifest,
  // GAIA's ListAccounts; chromium_launch.cpp turns each off), on a fresh profile as much as on
  // one the signer extension's install run (without that flag, proxy going nowhere) has used.
  // So both a signing browser (extension installed) and a plain one are checked. Fails without
  // those flags: clients2.google.com/time, update.googleapis.com and accounts.google.com ×3-4
  // reach the recorder within seconds.
  test('an idle browser makes no request of its own, signing (signer extension installed) or not', async () => {
    const asked = [];
    const recorder = http.createServer((req, res) => {
      asked.push(`${req.method} ${req.url}`);
      res.writeHead(502).end();
    });
    recorder.on('connect', (req, socket) => {
      asked.push(`CONNECT ${req.url}`);
      socket.end('HTTP/1.1 502 Bad Gateway\r\n\r\n');
    });
    const port = await listenAllowed(recorder);
    const browsers = [];
    try {
      const proxy = await kernel.proxies.create({ type: 'custom', protocol: 'http', name: 'recorder', config: { host: '127.0.0.1', port } });
      browsers.push(await kernel.browsers.create({ headless: true, proxy_id: proxy.id, extensions: [{ name: 'web-bot-auth' }], timeout_seconds: 120 }));
      browsers.push(await kernel.browsers.create({ headless: true, proxy_id: proxy.id, timeout_seconds: 120 }));
      // The signing one really has the extension (its worker runs): the quiet is not for want of it.
      const cdp = await chromium.connectOverCDP(browsers[0].cdp_ws_url, { timeout: 30_000 });
      try {
        const { targetInfos } = await (await cdp.newBrowserCDPSession()).send('Target.getTargets');
        assert.ok(targetInfos.some((t) => t.type === 'service_worker' && t.url.startsWith('chrome-extension://')), 'the signer extension runs');
      } finally {
        await cdp.close().catch(() => {});
      }
      await new Promise((r) => setTimeout(r, 20_000));
      assert.deepEqual(asked, [], 'nothing went through the proxy');
    } finally {
      for (const b of browsers) await kernel.browsers.deleteByID(b.session_id);
      recorder.closeAllConnections?.();
      await new Promise((r) => recorder.close(r));
    }
  });

  test('signature_agent_form = dictionary: the draft-02 form, which the RFC 9421 verifier accepts and web-bot-auth 0.1.3 does not', async () => {
    const other = await startServer({ env: { HANGAR_CONFIG: confWith('dictionary', 'signature_agent_form = dictionary') } });
    try {
      const b = await other.client.browsers.create({ headless: true, extensions: [{ name: 'web-bot-auth' }] });
      const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      try {
        await cdp.contexts()[0].pages()[0].goto(`http://127.0.0.1:${origin.port}/dictionary?subs=1`);
        const dir = await fetchDirectory(other.baseURL);
        for (const url of ['/dictionary?subs=1', '/sub/0.gif?p=%2Fdictionary']) {
          const hit = origin.hits.find((h) => h.url === url);
          assert.ok(hit, url);
          assert.equal(hit.headers['signature-agent'], `sig1="${other.baseURL}"`);
          assert.match(hit.headers['signature-input'], /^sig1=\("@authority" "signature-agent";key="sig1"\);/);
          assert.equal((await verifyRfc9421Hit(hit, dir)).keyid, dir.keys[0].kid);
          await assert.rejects(verifyHit(hit, dir), /invalid signature/);
        }
      } finally {
        await cdp.close().catch(() => {});
        await other.client.browsers.deleteByID(b.session_id);
      }
    } finally {
      await other.stop();
    }
  });

  test('without the extension nothing is signed, and without the CA bundle the site is not trusted', async () => {
    const proxy = await kernel.proxies.create({ type: 'custom', protocol: 'http', config: { host: '127.0.0.1', port: tiny.port } });
    const b = await kernel.browsers.create({ headless: true, proxy_id: proxy.id, timeout_seconds: 120 });
    const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
    try {
      const page = cdp.contexts()[0].pages()[0];
      await page.goto(`http://127.0.0.1:${origin.port}/unsigned`);
      const hit = origin.hits.find((h) => h.url === '/unsigned');
      assert.ok(hit && !isSigned(hit), 'no signature headers');
      const failure = await page.goto(`https://127.0.0.1:${site.port}/untrusted`).then(() => null, (e) => e);
      assert.match(String(failure), /ERR_CERT_AUTHORITY_INVALID/);
    } finally {
      await cdp.close().catch(() => {});
      await kernel.browsers.deleteByID(b.session_id);
    }
  });

  test('a pool with the web-bot-auth extension: its browsers sign from their start URL on', async () => {
    const startPath = `/pool-start-${Date.now()}`;
    const pool = await kernel.browserPools.create({
      size: 1,
      headless: true,
      extensions: [{ name: 'web-bot-auth' }],
      start_url: `http://127.0.0.1:${origin.port}${startPath}`,
    });
    try {
      const b = await kernel.browserPools.acquire(pool.id, { acquire_timeout_seconds: 45 });
      assert.ok(b?.session_id, 'a pooled browser');
      const dir = await fetchDirectory(server.baseURL);
      const start = await waitFor(() => origin.hits.find((h) => h.url === startPath), { what: 'the pool start URL request' });
      await verifyHit(start, dir);
      const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      try {
        await cdp.contexts()[0].pages()[0].goto(`http://127.0.0.1:${origin.port}/pooled`);
        const params = await verifyHit(origin.hits.find((h) => h.url === '/pooled'), dir);
        assert.equal(params.keyid, dir.keys[0].kid, 'the same project key');
      } finally {
        await cdp.close().catch(() => {});
      }
      await kernel.browserPools.release(pool.id, { session_id: b.session_id, reuse: false });
    } finally {
      await kernel.browserPools.delete(pool.id, { force: true });
    }
  });

  // A spare was started without the signer extension (it does not know it will sign), so with
  // the extension on (the default) a signing browser never comes from one: it starts cold and
  // signs its WebSockets. Fails when a spare serves it (its WebSocket goes unsigned).
  test('with the signer extension a signing browser starts cold, not from a warm spare, and signs its WebSockets', async () => {
    const spares = await startServer({
      env: { HANGAR_CONFIG: join(conf, 'hangar.ini'), HANGAR_WARM_SPARES: '1', HANGAR_WARM_SPARES_MAX: '1' },
    });
    try {
      const instances = () => readyInstances(spares.dataDir);
      const ready = await waitFor(() => (instances().length === 2 ? instances() : null), { timeoutMs: 90_000, what: 'two warm spares' });
      await new Promise((r) => setTimeout(r, 1000)); // the filler files a started spare right after
      const b = await spares.client.browsers.create({ headless: true, extensions: [{ name: 'web-bot-auth' }] });
      try {
        assert.ok(!ready.includes(b.session_id), `session ${b.session_id} is not one of the spares ${ready}`);
        const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
        try {
          const page = cdp.contexts()[0].pages()[0];
          await page.goto(`http://127.0.0.1:${origin.port}/cold-ws-page`);
          const answer = await wsAnswer(page, `ws://127.0.0.1:${origin.port}/ws-cold`);
          assert.equal(answer, 'ok');
          const hit = origin.hits.find((h) => h.upgrade && h.url === '/ws-cold');
          assert.ok(hit && isSigned(hit), 'the upgrade request carries a signature');
          assert.equal((await verifyHit(hit, await fetchDirectory(spares.baseURL))).tag, 'web-bot-auth');
        } finally {
          await cdp.close().catch(() => {});
        }
      } finally {
        await spares.client.browsers.deleteByID(b.session_id);
      }
    } finally {
      await spares.stop();
    }
  });

  test('sign_websockets = false: a signing browser with a proxy is served from a warm spare, a live swap and signing at hand-over', async () => {
    const spares = await startServer({
      env: { HANGAR_CONFIG: confWith('no-ws', 'sign_websockets = false'), HANGAR_WARM_SPARES: '1', HANGAR_WARM_SPARES_MAX: '1' },
    });
    try {
      const instances = () => readyInstances(spares.dataDir);
      const ready = await waitFor(() => (instances().length === 2 ? instances() : null), { timeoutMs: 90_000, what: 'two warm spares' });
      await new Promise((r) => setTimeout(r, 1000)); // the filler files a started spare right after
      const proxy = await spares.client.proxies.create({ type: 'custom', protocol: 'http', config: { host: '127.0.0.1', port: tiny.port } });
      const b = await spares.client.browsers.create({ headless: true, proxy_id: proxy.id, extensions: [{ name: 'web-bot-auth' }] });
      try {
        assert.ok(ready.includes(b.session_id), `session ${b.session_id} is one of the spares ${ready}`);
        assert.equal(b.proxy_id, proxy.id);
        const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
        try {
          const page = cdp.contexts()[0].pages()[0];
          // Only tinyproxy resolves *.hangar.test: the page loading proves the swapped route.
          await page.goto(`http://spare.hangar.test:${origin.port}/from-spare`);
          assert.equal(await page.title(), 'origin spare.hangar.test/from-spare');
          const hit = origin.hits.find((h) => h.url === '/from-spare' || h.url.endsWith('/from-spare'));
          const params = await verifyHit({ ...hit, url: '/from-spare' }, await fetchDirectory(spares.baseURL));
          assert.equal(params.tag, 'web-bot-auth');
        } finally {
          await cdp.close().catch(() => {});
        }
      } finally {
        await spares.client.browsers.deleteByID(b.session_id);
      }
      // Stop only once the replacement spare is up: a server stopped while a spare is still
      // starting has left that instance's folder mounted (EBUSY on cleanup), a runtime matter.
      await waitFor(() => (instances().length === 2 && !instances().includes(b.session_id) ? true : null), {
        timeoutMs: 90_000,
        what: 'the replacement spare',
      });
    } finally {
      await spares.stop();
    }
  });
});
