// bench/metrics: what one Prometheus scrape costs with many sessions. GET /metrics (an org-wide
// key) on a server holding BENCH_METRICS_SESSIONS headless browsers (default 50): each scrape
// reads every instance's cgroup files, asks the browsers plugin for its families (one grouped
// SQL count) and renders the request histograms. Baseline: GET /healthz on the same server,
// interleaved. Goal (issue 22): p50 ≤ 20 ms.
import { now, runStandalone, startServer, summary } from './lib.mjs';

async function timed(server, path) {
  const t0 = now();
  const res = await server.fetch(path);
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`GET ${path}: ${res.status}`);
  return now() - t0;
}

export async function run({ log = () => {}, sessions = Number(process.env.BENCH_METRICS_SESSIONS || 50), scrapes = 200 } = {}) {
  const server = await startServer({
    env: { HANGAR_WARM_SPARES: '0', HANGAR_LOG_LEVEL: 'warning', HANGAR_MAX_BROWSERS_PER_PROJECT: '0' },
  });
  const samples = { metrics: [], healthz: [] };
  let bytes = 0;
  try {
    const ids = [];
    // A few at a time: the server staggers cold starts anyway.
    for (let i = 0; i < sessions; i += 4) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(4, sessions - i) }, () => server.client.browsers.create({ headless: true, timeout_seconds: 600 })),
      );
      ids.push(...batch.map((b) => b.session_id));
      log(`${ids.length}/${sessions} sessions`);
    }
    const text = await (await server.fetch('/metrics')).text();
    bytes = text.length;
    const memSeries = text.split('\n').filter((l) => l.startsWith('hangar_instance_memory_bytes{')).length;
    if (memSeries < sessions) throw new Error(`only ${memSeries} instances in /metrics`);
    for (let i = 0; i < 20; i++) await timed(server, '/metrics');
    for (let i = 0; i < scrapes; i++) {
      samples.metrics.push(await timed(server, '/metrics'));
      samples.healthz.push(await timed(server, '/healthz'));
    }
    for (const id of ids) await server.client.browsers.deleteByID(id);
  } finally {
    await server.stop();
  }
  const m = summary(samples.metrics);
  const h = summary(samples.healthz);
  return [{
    name: 'metrics',
    metric: `p50 GET /metrics with ${sessions} sessions (ms)`,
    value: m.p50,
    baseline: h.p50,
    ratio: m.p50 / h.p50,
    goal: '≤ 20 ms',
    met: m.p50 <= 20,
    note: `${scrapes} scrapes of ${bytes} bytes, p95 ${m.p95.toFixed(2)} ms; baseline = GET /healthz p50 on the same server`,
  }];
}

runStandalone(import.meta.url, run);
