// bench/cluster (issue 24): three nodes on one PostgreSQL behind a real HAProxy
// (tests/e2e/lib/cluster.mjs), against one node alone on the same PostgreSQL, in the same run:
//   - create → first CDP reply with the SDK pointed at the front (a create may be placed on, and
//     relayed to, another node) vs at the lone node; runs interleave. Goal ≤ 1.2×.
//   - CDP round trip (Runtime.evaluate) on a cluster session at its cdp_ws_url (the owner's own
//     URL, no extra hop) vs on the lone node's. Goal ≤ 1.05×.
//   - GET /browsers/{id} with 200 clients through the front, spread over three nodes by HAProxy.
//     Goal p99 ≤ 50 ms; the baseline is the same load on the lone node.
// Starts its own PostgreSQL (tests/pg/pgtemp.sh) and needs Debian's haproxy (make setup).
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

import { freePort, startCluster } from '../tests/e2e/lib/cluster.mjs';
import { apiLoad } from '../tests/e2e/lib/load.mjs';
import { psql } from '../tests/e2e/lib/pg.mjs';
import { repoRoot } from '../tests/e2e/lib/server.mjs';
import { CdpClient, createToCdp, now, percentile, runStandalone, summary } from './lib.mjs';

// The SDK the e2e tests install (bench/ has no node_modules of its own).
const { default: Kernel } = createRequire(new URL('../tests/e2e/package.json', import.meta.url))('@onkernel/sdk');

const execFileP = promisify(execFile);
const pgtemp = join(repoRoot, 'tests/pg/pgtemp.sh');

async function roundTrips(client, count) {
  const b = await client.browsers.create({ headless: true });
  try {
    const cdp = await CdpClient.connect(b.cdp_ws_url);
    const page = await cdp.attachToPage();
    const ms = [];
    for (let i = 0; i < count + 20; i++) {
      const t0 = now();
      await cdp.send('Runtime.evaluate', { expression: '1 + 1', returnByValue: true }, page);
      if (i >= 20) ms.push(now() - t0); // the first are warm-up
    }
    await cdp.close();
    return ms;
  } finally {
    await client.browsers.deleteByID(b.session_id);
  }
}

