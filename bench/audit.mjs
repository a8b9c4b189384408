// bench/audit: what the audit log costs a request. GET /browsers/{id} on two servers alike but
// for [audit] enabled (HANGAR_AUDIT=true / false), each with one headless browser, requests
// interleaved in rounds so both sides see the same machine noise. Goal (issue 21): p50 with the
// audit log on ≤ 1.05× off — it costs a queue push on the request thread; rows are written in
// batches by one writer thread.
import { now, runStandalone, startServer, summary } from './lib.mjs';

async function timed(server, id) {
  const t0 = now();
  const res = await server.fetch(`/browsers/${id}`);
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`GET /browsers/${id}: ${res.status}`);
  return now() - t0;
}

export async function run({ log = () => {}, requests = Number(process.env.BENCH_AUDIT_REQUESTS || 3000) } = {}) {
  const on = await startServer({ env: { HANGAR_WARM_SPARES: '0', HANGAR_AUDIT: 'true', HANGAR_LOG_LEVEL: 'warning' } });
  const off = await startServer({ env: { HANGAR_WARM_SPARES: '0', HANGAR_AUDIT: 'false', HANGAR_LOG_LEVEL: 'warning' } });
  const samples = { on: [], off: [] };
  try {
    const bOn = await on.client.browsers.create({ headless: true });
    const bOff = await off.client.browsers.create({ headless: true });
    for (let i = 0; i < 200; i++) {
      await timed(on, bOn.session_id); // warm-up: connections, caches, the writer's first batch
      await timed(off, bOff.session_id);
    }
    const round = 100;
    for (let done = 0; done < requests; done += round) {
      const first = (done / round) % 2 ? ['off', off, bOff] : ['on', on, bOn];
      const second = first[0] === 'on' ? ['off', off, bOff] : ['on', on, bOn];
      for (const [side, server, b] of [first, second])
        for (let i = 0; i < round; i++) samples[side].push(await timed(server, b.session_id));
    }
    log(`${samples.on.length} requests a side`);
    const rows = (await on.client.auditLogs.list({
      start: new Date(Date.now() - 3_600_000).toISOString(),
      end: new Date(Date.now() + 60_000).toISOString(),
      limit: 1,
    })).items;
    if (!rows.length) throw new Error('the audited server recorded nothing');
    await on.client.browsers.deleteByID(bOn.session_id);
    await off.client.browsers.deleteByID(bOff.session_id);
  } finally {
    await on.stop();
    await off.stop();
  }
  const a = summary(samples.on);
  const b = summary(samples.off);
  const row = (metric, value, baseline, goal, met) => ({
    name: 'audit',
    metric,
    value,
    baseline,
    ratio: value / baseline,
    goal,
    met,
    note: `${samples.on.length} GET /browsers/{id} a side, keep-alive, interleaved rounds of 100; baseline = audit off`,
  });
  return [
    row('p50 GET /browsers/{id}, audit on (ms)', a.p50, b.p50, '≤ 1.05×', a.p50 / b.p50 <= 1.05),
    row('p99 GET /browsers/{id}, audit on (ms)', a.p99, b.p99, '', null),
  ];
}

await runStandalone(import.meta.url, run);
