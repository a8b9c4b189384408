// bench/burst: ten lifecycles at once without a pool — create a browser, Playwright
// connectOverCDP, open a local page, read its title, disconnect, delete — the way issue 42 (and
// the outside measurement before it) compares Hangar with the open-source Browserless server
// (npm @browserless.io/browserless 2.42.0, bench/peers) on the same machine and Chromium binary.
// Rounds alternate between the two; a Hangar server runs with the operator's defaults (one warm
// spare per kind at least, spares following demand), or one server per entry of
// BENCH_BURST_CONFIGS, to tune them: `;`-separated entries of `parallel=N,spares_max=M`
// (`max_parallel_starts`, `warm_spares_max`), e.g. "parallel=2;parallel=3,spares_max=10".
// Browserless runs with CONCURRENT=10, so all ten launch at once, as it does by default.
// Goal: p95 ≤ 0.7× Browserless.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { CHROMIUM_BIN, childrenByParent, lifecycle, now, runStandalone, startServer, summary, treeCpuMs } from './lib.mjs';
import { startTestPages } from '../tests/e2e/lib/server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const peers = join(here, 'peers');
const STEPS = ['create', 'connect', 'goto', 'title', 'disconnect', 'delete'];
const TOKEN = 'bench';

// Browserless finds Chromium where its own playwright-core would have downloaded it.
async function startBrowserless() {
  const entry = join(peers, 'node_modules/@browserless.io/browserless/package.json');
  if (!existsSync(entry)) throw new Error('Browserless is not installed: make setup-bench-peers');
  const browsersDir = mkdtempSync(join(tmpdir(), 'hangar-bench-browserless-'));
  // playwright-core reads PLAYWRIGHT_BROWSERS_PATH when it loads.
  const previous = process.env.PLAYWRIGHT_BROWSERS_PATH;
  process.env.PLAYWRIGHT_BROWSERS_PATH = browsersDir;
  const expected = createRequire(entry)('playwright-core').chromium.executablePath();
  if (previous === undefined) delete process.env.PLAYWRIGHT_BROWSERS_PATH;
  else process.env.PLAYWRIGHT_BROWSERS_PATH = previous;
  mkdirSync(dirname(expected), { recursive: true });
  symlinkSync(CHROMIUM_BIN, expected);
  const port = 20000 + Math.floor(Math.random() * 900);
  const proc = spawn(process.execPath, [join(peers, 'browserless.mjs')], {
    cwd: peers,
    env: { ...process.env, PLAYWRIGHT_BROWSERS_PATH: browsersDir, HOST: '127.0.0.1', PORT: String(port), TOKEN, CONCURRENT: '10', QUEUED: '10', TIMEOUT: '60000', DEBUG: '-*' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  proc.stdout.on('data', (c) => (output += c));
  proc.stderr.on('data', (c) => (output += c));
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/json/version?token=${TOKEN}`)).ok) break;
    } catch {}
    if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`Browserless did not start:\n${output}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    pid: proc.pid,
    wsUrl: `ws://127.0.0.1:${port}/chromium?token=${TOKEN}`,
    stop: async () => {
      proc.kill('SIGTERM');
      await new Promise((r) => (proc.exitCode !== null ? r() : proc.once('exit', r)));
      rmSync(browsersDir, { recursive: true, force: true });
    },
  };
}

const hangarBrowser = (client) => async () => {
  const b = await client.browsers.create({ headless: true });
  return { wsUrl: b.cdp_ws_url, end: () => client.browsers.deleteByID(b.session_id) };
};
// Browserless launches the browser on connect and ends it when the client disconnects.
const browserlessBrowser = (peer) => async () => ({ wsUrl: `${peer.wsUrl}&headless=true`, end: async () => {} });

// Waits until every server side (Hangar's spares being refilled, teardowns, Browserless's closing
// Chromiums) has gone quiet, so one side's after-work is not charged to the next side's round.
async function settle(pids, { quietMs = 100, maxMs = 30_000 } = {}) {
  const cpu = () => {
    const kids = childrenByParent();
    return pids.reduce((a, pid) => a + treeCpuMs(pid, kids), 0);
  };
  const deadline = Date.now() + maxMs;
  let before = cpu();
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 1000));
    const after = cpu();
    if (after - before < quietMs) return;
    before = after;
  }
}

