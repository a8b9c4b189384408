// bench/vaults: a vault item's `fill` of a 3-field login form (issue 48: p50 <= 300 ms), through
// the API (the server opens the item, makes the TOTP code, the browser's agent types over CDP),
// against the same three fields typed by a client's own Playwright connection (page.fill), in
// the same browser and run. The Node SDK 0.84 has no vaults: the vault routes are called with
// fetch. Goal: fill p50 <= 300 ms.
import http from 'node:http';
import { createRequire } from 'node:module';

import { now, percentile, startServer } from './lib.mjs';
import { listenAllowed } from '../tests/e2e/lib/server.mjs';

const { chromium } = createRequire(new URL('../tests/e2e/package.json', import.meta.url))('playwright-core');

const PAGE = `<!doctype html><html><head><title>login</title></head><body><form>
<input id="email" type="email"><input id="pass" type="password"><input id="code" autocomplete="one-time-code">
<button>Sign in</button></form></body></html>`;

export async function run({ log }) {
  const srv = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(PAGE);
  });
  const port = await listenAllowed(srv);
  const url = `http://127.0.0.1:${port}/login`;
  const server = await startServer();
  const api = async (method, path, body) => {
    const r = await fetch(server.baseURL + path, {
      method,
      headers: { authorization: `Bearer ${server.apiKey}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
  const viaApi = [];
  const viaClient = [];
  try {
    const vault = await api('POST', '/vaults', { name: 'bench' });
    await api('PUT', `/vaults/${vault.id}/items/login`, {
      type: 'credential',
      spec: {
        provider: 'kernel',
        fields: [
          { name: 'username', type: 'email', sensitive: false, value: 'ada@example.com' },
          { name: 'password', type: 'password', value: 'correct horse battery staple' },
          { name: 'otp', type: 'totp', value: 'JBSWY3DPEHPK3PXP' },
        ],
      },
    });
    const s = await api('POST', '/browsers', { headless: true, vaults: [{ id: vault.id }] });
    const browser = await chromium.connectOverCDP(s.cdp_ws_url);
    const page = browser.contexts()[0].pages()[0];
    await page.goto(url);
    const fields = [
      { field: 'username', selector: '#email' },
      { field: 'password', selector: '#pass' },
      { field: 'otp', selector: '#code' },
    ];
    const fill = () => api('POST', `/vaults/${vault.id}/items/login/operations`, { type: 'fill', browser_id: s.session_id, page_url: url, fields });
    for (let i = 0; i < 3; i++) await fill(); // warm up
    for (let i = 0; i < 30; i++) {
      let t0 = now();
      const r = await fill();
      viaApi.push(now() - t0);
      if (r.status !== 'completed') throw new Error(`fill: ${JSON.stringify(r)}`);
      t0 = now();
      await page.fill('#email', 'ada@example.com');
      await page.fill('#pass', 'correct horse battery staple');
      await page.fill('#code', '123456');
      viaClient.push(now() - t0);
    }
    await browser.close();
    await api('DELETE', `/browsers/${s.session_id}`);
    await api('DELETE', `/vaults/${vault.id}`);
  } finally {
    await server.stop();
    await new Promise((r) => srv.close(r));
  }
  const p50 = percentile(viaApi, 50);
  log(`fill p50 ${p50.toFixed(1)} ms, the client's page.fill x3 p50 ${percentile(viaClient, 50).toFixed(1)} ms`);
  return [
    { name: 'vaults', metric: 'fill of 3 fields p50 ms (API)', value: p50, baseline: percentile(viaClient, 50), ratio: p50 / percentile(viaClient, 50), goal: '<= 300 ms', met: p50 <= 300 },
    { name: 'vaults', metric: 'fill of 3 fields p95 ms (API)', value: percentile(viaApi, 95), baseline: percentile(viaClient, 95), ratio: percentile(viaApi, 95) / percentile(viaClient, 95) },
  ];
}
