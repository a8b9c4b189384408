// bench/playwright: POST /browsers/{id}/playwright/execute of a trivial snippet through the
// official SDK, against the same work done directly with playwright-core over the session's
// cdp_ws_url from this process (connection made once, as the executor caches it). Sequential
// calls in alternating blocks so machine noise hits both sides alike.
// Goal: execute p50 ≤ 50 ms (absolute; the ratio shows what the API path adds).
import { createRequire } from 'node:module';

import { interleaved, runStandalone, startServer, summary, timed } from './lib.mjs';

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
  let rows;
  try {
    session = await server.client.browsers.create({ headless: true, timeout_seconds: 600 });
    const sid = session.session_id;
    direct = await chromium.connectOverCDP(session.cdp_ws_url);
    const page = direct.contexts()[0].pages()[0];

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
    rows = await interleaved(steps, { calls, warmup, block, log, label: 'playwright' });
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
