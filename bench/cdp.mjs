// bench/cdp: Runtime.evaluate("1+1") round trip through Hangar's CDP relay vs straight to a raw
// Chromium's own DevTools socket (same flags, same protocol path: browser socket + flattened page
// session). Sequential calls in alternating blocks so machine noise hits both sides alike.
// Goal: relay p50 ≤ 1.15 × direct p50.
import { CdpClient, launchChromium, now, runStandalone, startServer, summary } from './lib.mjs';

export const GOAL_RATIO = 1.15;

/** A raw CDP client attached to the first page: once() times one Runtime.evaluate("1+1"). */
export async function evaluator(wsUrl) {
  const cdp = await CdpClient.connect(wsUrl);
  const sessionId = await cdp.attachToPage();
  const once = async () => {
    const t0 = now();
    const r = await cdp.send('Runtime.evaluate', { expression: '1+1', returnByValue: true }, sessionId);
    const ms = now() - t0;
    if (r.result.value !== 2) throw new Error(`1+1 gave ${JSON.stringify(r.result)}`);
    return ms;
  };
  return { once, close: () => cdp.close() };
}

export async function run({
  log = () => {},
  calls = Number(process.env.BENCH_CDP_CALLS || 2000),
  warmup = Number(process.env.BENCH_CDP_WARMUP || 200),
  block = 200,
} = {}) {
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  let chrome;
  let direct;
  let relay;
  let browser;
  const d = [];
  const h = [];
  try {
    chrome = await launchChromium();
    browser = await server.client.browsers.create({ headless: true, timeout_seconds: 600 });
    direct = await evaluator(chrome.wsUrl);
    relay = await evaluator(browser.cdp_ws_url);
    for (let i = 0; i < warmup; i++) {
      await direct.once();
      await relay.once();
    }
    while (d.length < calls) {
      const n = Math.min(block, calls - d.length);
      for (let i = 0; i < n; i++) d.push(await direct.once());
      for (let i = 0; i < n; i++) h.push(await relay.once());
      log(`cdp ${d.length}/${calls} calls each`);
    }
  } finally {
    await direct?.close();
    await relay?.close();
    await chrome?.stop();
    if (browser) await server.client.browsers.deleteByID(browser.session_id).catch(() => {});
    await server.stop();
  }
  const ds = summary(d);
  const hs = summary(h);
  const note = `${calls} sequential calls each, headless`;
  return [
    { name: 'cdp', metric: 'p50 Runtime.evaluate RTT (ms)', value: hs.p50, baseline: ds.p50, ratio: hs.p50 / ds.p50, goal: `≤ ${GOAL_RATIO}×`, met: hs.p50 / ds.p50 <= GOAL_RATIO, note },
    { name: 'cdp', metric: 'p99 Runtime.evaluate RTT (ms)', value: hs.p99, baseline: ds.p99, ratio: hs.p99 / ds.p99, goal: '', met: null, note },
  ];
}

await runStandalone(import.meta.url, run);
