// Proxies (plugin `proxies`) through the official SDK, against real proxy servers started here
// from Debian's packages (tests/e2e/lib/proxy-servers.mjs): tinyproxy with Basic auth, dante's
// sockd (SOCKS5) and stunnel4 (TLS to the proxy). Pages under *.hangar.test resolve nowhere but
// in tinyproxy (which hands them to the origin as its upstream), so a page that loads proves the
// proxy carried it. CRUD, paging, validation, managed types from proxies.ini, checks (good,
// wrong password, dead, hanging), encrypted at rest, browsers through HTTP, HTTPS-to-proxy and
// SOCKS5, bypass hosts, live swap under an open Playwright connection, delete while in use, a
// proxy dying mid-session, pools. At most one browser runs at a time.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

import Kernel, { BadRequestError, NotFoundError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';

import { startServer, rejectsWith, repoRoot } from './lib/server.mjs';
import { storeFilesAtRest } from './lib/pg.mjs';
import {
  allowedPort, startOrigin, startTinyproxy, startSocks, selfSignedCert, startStunnel, startBlackHole,
} from './lib/proxy-servers.mjs';

const execFileP = promisify(execFile);
const USER = 'hangar-user';
const PASSWORD = 'tp-' + 'Qx7w'.repeat(5);

describe('proxies', () => {
  let scratch, origin, tiny, socks, tls, hole, server, kernel, cert, deadPort;

  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'hangar-proxies-'));
    chmodSync(scratch, 0o755); // the agent reads the configuration as the sandbox user
    origin = await startOrigin('203.0.113.9');
    tiny = await startTinyproxy(scratch, { user: USER, password: PASSWORD, originPort: origin.port });
    socks = await startSocks(scratch);
    cert = selfSignedCert(scratch);
    tls = await startStunnel(scratch, { targetPort: tiny.port, cert: cert.cert, key: cert.key });
    hole = await startBlackHole();
    deadPort = await allowedPort();

    // The repository's configuration with pools for two managed types.
    const etc = join(repoRoot, 'etc');
    const conf = join(scratch, 'etc');
    mkdirSync(join(conf, 'plugins.d'), { recursive: true });
    copyFileSync(join(etc, 'hangar.ini'), join(conf, 'hangar.ini'));
    for (const f of readdirSync(join(etc, 'plugins.d'))) copyFileSync(join(etc, 'plugins.d', f), join(conf, 'plugins.d', f));
    const auth = `${USER}:${encodeURIComponent(PASSWORD)}`;
    writeFileSync(
      join(conf, 'plugins.d', 'proxies.ini'),
      [
        '[proxies]',
        'enabled = true',
        `datacenter = http://${auth}@127.0.0.1:${tiny.port} country=US, socks5://127.0.0.1:${socks.port} country=DE city=berlin`,
        `residential = socks5://127.0.0.1:${socks.port} country=DE city=berlin, socks5://127.0.0.1:${socks.port} country=US state=ca city=sanfrancisco`,
        `check_url = http://127.0.0.1:${origin.port}/ip`,
        'check_timeout_ms = 3000',
        '',
      ].join('\n'),
    );
    for (const d of [conf, join(conf, 'plugins.d')]) chmodSync(d, 0o755);
    server = await startServer({ env: { HANGAR_CONFIG: join(conf, 'hangar.ini') } });
    kernel = server.client;
  });

  after(async () => {
    await server?.stop();
    for (const s of [tiny, socks, tls]) await s?.stop();
    await hole?.close();
    await origin?.close();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  const custom = (over = {}) => ({
    type: 'custom',
    protocol: 'http',
    config: { host: '127.0.0.1', port: tiny.port, username: USER, password: PASSWORD },
    ...over,
  });

  describe('the resource', () => {
    test('create, retrieve, rename, list, delete: every field, the password never returned', async () => {
      const p = await kernel.proxies.create(custom({ name: ' office ', bypass_hosts: ['Example.com', '*.corp.test'] }));
      assert.match(p.id, /^[a-z0-9]{24}$/);
      assert.equal(p.type, 'custom');
      assert.equal(p.name, 'office');
      assert.equal(p.protocol, 'http');
      assert.deepEqual(p.bypass_hosts, ['example.com', '*.corp.test']);
      assert.deepEqual(p.config, { host: '127.0.0.1', port: tiny.port, username: USER, has_password: true, has_ca_bundle: false });
      assert.ok(!JSON.stringify(p).includes(PASSWORD));
      assert.equal(p.status, undefined, 'not checked yet');

      const got = await kernel.proxies.retrieve(p.id);
      assert.deepEqual(got, p);
      const renamed = await kernel.proxies.update(p.id, { name: 'office-2' });
      assert.equal(renamed.name, 'office-2');
      await rejectsWith(kernel.proxies.update(p.id, { name: '   ' }), BadRequestError);

      const def = await kernel.proxies.create({ type: 'custom', config: { host: 'proxy.example', port: 8443 } });
      assert.equal(def.protocol, 'https', 'protocol defaults to https');
      assert.equal(def.config.has_password, false);

      const listed = await kernel.proxies.list({ name: 'OFFICE-2' });
      assert.deepEqual(listed.getPaginatedItems().map((x) => x.id), [p.id]);
      const byHost = await kernel.proxies.list({ query: 'proxy.exam' });
      assert.deepEqual(byHost.getPaginatedItems().map((x) => x.id), [def.id]);

      await kernel.proxies.delete(p.id);
      await rejectsWith(kernel.proxies.retrieve(p.id), NotFoundError);
      await rejectsWith(kernel.proxies.delete(p.id), NotFoundError);
      const after = await kernel.proxies.list({ limit: 100 });
      assert.ok(!after.getPaginatedItems().some((x) => x.id === p.id), 'a deleted proxy is not listed');
      await kernel.proxies.delete(def.id);
    });

    test('list pages with offset and limit, newest first', async () => {
      const ids = [];
      for (let i = 0; i < 5; i++) ids.push((await kernel.proxies.create(custom({ name: `paged-${i}` }))).id);
      const first = await kernel.proxies.list({ query: 'paged-', limit: 2 });
      assert.deepEqual(first.getPaginatedItems().map((p) => p.name), ['paged-4', 'paged-3']);
      assert.ok(first.hasNextPage());
      const all = [];
      for await (const p of await kernel.proxies.list({ query: 'paged-', limit: 2 })) all.push(p.name);
      assert.deepEqual(all, ['paged-4', 'paged-3', 'paged-2', 'paged-1', 'paged-0']);
      for (const id of ids) await kernel.proxies.delete(id);
    });

    test('bad input: 400 naming the field, nothing created', async () => {
      const before = (await kernel.proxies.list({ limit: 100 })).getPaginatedItems().length;
      const cases = [
        [{ type: 'vpn' }, 'type'],
        [{ type: 'custom', config: { port: 80 } }, 'config.host'],
        [{ type: 'custom', config: { host: 'h.example' } }, 'config.port'],
        [{ type: 'custom', config: { host: 'h.example', port: 70000 } }, 'config.port'],
        [{ type: 'custom', config: { host: 'h.example', port: 80, password: 'abc' } }, 'config.password'],
        [{ type: 'custom', config: { host: 'h.example', port: 80 }, bypass_hosts: ['ok.example', '10.1.2.3'] }, 'bypass_hosts[1]'],
        [{ type: 'custom', config: { host: 'h.example', port: 80 }, bypass_hosts: ['a.example:443'] }, 'bypass_hosts[0]'],
        [{ type: 'custom', config: { host: 'h.example', port: 80 }, bypass_hosts: ['a.example/path'] }, 'bypass_hosts[0]'],
        [{ type: 'custom', config: { host: 'h.example', port: 80, ca_bundle: '-----BEGIN CERTIFICATE-----' + 'A'.repeat(70_000) } }, 'config.ca_bundle'],
        [{ type: 'custom', protocol: 'socks5', config: { host: 'h.example', port: 80 } }, 'protocol'],
        [{ type: 'residential', config: { city: 'berlin' } }, 'config.country'],
      ];
      for (const [body, field] of cases) {
        const err = await rejectsWith(kernel.proxies.create(body), BadRequestError);
        assert.ok(JSON.stringify(err.error).includes(field), `${JSON.stringify(body).slice(0, 80)} names ${field}: ${JSON.stringify(err.error)}`);
        assert.ok(!JSON.stringify(err.error).includes('A'.repeat(100)), 'the bundle is not echoed');
      }
      assert.equal((await kernel.proxies.list({ limit: 100 })).getPaginatedItems().length, before);
    });

    test('managed types map to the operator pools in proxies.ini', async () => {
      const dc = await kernel.proxies.create({ type: 'datacenter' });
      assert.deepEqual(dc.config, { country: 'US' });
      const de = await kernel.proxies.create({ type: 'residential', config: { country: 'DE', city: 'Berlin' } });
      assert.deepEqual(de.config, { country: 'DE', city: 'berlin' });

      const none = await rejectsWith(kernel.proxies.create({ type: 'isp' }), BadRequestError, 'proxy_type_unavailable');
      assert.match(none.error.message, /no isp upstreams/);
      const far = await rejectsWith(
        kernel.proxies.create({ type: 'residential', config: { country: 'DE', city: 'hamburg' } }),
        BadRequestError,
        'no_matching_upstream',
      );
      const suggestions = far.error.details.filter((d) => d.code === 'suggestion').map((d) => d.message);
      assert.deepEqual(suggestions, ['country=DE city=berlin', 'country=US state=ca city=sanfrancisco']);
      await kernel.proxies.delete(dc.id);
      await kernel.proxies.delete(de.id);
    });

    test('another project cannot see or use a proxy', async () => {
      const p = await kernel.proxies.create(custom({ name: 'mine' }));
      const proj = await server.admin('project', 'create', 'proxies-other');
      const other = new Kernel({ apiKey: server.apiKey, baseURL: server.baseURL, projectID: proj, maxRetries: 0 });
      await rejectsWith(other.proxies.retrieve(p.id), NotFoundError);
      await rejectsWith(other.proxies.check(p.id), NotFoundError);
      await rejectsWith(other.browsers.create({ headless: true, proxy_id: p.id }), NotFoundError);
      assert.equal((await other.proxies.list()).getPaginatedItems().length, 0);
      await kernel.proxies.delete(p.id);
    });

    test('at rest: the store (SQLite file and WAL, or the PostgreSQL database) holds no password and no CA bundle', async () => {
      const pw = 'at-rest-' + 'Kp3z'.repeat(6);
      await kernel.proxies.create({ ...custom({ name: 'at-rest-proxy' }), config: { host: '127.0.0.1', port: tiny.port, username: USER, password: pw, ca_bundle: cert.pem } });
      const files = await storeFilesAtRest(server); // on PostgreSQL (make test-postgres): its dump
      const found = async (needle) => {
        let hit = false;
        for (const f of files) {
          const r = await execFileP('grep', ['-c', '-a', '-F', needle, f]).then(() => 0, (e) => e.code);
          assert.ok(r === 0 || r === 1, `grep failed on ${f}`);
          hit ||= r === 0 || readFileSync(f).includes(Buffer.from(needle));
        }
        return hit;
      };
      assert.equal(await found('at-rest-proxy'), true, 'control: the name is stored in clear, so the search works');
      assert.equal(await found(pw), false, 'the password is sealed');
      const certLine = cert.pem.split('\n')[1];
      assert.equal(await found(certLine), false, 'the CA bundle is sealed');
    });
  });

  describe('check', () => {
    test('a good proxy: available, with the exit address the target saw', async () => {
      const p = await kernel.proxies.create(custom());
      const checked = await kernel.proxies.check(p.id);
      assert.equal(checked.status, 'available', JSON.stringify(checked));
      assert.equal(checked.ip_address, '203.0.113.9');
      assert.ok(Date.now() - Date.parse(checked.last_checked) < 30_000);
      const stored = await kernel.proxies.retrieve(p.id);
      assert.equal(stored.status, 'available');
      assert.equal(stored.ip_address, '203.0.113.9');
      assert.ok(origin.hits.some((h) => h.url === '/ip' && h.headers['user-agent'] === 'hangar-proxy-check'));
    });

    test('a given url is checked without touching the stored status', async () => {
      const p = await kernel.proxies.create(custom());
      const checked = await kernel.proxies.check(p.id, { url: `http://page.hangar.test:${origin.port}/only-via-proxy` });
      assert.equal(checked.status, 'available', JSON.stringify(checked));
      const stored = await kernel.proxies.retrieve(p.id);
      assert.equal(stored.status, undefined);
      assert.equal(stored.last_checked, undefined);
      await rejectsWith(kernel.proxies.check(p.id, { url: 'ftp://x/' }), BadRequestError);
    });

    test('HTTPS to the proxy (stunnel4) verified with the CA bundle, and SOCKS5', async () => {
      const viaTls = await kernel.proxies.create({ type: 'custom', protocol: 'https', config: { host: '127.0.0.1', port: tls.port, username: USER, password: PASSWORD, ca_bundle: cert.pem } });
      assert.equal((await kernel.proxies.check(viaTls.id)).status, 'available');
      const untrusted = await kernel.proxies.create({ type: 'custom', protocol: 'https', config: { host: '127.0.0.1', port: tls.port, username: USER, password: PASSWORD } });
      const bad = await kernel.proxies.check(untrusted.id);
      assert.equal(bad.status, 'unavailable');
      assert.match(bad.status_reason, /TLS/);
      const viaSocks = await kernel.proxies.create({ type: 'residential', config: { country: 'DE', city: 'berlin' } });
      assert.equal((await kernel.proxies.check(viaSocks.id)).status, 'available');
      assert.match(socks.log(), new RegExp(`127\\.0\\.0\\.1\\.${origin.port}`));
    });

    test('wrong password, dead and hanging proxies: unavailable with the reason, within the timeout', async () => {
      const wrong = await kernel.proxies.create(custom({ config: { host: '127.0.0.1', port: tiny.port, username: USER, password: 'not-the-password' } }));
      const w = await kernel.proxies.check(wrong.id);
      assert.equal(w.status, 'unavailable');
      assert.match(w.status_reason, /authentication failed/);
      assert.ok(!w.status_reason.includes('not-the-password'));

      const dead = await kernel.proxies.create(custom({ config: { host: '127.0.0.1', port: deadPort } }));
      const d = await kernel.proxies.check(dead.id);
      assert.equal(d.status, 'unavailable');
      assert.match(d.status_reason, /cannot connect/);

      const hanging = await kernel.proxies.create(custom({ config: { host: '127.0.0.1', port: hole.port } }));
      const t0 = Date.now();
      const h = await kernel.proxies.check(hanging.id);
      assert.equal(h.status, 'unavailable');
      assert.match(h.status_reason, /timed out/);
      assert.ok(Date.now() - t0 < 6000, `bounded by check_timeout_ms (took ${Date.now() - t0} ms)`);
      assert.equal((await kernel.proxies.retrieve(hanging.id)).status, 'unavailable');
    });
  });

  describe('browsers through proxies', () => {
    const title = async (page, url) => {
      // A failed load commits Chromium's error page a moment later, which would cancel the next
      // goto: settle on about:blank first.
      for (let i = 0; i < 5; i++) {
        if (await page.goto('about:blank').then(() => true, () => false)) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      try {
        const res = await page.goto(url, { timeout: 15_000 });
        return res && res.ok() ? await page.title() : `HTTP ${res?.status()}`;
      } catch (e) {
        return `error ${e.message.split('\n')[0]}`;
      }
    };

    test('HTTP proxy on create, live swaps (HTTPS-to-proxy, SOCKS5, direct) under one Playwright connection, proxy dying mid-session', async () => {
      const http = await kernel.proxies.create(custom({ name: 'tiny' }));
      const https = await kernel.proxies.create({ type: 'custom', protocol: 'https', config: { host: '127.0.0.1', port: tls.port, username: USER, password: PASSWORD, ca_bundle: cert.pem } });
      const viaSocks = await kernel.proxies.create({ type: 'residential', config: { country: 'DE', city: 'berlin' } });
      const b = await kernel.browsers.create({ headless: true, proxy_id: http.id, timeout_seconds: 120 });
      assert.equal(b.proxy_id, http.id, 'the browser object names its proxy');
      const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      try {
        const page = cdp.contexts()[0].pages()[0];
        const host = `page.hangar.test:${origin.port}`;
        assert.equal(await title(page, `http://${host}/http`), 'origin page.hangar.test/http', 'carried by tinyproxy');
        assert.ok(tiny.log().includes('page.hangar.test'), 'tinyproxy saw the request');
        assert.ok(!origin.hits.some((h) => h.headers['proxy-authorization']), 'credentials stop at the proxy');

        const swapped = await kernel.browsers.update(b.session_id, { proxy_id: https.id });
        assert.equal(swapped.proxy_id, https.id, 'the swap shows in the answer');
        assert.equal((await kernel.browsers.retrieve(b.session_id)).proxy_id, https.id);
        assert.equal(await title(page, `http://${host}/https`), 'origin page.hangar.test/https', 'through stunnel to tinyproxy');

        await kernel.browsers.update(b.session_id, { proxy_id: viaSocks.id });
        const socksBefore = socks.log().length;
        assert.equal(await title(page, `http://127.0.0.1:${origin.port}/socks`), 'origin 127.0.0.1/socks');
        assert.match(socks.log().slice(socksBefore), new RegExp(`127\\.0\\.0\\.1\\.${origin.port}`), 'sockd carried it');
        // page.hangar.test does not resolve for sockd: the name went to the proxy, not to a local resolver.
        assert.match(await title(page, `http://${host}/nowhere`), /error|HTTP 502/);

        const direct = await kernel.browsers.update(b.session_id, { proxy_id: '' });
        assert.equal(direct.proxy_id, undefined, 'direct: no proxy named');
        assert.match(await title(page, `http://${host}/direct`), /error|HTTP 502/, 'direct: the name resolves nowhere');
        assert.equal(await title(page, `http://127.0.0.1:${origin.port}/direct`), 'origin 127.0.0.1/direct');

        // The proxy dies mid-session: requests fail like a network failure, the session lives.
        const doomed = await startStunnel(scratch, { targetPort: tiny.port, cert: cert.cert, key: cert.key });
        const short = await kernel.proxies.create({ type: 'custom', protocol: 'https', config: { host: '127.0.0.1', port: doomed.port, username: USER, password: PASSWORD, ca_bundle: cert.pem } });
        await kernel.browsers.update(b.session_id, { proxy_id: short.id });
        assert.equal(await title(page, `http://${host}/before-death`), 'origin page.hangar.test/before-death');
        await doomed.stop();
        assert.match(await title(page, `http://${host}/after-death`), /error|HTTP 502/);
        assert.ok(cdp.isConnected(), 'the CDP connection survived every swap');
        assert.equal((await kernel.browsers.retrieve(b.session_id)).session_id, b.session_id);
        await kernel.browsers.update(b.session_id, { proxy_id: http.id });
        assert.equal(await title(page, `http://${host}/back`), 'origin page.hangar.test/back');
      } finally {
        await cdp.close().catch(() => {});
        await kernel.browsers.deleteByID(b.session_id);
      }
    });

    test('bypass hosts go direct; delete while in use leaves the session on its route and refuses new uses', async () => {
      // A proxy that cannot work (nothing listens) but bypasses localhost.
      const broken = await kernel.proxies.create(custom({ config: { host: '127.0.0.1', port: deadPort }, bypass_hosts: ['localhost'] }));
      const good = await kernel.proxies.create(custom({ name: 'to-delete' }));
      const b = await kernel.browsers.create({ headless: true, proxy_id: broken.id, timeout_seconds: 120 });
      const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      try {
        const page = cdp.contexts()[0].pages()[0];
        assert.equal(await title(page, `http://localhost:${origin.port}/bypassed`), 'origin localhost/bypassed');
        assert.match(await title(page, `http://127.0.0.1:${origin.port}/proxied`), /error|HTTP 502/);

        await kernel.browsers.update(b.session_id, { proxy_id: good.id });
        await kernel.proxies.delete(good.id);
        const host = `page.hangar.test:${origin.port}`;
        assert.equal(await title(page, `http://${host}/after-delete`), 'origin page.hangar.test/after-delete', 'the running session keeps its route');
        await rejectsWith(kernel.browsers.update(b.session_id, { proxy_id: good.id }), NotFoundError);
        await rejectsWith(kernel.browsers.create({ headless: true, proxy_id: good.id }), NotFoundError);
        await rejectsWith(kernel.browserPools.create({ size: 1, proxy_id: good.id }), NotFoundError);
        await rejectsWith(kernel.browsers.create({ headless: true, proxy_id: 'nosuchproxy' }), NotFoundError);
        assert.equal(await title(page, `http://${host}/still`), 'origin page.hangar.test/still');
      } finally {
        await cdp.close().catch(() => {});
        await kernel.browsers.deleteByID(b.session_id);
      }
    });

    test('network.proxy_routes (0.131): chosen hosts through chosen proxies, exact before wildcard, a dead route fails closed', async () => {
      const routed = await kernel.proxies.create(custom({ name: 'routed' }));
      const dead = await kernel.proxies.create(custom({ name: 'dead-route', config: { host: '127.0.0.1', port: deadPort } }));
      // The SDK 0.84 passes the 0.131 field through as it is.
      const b = await kernel.browsers.create({
        headless: true,
        timeout_seconds: 120,
        network: {
          proxy_routes: [
            { hosts: ['*.hangar.test'], proxy: { name: 'routed' } },
            { hosts: ['Closed.hangar.test'], proxy: { id: dead.id } },
          ],
        },
      });
      const want = [
        { hosts: ['*.hangar.test'], proxy: { id: routed.id } },
        { hosts: ['closed.hangar.test'], proxy: { id: dead.id } },
      ];
      assert.deepEqual(b.network, { proxy_routes: want }, 'the routes, their proxies by id, no allowlist state');
      assert.deepEqual(b.proxy, { mode: 'direct' }, 'the browser itself has no proxy');
      const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      try {
        const page = cdp.contexts()[0].pages()[0];
        // Only tinyproxy resolves *.hangar.test: a page that loads went through the route.
        assert.equal(await title(page, `http://page.hangar.test:${origin.port}/routed`), 'origin page.hangar.test/routed');
        // The exact route wins over the wildcard, and its proxy is dead: no other way out.
        assert.match(await title(page, `http://closed.hangar.test:${origin.port}/closed`), /error|HTTP 502/);
        assert.ok(!origin.hits.some((h) => h.url.includes('/closed')), 'nothing reached the origin another way');
        // Hosts no route names take the browser's own way: direct here.
        assert.equal(await title(page, `http://127.0.0.1:${origin.port}/unrouted`), 'origin 127.0.0.1/unrouted');
        assert.ok(!tiny.log().includes('/unrouted'), 'not through the routed proxy');

        // Swapping the browser's own proxy leaves the routes as they were made.
        await kernel.browsers.update(b.session_id, { proxy_id: dead.id });
        assert.match(await title(page, `http://127.0.0.1:${origin.port}/own-dead`), /error|HTTP 502/);
        assert.equal(await title(page, `http://page.hangar.test:${origin.port}/still-routed`), 'origin page.hangar.test/still-routed');
        assert.deepEqual((await kernel.browsers.retrieve(b.session_id)).network, { proxy_routes: want });
        await rejectsWith(
          kernel.browsers.update(b.session_id, { network: { proxy_routes: [] } }),
          BadRequestError,
        );
      } finally {
        await cdp.close().catch(() => {});
        await kernel.browsers.deleteByID(b.session_id);
      }
      // A pattern in two routes, a host the grammar refuses, a proxy not the project's: refused,
      // nothing started.
      const route = (hosts, proxy) => ({ hosts, proxy });
      await rejectsWith(
        kernel.browsers.create({ headless: true, network: { proxy_routes: [route(['a.hangar.test'], { name: 'routed' }), route(['A.hangar.test'], { id: dead.id })] } }),
        BadRequestError,
      );
      await rejectsWith(kernel.browsers.create({ headless: true, network: { proxy_routes: [route(['*.com'], { name: 'routed' })] } }), BadRequestError);
      await rejectsWith(kernel.browsers.create({ headless: true, network: { proxy_routes: [route(['a.hangar.test'], { name: 'nope' })] } }), NotFoundError);
      assert.equal((await kernel.browsers.list()).getPaginatedItems().length, 0, 'no browser was left behind');
    });

    test('network.private_hosts (0.131): the hosts it names go direct, past the browser\'s proxy', async () => {
      const viaTiny = await kernel.proxies.create(custom({ name: 'private-test' }));
      const b = await kernel.browsers.create({
        headless: true,
        timeout_seconds: 120,
        proxy_id: viaTiny.id,
        network: { private_hosts: ['LOCALHOST', '10.1.30.63:8443'] },
      });
      assert.deepEqual(b.network, { private_hosts: ['localhost', '10.1.30.63:8443'] });
      const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      try {
        const page = cdp.contexts()[0].pages()[0];
        assert.equal(await title(page, `http://localhost:${origin.port}/private-direct`), 'origin localhost/private-direct');
        assert.ok(!tiny.log().includes('private-direct'), 'not through the proxy');
        assert.equal(await title(page, `http://page.hangar.test:${origin.port}/private-proxied`), 'origin page.hangar.test/private-proxied');
        assert.ok(tiny.log().includes('private-proxied'), 'everything else through it');
      } finally {
        await cdp.close().catch(() => {});
        await kernel.browsers.deleteByID(b.session_id);
      }
      // As on Kernel, a private host is not held to the allowlist; everything else still is.
      const fenced = await kernel.browsers.create({
        headless: true,
        timeout_seconds: 120,
        network: { allowed_hosts: ['example.com'], private_hosts: ['localhost'] },
      });
      const fencedCdp = await chromium.connectOverCDP(fenced.cdp_ws_url, { timeout: 30_000 });
      try {
        const page = fencedCdp.contexts()[0].pages()[0];
        assert.equal(await title(page, `http://localhost:${origin.port}/private-fenced`), 'origin localhost/private-fenced');
        assert.equal(await title(page, `http://127.0.0.1:${origin.port}/not-private`), 'HTTP 403');
      } finally {
        await fencedCdp.close().catch(() => {});
        await kernel.browsers.deleteByID(fenced.session_id);
      }
      // Only private ranges; never a host the allowlist names too.
      await rejectsWith(kernel.browsers.create({ headless: true, network: { private_hosts: ['203.0.113.7'] } }), BadRequestError);
      await rejectsWith(
        kernel.browsers.create({ headless: true, network: { allowed_hosts: ['a.example'], private_hosts: ['a.example'] } }),
        BadRequestError,
      );
      // A port on the private entry does not make it another host.
      await rejectsWith(
        kernel.browsers.create({ headless: true, network: { allowed_hosts: ['*.a.example'], private_hosts: ['*.a.example', 'db.a.example:5432'] } }),
        BadRequestError,
      );
      await rejectsWith(
        kernel.browsers.create({ headless: true, network: { allowed_hosts: ['db.a.example'], private_hosts: ['db.a.example:5432'] } }),
        BadRequestError,
      );
    });

    test('a failure at the proxy: a 502 naming its code in X-Kernel-Proxy-Error, and a proxy_error telemetry event per request', async () => {
      const wrongPassword = await kernel.proxies.create(custom({ config: { host: '127.0.0.1', port: tiny.port, username: USER, password: 'wrong-password' } }));
      const socksProxy = await kernel.proxies.create({ type: 'residential', config: { country: 'DE', city: 'berlin' } });
      const dead = await kernel.proxies.create(custom({ config: { host: '127.0.0.1', port: deadPort } }));
      const b = await kernel.browsers.create({ headless: true, proxy_id: socksProxy.id, timeout_seconds: 120, telemetry: { browser: { network: {} } } });
      const cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
      try {
        const page = cdp.contexts()[0].pages()[0];
        // sockd cannot reach a port nobody listens on: the page is ours, 502 with the code.
        const plain = `http://127.0.0.1:${deadPort}/plain`;
        const res = await page.goto(plain, { timeout: 15_000 });
        assert.equal(res.status(), 502);
        assert.equal(res.headers()["x-kernel-proxy-error"], "upstream_connect_failed", await res.text());
        assert.match(await page.title(), /upstream_connect_failed/);
        // HTTPS goes as a CONNECT tunnel: Chromium shows only a tunnel failure, telemetry names it.
        const tunnel = `https://127.0.0.1:${deadPort}/tunnel`;
        assert.match(await title(page, tunnel), /ERR_TUNNEL_CONNECTION_FAILED/);
        // The proxy itself is unreachable, or refuses our credentials.
        await kernel.browsers.update(b.session_id, { proxy_id: dead.id });
        const unreachable = `http://page.hangar.test:${origin.port}/unreachable`;
        assert.equal(await title(page, unreachable), 'HTTP 502');
        await kernel.browsers.update(b.session_id, { proxy_id: wrongPassword.id });
        const rejected = `https://page.hangar.test:${origin.port}/rejected`;
        assert.match(await title(page, rejected), /ERR_TUNNEL_CONNECTION_FAILED/);
        // A page that loads is no proxy error.
        await kernel.browsers.update(b.session_id, { proxy_id: '' });
        assert.equal(await title(page, `http://127.0.0.1:${origin.port}/fine`), 'origin 127.0.0.1/fine');
        // Going direct, a name that resolves nowhere is named too (never an empty answer, which
        // Chromium would retry).
        const nowhere = `http://nowhere.hangar.test:${origin.port}/direct`;
        const direct = await page.goto(nowhere, { timeout: 15_000 });
        assert.equal(direct.status(), 502);
        assert.equal(direct.headers()['x-kernel-proxy-error'], 'upstream_dns_failure');

        const want = { [plain]: 'upstream_connect_failed', [tunnel]: 'upstream_connect_failed', [unreachable]: 'provider_unreachable', [rejected]: 'provider_rejected', [nowhere]: 'upstream_dns_failure' };
        let events = [];
        for (let i = 0; i < 50; i++) {
          events = [];
          for await (const e of kernel.browsers.telemetry.events(b.session_id, { since: '10m', limit: 1000, category: 'network' })) events.push(e.event);
          if (Object.keys(want).every((u) => events.some((e) => e.type === 'proxy_error' && e.data.url === u))) break;
          await new Promise((r) => setTimeout(r, 200));
        }
        const errors = events.filter((e) => e.type === 'proxy_error');
        const requests = events.filter((e) => e.type === 'network_request');
        for (const [url, code] of Object.entries(want)) {
          const e = errors.find((x) => x.data.url === url);
          assert.ok(e, `a proxy_error for ${url}; got ${JSON.stringify(errors.map((x) => x.data))}`);
          assert.equal(e.category, 'network');
          assert.equal(e.data.code, code, url);
          assert.equal(e.data.status, 502);
          assert.equal(e.data.method, 'GET');
          assert.equal(e.data.resource_type, 'Document');
          assert.equal(e.data.raw_code, undefined, 'a known code has no raw_code');
          assert.ok(requests.some((r) => r.data.request_id === e.data.request_id && r.data.url === url), 'its request_id is the request\'s');
        }
        assert.ok(!errors.some((e) => e.data.url.includes('/fine')), 'no proxy_error for a page that loaded');
        assert.ok(!JSON.stringify(errors).includes('wrong-password'), 'no credential in an event');
      } finally {
        await cdp.close().catch(() => {});
        await kernel.browsers.deleteByID(b.session_id);
      }
    });

    test('a pool with a proxy: acquired browsers go through it, a lessee\'s swap is undone on release', async () => {
      const p = await kernel.proxies.create(custom({ name: 'pool-proxy' }));
      const pool = await kernel.browserPools.create({ name: 'proxied-pool', size: 1, headless: true, proxy_id: p.id, fill_rate_per_minute: 6000 });
      const said = () => server.output().split('\n').filter((l) => /pool|proxies|warn|error/i.test(l)).slice(-20).join('\n');
      try {
        const b = await kernel.browserPools.acquire(pool.id, { acquire_timeout_seconds: 45 });
        assert.ok(b?.session_id, `a browser was acquired; server said:\n${said()}`);
        assert.equal(b.proxy_id, p.id, 'an acquired browser names the pool proxy');
        let cdp = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
        try {
          const page = cdp.contexts()[0].pages()[0];
          assert.equal(await title(page, `http://pool.hangar.test:${origin.port}/p`), 'origin pool.hangar.test/p');
          await kernel.browsers.update(b.session_id, { proxy_id: '' });
          assert.match(await title(page, `http://pool.hangar.test:${origin.port}/direct`), /error|HTTP 502/);
        } finally {
          await cdp.close().catch(() => {});
        }
        await kernel.browserPools.release(pool.id, { session_id: b.session_id, reuse: true });
        const again = await kernel.browserPools.acquire(pool.id, { acquire_timeout_seconds: 45 });
        assert.equal(again?.session_id, b.session_id, 'the same browser came back');
        assert.equal(again.proxy_id, p.id, 'and names the pool proxy again');
        cdp = await chromium.connectOverCDP(again.cdp_ws_url, { timeout: 30_000 });
        try {
          const page = cdp.contexts()[0].pages()[0];
          assert.equal(await title(page, `http://pool.hangar.test:${origin.port}/again`), 'origin pool.hangar.test/again', 'back on the pool proxy');
        } finally {
          await cdp.close().catch(() => {});
        }
        await kernel.browserPools.release(pool.id, { session_id: b.session_id, reuse: false });
      } finally {
        await kernel.browserPools.delete(pool.id, { force: true });
      }
    });
  });
});
