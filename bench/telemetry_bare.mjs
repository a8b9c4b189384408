// bench/telemetry_bare: Chromium's own cost of what the telemetry collector asks, with no Hangar in
// between. A raw Chromium (same flags as Hangar), Playwright connected over CDP loading the same
// busy page as bench/telemetry.mjs, and a second bare CDP client that does, per mode, what the
// collector does (its own browser connection, attachToTarget flatten, the domains enabled, one
// Network.getResponseBody per finished text response). Alternating blocks, one mode per block.
import { createRequire } from 'node:module';

import { launchChromium, now, runStandalone, summary } from './lib.mjs';
import { BARE_MODES as MODES, bareCollector as collector, startSite } from './telemetry.mjs';

const require = createRequire(new URL('../tests/e2e/package.json', import.meta.url));
const { chromium } = require('playwright-core');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function run({ log = () => {}, loads = Number(process.env.BENCH_BARE_LOADS || 60), block = 10 } = {}) {
  const modes = (process.env.BENCH_BARE_MODES || 'off,full').split(',');
  const site = await startSite();
  const chrome = await launchChromium();
  let browser;
  try {
    browser = await chromium.connectOverCDP(chrome.wsUrl, { timeout: 30_000 });
    const page = browser.contexts()[0].pages()[0];
    const load = async () => {
      const t0 = now();
      await page.goto(`${site.url}/?r=${Math.random()}`, { waitUntil: 'load' });
      return now() - t0;
    };
    for (let i = 0; i < 5; i++) await load();
    const times = Object.fromEntries(modes.map((m) => [m, []]));
    while (times[modes[0]].length < loads) {
      for (const mode of modes) {
        const c = MODES[mode] ? await collector(chrome.wsUrl, MODES[mode]) : null;
        await sleep(300);
        for (let i = 0; i < block; i++) times[mode].push(await load());
        await c?.close();
      }
      log(`bare ${times[modes[0]].length}/${loads}`);
    }
    const base = summary(times[modes[0]]);
    return modes.map((m) => {
      const s = summary(times[m]);
      return { name: 'telemetry_bare', metric: `p50 page load, bare CDP client: ${m} (ms)`, value: s.p50, baseline: base.p50, ratio: s.p50 / base.p50, p95: s.p95, samples: times[m] };
    });
  } finally {
    await browser?.close().catch(() => {});
    await chrome.stop();
    site.close();
  }
}

await runStandalone(import.meta.url, run);
