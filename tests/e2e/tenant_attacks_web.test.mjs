// Issue 40, "tenant boundaries that hold", the web side: attacks a tenant can make with a
// project-scoped key (and, for the org-level credential providers, an org key) against the pages,
// the server-side fetches, managed auth's 1Password logins, the per-project feature switches and
// live-view links. Each one failed on the server before the fix.
//
// One server on a data dir of the test: a first run makes the projects and keys, the second runs
// with a configuration that switches proxies off for project "alpha" by name, a third checks the
// switch still holds after a restart.
import assert from 'node:assert/strict';
import { cpSync, chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import Kernel, { BadRequestError, PermissionDeniedError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';

import { startConnectDouble } from './lib/connect-double.mjs';
import { chromiumBaseArgs, chromiumPath, rejectsWith, repoRoot, startServer } from './lib/server.mjs';

const scratch = mkdtempSync(join(tmpdir(), 'hangar-attacks-web-'));
const dataDir = join(scratch, 'data');
const apiKey = 'sk_test_attacks_web_' + Date.now();
let server;
let keys; // project name → its project-scoped key
let projects; // project name → id
let browser; // Playwright's own Chromium, the victim's browser

const scoped = (name) => new Kernel({ apiKey: keys[name], baseURL: server.baseURL, maxRetries: 0, timeout: 120_000 });

/** A loopback listener no configuration allows (an ephemeral port): counts the connections it gets. */
async function loopbackListener() {
  let connections = 0;
  const srv = net.createServer((s) => {
    connections++;
    s.destroy();
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return { port: srv.address().port, connections: () => connections, close: () => new Promise((r) => srv.close(r)) };
}

async function start(env = {}) {
  return startServer({ dataDir, apiKey, env });
}

before(async () => {
  const first = await start();
  try {
    keys = {};
    projects = {};
    for (const name of ['alpha', 'beta']) {
      projects[name] = await first.admin('project', 'create', name);
      keys[name] = await first.admin('key', 'create', '--project', projects[name]);
    }
  } finally {
    await first.stop();
  }
  // The shipped configuration, proxies switched off for "alpha" by the name it had then.
  const conf = join(scratch, 'etc');
  cpSync(join(repoRoot, 'etc'), conf, { recursive: true });
  const ini = join(conf, 'hangar.ini');
  writeFileSync(ini, readFileSync(ini, 'utf8') + '\n[project.alpha]\nproxies = off\n');
  for (const d of [scratch, conf, join(conf, 'plugins.d')]) chmodSync(d, 0o755);
  server = await start({ HANGAR_CONFIG: ini });
  browser = await chromium.launch({ executablePath: chromiumPath, args: chromiumBaseArgs });
});

after(async () => {
  await browser?.close();
  await server?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

describe('pages: strict headers, redirects only to allowed origins', () => {
  test('hosted login page with error_url=javascript:… runs no script; the page itself runs under a strict CSP', async () => {
    const alpha = scoped('alpha');
    const c = await alpha.auth.connections.create({ domain: 'example.com', profile_name: 'xss' });
    const hosted = `${server.baseURL}/auth/connections/${c.id}/hosted`;

    const page = await browser.newPage();
    try {
      const marker = 'XSS-MARKER';
      // The page appends ?code=…&message=… to error_url: a trailing // keeps that out of the script.
      const evil = `${hosted}?error_url=${encodeURIComponent(`javascript:void(document.title='${marker}')//`)}`;
      const res = await page.goto(evil);
      await page.waitForTimeout(1000);
      assert.notEqual(await page.title(), marker, 'the javascript: error_url ran');
      assert.equal(res.status(), 400, 'a javascript: redirect target is refused');

      for (const target of ['https://evil.example/x', 'data:text/html,hi', '//evil.example/', 'http://user@evil.example/']) {
        const r = await fetch(`${hosted}?error_url=${encodeURIComponent(target)}`);
        assert.equal(r.status, 400, `${target} refused`);
        await r.arrayBuffer();
      }

      // Same origin: the page loads under the strict CSP, and its script still works (no
      // handoff code → it says so and redirects to error_url with the code).
      const back = `${server.baseURL}/auth/connections/${c.id}/landing`;
      const ok = await fetch(`${hosted}?error_url=${encodeURIComponent(back)}`);
      await ok.text();
      assert.equal(ok.status, 200);
      const csp = ok.headers.get('content-security-policy') || '';
      assert.match(csp, /default-src 'none'/);
      assert.match(csp, /script-src 'nonce-[^']+'/);
      assert.doesNotMatch(csp, /unsafe-inline/);
      assert.match(csp, /frame-ancestors 'none'/);
      assert.match(csp, /base-uri 'none'/);
      assert.equal(ok.headers.get('x-content-type-options'), 'nosniff');
      assert.equal(ok.headers.get('referrer-policy'), 'no-referrer');

      await page.goto(`${hosted}?error_url=${encodeURIComponent(back)}`);
      await page.waitForURL((u) => u.pathname.endsWith('/landing'), { timeout: 10_000 });
      assert.equal(new URL(page.url()).searchParams.get('code'), 'missing_handoff_code');
    } finally {
      await page.close();
    }
  });

  test('the dashboard answers with the strict headers too', async () => {
    const r = await fetch(`${server.baseURL}/dashboard`);
    await r.text();
    assert.match(r.headers.get('content-security-policy') || '', /default-src 'none'.*base-uri 'none'/);
    assert.equal(r.headers.get('x-content-type-options'), 'nosniff');
  });
});

describe('server-side fetches do not reach the host’s loopback', () => {
  test('proxy check to a loopback listener: refused, the listener sees no connection', async () => {
    const l = await loopbackListener();
    try {
      const beta = scoped('beta');
      const p = await beta.proxies.create({ type: 'custom', protocol: 'http', config: { host: '127.0.0.1', port: l.port } });
      await rejectsWith(beta.proxies.check(p.id), BadRequestError, 'bad_request');
      const viaName = await beta.proxies.create({ type: 'custom', protocol: 'http', config: { host: 'localhost', port: l.port } });
      await rejectsWith(beta.proxies.check(viaName.id), BadRequestError, 'bad_request');
      const mapped = await beta.proxies.create({ type: 'custom', protocol: 'http', config: { host: '::ffff:127.0.0.1', port: l.port } });
      await rejectsWith(beta.proxies.check(mapped.id), BadRequestError, 'bad_request');
      assert.equal(l.connections(), 0);
    } finally {
      await l.close();
    }
  });

  test('credential provider with a loopback Connect URL: refused, the listener sees no connection', async () => {
    const l = await loopbackListener();
    try {
      // Providers are org-level: the org's own key (a tenant of its own), not a project key.
      const org = server.newClient({ maxRetries: 0 });
      const p = await org.credentialProviders.create({ name: 'loopback', provider_type: 'onepassword', token: 't', url: `http://127.0.0.1:${l.port}` });
      const tested = await org.credentialProviders.test(p.id);
      assert.equal(tested.success, false);
      assert.match(tested.error, /loopback/);
      assert.equal(l.connections(), 0);
      await org.credentialProviders.delete(p.id);
    } finally {
      await l.close();
    }
  });
});

describe('managed auth with an org 1Password login', () => {
  test('a login item for another domain is refused for a connection', async () => {
    // Listens on a port the tests' servers allow (the configuration's fetch_allow).
    const connect = await startConnectDouble({
      token: 'tok',
      vaults: [{
        id: 'v1', name: 'Shared',
        items: [{
          id: 'bank', title: 'Bank', category: 'LOGIN', urls: [{ href: 'https://bank.example/login', primary: true }],
          fields: [
            { id: 'username', type: 'STRING', purpose: 'USERNAME', label: 'username', value: 'ceo@org' },
            { id: 'password', type: 'CONCEALED', purpose: 'PASSWORD', label: 'password', value: 'org-secret' },
          ],
        }],
      }],
    });
    try {
      const org = server.newClient({ maxRetries: 0 });
      const provider = await org.credentialProviders.create({ name: 'org-1p', provider_type: 'onepassword', token: 'tok', url: connect.url });
      const alpha = scoped('alpha');
      const err = await rejectsWith(
        alpha.auth.connections.create({ domain: 'attacker.example', profile_name: 'steal', credential: { provider: provider.id, path: 'Shared/Bank' } }),
        BadRequestError);
      assert.match(err.message, /attacker\.example/);
      const plain = await alpha.auth.connections.create({ domain: 'attacker.example', profile_name: 'plain' });
      await rejectsWith(alpha.auth.connections.update(plain.id, { credential: { provider: provider.id, path: 'Shared/Bank' } }), BadRequestError);
      // The item's own domain is fine.
      await alpha.auth.connections.create({ domain: 'bank.example', profile_name: 'bank', credential: { provider: provider.id, path: 'Shared/Bank' } });
      await org.credentialProviders.delete(provider.id);
    } finally {
      await connect.close();
    }
  });
});

describe('feature switches by project', () => {
  test('a project renamed away from [project.<old name>] still has the feature off, also after a restart', async () => {
    const alpha = scoped('alpha');
    await rejectsWith(alpha.proxies.list(), PermissionDeniedError, 'forbidden');
    assert.equal((await alpha.projects.update(projects.alpha, { name: 'alpha-renamed' })).name, 'alpha-renamed');
    await rejectsWith(alpha.proxies.list(), PermissionDeniedError, 'forbidden');
    // beta is untouched by alpha's switch
    await scoped('beta').proxies.list();

    await server.stop();
    server = await start({ HANGAR_CONFIG: join(scratch, 'etc', 'hangar.ini') });
    await rejectsWith(scoped('alpha').proxies.list(), PermissionDeniedError, 'forbidden');
    // A project that takes the old name now is not the one the operator meant.
    await scoped('beta').projects.update(projects.beta, { name: 'alpha' });
    await scoped('beta').proxies.list();
  });
});

describe('live view', () => {
  test('a read-only link is read-only whatever its query says', async () => {
    const beta = scoped('beta');
    const b = await beta.browsers.create({ headless: true });
    try {
      const url = b.browser_live_view_url;
      assert.ok(url);
      const r = await fetch(`${url}?readOnly=true`, { redirect: 'manual' });
      await r.arrayBuffer();
      assert.equal(r.status, 302, 'asking for a read-only view hands out a read-only link');
      const ro = new URL(r.headers.get('location'), url);
      const roBase = `${ro.origin}${ro.pathname}`;
      assert.notEqual(roBase, url, 'another token');
      // The query dropped: paste (input) is still refused, as the token says.
      const paste = await fetch(`${roBase}/clipboard`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text: 'typed' }) });
      assert.equal(paste.status, 403, await paste.text());
      const read = await fetch(`${roBase}/clipboard?readOnly=false`);
      await read.arrayBuffer();
      assert.equal(read.status, 403);
      // The page of a read-only link shows read-only (it redirects to say so).
      const plain = await fetch(roBase, { redirect: 'manual' });
      await plain.arrayBuffer();
      assert.equal(plain.status, 302);
      assert.match(plain.headers.get('location'), /readOnly=true/);
    } finally {
      await beta.browsers.deleteByID(b.session_id);
    }
  });
});
