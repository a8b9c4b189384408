// bench/config_registry: one config-registry analysis of a URL that blocks everything (so all four
// direct candidates run: headless/headful × stealth off/on, in batches of [config_registry]
// parallelism = 2), against the same four configurations loaded one after another through the
// public API (create the browser, Page.navigate over its cdp_ws_url until the load event, delete
// it), same server, same run.
// Goal (issue 50): analysis ≤ 2× the four sequential page loads.
import http from 'node:http';

import { CdpClient, now, runStandalone, startServer } from './lib.mjs';

export const RATIO_GOAL = 2;

async function blockedSite() {
  const srv = http.createServer((req, res) => {
    res.writeHead(403, { 'content-type': 'text/html' });
    res.end('<!doctype html><title>Forbidden</title><p>no</p>');
  });
  for (let port = 21160; port < 21199; port++) {
    const ok = await new Promise((resolve) => {
      srv.once('error', () => resolve(false));
      srv.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (ok) return { port, close: () => new Promise((r) => srv.close(r)) };
  }
  throw new Error('no free port');
}

export async function main({ log = () => {} } = {}) {
  const site = await blockedSite();
  const server = await startServer();
  try {
    const kernel = server.newClient({ maxRetries: 0 });
    const url = `http://127.0.0.1:${site.port}/bench`;
    const configs = [
      { headless: true, stealth: false }, { headless: true, stealth: true },
      { headless: false, stealth: false }, { headless: false, stealth: true },
    ];
    const rows = [];
    for (let round = 0; round < 2; round++) {
      let t0 = now();
      for (const c of configs) {
        const b = await kernel.browsers.create({ ...c, proxy: { mode: 'direct' } });
        const cdp = await CdpClient.connect(b.cdp_ws_url);
        const page = await cdp.attachToPage();
        await cdp.send('Page.enable', {}, page);
        cdp.events.length = 0;
        await cdp.send('Page.navigate', { url }, page);
        const t = now();
        while (!cdp.events.some((e) => e.method === 'Page.loadEventFired')) {
          if (now() - t > 30_000) throw new Error('no load event');
          await new Promise((r) => setTimeout(r, 2));
        }
        cdp.close();
        await kernel.browsers.deleteByID(b.session_id);
      }
      const sequential = now() - t0;
      t0 = now();
      const r = await kernel.post('/config-registry/resolve', { body: { url } });
      let a = r.analysis;
      while (!a.finished_at) {
        await new Promise((res) => setTimeout(res, 200));
        a = (await kernel.get(`/config-registry/analyses/${a.id}`)).analysis;
      }
      const analysis = now() - t0;
      log(`round ${round}: sequential ${sequential.toFixed(0)} ms, analysis ${analysis.toFixed(0)} ms (${a.status})`);
      rows.push({ round, sequential_ms: Math.round(sequential), analysis_ms: Math.round(analysis),
        ratio: +(analysis / sequential).toFixed(2), goal: `<= ${RATIO_GOAL}` });
    }
    return rows;
  } finally {
    await server.stop();
    await site.close();
  }
}

runStandalone(import.meta.url, main);
