// bench/network: what an instance's own network namespace costs a page load. The same page (an
// HTML document with 30 sub-resources from a local server on an allowed host port) is loaded 30
// times in a browser of a server whose instances are isolated (pasta) and of one sharing the
// host's network (`HANGAR_SANDBOX_NETWORK=host`), alternating, in the same run. Also the cold
// create → first CDP reply of both (the namespace and pasta are set up before the sandbox runs),
// and of a third server whose instance folders are not their own file systems
// (`HANGAR_SANDBOX_DISK_QUOTA_MB=0`): what the disk quota costs a cold start. Both Hangar sides
// go through the instance's forwarder, so a third side loads the same page in a raw Chromium on
// the host's network (same flags, no Hangar): the cost of forwarder and pasta together. Then ten
// browsers of each kind load the page at once, 5 rounds alternating (`BENCH_NETWORK_TEN_ROUNDS`),
// isolated Hangar against ten raw Chromiums (issue 42).
// Goals: load p50 isolated / host network <= 1.05, alone and ten at once.
import http from 'node:http';
import { createRequire } from 'node:module';

import { createToCdp, launchChromium, now, percentile, startServer } from './lib.mjs';
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

export async function run({ log, tenRounds = Number(process.env.BENCH_NETWORK_TEN_ROUNDS || 5) }) {
  const pages = await site();
  const isolated = await startServer();
  const shared = await startServer({ env: { HANGAR_SANDBOX_NETWORK: 'host' } });
  const diskless = await startServer({ env: { HANGAR_SANDBOX_DISK_QUOTA_MB: '0' } });
  const loads = { isolated: [], host: [], raw: [] };
  const ten = { isolated: [], raw: [] };
  const raws = [];
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
    const openRaw = async () => {
      const chrome = await launchChromium();
      raws.push(chrome);
      const browser = await chromium.connectOverCDP(chrome.wsUrl);
      const context = browser.contexts()[0];
      return { browser, page: context.pages()[0] ?? (await context.newPage()) };
    };
    const sides = { isolated: await open(isolated), host: await open(shared), raw: await openRaw() };
    for (const side of Object.values(sides)) await side.page.goto(pages.url); // warm up
    for (let i = 0; i < 30; i++)
      for (const [name, side] of Object.entries(sides)) {
        const t0 = now();
        await side.page.goto(pages.url, { waitUntil: 'load' });
        loads[name].push(now() - t0);
      }
    for (const side of Object.values(sides)) {
      await side.browser.close();
      if (side.server) await side.server.client.browsers.deleteByID(side.s.session_id);
    }
    // Ten at once: every browser of a side starts its load together.
    const fleets = { isolated: [], raw: [] };
    for (let i = 0; i < 10; i++) {
      fleets.isolated.push(await open(isolated));
      fleets.raw.push(await openRaw());
    }
    for (const fleet of Object.values(fleets)) await Promise.all(fleet.map((b) => b.page.goto(pages.url)));
    for (let r = 0; r < tenRounds; r++)
      for (const [name, fleet] of Object.entries(fleets)) {
        const times = await Promise.all(fleet.map(async (b) => {
          const t0 = now();
          await b.page.goto(pages.url, { waitUntil: 'load' });
          return now() - t0;
        }));
        ten[name].push(...times);
      }
    for (const fleet of Object.values(fleets))
      for (const b of fleet) {
        await b.browser.close();
        if (b.server) await b.server.client.browsers.deleteByID(b.s.session_id);
      }
  } finally {
    for (const chrome of raws) await chrome.stop();
    await isolated.stop();
    await shared.stop();
    await diskless.stop();
    await pages.close();
  }
  const p50 = (xs) => percentile(xs, 50);
  log(`loads isolated ${p50(loads.isolated).toFixed(1)} ms, host ${p50(loads.host).toFixed(1)} ms, raw Chromium ${p50(loads.raw).toFixed(1)} ms; ten at once isolated ${p50(ten.isolated).toFixed(1)} ms, raw ${p50(ten.raw).toFixed(1)} ms`);
  const ratio = p50(loads.isolated) / p50(loads.host);
  const rawRatio = p50(loads.isolated) / p50(loads.raw);
  const tenRatio = p50(ten.isolated) / p50(ten.raw);
  return [
    { name: 'network', metric: 'page load p50 ms, Hangar (forwarder + pasta) vs raw Chromium on the host network', value: p50(loads.isolated), baseline: p50(loads.raw), ratio: rawRatio, goal: '<= 1.05x', met: rawRatio <= 1.05 },
    { name: 'network', metric: 'page load p50 ms, ten browsers at once, Hangar vs ten raw Chromiums', value: p50(ten.isolated), baseline: p50(ten.raw), ratio: tenRatio, goal: '<= 1.05x', met: tenRatio <= 1.05, note: `${ten.isolated.length} loads a side` },
    { name: 'network', metric: 'page load p50 ms, own namespace (pasta)', value: p50(loads.isolated), baseline: p50(loads.host), ratio, goal: '<= 1.15x host network', met: ratio <= 1.15 },
    { name: 'network', metric: 'page load p95 ms, own namespace (pasta)', value: percentile(loads.isolated, 95), baseline: percentile(loads.host, 95), ratio: percentile(loads.isolated, 95) / percentile(loads.host, 95) },
    { name: 'network', metric: 'cold create → CDP p50 ms, own namespace', value: p50(creates.isolated), baseline: p50(creates.host), ratio: p50(creates.isolated) / p50(creates.host) },
    { name: 'network', metric: 'cold create → CDP p50 ms, own disk (quota)', value: p50(creates.isolated), baseline: p50(creates.diskless), ratio: p50(creates.isolated) / p50(creates.diskless) },
  ];
}
