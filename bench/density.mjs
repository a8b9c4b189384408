// bench/density: how many idle sessions one machine holds, and whether the API stays responsive
// at that count (issue 23 point 7). For each kind (headful, then headless) on a fresh server:
// create sessions two at a time and let each settle, summing their PSS (the sandbox's process
// tree, /proc/<pid>/smaps_rollup), until the sessions' PSS reaches 80 % of MemTotal, the
// machine's MemAvailable falls under 20 %, or BENCH_DENSITY_MAX_<KIND> sessions exist (defaults
// 80 headful / 120 headless: past what 80 % of 24 GB holds). The count the machine
// holds is then 80 % of MemTotal over the mean PSS per session: measured, not extrapolated, when
// the memory bound stopped the loop. At the final count: GET /browsers and GET /browsers/{id}
// p50/p99 over 200 sequential calls each, against the same calls with one session in the same
// server. Goals: ≥ 40 headful, ≥ 80 headless, GET /browsers p99 ≤ 50 ms.
import { readFileSync } from 'node:fs';

import { childrenByParent, instancePssMb, instancePssParts, now, percentile, runStandalone, startServer } from './lib.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function meminfoMb() {
  const text = readFileSync('/proc/meminfo', 'utf8');
  const field = (name) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(text)[1]) / 1024;
  return { total: field('MemTotal'), available: field('MemAvailable') };
}

async function apiTimes(server, sessionId, calls = 200) {
  const list = [];
  const get = [];
  for (let i = 0; i < calls; i++) {
    let t0 = now();
    let res = await server.fetch('/browsers');
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`GET /browsers: ${res.status}`);
    list.push(now() - t0);
    t0 = now();
    res = await server.fetch(`/browsers/${sessionId}`);
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`GET /browsers/{id}: ${res.status}`);
    get.push(now() - t0);
  }
  return { list, get };
}

async function density(kind, log) {
  const headless = kind === 'headless';
  const goal = headless ? 80 : 40;
  const max = Number(process.env[`BENCH_DENSITY_MAX_${kind.toUpperCase()}`] || (headless ? 120 : 80));
  const server = await startServer({
    env: { HANGAR_WARM_SPARES: '0', HANGAR_LOG_LEVEL: 'warning', HANGAR_MAX_BROWSERS_PER_PROJECT: '0' },
  });
  const ids = [];
  const pss = new Map();
  try {
    const create = async () => {
      const b = await server.client.browsers.create({ headless, timeout_seconds: 3600 });
      ids.push(b.session_id);
      return b.session_id;
    };
    const first = await create();
    await sleep(3000);
    const alone = await apiTimes(server, first);
    let stoppedBy = `the cap of ${max}`;
    const { total } = meminfoMb();
    while (ids.length < max) {
      const batch = await Promise.all(Array.from({ length: Math.min(2, max - ids.length) }, create));
      await sleep(1500); // idle figures: start-up work done
      // The new sessions only (PSS of the others moves a little as pages are shared): one walk of
      // /proc per batch, or the loop slows with the square of the count.
      const kids = childrenByParent();
      for (const id of ids.filter((id) => !pss.has(id))) pss.set(id, instancePssMb(server, id, kids));
      const sum = [...pss.values()].reduce((a, b) => a + b, 0);
      const { available } = meminfoMb();
      if (ids.length % 10 < 2) log(`${kind}: ${ids.length} sessions, ${Math.round(sum)} MB PSS, ${Math.round(available)} MB available`);
      if (sum >= 0.8 * total) { stoppedBy = '80 % of memory in sessions'; break; }
      if (available < 0.2 * total) { stoppedBy = 'MemAvailable under 20 %'; break; }
    }
    // PSS splits shared pages between the sessions that map them: read again at the final count.
    const kids = childrenByParent();
    const parts = {};
    for (const id of ids) {
      const own = instancePssParts(server, id, kids);
      pss.set(id, Object.values(own).reduce((a, b) => a + b, 0));
      for (const [name, mb] of Object.entries(own)) parts[name] = (parts[name] ?? 0) + mb / ids.length;
    }
    const sum = [...pss.values()].reduce((a, b) => a + b, 0);
    const mean = sum / pss.size;
    const itemised = Object.entries(parts).sort((a, b) => b[1] - a[1]).map(([name, mb]) => `${name} ${mb.toFixed(1)}`).join(', ');
    log(`${kind}: mean PSS per session at ${ids.length}: ${mean.toFixed(1)} MB = ${itemised}`);
    const holds = stoppedBy.startsWith('the cap') ? Math.floor((0.8 * total) / mean) : ids.length;
    // The PSS walk above blocks this process for seconds, long enough for the server to close
    // the idle keep-alive connection (5 s) before the client's own timer could retire it: the
    // first request may meet a closed socket. That is the client's race, not the server's.
    await server.fetch('/healthz').catch(() => {});
    const busy = await apiTimes(server, first);
    const listP99 = percentile(busy.list, 99);
    return [
      {
        name: 'density',
        metric: `idle ${kind} sessions in 80 % of ${Math.round(total / 1024)} GB`,
        value: holds,
        goal: `≥ ${goal}`,
        met: holds >= goal,
        note: `${ids.length} created (stopped by ${stoppedBy}); mean PSS ${mean.toFixed(0)} MB per session (${itemised} MB)${stoppedBy.startsWith('the cap') ? '; count = 80 % of MemTotal / mean PSS' : ''}`,
      },
      {
        name: 'density',
        metric: `GET /browsers p99 with ${ids.length} ${kind} sessions (ms)`,
        value: listP99,
        baseline: percentile(alone.list, 99),
        ratio: listP99 / percentile(alone.list, 99),
        goal: '≤ 50 ms',
        met: listP99 <= 50,
        note: `p50 ${percentile(busy.list, 50).toFixed(2)} ms; GET /browsers/{id} p50 ${percentile(busy.get, 50).toFixed(2)} / p99 ${percentile(busy.get, 99).toFixed(2)} ms (one session: ${percentile(alone.get, 99).toFixed(2)}); baseline = the same with one session`,
      },
    ];
  } finally {
    for (const id of ids) await server.client.browsers.deleteByID(id).catch(() => {});
    await server.stop();
  }
}

export async function run({ log = () => {} } = {}) {
  const kinds = (process.env.BENCH_DENSITY_KINDS || 'headful,headless').split(',');
  const rows = [];
  for (const kind of kinds) rows.push(...(await density(kind, log)));
  return rows;
}

runStandalone(import.meta.url, run);
