// bench/spares: creates that come in a row, the way an outside measurement found them slow (one
// spare taken, its replacement not ready for the next create). Each pattern runs against a
// server whose spares follow demand (HANGAR_WARM_SPARES=1, the default maximum of 4) and, as the
// same-run baseline, one that keeps exactly one spare per kind (HANGAR_WARM_SPARES_MAX=1: what
// Hangar did before). Headless, default options; each create is timed to the first CDP reply and
// the session deleted at once.
//   back-to-back: 20 creates one after the other, as fast as they go;
//   one per second: 20 creates at 1/s;
//   burst: 5 at once, 10 s after a first burst of 5 (the first one teaches the server).
// Goals (issue 23, point 3): one per second and burst p50 ≤ 30 ms and p99 ≤ 100 ms.
import { createToCdp, now, percentile, runStandalone, startServer } from './lib.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function patterns(server) {
  await sleep(3000); // the first spares
  const inRow = [];
  for (let i = 0; i < 20; i++) inRow.push(await createToCdp(server));
  await sleep(3000);
  const perSecond = [];
  for (let i = 0; i < 20; i++) {
    const t0 = now();
    perSecond.push(await createToCdp(server));
    await sleep(Math.max(0, 1000 - (now() - t0)));
  }
  await Promise.all(Array.from({ length: 5 }, () => createToCdp(server)));
  await sleep(10_000);
  const burst = await Promise.all(Array.from({ length: 5 }, () => createToCdp(server)));
  return { inRow, perSecond, burst };
}

export async function run({ log }) {
  const adaptive = await startServer({ env: { HANGAR_WARM_SPARES: '1' } });
  let ours;
  try {
    ours = await patterns(adaptive);
  } finally {
    await adaptive.stop();
  }
  const fixed = await startServer({ env: { HANGAR_WARM_SPARES: '1', HANGAR_WARM_SPARES_MAX: '1' } });
  let before;
  try {
    before = await patterns(fixed);
  } finally {
    await fixed.stop();
  }
  const rows = [];
  for (const [key, label, goal] of [
    ['inRow', 'back-to-back', false],
    ['perSecond', 'one per second', true],
    ['burst', 'burst of 5', true],
  ]) {
    const p50 = percentile(ours[key], 50);
    const p99 = percentile(ours[key], 99);
    log(`${label}: adaptive, in order: ${ours[key].map((ms) => ms.toFixed(0)).join(' ')} ms`);
    log(`${label}: adaptive p50 ${p50.toFixed(1)} p99 ${p99.toFixed(1)}; one spare p50 ${percentile(before[key], 50).toFixed(1)} p99 ${percentile(before[key], 99).toFixed(1)}`);
    rows.push(
      { name: 'spares', metric: `${label}: p50 create→CDP (ms)`, value: p50, baseline: percentile(before[key], 50), ratio: p50 / percentile(before[key], 50), goal: goal ? '≤ 30 ms' : '', met: goal ? p50 <= 30 : null },
      { name: 'spares', metric: `${label}: p99 create→CDP (ms)`, value: p99, baseline: percentile(before[key], 99), ratio: p99 / percentile(before[key], 99), goal: goal ? '≤ 100 ms' : '', met: goal ? p99 <= 100 : null },
    );
  }
  return rows;
}

await runStandalone(import.meta.url, run);