export async function run({ log = () => {} } = {}) {
  const runs = Number(process.env.BENCH_CLUSTER_RUNS || 10);
  const trips = Number(process.env.BENCH_CLUSTER_TRIPS || 500);
  const seconds = Number(process.env.BENCH_CLUSTER_LOAD_SECONDS || 20);
  const dir = mkdtempSync(join(tmpdir(), 'hangar-bench-pg-'));
  chmodSync(dir, 0o711); // as root, PostgreSQL runs as its own user and must pass through
  const apiKey = 'sk_test_' + randomBytes(24).toString('hex');
  let cluster;
  let lone;
  try {
    const admin = (await execFileP(pgtemp, ['start', join(dir, 'pg'), String(await freePort())], { timeout: 120_000 })).stdout.trim();
    const dbUrl = (name) => Object.assign(new URL(admin), { pathname: `/${name}` }).toString();
    await psql(admin, 'CREATE DATABASE bench_cluster');
    await psql(admin, 'CREATE DATABASE bench_lone');
    cluster = await startCluster({ storeUrl: dbUrl('bench_cluster'), apiKey, count: 3 });
    // The lone node is set up as the cluster's are (same settings), and reached directly.
    lone = await startCluster({ storeUrl: dbUrl('bench_lone'), apiKey, count: 1 });
    const loneNode = lone.nodes[0].server;
    const viaFront = new Kernel({ apiKey, baseURL: cluster.front.url, maxRetries: 2, timeout: 120_000 });
    const alone = loneNode.client;

    const front = [];
    const one = [];
    await createToCdp(viaFront); // warm-up, not counted
    await createToCdp(alone);
    for (let i = 0; i < runs; i++) {
      front.push(await createToCdp(viaFront));
      one.push(await createToCdp(alone));
      log(`create ${i + 1}/${runs}: through the front ${front.at(-1).toFixed(0)} ms, one node ${one.at(-1).toFixed(0)} ms`);
    }

    // Alternating batches, so drift on a noisy machine hits both alike.
    const rtCluster = [];
    const rtOne = [];
    for (let i = 0; i < 4; i++) {
      rtCluster.push(...(await roundTrips(viaFront, Math.ceil(trips / 4))));
      rtOne.push(...(await roundTrips(alone, Math.ceil(trips / 4))));
    }
    log(`CDP round trip p50: cluster ${percentile(rtCluster, 50).toFixed(3)} ms, one node ${percentile(rtOne, 50).toFixed(3)} ms`);

    // Two browsers each, as bench/load holds; the front spreads the 200 clients over all nodes.
    const loadOn = async (client, port) => {
      const ids = [];
      for (let i = 0; i < 2; i++) ids.push((await client.browsers.create({ headless: true })).session_id);
      try {
        return await apiLoad({ port, apiKey, sessionIds: ids, clients: 200, seconds });
      } finally {
        for (const id of ids) await client.browsers.deleteByID(id);
      }
    };
    log(`200 clients for ${seconds} s through the front, then on one node`);
    const busyCluster = await loadOn(viaFront, Number(new URL(cluster.front.url).port));
    const busyOne = await loadOn(alone, loneNode.port);

    const c = summary(front);
    const o = summary(one);
    const rc = percentile(rtCluster, 50);
    const ro = percentile(rtOne, 50);
    const p99 = percentile(busyCluster.byOp.get, 99);
    const p99One = percentile(busyOne.byOp.get, 99);
    const failed = (busy) => {
      const kinds = {};
      for (const f of busy.failures.filter(Boolean)) kinds[`${f.op} ${f.status || f.error}`] = (kinds[`${f.op} ${f.status || f.error}`] || 0) + 1;
      return JSON.stringify(kinds);
    };
    log(`failures through the front (first 50, by kind): ${failed(busyCluster)}; on one node: ${failed(busyOne)}`);
    // Where the p99 sits: a closed loop's latency follows throughput, so both are printed.
    for (const [where, busy] of [['through the front', busyCluster], ['on one node', busyOne]]) {
      const ops = Object.entries(busy.byOp).map(([op, ms]) => `${op} p50 ${percentile(ms, 50).toFixed(1)} / p99 ${percentile(ms, 99).toFixed(1)} ms`);
      log(`${where}: ${(busy.count / seconds).toFixed(0)} requests/s; ${ops.join('; ')}`);
    }
    const note = `3 nodes + HAProxy vs 1 node, one PostgreSQL, headless, no warm spares, ${runs} creates, ${trips} round trips`;
    return [
      { name: 'cluster', metric: 'p50 create→first CDP reply via the front (ms)', value: c.p50, baseline: o.p50, ratio: c.p50 / o.p50, goal: '≤ 1.2×', met: c.p50 / o.p50 <= 1.2, note, samples: { front, one } },
      { name: 'cluster', metric: 'p95 create→first CDP reply via the front (ms)', value: c.p95, baseline: o.p95, ratio: c.p95 / o.p95 },
      { name: 'cluster', metric: 'p50 CDP round trip (ms)', value: rc, baseline: ro, ratio: rc / ro, goal: '≤ 1.05×', met: rc / ro <= 1.05, note },
      { name: 'cluster', metric: 'GET /browsers/{id} p99 ms (200 clients, 3 nodes)', value: p99, baseline: p99One, ratio: p99 / p99One, goal: '<= 50 ms', met: p99 <= 50, note: `${seconds} s; baseline: the same load on one node` },
      { name: 'cluster', metric: 'failed requests (200 clients, 3 nodes)', value: busyCluster.failures.length, goal: '= 0', met: busyCluster.failures.length === 0 },
    ];
  } finally {
    await lone?.stop();
    await cluster?.stop();
    await execFileP(pgtemp, ['stop', join(dir, 'pg')]).catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  }
}

await runStandalone(import.meta.url, run);
