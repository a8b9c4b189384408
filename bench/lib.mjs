// Shared pieces of the benchmarks: percentiles, a raw Chromium launcher for baselines, and the
// server helper from the end-to-end tests (its node_modules live in tests/e2e).
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { join } from 'node:path';

export { startServer } from '../tests/e2e/lib/server.mjs';
import { CdpClient } from '../tests/e2e/lib/cdp.mjs';

export { CdpClient };

/** The real Chromium binary (/usr/bin/chromium is a wrapper shell script). */
export const CHROMIUM_BIN = process.env.BENCH_CHROMIUM || '/usr/lib/chromium/chromium';
/** Flags Hangar always passes; the baselines use the same. */
export const CHROMIUM_FLAGS = [
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--no-sandbox',
  // What Hangar passes to keep Chromium's own requests in (plugins/browsers/chromium_launch.cpp),
  // so the baseline does the same work.
  '--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup,NetworkTimeServiceQuerying',
  '--component-updater=url-source=file:///nonexistent/',
  '--gaia-url=https://gaia.hangar.invalid/',
];

/** The first port in [first, last] that 127.0.0.1 can listen on now (for a server a bench starts). */
export async function freePort(first, last) {
  for (let port = first; port <= last; port++) {
    const ok = await new Promise((resolve) => {
      const s = net.createServer().once('error', () => resolve(false)).listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (ok) return port;
  }
  throw new Error(`no free port in ${first}-${last}`);
}

/**
 * One browser lifecycle as a client lives it: `acquire()` answers {wsUrl, end} (a create, a pool
 * lease, a raw Chromium), then Playwright connects over CDP, opens `pageUrl` in the first page,
 * reads its title (the test pages' "Hangar test page"), disconnects, and `end()` gives the
 * browser back. Answers the time of each of those six steps in ms.
 */
export async function lifecycle(pageUrl, acquire) {
  const { chromium } = createRequire(new URL('../tests/e2e/package.json', import.meta.url))('playwright-core');
  const marks = [now()];
  const mark = () => marks.push(now());
  const { wsUrl, end } = await acquire();
  mark();
  const browser = await chromium.connectOverCDP(wsUrl, { timeout: 60_000 });
  mark();
  const context = browser.contexts()[0] ?? (await browser.newContext());
  const page = context.pages()[0] ?? (await context.newPage());
  await page.goto(pageUrl);
  mark();
  const title = await page.title();
  if (title !== 'Hangar test page') throw new Error(`title ${title}`);
  mark();
  await browser.close();
  mark();
  await end();
  mark();
  return marks.slice(1).map((t, i) => t - marks[i]);
}

export function percentile(xs, p) {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const i = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1));
  return s[i];
}

export const now = () => Number(process.hrtime.bigint()) / 1e6; // ms

const groups = new Set();
process.on('exit', () => {
  for (const pid of groups) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {}
  }
});

/**
 * Starts Chromium headless with a fresh profile and resolves once it prints its DevTools line:
 * {wsUrl, proc, stop()}.
 */
export function launchChromium({ extraArgs = [], timeoutMs = 30_000 } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'hangar-bench-chromium-'));
  const proc = spawn(
    CHROMIUM_BIN,
    ['--headless=new', '--remote-debugging-port=0', `--user-data-dir=${dir}`, ...CHROMIUM_FLAGS, ...extraArgs, 'about:blank'],
    // Its own process group, so stop() ends the zygote and renderers too, not just the browser.
    { stdio: ['ignore', 'ignore', 'pipe'], detached: true },
  );
  groups.add(proc.pid);
  const exited = new Promise((r) => proc.once('exit', r)).then(() => groups.delete(proc.pid));
  const stop = async () => {
    try {
      process.kill(-proc.pid, 'SIGKILL');
    } catch {}
    await exited;
    rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  };
  return new Promise((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => {
      stop();
      reject(new Error(`chromium did not print its DevTools line within ${timeoutMs} ms:\n${err}`));
    }, timeoutMs);
    proc.stderr.on('data', (chunk) => {
      err += chunk;
      const m = /DevTools listening on (ws:\/\/\S+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        proc.stderr.removeAllListeners('data');
        proc.stderr.resume();
        resolve({ wsUrl: m[1], proc, stop });
      }
    });
    proc.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
}

// POST /browsers (headless, default options) → the first CDP reply over cdp_ws_url, in ms; the
// session is deleted after. `target`: a server from startServer, or an SDK client.
// `deletes`, when given, collects how long each DELETE took to answer.
export async function createToCdp(target, { deletes } = {}) {
  const client = target.client ?? target;
  const t0 = now();
  const s = await client.browsers.create({ headless: true });
  try {
    const cdp = await CdpClient.connect(s.cdp_ws_url);
    await cdp.send('Browser.getVersion');
    const ms = now() - t0;
    await cdp.close();
    return ms;
  } finally {
    const t0 = now();
    await client.browsers.deleteByID(s.session_id);
    deletes?.push(now() - t0);
  }
}

/** The milliseconds `fn` took; `check` sees its answer and throws when it is wrong. */
export async function timed(fn, check = () => {}) {
  const t0 = now();
  const r = await fn();
  const ms = now() - t0;
  check(r);
  return ms;
}

