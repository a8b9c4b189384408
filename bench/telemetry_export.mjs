// bench/telemetry_export: what OTLP export adds to a page load (plugins/telemetry, "OTLP export").
// One headless session captures network+page+console throughout; in alternating blocks its
// telemetry is exported to a real OpenTelemetry Collector (tests/tools/otelcol, `make otelcol`)
// or not (PATCH telemetry.export between blocks, so noise hits both sides alike).
// Goal: p50 page load with export ≤ 1.05 × without. The export runs in the server off the
// page's path, so the ratio says whether anything of it reaches the browser.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { createRequire } from 'node:module';
import { join } from 'node:path';

import { freePort, now, runStandalone, startServer, summary } from './lib.mjs';
import { GOAL_RATIO, startSite } from './telemetry.mjs';

const require = createRequire(new URL('../tests/e2e/package.json', import.meta.url));
const { chromium } = require('playwright-core');

const OTELCOL =
  process.env.HANGAR_OTELCOL ||
  join(process.env.XDG_CACHE_HOME || join(os.homedir(), '.cache'), 'hangar-tools', 'otelcol-v0.165.0', 'hangar-otelcol');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function startCollector() {
  if (!existsSync(OTELCOL)) throw new Error(`${OTELCOL} is missing: run make otelcol`);
  const dir = mkdtempSync(join(os.tmpdir(), 'hangar-bench-otelcol-'));
  // The e2e harness lets the server dial 127.0.0.1:21000-21199 ([server] fetch_allow).
  const port = await freePort(21150, 21199);
  const file = join(dir, 'logs.jsonl');
  writeFileSync(join(dir, 'c.yaml'), `receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:${port}
exporters:
  file:
    path: ${file}
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [file]
`);
  const proc = spawn(OTELCOL, ['--config', join(dir, 'c.yaml')], { stdio: 'ignore' });
  for (let i = 0; i < 200; i++) {
    const up = await new Promise((resolve) => {
      const s = net.connect(port, '127.0.0.1').once('connect', () => { s.destroy(); resolve(true); }).once('error', () => resolve(false));
    });
    if (up) break;
    await sleep(100);
  }
  return {
    url: `http://127.0.0.1:${port}`,
    records: () => (existsSync(file) ? readFileSync(file, 'utf8').split('"eventName"').length - 1 : 0),
    stop: () => { proc.kill('SIGTERM'); rmSync(dir, { recursive: true, force: true }); },
  };
}

export async function run({ log = () => {}, loads = Number(process.env.BENCH_TELEMETRY_LOADS || 60), block = 10 } = {}) {
  const collector = await startCollector();
  const site = await startSite();
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  const client = server.client;
  let session;
  let browser;
  try {
    // The TypeScript SDK 0.84 has no /telemetry/destinations: its generic post.
    const dest = await client.post('/telemetry/destinations', { body: { name: 'bench', endpoint: collector.url } });
    const capture = { browser: { network: {}, page: {}, console: {} } };
    session = await client.browsers.create({ headless: true, timeout_seconds: 900, telemetry: { enabled: true, ...capture } });
    const sid = session.session_id;
    browser = await chromium.connectOverCDP(session.cdp_ws_url, { timeout: 30_000 });
    const page = browser.contexts()[0].pages()[0];
    const load = async () => {
      const t0 = now();
      await page.goto(`${site.url}/?r=${Math.random()}`, { waitUntil: 'load' });
      return now() - t0;
    };
    for (let i = 0; i < 5; i++) await load();
    const times = { on: [], off: [] };
    while (times.on.length < loads) {
      for (const mode of ['off', 'on']) {
        const exp = mode === 'on' ? { otlp: { destination: { id: dest.id } } } : { otlp: { enabled: false } };
        await client.browsers.update(sid, { telemetry: { export: exp } });
        await sleep(300);
        for (let i = 0; i < block; i++) times[mode].push(await load());
      }
      log(`telemetry export page loads ${times.on.length}/${loads} each`);
    }
    await sleep(3000);
    const records = collector.records();
    if (records === 0) throw new Error('nothing reached the collector: export did not run');
    const sOn = summary(times.on);
    const sOff = summary(times.off);
    return [
      {
        name: 'telemetry_export',
        metric: 'p50 page load, network+page+console exported over OTLP (ms)',
        value: sOn.p50,
        baseline: sOff.p50,
        ratio: sOn.p50 / sOff.p50,
        goal: `≤ ${GOAL_RATIO}×`,
        met: sOn.p50 / sOff.p50 <= GOAL_RATIO,
        note: `${loads} loads each (the telemetry bench's page), capture on both sides; baseline: export off; ${records} records reached the collector`,
        samples: times,
      },
      { name: 'telemetry_export', metric: 'p95 page load, exported (ms)', value: sOn.p95, baseline: sOff.p95, ratio: sOn.p95 / sOff.p95, goal: '', met: null },
    ];
  } finally {
    await browser?.close().catch(() => {});
    if (session) await client.browsers.deleteByID(session.session_id).catch(() => {});
    await server.stop();
    site.close();
    collector.stop();
  }
}

await runStandalone(import.meta.url, run);
