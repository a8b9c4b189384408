// bench/network: what an instance's own network namespace costs a page load. The same page (an
// HTML document with 30 sub-resources from a local server on an allowed host port) is loaded 30
// times in a browser of a server whose instances are isolated (pasta) and of one sharing the
// host's network (`HANGAR_SANDBOX_NETWORK=host`), alternating, in the same run. Also the cold
// create → first CDP reply of both (the namespace and pasta are set up before the sandbox runs),
// and of a third server whose instance folders are not their own file systems
// (`HANGAR_SANDBOX_DISK_QUOTA_MB=0`): what the disk quota costs a cold start.
// Goal: load time isolated / host <= 1.15.
import http from 'node:http';
import { createRequire } from 'node:module';

import { createToCdp, now, percentile, startServer } from './lib.mjs';
import { listenAllowed } from '../tests/e2e/lib/server.mjs';

const { chromium } = createRequire(new URL('../tests/e2e/package.json', import.meta.url))('playwright-core');

async function site() {
  const blob = 'x'.repeat(20_000);
  const srv = http.createServer((req, res) => {
    if (req.url.startsWith('/r/')) {
      res.writeHead(200, { 'content-type': 'text/css', 'cache-control': 'no-store' });
      res.end(`/* ${blob} */`);
      return;
    }
    const links = Array.from({ length: 30 }, (_, i) => `<link rel="stylesheet" href="/r/${i}?${Date.now()}">`).join('');
    res.writeHead(200, { 'content-type': 'text/html', 'cache-control': 'no-store' });
    res.end(`<!doctype html><html><head><title>net</title>${links}</head><body>${blob}</body></html>`);
  });
  const port = await listenAllowed(srv);
  return { url: `http://127.0.0.1:${port}/`, close: () => new Promise((r) => srv.close(r)) };
}

export async function run({ log }) {
  const pages = await site();
  const isolated = await startServer();
  const shared = await startServer({ env: { HANGAR_SANDBOX_NETWORK: 'host' } });
  const diskless = await startServer({ env: { HANGAR_SANDBOX_DISK_QUOTA_MB: '0' } });
  const loads = { isolated: [], host: [] };
  const creates = { isolated: [], host: [], diskless: [] };
  try {
    for (let i = 0; i < 5; i++) {
      creates.isolated.push(await createToCdp(isolated));
      creates.host.push(await createToCdp(shared));
      creates.diskless.push(await createToCdp(diskless));
    }
    const open = async (server) => {
      const s = await server.client.browsers.create({ headless: true });
      const browser = await chromium.connectOverCDP(s.cdp_ws_url);
      const page = browser.contexts()[0].pages()[0];
      return { server, s, browser, page };
    };
    const sides = { isolated: await open(isolated), host: await open(shared) };
    for (const side of Object.values(sides)) await side.page.goto(pages.url); // warm up
    for (let i = 0; i < 30; i++)
      for (const [name, side] of Object.entries(sides)) {
        const t0 = now();
        await side.page.goto(pages.url, { waitUntil: 'load' });
        loads[name].push(now() - t0);
      }
    for (const side of Object.values(sides)) {
      await side.browser.close();
      await side.server.client.browsers.deleteByID(side.s.session_id);
    }
  } finally {
    await isolated.stop();
    await shared.stop();
    await diskless.stop();
    await pages.close();
  }
  const p50 = (xs) => percentile(xs, 50);
  log(`loads isolated ${p50(loads.isolated).toFixed(1)} ms, host ${p50(loads.host).toFixed(1)} ms`);
  const ratio = p50(loads.isolated) / p50(loads.host);
  return [
    { name: 'network', metric: 'page load p50 ms, own namespace (pasta)', value: p50(loads.isolated), baseline: p50(loads.host), ratio, goal: '<= 1.15x host network', met: ratio <= 1.15 },
    { name: 'network', metric: 'page load p95 ms, own namespace (pasta)', value: percentile(loads.isolated, 95), baseline: percentile(loads.host, 95), ratio: percentile(loads.isolated, 95) / percentile(loads.host, 95) },
    { name: 'network', metric: 'cold create → CDP p50 ms, own namespace', value: p50(creates.isolated), baseline: p50(creates.host), ratio: p50(creates.isolated) / p50(creates.host) },
    { name: 'network', metric: 'cold create → CDP p50 ms, own disk (quota)', value: p50(creates.isolated), baseline: p50(creates.diskless), ratio: p50(creates.isolated) / p50(creates.diskless) },
  ];
}
