// bench/bidi_alone: the chromium-bidi mapper's own cost, without Hangar. Chromium headless on its
// DevTools port, plugins/bidi/mapper/mapper.mjs run by Node on a unix socket against it (as the
// agent runs it, minus the sandbox), and the same alternating script.evaluate / Runtime.evaluate
// round trips as bench/bidi, the CDP side straight to Chromium. What the ratio shows is the
// mapper's hop and work alone, which bench/bidi's goal (≤ 1.5×) cannot go below.
//   BENCH_BIDI_MAPPER=<path>   another mapper.mjs (a variant under study; it must sit where its
//                              imports resolve, e.g. beside the real one)
//   BENCH_BIDI_NODE_FLAGS="…"  flags for the mapper's Node (e.g. --cpu-prof --cpu-prof-dir=DIR)
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { BidiClient } from '../tests/e2e/lib/bidi.mjs';
import { alternate } from './bidi.mjs';
import { CdpClient, launchChromium, runStandalone, summary } from './lib.mjs';

const MAPPER = process.env.BENCH_BIDI_MAPPER || fileURLToPath(new URL('../plugins/bidi/mapper/mapper.mjs', import.meta.url));

export async function run({
  log = () => {},
  calls = Number(process.env.BENCH_BIDI_CALLS || 2000),
  warmup = Number(process.env.BENCH_BIDI_WARMUP || 200),
  block = 20,
} = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'hangar-bench-bidi-'));
  const socket = join(dir, 'bidi.sock');
  const chromium = await launchChromium();
  let mapper;
  let cdp;
  let bidi;
  let c;
  let b;
  try {
    const flags = (process.env.BENCH_BIDI_NODE_FLAGS || '').split(' ').filter(Boolean);
    mapper = spawn(process.execPath, [...flags, MAPPER, socket, chromium.wsUrl], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise((resolve, reject) => {
      mapper.stdout.on('data', (d) => String(d).includes('ready') && resolve());
      mapper.once('exit', (code) => reject(new Error(`the mapper exited (${code}) before it listened`)));
    });
    bidi = await BidiClient.connect(`ws+unix://${socket}:/`);
    const { context } = await bidi.start();
    cdp = await CdpClient.connect(chromium.wsUrl);
    const sessionId = await cdp.attachToPage();
    ({ c, b } = await alternate({ cdp, sessionId, bidi, context, calls, warmup, block, log }));
  } finally {
    await bidi?.close();
    await cdp?.close();
    if (mapper && mapper.exitCode === null) {
      const exited = new Promise((r) => mapper.once('exit', r));
      mapper.kill('SIGTERM');
      await exited;
    }
    await chromium.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  const cs = summary(c);
  const bs = summary(b);
  return [
    {
      name: 'bidi_alone',
      metric: 'p50 script.evaluate via the mapper vs Runtime.evaluate, no Hangar (ms)',
      value: bs.p50,
      baseline: cs.p50,
      ratio: bs.p50 / cs.p50,
      goal: '',
      met: null,
      note: `${calls} sequential calls each, straight to Chromium's DevTools port and the mapper's socket`,
    },
  ];
}

await runStandalone(import.meta.url, run);
