// bench/fast: how fast a browser is ready, the way issue "Fast create" measures it, in one run:
// - create → first CDP reply (Browser.getVersion) p50/p95/p99 from a warm spare, from a cold
//   start, and from a pool (acquire), beside a raw Chromium cold start measured in the same run;
// - pool acquire latency;
// - a full lifecycle (get a browser, Playwright connectOverCDP, open a local page, read its title,
//   give it back) one at a time and 10 at once with a pool of 10, beside the same lifecycle on
//   10 raw Chromiums started beforehand (connect, open, title, disconnect: what is left when
//   Hangar adds nothing), with the time of each step and the CPU each side spent per lifecycle;
// - memory of an idle headless and an idle headful session: PSS summed over the instance's
//   processes (/proc/<pid>/smaps_rollup of the sandbox and everything under it).
// Goals: spare/pool p50 ≤ 30 ms, p99 ≤ 100 ms, ≤ 0.05× raw; lifecycle p50 ≤ 150 ms alone, p95 ≤
// 600 ms at 10 at once; acquire p50 ≤ 10 ms; idle headless ≤ 300 MB PSS.
import { CdpClient, instancePssMb, launchChromium, lifecycle, now, runStandalone, startServer, summary, treeCpuMs } from './lib.mjs';
import { startTestPages } from '../tests/e2e/lib/server.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function firstReply(wsUrl) {
  const cdp = await CdpClient.connect(wsUrl);
  await cdp.send('Browser.getVersion');
  await cdp.close();
}

async function rawColdStart() {
  const t0 = now();
  const chrome = await launchChromium();
  try {
    await firstReply(chrome.wsUrl);
    return now() - t0;
  } finally {
    await chrome.stop();
  }
}

async function idlePss(server, headless) {
  const b = await server.client.browsers.create({ headless, timeout_seconds: 600 });
  try {
    await sleep(3000); // let start-up work settle: this is the idle figure
    return instancePssMb(server, b.session_id);
  } finally {
    await server.client.browsers.deleteByID(b.session_id);
  }
}

const STEPS = ['acquire', 'connect', 'goto', 'title', 'disconnect', 'release'];

// A lifecycle on a pool's lease, given back at the end.
function pooledLifecycle(client, pool, pageUrl) {
  return lifecycle(pageUrl, async () => {
    const b = await client.browserPools.acquire(pool, { acquire_timeout_seconds: 30 });
    if (!b) throw new Error('the pool had nothing to lease');
    return { wsUrl: b.cdp_ws_url, end: () => client.browserPools.release(pool, { session_id: b.session_id }) };
  });
}

const total = (steps) => steps.reduce((a, b) => a + b, 0);

// Ten lifecycles at once, `rounds` times; answers the step times and the CPU ms per lifecycle
// of the browser side (the trees under `roots`) and of this process (the Playwright clients).
async function bursts(rounds, roots, one) {
  const out = [];
  const before = roots().reduce((a, pid) => a + treeCpuMs(pid), 0);
  const client = process.cpuUsage();
  for (let round = 0; round < rounds; round++) out.push(...(await Promise.all(Array.from({ length: 10 }, (_, i) => one(i)))));
  const used = process.cpuUsage(client);
  const browserCpu = (roots().reduce((a, pid) => a + treeCpuMs(pid), 0) - before) / out.length;
  return { steps: out, browserCpu, clientCpu: (used.user + used.system) / 1000 / out.length };
}

function stepLine(label, steps) {
  return `${label}: ${STEPS.map((name, i) => `${name} ${summary(steps.map((s) => s[i])).p50.toFixed(0)}`).join(', ')} ms (p50 of each step)`;
}