/**
 * Sequential samples of several steps (each a function answering milliseconds) in alternating
 * blocks, so machine noise hits every side alike, after `warmup` rounds: `calls` of each.
 * Answers {step name: [ms...]}.
 */
export async function interleaved(steps, { calls, warmup, block, log = () => {}, label }) {
  const rows = Object.fromEntries(Object.keys(steps).map((k) => [k, []]));
  for (let i = 0; i < warmup; i++) for (const step of Object.values(steps)) await step();
  for (let done = 0; done < calls; ) {
    const n = Math.min(block, calls - done);
    for (const [name, step] of Object.entries(steps)) for (let i = 0; i < n; i++) rows[name].push(await step());
    done += n;
    log(`${label} ${done}/${calls} calls each`);
  }
  return rows;
}

export function summary(xs) {
  return { n: xs.length, p50: percentile(xs, 50), p95: percentile(xs, 95), p99: percentile(xs, 99), min: Math.min(...xs), max: Math.max(...xs) };
}

/** Runs `main` when the file is executed directly (node bench/x.mjs), printing its rows. */
export async function runStandalone(metaUrl, main) {
  if (process.argv[1] && metaUrl === new URL(`file://${process.argv[1]}`).href) {
    const rows = await main({ log: (m) => console.error(m) });
    console.table(rows.map(({ samples, ...r }) => r));
  }
}

export function childrenByParent() {
  const map = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (!map.has(ppid)) map.set(ppid, []);
      map.get(ppid).push(Number(name));
    } catch {}
  }
  return map;
}

/**
 * CPU time in ms (user + system, with the reaped children of each) of a process and all its live
 * descendants. Taken before and after some work, the difference is what that tree spent on it,
 * processes that started and ended in between included once their parent reaped them.
 */
export function treeCpuMs(root, kids = childrenByParent()) {
  const tickMs = 10; // USER_HZ is 100 on Linux
  let ticks = 0;
  const walk = (pid) => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
    } catch {}
    for (const c of kids.get(pid) || []) walk(c);
  };
  walk(root);
  return ticks * tickMs;
}

/** PSS in MB of a process and all its descendants. */
export function treePssMb(root, kids = childrenByParent()) {
  let kb = 0;
  const walk = (pid) => {
    try {
      const m = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'));
      if (m) kb += Number(m[1]);
    } catch {}
    for (const c of kids.get(pid) || []) walk(c);
  };
  walk(root);
  return kb / 1024;
}

// An instance's processes, from <id>.pids beside its folder: "<sandbox pid> <pasta pid> <server pid>".
function instancePids(server, sessionId) {
  const [sandbox, pasta] = readFileSync(join(server.dataDir, 'instances', `${sessionId}.pids`), 'utf8').trim().split(' ').map(Number);
  return { sandbox, pasta };
}
const sandboxPid = (server, sessionId) => instancePids(server, sessionId).sandbox;

// What a process of an instance is, from its command line (Chromium rewrites its own).
function role(pid) {
  const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  if (/^\S*pasta/.test(cmd)) return 'pasta';
  if (/^\S*bwrap /.test(cmd)) return 'bwrap';
  if (/^\S*hangar agent/.test(cmd)) return 'agent';
  if (/^\S*Xvfb/.test(cmd)) return 'Xvfb';
  if (/^\S*pulseaudio/.test(cmd)) return 'pulseaudio';
  if (/crashpad_handler/.test(cmd)) return 'chromium crashpad';
  if (/chromium/.test(cmd)) {
    const type = /--type=(\S+)/.exec(cmd)?.[1];
    if (!type) return 'chromium browser';
    if (type === 'utility') return `chromium ${/--utility-sub-type=(\S+)/.exec(cmd)?.[1]?.split('.')[0] ?? 'utility'}`;
    return `chromium ${type}`;
  }
  return cmd.split(' ')[0].split('/').pop() || 'other';
}

/**
 * PSS in MB of one Hangar instance, by part: every process of its sandbox tree and its pasta
 * (the network helper outside the sandbox), keyed by what each is (agent, Xvfb, chromium renderer…).
 */
export function instancePssParts(server, sessionId, kids = childrenByParent()) {
  const { sandbox, pasta } = instancePids(server, sessionId);
  const parts = {};
  const walk = (pid) => {
    try {
      const m = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'));
      const name = role(pid);
      if (m) parts[name] = (parts[name] ?? 0) + Number(m[1]) / 1024;
    } catch {}
    for (const c of kids.get(pid) || []) walk(c);
  };
  walk(sandbox);
  if (pasta > 0) walk(pasta);
  return parts;
}

/** PSS in MB of one Hangar instance: its sandbox process and everything under it, and its pasta. */
export function instancePssMb(server, sessionId, kids = childrenByParent()) {
  return Object.values(instancePssParts(server, sessionId, kids)).reduce((a, b) => a + b, 0);
}

/** CPU ms spent so far by one Hangar instance: its sandbox process and everything under it. */
export function instanceCpuMs(server, sessionId, kids = childrenByParent()) {
  return treeCpuMs(sandboxPid(server, sessionId), kids);
}