const total = (steps) => steps.reduce((a, b) => a + b, 0);
const stepLine = (steps) => STEPS.map((name, i) => `${name} ${summary(steps.map((s) => s[i])).p50.toFixed(0)}`).join(', ');

export async function run({ log = () => {}, rounds = Number(process.env.BENCH_BURST_ROUNDS || 4) } = {}) {
  const configs = (process.env.BENCH_BURST_CONFIGS || 'defaults').split(';').map((entry) => {
    const settings = Object.fromEntries(entry.split(',').filter((kv) => kv.includes('=')).map((kv) => kv.split('=').map((x) => x.trim())));
    return { label: `hangar ${entry}`, env: {
      ...(settings.parallel ? { HANGAR_MAX_PARALLEL_STARTS: settings.parallel } : {}),
      ...(settings.spares_max ? { HANGAR_WARM_SPARES_MAX: settings.spares_max } : {}),
    } };
  });
  const pages = await startTestPages();
  const port = new URL(pages.url).port;
  const peer = await startBrowserless();
  const sides = [];
  try {
    for (const config of configs) {
      const server = await startServer({
        env: {
          HANGAR_WARM_SPARES: '1', // the operator's default (the test harness turns spares off)
          ...config.env,
          HANGAR_MAX_BROWSERS_PER_PROJECT: '40',
          // Only the page server's port, as an operator would open one: each forwarded port costs
          // pasta a listening socket per instance (bench/README.md, issue 42 cold start).
          HANGAR_SANDBOX_ALLOW_HOST_PORTS: port,
        },
      });
      sides.push({ label: config.label, server, steps: [] });
    }
    const theirs = { label: 'browserless', steps: [] };
    const burst = async (side, create) => {
      const t0 = now();
      const out = await Promise.all(Array.from({ length: 10 }, () => lifecycle(pages.url, create)));
      side.steps.push(...out);
      log(`burst: ${side.label} round of 10 in ${(now() - t0).toFixed(0)} ms, p95 ${summary(out.map(total)).p95.toFixed(0)} ms`);
    };
    // A warm-up round each (first launches fill page caches), not counted.
    await Promise.all(Array.from({ length: 2 }, () => lifecycle(pages.url, browserlessBrowser(peer))));
    for (const s of sides) await Promise.all(Array.from({ length: 2 }, () => lifecycle(pages.url, hangarBrowser(s.server.client))));
    const pids = [peer.pid, ...sides.map((s) => s.server.pid)];
    for (let r = 0; r < rounds; r++) {
      await settle(pids);
      await burst(theirs, browserlessBrowser(peer));
      for (const s of sides) {
        await settle(pids);
        await burst(s, hangarBrowser(s.server.client));
      }
    }
    const b = summary(theirs.steps.map(total));
    log(`burst: browserless p50 of each step: ${stepLine(theirs.steps)} ms`);
    const rows = [];
    for (const s of sides) {
      const h = summary(s.steps.map(total));
      log(`burst: ${s.label} p50 of each step: ${stepLine(s.steps)} ms`);
      const note = `${rounds} rounds of 10 at once, alternating with Browserless 2.42.0 on ${CHROMIUM_BIN}`;
      rows.push(
        { name: 'burst', metric: `p95 lifecycle, 10 at once, no pool, ${s.label} vs Browserless (ms)`, value: h.p95, baseline: b.p95, ratio: h.p95 / b.p95, goal: '≤ 0.7×', met: h.p95 / b.p95 <= 0.7, note },
        { name: 'burst', metric: `p50 lifecycle, 10 at once, no pool, ${s.label} vs Browserless (ms)`, value: h.p50, baseline: b.p50, ratio: h.p50 / b.p50, samples: s.steps, baselineSamples: theirs.steps },
      );
    }
    return rows;
  } finally {
    for (const s of sides) await s.server.stop();
    await peer.stop();
    await pages.close();
  }
}

await runStandalone(import.meta.url, run);