export async function run({ log = () => {}, runs = Number(process.env.BENCH_FAST_RUNS || 15) } = {}) {
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '1', HANGAR_MAX_BROWSERS_PER_PROJECT: '40' } });
  const pages = await startTestPages();
  const client = server.client;
  const raw = [];
  const spare = [];
  const cold = [];
  const pooled = [];
  const acquire = [];
  const single = [];
  let burst = { steps: [] };
  let rawBurst = { steps: [] };
  let pssHeadless = NaN;
  let pssHeadful = NaN;
  try {
    for (let i = 0; i < Math.ceil(runs / 2); i++) {
      raw.push(await rawColdStart());
      let t0 = now();
      const c = await client.browsers.create({ headless: true, viewport: { width: 1280, height: 720 } }); // no spare
      await firstReply(c.cdp_ws_url);
      cold.push(now() - t0);
      await client.browsers.deleteByID(c.session_id);
      log(`fast: raw ${raw.at(-1).toFixed(0)} ms, cold ${cold.at(-1).toFixed(0)} ms`);
    }
    for (let i = 0; i < runs; i++) {
      await sleep(1500); // the spare filler replaces the last one
      const t0 = now();
      const b = await client.browsers.create({ headless: true });
      await firstReply(b.cdp_ws_url);
      spare.push(now() - t0);
      await client.browsers.deleteByID(b.session_id);
    }
    log(`fast: spare p50 ${summary(spare).p50.toFixed(1)} ms`);

    await client.browserPools.create({ name: 'bench', size: 10, headless: true, fill_rate_per_minute: 3000 });
    const deadline = Date.now() + 120_000;
    while ((await client.browserPools.retrieve('bench')).available_count < 10) {
      if (Date.now() > deadline) throw new Error('the pool did not fill in 2 minutes');
      await sleep(500);
    }
    for (let i = 0; i < runs * 2; i++) {
      const t0 = now();
      const b = await client.browserPools.acquire('bench', {});
      acquire.push(now() - t0);
      await firstReply(b.cdp_ws_url);
      pooled.push(now() - t0);
      await client.browserPools.release('bench', { session_id: b.session_id });
    }
    log(`fast: acquire p50 ${summary(acquire).p50.toFixed(1)} ms`);
    for (let i = 0; i < runs; i++) single.push(total(await pooledLifecycle(client, 'bench', pages.url)));
    burst = await bursts(3, () => [server.pid], () => pooledLifecycle(client, 'bench', pages.url));
    log(`fast: lifecycle alone p50 ${summary(single).p50.toFixed(0)} ms, 10 at once p95 ${summary(burst.steps.map(total)).p95.toFixed(0)} ms`);
    log(`fast: ${stepLine('10 at once through Hangar', burst.steps)}`);
    await client.browserPools.delete('bench', { force: true });
    // The same ten lifecycles on ten raw Chromiums started beforehand: what the 2 cores give
    // when Hangar adds nothing.
    const raws = [];
    try {
      for (let i = 0; i < 10; i++) raws.push(await launchChromium());
      await sleep(2000);
      rawBurst = await bursts(3, () => raws.map((c) => c.proc.pid), (i) => lifecycle(pages.url, async () => ({ wsUrl: raws[i].wsUrl, end: async () => {} })));
      log(`fast: ${stepLine('10 at once on raw Chromiums', rawBurst.steps)}`);
      log(
        `fast: CPU per lifecycle at 10 at once: Hangar side ${burst.browserCpu.toFixed(0)} ms, raw Chromium ${rawBurst.browserCpu.toFixed(0)} ms;` +
          ` Playwright client ${burst.clientCpu.toFixed(0)} / ${rawBurst.clientCpu.toFixed(0)} ms`,
      );
    } finally {
      for (const c of raws) await c.stop();
    }
    pssHeadless = await idlePss(server, true);
    pssHeadful = await idlePss(server, false);
  } finally {
    await pages.close();
    await server.stop();
  }
  const r = summary(raw);
  const s = summary(spare);
  const c = summary(cold);
  const p = summary(pooled);
  const a = summary(acquire);
  const l1 = summary(single);
  const l10 = summary(burst.steps.map(total));
  const raw10 = summary(rawBurst.steps.map(total));
  const note = `headless; ${runs} spare creates, ${raw.length} raw/cold starts, ${pooled.length} acquires, pool of 10`;
  const row = (metric, value, baseline, goal, met) => ({
    name: 'fast',
    metric,
    value,
    baseline,
    ratio: typeof baseline === 'number' ? value / baseline : '',
    goal,
    met,
    note,
  });
  return [
    row('p50 create→CDP, warm spare (ms)', s.p50, r.p50, '≤ 30 ms, ≤ 0.05×', s.p50 <= 30 && s.p50 / r.p50 <= 0.05),
    row('p99 create→CDP, warm spare (ms)', s.p99, r.p99, '≤ 100 ms', s.p99 <= 100),
    row('p50 create→CDP, pool acquire (ms)', p.p50, r.p50, '≤ 30 ms, ≤ 0.05×', p.p50 <= 30 && p.p50 / r.p50 <= 0.05),
    row('p99 create→CDP, pool acquire (ms)', p.p99, r.p99, '≤ 100 ms', p.p99 <= 100),
    row('p50 create→CDP, cold (ms)', c.p50, r.p50, '', null),
    row('p95 create→CDP, cold (ms)', c.p95, r.p95, '', null),
    row('p50 pool acquire (ms)', a.p50, '', '≤ 10 ms', a.p50 <= 10),
    row('p50 lifecycle, one at a time (ms)', l1.p50, '', '≤ 150 ms', l1.p50 <= 150),
    row('p95 lifecycle, 10 at once, pool of 10, vs 10 raw Chromiums (ms)', l10.p95, raw10.p95, '≤ 600 ms', l10.p95 <= 600),
    row('p50 lifecycle, 10 at once (ms)', l10.p50, raw10.p50, '', null),
    row('CPU per lifecycle at 10 at once, browser side (ms)', burst.browserCpu, rawBurst.browserCpu, '', null),
    row('idle headless session PSS (MB)', pssHeadless, '', '≤ 300 MB', pssHeadless <= 300),
    row('idle headful session PSS (MB)', pssHeadful, '', '', null),
  ];
}

await runStandalone(import.meta.url, run);
