// bench/telemetry: what capture costs and how much it carries, on one headless session.
//   1. page load (Playwright goto, waitUntil load) of a busy local page with network+page+console
//      on vs off (PATCH telemetry between alternating blocks, so noise hits both sides alike).
//      Goal: p50 on ≤ 1.05 × p50 off.
//   2. CPU of the agent (the collector's process) while the page logs and fetches for 10 s, in %
//      of one core; baseline: the same with telemetry off.
//   3. events/s one session sustains without a drop: the page writes console lines as fast as it
//      can; the archive must hold all of them and no monitor_dropped.
//   4. the CDP relay's round trip (Runtime.evaluate "1+1") on a connection the relay observer
//      watches (opened with control+connection on: it reads each command's method and records
//      cdp_command) vs one it does not (opened with telemetry off: a plain byte relay), in
//      alternating blocks on the same browser. Goal: p50 watched ≤ 1.05 × p50 plain.
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import { join } from 'node:path';

import { listenAllowed } from '../tests/e2e/lib/server.mjs';
import { evaluator } from './cdp.mjs';
import { CdpClient, now, runStandalone, startServer, summary } from './lib.mjs';

// Playwright is installed for the end-to-end tests; the bench borrows it.
const require = createRequire(new URL('../tests/e2e/package.json', import.meta.url));
const { chromium } = require('playwright-core');

// What the collector asks of Chromium, done by a bare CDP client with nothing behind it (its own
// browser connection, attachToTarget flatten, the domains enabled, one Network.getResponseBody per
// finished non-image response), so a run can tell Chromium's own cost from Hangar's.
export const BARE_MODES = {
  off: null,
  full: { runtime: true, network: true, page: true, timeline: true, bodies: true },
  nobodies: { runtime: true, network: true, page: true, timeline: true, bodies: false },
  network: { network: true, bodies: true },
  page: { page: true, timeline: true },
  console: { runtime: true },
};

export async function bareCollector(wsUrl, m) {
  const cdp = await CdpClient.connect(wsUrl);
  const { targetInfos } = await cdp.send('Target.getTargets');
  const page = targetInfos.find((t) => t.type === 'page');
  const { sessionId } = await cdp.send('Target.attachToTarget', { targetId: page.targetId, flatten: true });
  const s = (method, params) => cdp.send(method, params, sessionId).catch(() => null);
  const mimes = new Map();
  let events = 0;
  cdp.ws.on('message', (data) => {
    const msg = JSON.parse(data.toString());
    if (!msg.method) return;
    events++;
    if (msg.method === 'Network.responseReceived') mimes.set(msg.params.requestId, msg.params.response.mimeType);
    if (msg.method === 'Network.loadingFinished' && m.bodies) {
      const mime = mimes.get(msg.params.requestId) || '';
      if (!mime.startsWith('image/')) s('Network.getResponseBody', { requestId: msg.params.requestId });
    }
  });
  cdp.events = { push() {} }; // keep nothing
  const enables = [];
  if (m.runtime) enables.push(s('Runtime.enable'));
  if (m.network) enables.push(s('Network.enable', { maxPostDataSize: 65536 }));
  if (m.page) enables.push(s('Page.enable'));
  if (m.timeline) enables.push(s('PerformanceTimeline.enable', { eventTypes: ['layout-shift', 'largest-contentful-paint'] }));
  await Promise.all(enables);
  return { close: () => cdp.close(), events: () => events };
}

export const GOAL_RATIO = 1.05;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const BUSY = `<!doctype html><title>busy</title><body>
${Array.from({ length: 20 }, (_, i) => `<img src="/img/${i}.svg" width="20" height="20">`).join('')}
<script>
  for (let i = 0; i < 20; i++) console.log('line', i, {i});
  Promise.all(Array.from({length: 10}, (_, i) => fetch('/api/' + i).then((r) => r.json())));
</script></body>`;

export async function startSite() {
  const srv = http.createServer((req, res) => {
    const path = new URL(req.url, 'http://x').pathname;
    if (path.startsWith('/api/')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ path, pad: 'x'.repeat(2000) }));
    } else if (path.startsWith('/img/')) {
      res.writeHead(200, { 'content-type': 'image/svg+xml' });
      res.end('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20"><rect width="20" height="20"/></svg>');
    } else if (path === '/flood') {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<!doctype html><title>flood</title>');
    } else {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(BUSY);
    }
  });
  const port = await listenAllowed(srv);
  return { url: `http://127.0.0.1:${port}`, close: () => { srv.closeAllConnections(); srv.close(); } };
}

