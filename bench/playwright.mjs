// bench/playwright: POST /browsers/{id}/playwright/execute of a trivial snippet through the
// official SDK, against the same work done directly with playwright-core over the session's
// cdp_ws_url from this process (connection made once, as the executor caches it). Sequential
// calls in alternating blocks so machine noise hits both sides alike.
// Goal: execute p50 ≤ 50 ms (absolute; the ratio shows what the API path adds).
import { createRequire } from 'node:module';

import { now, runStandalone, startServer, summary } from './lib.mjs';

const require = createRequire(new URL('../tests/e2e/package.json', import.meta.url));
const { chromium } = require('playwright-core');

export const GOAL_MS = 50;

export async function run({
  log = () => {},
  calls = Number(process.env.BENCH_PLAYWRIGHT_CALLS || 200),
  warmup = Number(process.env.BENCH_PLAYWRIGHT_WARMUP || 20),
  block = 20,
} = {}) {
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  let session;
  let direct;
  const rows = { execReturn: [], execEvaluate: [], direct: [] };
  try {
    session = await server.client.browsers.create({ headless: true, timeout_seconds: 600 });
    const sid = session.session_id;
    direct = await chromium.connectOverCDP(session.cdp_ws_url);
    const page = direct.contexts()[0].pages()[0];

    const timed = async (fn, check) => {
      const t0 = now();
      const r = await fn();
      const ms = now() - t0;
      check(r);
      return ms;
    };
    const execute = (code) => () => server.client.browsers.playwright.execute(sid, { code });
    const ok = (want) => (r) => {
      if (!r.success || r.result !== want) throw new Error(`execute gave ${JSON.stringify(r)}`);
    };
    const steps = {
      execReturn: () => timed(execute('return 1 + 1;'), ok(2)),
      execEvaluate: () => timed(execute('return await page.evaluate(() => 1 + 1);'), ok(2)),
      direct: () =>
        timed(
          () => page.evaluate(() => 1 + 1),
          (v) => {
            if (v !== 2) throw new Error(`evaluate gave ${v}`);
          },
        ),
    };
    for (let i = 0; i < warmup; i++) for (const step of Object.values(steps)) await step();
    while (rows.direct.length < calls) {
      const n = Math.min(block, calls - rows.direct.length);
      for (const [name, step] of Object.entries(steps)) for (let i = 0; i < n; i++) rows[name].push(await step());
      log(`playwright ${rows.direct.length}/${calls} calls each`);
    }
  } finally {
    await direct?.close().catch(() => {});
    if (session) await server.client.browsers.deleteByID(session.session_id).catch(() => {});
    await server.stop();
  }
  const d = summary(rows.direct);
  const r = summary(rows.execReturn);
  const e = summary(rows.execEvaluate);
  const note = `${calls} sequential calls each after ${warmup} warm-up, headless; baseline: page.evaluate over cdp_ws_url in the bench process`;
  const row = (metric, s, p, withNote = false) => ({
    name: 'playwright',
    metric,
    value: s[p],
    baseline: d[p],
    ratio: s[p] / d[p],
    goal: p === 'p50' ? `≤ ${GOAL_MS} ms` : '',
    met: p === 'p50' ? s[p] <= GOAL_MS : null,
    ...(withNote ? { note } : {}),
  });
  return [
    row('p50 execute `return 1 + 1` (ms)', r, 'p50', true),
    row('p95 execute `return 1 + 1` (ms)', r, 'p95'),
    row('p50 execute page.evaluate (ms)', e, 'p50'),
    row('p95 execute page.evaluate (ms)', e, 'p95'),
  ];
}

await runStandalone(import.meta.url, run);
