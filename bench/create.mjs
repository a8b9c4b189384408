// bench/create: POST /browsers → first CDP reply over cdp_ws_url (a raw WebSocket sending
// Browser.getVersion), beside a raw Chromium cold start measured in the same run (spawn with a
// fresh user-data-dir → "DevTools listening" → first Browser.getVersion reply). Runs interleave
// so drift on a noisy machine hits both sides alike. Goal (issue 42): create p50 ≤ 1.2 × raw p50.
// Hangar's create answers only once the browser has its first page (so a client finds
// contexts()[0].pages()[0], as on Kernel); the second baseline is the same raw start carried on
// to that point, which is the like-for-like comparison.
// Each DELETE is timed too (issue 42: p50 ≤ 30 ms, p99 ≤ 100 ms, Kernel's published p50 is 29 ms),
// beside the raw Chromium's own end (its process group killed, its folder removed) for scale.
import { CdpClient, createToCdp, launchChromium, now, runStandalone, startServer, summary } from './lib.mjs';

export const GOAL_RATIO = 1.2;
export const DELETE_GOAL_MS = { p50: 30, p99: 100 };

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
    const stopping = now();
    await chrome.stop();
    return { ms, withPage, stop: now() - stopping };
  } catch (err) {
    await chrome.stop();
    throw err;
  }
}

export async function run({ log = () => {}, runs = Number(process.env.BENCH_CREATE_RUNS || 20) } = {}) {
  const warmSpares = process.env.BENCH_WARM_SPARES ?? '0';
  // The operator's default: no host ports forwarded into instances. The tests' 200 (e2e
  // lib/server.mjs) cost each start ~15 ms of pasta's time; BENCH_HOST_PORTS measures a range.
  const hostPorts = process.env.BENCH_HOST_PORTS ?? '';
  const server = await startServer({ env: { HANGAR_WARM_SPARES: warmSpares, HANGAR_SANDBOX_ALLOW_HOST_PORTS: hostPorts } });
  const raw = [];
  const rawPage = [];
  const hangar = [];
  const deletes = [];
  const rawStops = [];
  try {
    // One warm-up of each (page cache, first-run work) that is not counted.
    await rawColdStart();
    await createToCdp(server);
    for (let i = 0; i < runs; i++) {
      const r = await rawColdStart();
      raw.push(r.ms);
      rawPage.push(r.withPage);
      rawStops.push(r.stop);
      hangar.push(await createToCdp(server, { deletes }));
      log(`create ${i + 1}/${runs}: hangar ${hangar.at(-1).toFixed(0)} ms, raw chromium ${raw.at(-1).toFixed(0)} ms`);
    }
  } finally {
    await server.stop();
  }
  const r = summary(raw);
  const rp = summary(rawPage);
  const h = summary(hangar);
  const d = summary(deletes);
  const rs = summary(rawStops);
  const note = `headless, warm spares ${warmSpares}, ${runs} runs`;
  return [
    { name: 'create', metric: 'p50 create→first CDP reply (ms)', value: h.p50, baseline: r.p50, ratio: h.p50 / r.p50, goal: `≤ ${GOAL_RATIO}×`, met: h.p50 / r.p50 <= GOAL_RATIO, note, samples: { hangar, raw } },
    { name: 'create', metric: 'p95 create→first CDP reply (ms)', value: h.p95, baseline: r.p95, ratio: h.p95 / r.p95, goal: '', met: null, note },
    { name: 'create', metric: 'p50 vs raw start with first page (ms)', value: h.p50, baseline: rp.p50, ratio: h.p50 / rp.p50, goal: `≤ ${GOAL_RATIO}×`, met: h.p50 / rp.p50 <= GOAL_RATIO, note, samples: { rawPage } },
    { name: 'create', metric: 'p50 DELETE answered (ms) vs raw Chromium stop', value: d.p50, baseline: rs.p50, ratio: d.p50 / rs.p50, goal: `≤ ${DELETE_GOAL_MS.p50} ms`, met: d.p50 <= DELETE_GOAL_MS.p50, note, samples: { deletes, rawStops } },
    { name: 'create', metric: 'p99 DELETE answered (ms) vs raw Chromium stop', value: d.p99, baseline: rs.p99, ratio: d.p99 / rs.p99, goal: `≤ ${DELETE_GOAL_MS.p99} ms`, met: d.p99 <= DELETE_GOAL_MS.p99, note },
  ];
}

await runStandalone(import.meta.url, run);
