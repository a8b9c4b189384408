// The API under load as many agents use it: 200 concurrent clients, each on its own keep-alive
// connection, reading (list, get) and writing (tag updates) for 60 s against a server holding two
// browsers. Goal: no error and GET /browsers/{id} p99 <= 50 ms. The baseline is the same get from
// one client alone in the same run.
import { percentile, startServer } from './lib.mjs';
import { apiLoad } from '../tests/e2e/lib/load.mjs';

export async function run({ log }) {
  const server = await startServer();
  try {
    const ids = [];
    for (let i = 0; i < 2; i++) ids.push((await server.client.browsers.create({ headless: true })).session_id);
    const alone = await apiLoad({ port: server.port, apiKey: server.apiKey, sessionIds: ids, clients: 1, seconds: 5 });
    const seconds = Number(process.env.BENCH_LOAD_SECONDS || 60);
    log(`200 clients for ${seconds} s`);
    const busy = await apiLoad({ port: server.port, apiKey: server.apiKey, sessionIds: ids, clients: 200, seconds });
    const p99 = percentile(busy.byOp.get, 99);
    const base = percentile(alone.byOp.get, 99);
    return [
      { name: 'load', metric: 'requests/s with 200 clients', value: busy.count / seconds },
      { name: 'load', metric: 'failed requests', value: busy.failures.length, goal: '= 0', met: busy.failures.length === 0 },
      { name: 'load', metric: 'GET /browsers/{id} p50 ms (200 clients)', value: percentile(busy.byOp.get, 50), baseline: percentile(alone.byOp.get, 50) },
      { name: 'load', metric: 'GET /browsers/{id} p99 ms (200 clients)', value: p99, baseline: base, ratio: p99 / base, goal: '<= 50 ms', met: p99 <= 50 },
      { name: 'load', metric: 'PATCH /browsers/{id} p99 ms (200 clients)', value: percentile(busy.byOp.update, 99) },
    ];
  } finally {
    await server.stop();
  }
}
