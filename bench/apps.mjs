// bench/apps: what a team deploying its agent to Hangar waits for.
//  - invoke: a synchronous POST /invocations of a trivial action (`env` of the TypeScript fixture
//    app) on a running deployment, from request to answer: an upper bound of invoke → action
//    start. Once 3 s apart (a warm deployment: goal p50 ≤ 150 ms), once 1 s apart (faster than
//    this machine makes the replacement sandboxes). Baseline: a cheap API round trip on the same
//    server (GET /invocations/{id}).
//  - deploy: POST /deployments of the fixture until `running`, against `npm ci` of the same
//    fixture run directly in a scratch folder (the part of a deploy a user would pay anyway).
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { now, percentile, runStandalone, startServer, summary } from './lib.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const fixture = join(here, '../tests/fixtures/apps/ts-app');
export const GOAL_MS = 150;

async function deployFixture(client, zip) {
  const t0 = now();
  const created = await client.deployments.create({ file: new File([zip], 'app.zip'), entrypoint_rel_path: 'index.ts' });
  for await (const e of await client.deployments.follow(created.id)) {
    if (e.event === 'deployment_state' && ['running', 'failed', 'stopped'].includes(e.deployment.status)) break;
  }
  const d = await client.deployments.retrieve(created.id);
  if (d.status !== 'running') throw new Error(`the fixture did not deploy: ${d.status_reason}`);
  return now() - t0;
}

export async function run({
  log = () => {},
  invokes = Number(process.env.BENCH_APPS_INVOKES || 15),
  pauseMs = Number(process.env.BENCH_APPS_PAUSE_MS || 3000),
  warm = Number(process.env.BENCH_APPS_WARM || 1),
} = {}) {
  const scratch = mkdtempSync(join(tmpdir(), 'hangar-bench-apps-'));
  const server = await startServer({ env: { HANGAR_APPS_WARM_SANDBOXES: String(warm) } });
  try {
    const src = join(scratch, 'src');
    cpSync(fixture, src, { recursive: true, filter: (p) => !p.includes('node_modules') });
    execFileSync('zip', ['-qr', join(scratch, 'app.zip'), '.'], { cwd: src });
    const zip = readFileSync(join(scratch, 'app.zip'));

    const npm0 = now();
    execFileSync('npm', ['ci', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: src, stdio: 'ignore' });
    const npmMs = now() - npm0;
    const deployMs = await deployFixture(server.client, zip);
    log(`deploy ${deployMs.toFixed(0)} ms, npm ci alone ${npmMs.toFixed(0)} ms`);

    // Spaced invocations find a warm sandbox ready; at one a second each waits for the
    // replacement of the one before (a sandbox, Node and the app's imports: CPU-bound here).
    const series = async (n, pause) => {
      const invoke = [];
      const api = [];
      for (let i = 0; i < n; i++) {
        await new Promise((r) => setTimeout(r, pause));
        const t0 = now();
        const inv = await server.client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest' });
        invoke.push(now() - t0);
        if (inv.status !== 'succeeded') throw new Error(`invocation ${inv.id} ${inv.status}: ${inv.status_reason}`);
        const t1 = now();
        await server.client.invocations.retrieve(inv.id);
        api.push(now() - t1);
      }
      return { s: summary(invoke), api: percentile(api, 50), samples: invoke };
    };
    const spaced = await series(invokes, pauseMs);
    const inRow = await series(invokes, 1000);
    log(`invoke ${pauseMs} ms apart p50 ${spaced.s.p50.toFixed(0)} ms p95 ${spaced.s.p95.toFixed(0)} ms; 1 s apart p50 ${inRow.s.p50.toFixed(0)} ms (api round trip p50 ${spaced.api.toFixed(1)} ms)`);
    return [
      {
        name: 'apps',
        metric: `sync invoke, trivial action, ${pauseMs / 1000} s apart, p50 ms`,
        value: spaced.s.p50,
        baseline: spaced.api,
        ratio: spaced.s.p50 / spaced.api,
        goal: `p50 ≤ ${GOAL_MS} ms`,
        met: spaced.s.p50 <= GOAL_MS,
        note: `p95 ${spaced.s.p95.toFixed(0)} ms over ${spaced.s.n} invocations, ${warm} warm sandboxes`,
        samples: spaced.samples,
      },
      { name: 'apps', metric: 'sync invoke, 1 s apart, p50 ms', value: inRow.s.p50, baseline: inRow.api, ratio: inRow.s.p50 / inRow.api, samples: inRow.samples },
      { name: 'apps', metric: 'sync invoke, 1 s apart, p95 ms', value: inRow.s.p95, baseline: inRow.api, ratio: inRow.s.p95 / inRow.api },
      { name: 'apps', metric: 'deploy of the fixture ms', value: deployMs, baseline: npmMs, ratio: deployMs / npmMs },
    ];
  } finally {
    await server.stop();
    rmSync(scratch, { recursive: true, force: true });
  }
}

await runStandalone(import.meta.url, run);