function tree() {
  const kids = new Map();
  const comm = new Map();
  const cpu = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ppid = Number(rest[1]);
      if (!kids.has(ppid)) kids.set(ppid, []);
      kids.get(ppid).push(Number(name));
      comm.set(Number(name), stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')));
      cpu.set(Number(name), Number(rest[11]) + Number(rest[12])); // utime + stime, clock ticks
    } catch {}
  }
  return { kids, comm, cpu };
}

/** The agent's pid: the `hangar` process under the instance's sandbox. */
function agentPid(server, sid) {
  const [root] = readFileSync(join(server.dataDir, 'instances', `${sid}.pids`), 'utf8').trim().split(' ').map(Number);
  const { kids, comm } = tree();
  const queue = [root];
  while (queue.length) {
    const pid = queue.shift();
    if (pid !== root && comm.get(pid) === 'hangar') return pid;
    queue.push(...(kids.get(pid) || []));
  }
  throw new Error('no agent process found');
}

const cpuTicks = (pid) => tree().cpu.get(pid) ?? 0;

export async function run({
  log = () => {},
  loads = Number(process.env.BENCH_TELEMETRY_LOADS || 60),
  block = 10,
  calls = Number(process.env.BENCH_TELEMETRY_CDP_CALLS || 2000),
} = {}) {
  const site = await startSite();
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  const client = server.client;
  // BENCH_TELEMETRY_CATEGORIES=network (say) tells which category costs what.
  const cats = (process.env.BENCH_TELEMETRY_CATEGORIES || 'network,page,console').split(',');
  const on = { browser: Object.fromEntries(cats.map((c) => [c, {}])) };
  let session;
  let browser;
  try {
    session = await client.browsers.create({ headless: true, timeout_seconds: 900 });
    const sid = session.session_id;
    browser = await chromium.connectOverCDP(session.cdp_ws_url, { timeout: 30_000 });
    const page = browser.contexts()[0].pages()[0];
    const load = async () => {
      const t0 = now();
      await page.goto(`${site.url}/?r=${Math.random()}`, { waitUntil: 'load' });
      return now() - t0;
    };
    for (let i = 0; i < 5; i++) await load(); // warm-up

    // 1. page load, alternating blocks. A third side, `bare` (BENCH_TELEMETRY_BARE=0 leaves it
    // out), has telemetry off and a bare CDP client asking Chromium what the collector asks for
    // these categories: what Chromium itself charges for it, with no agent behind.
    const bareMode = {
      runtime: cats.includes('console'),
      network: cats.includes('network'),
      bodies: cats.includes('network'),
      page: cats.includes('page'),
      timeline: cats.includes('page'),
    };
    const modes = process.env.BENCH_TELEMETRY_BARE === '0' ? ['off', 'on'] : ['off', 'on', 'bare'];
    const times = { on: [], off: [], bare: [] };
    while (times.on.length < loads) {
      for (const mode of modes) {
        await client.browsers.update(sid, { telemetry: mode === 'on' ? { enabled: true, ...on } : { enabled: false } });
        const bare = mode === 'bare' ? await bareCollector(session.cdp_ws_url, bareMode) : null;
        await sleep(300); // the collector attaches
        for (let i = 0; i < block; i++) times[mode].push(await load());
        await bare?.close();
      }
      log(`telemetry page loads ${times.on.length}/${loads} each`);
    }
    const sOn = summary(times.on);
    const sOff = summary(times.off);
    const sBare = times.bare.length ? summary(times.bare) : null;

    // 2. agent CPU on a busy page for 10 s
    const agent = agentPid(server, sid);
    const hz = 100;
    const busyCpu = async (mode) => {
      await client.browsers.update(sid, { telemetry: mode === 'on' ? { enabled: true, ...on } : { enabled: false } });
      await sleep(300);
      const c0 = cpuTicks(agent);
      const t0 = now();
      while (now() - t0 < 10_000) await load();
      return ((cpuTicks(agent) - c0) / hz) / ((now() - t0) / 1000) * 100;
    };
    const cpuOff = await busyCpu('off');
    const cpuOn = await busyCpu('on');
    log(`agent CPU on ${cpuOn.toFixed(1)} %, off ${cpuOff.toFixed(1)} %`);

    // 3. events/s without drops: console lines as fast as the page writes them
    await client.browsers.update(sid, { telemetry: { enabled: true, browser: { console: {} } } });
    await page.goto(`${site.url}/flood`);
    await sleep(300);
    const lines = Number(process.env.BENCH_TELEMETRY_LINES || 20000);
    const since = new Date().toISOString();
    await page.evaluate(async (n) => {
      for (let i = 0; i < n; i += 500) {
        for (let j = i; j < Math.min(n, i + 500); j++) console.log('flood', j);
        await new Promise((r) => setTimeout(r, 0));
      }
    }, lines);
    let flood = [];
    let dropped = 0;
    for (let tries = 0; tries < 60; tries++) {
      await sleep(1000);
      flood = [];
      dropped = 0;
      for await (const e of client.browsers.telemetry.events(sid, { since, limit: 1000, category: ['console', 'monitor'] })) {
        if (e.event.type === 'monitor_dropped') dropped += e.event.data.count;
        else if (e.event.data?.text?.startsWith('flood')) flood.push(e.event.ts);
      }
      if (flood.length + dropped >= lines) break;
    }
    const spanS = flood.length > 1 ? (flood.at(-1) - flood[0]) / 1e6 : NaN;
    const rate = flood.length / spanS;
    log(`flood: ${flood.length}/${lines} events in ${spanS.toFixed(2)} s, ${dropped} dropped`);

    // 4. CDP round trip through the relay, observed vs not
    await client.browsers.update(sid, { telemetry: { enabled: true } }); // control + connection
    const watched = await evaluator(session.cdp_ws_url);
    await client.browsers.update(sid, { telemetry: { enabled: false } });
    const plain = await evaluator(session.cdp_ws_url);
    await client.browsers.update(sid, { telemetry: { enabled: true } }); // cdp_command recorded
    const rtt = { watched: [], plain: [] };
    try {
      for (let i = 0; i < 200; i++) {
        await watched.once();
        await plain.once();
      }
      while (rtt.watched.length < calls) {
        for (let i = 0; i < 200; i++) rtt.plain.push(await plain.once());
        for (let i = 0; i < 200; i++) rtt.watched.push(await watched.once());
        log(`relay observer ${rtt.watched.length}/${calls} calls each`);
      }
    } finally {
      await watched.close();
      await plain.close();
    }
    const commands = (await client.browsers.telemetry.events(sid, { since: '10m', category: ['control'], limit: 1 })).getPaginatedItems();
    if (!commands.length) throw new Error('the watched connection recorded no cdp_command');
    const sW = summary(rtt.watched);
    const sP = summary(rtt.plain);

    return [
      {
        name: 'telemetry',
        metric: `p50 page load, ${cats.join('+')} on (ms)`,
        value: sOn.p50,
        baseline: sOff.p50,
        ratio: sOn.p50 / sOff.p50,
        goal: `≤ ${GOAL_RATIO}×`,
        met: sOn.p50 / sOff.p50 <= GOAL_RATIO,
        note: `${loads} loads each of a local page with 20 images, 10 fetches, 20 console lines; baseline: telemetry off`,
        samples: times, // in load order, blocks of `block`: for per-round ratios
      },
      { name: 'telemetry', metric: 'p95 page load on (ms)', value: sOn.p95, baseline: sOff.p95, ratio: sOn.p95 / sOff.p95, goal: '', met: null },
      ...(sBare
        ? [
            {
              name: 'telemetry',
              metric: `p50 page load, a bare CDP client asking the same of Chromium (ms)`,
              value: sBare.p50,
              baseline: sOff.p50,
              ratio: sBare.p50 / sOff.p50,
              goal: '',
              met: null,
              note: 'telemetry off; a raw CDP client through the relay enables what the collector enables and reads the same bodies: Chromium\'s own cost',
            },
            { name: 'telemetry', metric: 'p50 page load on vs bare client', value: sOn.p50, baseline: sBare.p50, ratio: sOn.p50 / sBare.p50, goal: '', met: null },
          ]
        : []),
      { name: 'telemetry', metric: 'agent CPU, busy page (% of a core)', value: cpuOn, baseline: cpuOff, ratio: cpuOn / Math.max(cpuOff, 0.01), goal: '', met: null },
      { name: 'telemetry', metric: `events/s, ${lines} console lines, dropped ${dropped}`, value: rate, baseline: null, ratio: null, goal: '', met: dropped === 0 && flood.length === lines ? null : false },
      {
        name: 'telemetry',
        metric: 'p50 CDP Runtime.evaluate RTT, relay observer on (ms)',
        value: sW.p50,
        baseline: sP.p50,
        ratio: sW.p50 / sP.p50,
        goal: `≤ ${GOAL_RATIO}×`,
        met: sW.p50 / sP.p50 <= GOAL_RATIO,
        note: `${calls} sequential calls each; baseline: a connection opened with telemetry off (not observed)`,
      },
      { name: 'telemetry', metric: 'p99 CDP RTT, relay observer on (ms)', value: sW.p99, baseline: sP.p99, ratio: sW.p99 / sP.p99, goal: '', met: null },
    ];
  } finally {
    await browser?.close().catch(() => {});
    if (session) await client.browsers.deleteByID(session.session_id).catch(() => {});
    await server.stop();
    site.close();
  }
}

await runStandalone(import.meta.url, run);
