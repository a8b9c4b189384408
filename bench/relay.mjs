// bench/relay: what the server's plain relay costs a large answer. `fs/read_file` of a 256 MiB
// file (`BENCH_RELAY_MB`) in a headless session, through the API (server → agent → file), against
// the same read straight from the session's agent socket (the instance's own answer with no relay
// in between), alternated `BENCH_RELAY_ROUNDS` (6) times; throughput p50 of each side and their
// ratio, and how far the server's resident memory rose over the API reads (the relay streams the
// answer through a bounded buffer, so it must stay far below the file's size).
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';

import { now, percentile, runStandalone, startServer } from './lib.mjs';

const MB = Number(process.env.BENCH_RELAY_MB || 256);
const ROUNDS = Number(process.env.BENCH_RELAY_ROUNDS || 6);

// Reads a whole answer, counting bytes; resolves to MB/s.
function timedGet(options) {
  return new Promise((resolve, reject) => {
    const t0 = now();
    const req = http.get(options, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode}`));
      let n = 0;
      res.on('data', (c) => (n += c.length));
      res.on('end', () => {
        if (n !== MB << 20) return reject(new Error(`got ${n} bytes of ${MB << 20}`));
        resolve(MB / ((now() - t0) / 1000));
      });
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

export async function run({ log }) {
  const server = await startServer();
  const rss = (field) => Number(readFileSync(`/proc/${server.pid}/status`, 'utf8').match(new RegExp(`${field}:\\s+(\\d+)`))[1]) / 1024;
  let id;
  try {
    const b = await server.client.browsers.create({ headless: true });
    id = b.session_id;
    const made = await server.client.browsers.process.exec(id, { command: `head -c ${MB}M /dev/urandom > /tmp/relay.bin` });
    if (made.exit_code !== 0) throw new Error('could not write the file');
    // The agent's socket in the session's instance folder (the one whose spec names the session).
    const root = join(server.dataDir, 'instances');
    const dirs = readdirSync(root)
      .map((d) => join(root, d))
      .filter((d) => existsSync(join(d, 'agent.sock')));
    const spec = (d) => (existsSync(join(d, 'spec.json')) ? readFileSync(join(d, 'spec.json'), 'utf8') : '');
    const socket = dirs.find((d) => spec(d).includes(id)) ?? (dirs.length === 1 ? dirs[0] : undefined);
    if (!socket) throw new Error('no agent socket found for the session');
    const viaApi = () =>
      timedGet({ host: '127.0.0.1', port: server.port, path: `/browsers/${id}/fs/read_file?path=/tmp/relay.bin`, headers: { authorization: `Bearer ${server.apiKey}` } });
    const direct = () => timedGet({ socketPath: join(socket, 'agent.sock'), path: '/fs/read_file?path=/tmp/relay.bin' });
    await viaApi();
    await direct(); // warm the page cache and both paths
    const before = rss('VmRSS');
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, rss('VmRSS'))), 20);
    const api = [];
    const agent = [];
    try {
      for (let i = 0; i < ROUNDS; i++) {
        api.push(await viaApi());
        agent.push(await direct());
      }
    } finally {
      clearInterval(sampler);
    }
    const p50 = percentile(api, 50);
    const base = percentile(agent, 50);
    log(`API ${api.map((x) => x.toFixed(0)).join(', ')} MB/s; agent socket ${agent.map((x) => x.toFixed(0)).join(', ')} MB/s`);
    const grew = peak - before;
    return [
      { name: 'relay', metric: `fs/read_file ${MB} MiB throughput p50 (MB/s)`, value: p50, baseline: base, ratio: p50 / base, goal: '>= 0.8x the agent alone', met: p50 / base >= 0.8, note: `${ROUNDS} rounds a side, alternated; baseline: the same read from the agent socket` },
      { name: 'relay', metric: `server RSS growth over ${ROUNDS} reads of ${MB} MiB (MB)`, value: grew, baseline: before, goal: '< 64 MB', met: grew < 64 },
    ];
  } finally {
    if (id) await server.client.browsers.deleteByID(id).catch(() => {});
    await server.stop();
  }
}

await runStandalone(import.meta.url, run);
