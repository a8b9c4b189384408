// bench/bidi: a WebDriver BiDi command round trip through Hangar (webdriver_ws_url: relay → agent →
// chromium-bidi mapper → the agent's /cdp → Chromium) vs the CDP round trip of the same work
// through Hangar (cdp_ws_url), on one browser: script.evaluate("1+1") in the page's context vs
// Runtime.evaluate("1+1") on a flattened page session. Sequential calls in alternating blocks so
// machine noise hits both sides alike. Goal: BiDi p50 ≤ 1.5 × CDP p50. Also reported: the first
// connection's session.new + getTree (it starts the mapper) and a later one's.
import { BidiClient } from '../tests/e2e/lib/bidi.mjs';
import { CdpClient, now, runStandalone, startServer, summary } from './lib.mjs';

export const GOAL_RATIO = 1.5;

/**
 * `calls` sequential round trips each way after `warmup`, in alternating blocks of `block` so
 * machine noise hits both sides alike: CDP `Runtime.evaluate("1+1")` on the flattened page
 * session `sessionId` of `cdp`, BiDi `script.evaluate("1+1")` in `context` through `bidi`.
 * Resolves to the round-trip times in ms, {c, b}.
 */
export async function alternate({ cdp, sessionId, bidi, context, calls, warmup, block, log }) {
  const viaCdp = async () => {
    const s = now();
    const r = await cdp.send('Runtime.evaluate', { expression: '1+1', returnByValue: true }, sessionId);
    const ms = now() - s;
    if (r.result.value !== 2) throw new Error(`CDP 1+1 gave ${JSON.stringify(r.result)}`);
    return ms;
  };
  const viaBidi = async () => {
    const s = now();
    const r = await bidi.send('script.evaluate', { expression: '1+1', target: { context }, awaitPromise: false });
    const ms = now() - s;
    if (r.result.value !== 2) throw new Error(`BiDi 1+1 gave ${JSON.stringify(r.result)}`);
    return ms;
  };
  for (let i = 0; i < warmup; i++) {
    await viaCdp();
    await viaBidi();
  }
  const c = [];
  const b = [];
  while (c.length < calls) {
    const n = Math.min(block, calls - c.length);
    for (let i = 0; i < n; i++) c.push(await viaCdp());
    for (let i = 0; i < n; i++) b.push(await viaBidi());
    if (c.length % 200 === 0) log(`bidi ${c.length}/${calls} calls each`);
  }
  return { c, b };
}

export async function run({
  log = () => {},
  calls = Number(process.env.BENCH_BIDI_CALLS || 2000),
  warmup = Number(process.env.BENCH_BIDI_WARMUP || 200),
  block = 20, // small blocks: on a loaded machine the noise then hits both sides alike
} = {}) {
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  let browser;
  let cdp;
  let bidi;
  let again;
  let c = [];
  let b = [];
  let firstMs;
  let laterMs;
  try {
    browser = await server.client.browsers.create({ headless: true, timeout_seconds: 600 });
    cdp = await CdpClient.connect(browser.cdp_ws_url);
    const sessionId = await cdp.attachToPage();
    let t0 = now();
    bidi = await BidiClient.connect(browser.webdriver_ws_url);
    const { context } = await bidi.start();
    firstMs = now() - t0;
    t0 = now();
    again = await BidiClient.connect(browser.webdriver_ws_url);
    await again.start();
    laterMs = now() - t0;
    await again.close();

    ({ c, b } = await alternate({ cdp, sessionId, bidi, context, calls, warmup, block, log }));
  } finally {
    await bidi?.close();
    await again?.close();
    await cdp?.close();
    if (browser) await server.client.browsers.deleteByID(browser.session_id).catch(() => {});
    await server.stop();
  }
  const cs = summary(c);
  const bs = summary(b);
  const note = `${calls} sequential calls each through Hangar, headless`;
  return [
    { name: 'bidi', metric: 'p50 script.evaluate vs CDP Runtime.evaluate RTT (ms)', value: bs.p50, baseline: cs.p50, ratio: bs.p50 / cs.p50, goal: `≤ ${GOAL_RATIO}×`, met: bs.p50 / cs.p50 <= GOAL_RATIO, note },
    { name: 'bidi', metric: 'p99 script.evaluate vs CDP Runtime.evaluate RTT (ms)', value: bs.p99, baseline: cs.p99, ratio: bs.p99 / cs.p99, goal: '', met: null, note },
    { name: 'bidi', metric: 'first connect + session.new + getTree (ms, starts the mapper)', value: firstMs, baseline: null, ratio: null, goal: '', met: null },
    { name: 'bidi', metric: 'later connect + session.new + getTree (ms)', value: laterMs, baseline: null, ratio: null, goal: '', met: null },
  ];
}

await runStandalone(import.meta.url, run);
