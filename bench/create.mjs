// bench/create: POST /browsers → first CDP reply over cdp_ws_url (a raw WebSocket sending
// Browser.getVersion), beside a raw Chromium cold start measured in the same run (spawn with a
// fresh user-data-dir → "DevTools listening" → first Browser.getVersion reply). Runs interleave
// so drift on a noisy machine hits both sides alike. Goal: create p50 ≤ 1.3 × raw p50.
// Hangar's create answers only once the browser has its first page (so a client finds
// contexts()[0].pages()[0], as on Kernel); the second baseline is the same raw start carried on
// to that point, which is the like-for-like comparison.
import { CdpClient, createToCdp, launchChromium, now, runStandalone, startServer, summary } from './lib.mjs';

export const GOAL_RATIO = 1.3;

async function rawColdStart() {
  const t0 = now();
  const chrome = await launchChromium();
  try {
    const cdp = await CdpClient.connect(chrome.wsUrl);
    await cdp.send('Browser.getVersion');
    const ms = now() - t0;
    for (;;) {
      const { targetInfos } = await cdp.send('Target.getTargets');
      if (targetInfos.some((t) => t.type === 'page')) break;
      await new Promise((r) => setTimeout(r, 2));
    }
    const withPage = now() - t0;
    await cdp.close();
    return { ms, withPage };
  } finally {
    await chrome.stop();
  }
}

export async function run({ log = () => {}, runs = Number(process.env.BENCH_CREATE_RUNS || 20) } = {}) {
  const warmSpares = process.env.BENCH_WARM_SPARES ?? '0';
  const server = await startServer({ env: { HANGAR_WARM_SPARES: warmSpares } });
  const raw = [];
  const rawPage = [];
  const hangar = [];
  try {
    // One warm-up of each (page cache, first-run work) that is not counted.
    await rawColdStart();
    await createToCdp(server);
    for (let i = 0; i < runs; i++) {
      const r = await rawColdStart();
      raw.push(r.ms);
      rawPage.push(r.withPage);
      hangar.push(await createToCdp(server));
      log(`create ${i + 1}/${runs}: hangar ${hangar.at(-1).toFixed(0)} ms, raw chromium ${raw.at(-1).toFixed(0)} ms`);
    }
  } finally {
    await server.stop();
  }
  const r = summary(raw);
  const rp = summary(rawPage);
  const h = summary(hangar);
  const note = `headless, warm spares ${warmSpares}, ${runs} runs`;
  return [
    { name: 'create', metric: 'p50 create→first CDP reply (ms)', value: h.p50, baseline: r.p50, ratio: h.p50 / r.p50, goal: `≤ ${GOAL_RATIO}×`, met: h.p50 / r.p50 <= GOAL_RATIO, note, samples: { hangar, raw } },
    { name: 'create', metric: 'p95 create→first CDP reply (ms)', value: h.p95, baseline: r.p95, ratio: h.p95 / r.p95, goal: '', met: null, note },
    { name: 'create', metric: 'p50 vs raw start with first page (ms)', value: h.p50, baseline: rp.p50, ratio: h.p50 / rp.p50, goal: `≤ ${GOAL_RATIO}×`, met: h.p50 / rp.p50 <= GOAL_RATIO, note, samples: { rawPage } },
  ];
}

await runStandalone(import.meta.url, run);
