// bench/liveview: a headful 1920x1080 session watched through its browser_live_view_url in a
// headless viewer (playwright-core, as a person's browser would), measuring
//  - glass-to-glass latency: the remote page changes colour (over CDP) → the viewer's canvas shows
//    it (the viewer page polls its canvas every animation frame and reports Date.now());
//    baseline: the same change until the remote Chromium itself has presented it (two animation
//    frames in the remote page), i.e. what no live view can beat;
//  - the same after a full-page navigation: the remote page.goto()es between two local pages of
//    different solid colours on two sites (127.0.0.1 and localhost, so each navigation swaps the
//    renderer as most real ones do), waitUntil 'load'; time from goto resolving → the viewer's
//    canvas shows the new colour (0 when the viewer had it first); baseline: goto resolving →
//    the remote page has presented two animation frames. Then the same after the screen was
//    still for 62 s (an agent thinking), the case a live view's idle throttle would hit;
//  - CPU per viewer: x11vnc + the hangar processes (agent bridge, server relay) over a window in
//    which the remote page changes colour 10 times a second, in cores;
//  - the colour-change latency again through a headless 1920x1080 session's live view (the CDP
//    screencast the agent relays), same baseline; and that session's CPU (instance + server)
//    while its page changes 10 times a second, watched by one viewer (full size, then a 960x540
//    window) against unwatched.
// Goal: latency p50 ≤ 150 ms in every case.
import { readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';

import { listenAllowed } from '../tests/e2e/lib/server.mjs';
import { instanceCpuMs, now, runStandalone, startServer, summary } from './lib.mjs';

const require = createRequire(new URL('../tests/e2e/package.json', import.meta.url));
const { chromium } = require('playwright-core');

export const GOAL_MS = 150;
const VIEWPORT = { width: 1920, height: 1080 };
const SMALL_VIEWER = { width: 960, height: 540 };
const TICK_HZ = 100; // /proc/<pid>/stat times are in clock ticks (getconf CLK_TCK)

function cpuTicks(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]); // utime + stime
  } catch {
    return 0;
  }
}

function parentOf(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  } catch {
    return 0;
  }
}

// Processes whose command line matches, among the descendants of `root` only: the machine is
// shared, and another server's agents and x11vnc must not count.
function pidsMatching(re, root) {
  const out = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      if (!re.test(readFileSync(`/proc/${d}/cmdline`, 'utf8').replaceAll('\0', ' '))) continue;
      let p = Number(d);
      while (p > 1 && p !== root) p = parentOf(p);
      if (p === root) out.push(Number(d));
    } catch {}
  }
  return out;
}

// Solid-colour pages for the navigation case: /c/<red> has background rgb(<red>,0,0).
async function startSite() {
  const srv = http.createServer((req, res) => {
    const red = Number(/^\/c\/(\d+)/.exec(req.url)?.[1] ?? 0);
    res.writeHead(200, { 'content-type': 'text/html', 'cache-control': 'no-store' });
    res.end(`<!doctype html><title>c${red}</title><body style="margin:0;height:100vh;background:rgb(${red},0,0)"></body>`);
  });
  const port = await listenAllowed(srv); // a port the instances' sandbox may reach
  return { port, close: () => new Promise((r) => srv.close(r)) };
}

// Resolves with Date.now() once the middle of the viewer's canvas has the wanted red level.
const watchColour = (viewer, red) =>
  viewer.evaluate(
    (want) =>
      new Promise((resolve) => {
        const canvas = document.querySelector('#screen canvas');
        const ctx = canvas.getContext('2d', { willReadFrequently: true });
        const check = () => {
          const px = ctx.getImageData(canvas.width >> 1, canvas.height >> 1, 1, 1).data;
          if (Math.abs(px[0] - want) <= 8) resolve(Date.now());
          else requestAnimationFrame(check);
        };
        check();
      }),
    red,
  );

// Changes the remote page's colour; resolves with the ms until it presented the change itself.
const presentColour = (remote, red) =>
  remote.evaluate(
    (r) =>
      new Promise((resolve) => {
        const t0 = Date.now();
        document.body.style.background = `rgb(${r},0,0)`;
        requestAnimationFrame(() => requestAnimationFrame(() => resolve(Date.now() - t0)));
      }),
    red,
  );

// The remote page changes colour 10 times a second for 10 s.
const animate = (remote) =>
  remote.evaluate(
    () =>
      new Promise((resolve) => {
        let n = 0;
        const id = setInterval(() => {
          document.body.style.background = `rgb(${(n * 37) % 255},${(n * 91) % 255},${(n * 53) % 255})`;
          if (++n === 100) {
            clearInterval(id);
            resolve();
          }
        }, 100);
      }),
  );

// Cores the headless instance (agent, Chromium) and the server process spend while the page
// animates: with a viewer, that is the live view's cost on top of the page's own.
async function animatedCores(server, remote, sessionId) {
  const cpu = () => instanceCpuMs(server, sessionId) + cpuTicks(server.pid) * (1000 / TICK_HZ);
  const t0 = now();
  const before = cpu();
  await animate(remote);
  return (cpu() - before) / (now() - t0);
}

// The colour-change latency through a headless session's live view (CDP screencast), and its CPU.
async function headlessLatency(server, viewerBrowser, samples) {
  const latency = [];
  const paint = [];
  let watched = NaN;
  let watchedSmall = NaN;
  let unwatched = NaN;
  const session = await server.client.browsers.create({ headless: true, viewport: VIEWPORT, timeout_seconds: 600 });
  const cdp = await chromium.connectOverCDP(session.cdp_ws_url);
  try {
    const remote = cdp.contexts()[0].pages()[0];
    await remote.setContent('<html><body style="margin:0;height:100vh;background:rgb(0,0,0)"></body></html>');
    const viewer = await viewerBrowser.newPage({ viewport: VIEWPORT });
    await viewer.goto(session.browser_live_view_url);
    await viewer.waitForFunction(() => document.getElementById('status')?.textContent === '', null, { timeout: 30_000 });
    for (let i = 0; i < samples + 3; i++) {
      const red = i % 2 ? 40 : 220;
      const seen = watchColour(viewer, red);
      const t0 = Date.now();
      const painted = await presentColour(remote, red);
      const ms = (await seen) - t0;
      if (i >= 3) {
        latency.push(ms);
        paint.push(painted);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    watched = await animatedCores(server, remote, session.session_id);
    await viewer.close();
    // A window smaller than the page (an embedded view): frames come at its size.
    const small = await viewerBrowser.newPage({ viewport: SMALL_VIEWER });
    await small.goto(session.browser_live_view_url);
    await small.waitForFunction(() => document.getElementById('status')?.textContent === '', null, { timeout: 30_000 });
    watchedSmall = await animatedCores(server, remote, session.session_id);
    await small.close();
    await new Promise((r) => setTimeout(r, 1000)); // the viewer's CDP connection and screencast end
    unwatched = await animatedCores(server, remote, session.session_id);
  } finally {
    await cdp.close().catch(() => {});
    await server.client.browsers.deleteByID(session.session_id).catch(() => {});
  }
  return { latency: summary(latency), paint: summary(paint), watched, watchedSmall, unwatched };
}

export async function run({
  log = () => {},
  samples = Number(process.env.BENCH_LIVEVIEW_SAMPLES || 40),
  stillSamples = Number(process.env.BENCH_LIVEVIEW_STILL_SAMPLES || 3),
} = {}) {
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  const site = await startSite();
  let session;
  let cdp;
  let viewerBrowser;
  const latency = [];
  const paint = [];
  const navLatency = [];
  const navPaint = [];
  const stillLatency = [];
  const stillPaint = [];
  let stillCores = NaN;
  let cores = NaN;
  let headless;
  try {
    session = await server.client.browsers.create({ headless: false, viewport: VIEWPORT, timeout_seconds: 600 });
    cdp = await chromium.connectOverCDP(session.cdp_ws_url);
    const remote = cdp.contexts()[0].pages()[0];
    await remote.setContent('<html><body style="margin:0;height:100vh;background:rgb(0,0,0)"></body></html>');

    viewerBrowser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      args: ['--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
    });
    const viewer = await viewerBrowser.newPage({ viewport: VIEWPORT });
    await viewer.goto(session.browser_live_view_url);
    await viewer.waitForFunction(() => document.getElementById('status')?.textContent === '', null, { timeout: 30_000 });

    const watch = (red) => watchColour(viewer, red);
    const presented = (red) => presentColour(remote, red);

    for (let i = 0; i < samples + 3; i++) {
      const red = i % 2 ? 40 : 220;
      const seen = watch(red);
      const t0 = Date.now();
      const painted = await presented(red);
      const ms = (await seen) - t0;
      if (i >= 3) {
        latency.push(ms);
        paint.push(painted);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    log(`latency p50 ${summary(latency).p50} ms, remote paint p50 ${summary(paint).p50} ms`);

    // Full-page navigations, alternating between the two sites and colours.
    const twoFrames = () =>
      remote.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))));
    const navigate = async (i) => {
      const red = i % 2 ? 60 : 200;
      const seen = watch(red);
      await remote.goto(`http://${i % 2 ? 'localhost' : '127.0.0.1'}:${site.port}/c/${red}?i=${i}`, { waitUntil: 'load' });
      const t0 = Date.now();
      await twoFrames();
      const painted = Date.now() - t0;
      return { ms: Math.max(0, (await seen) - t0), painted };
    };
    for (let i = 0; i < samples + 3; i++) {
      const { ms, painted } = await navigate(i);
      if (i >= 3) {
        navLatency.push(ms);
        navPaint.push(painted);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    log(`navigation p50 ${summary(navLatency).p50} ms p95 ${summary(navLatency).p95} ms, remote paint p50 ${summary(navPaint).p50} ms`);
    // Each after 62 s still (x11vnc's default idle throttle starts after 60 s and holds a change
    // for a random 0-4 s, so one sample proves little: p50 of 3). x11vnc's CPU while the screen
    // is still, from the 6th second of each pause on.
    const x11vnc = pidsMatching(/x11vnc .*liveview-control/, server.pid);
    let stillTicks = 0;
    let stillSeconds = 0;
    for (let i = 0; i < stillSamples; i++) {
      await new Promise((r) => setTimeout(r, 5_000));
      const t0 = now();
      const before = x11vnc.map(cpuTicks);
      await new Promise((r) => setTimeout(r, 57_000));
      stillTicks += x11vnc.map(cpuTicks).reduce((s, v, j) => s + v - before[j], 0);
      stillSeconds += (now() - t0) / 1000;
      const { ms, painted } = await navigate(i);
      stillLatency.push(ms);
      stillPaint.push(painted);
    }
    stillCores = stillTicks / TICK_HZ / stillSeconds;
    log(`navigation after 62 s still: ${stillLatency.join(', ')} ms (remote paint ${stillPaint.join(', ')} ms); x11vnc ${stillCores.toFixed(4)} cores while still`);

    // CPU while one viewer watches a page that changes 10 times a second.
    const pids = [
      ...pidsMatching(/x11vnc .*liveview-control/, server.pid),
      ...pidsMatching(/hangar agent/, server.pid),
      server.pid,
    ];
    const t0 = now();
    const before = pids.map(cpuTicks);
    await animate(remote);
    const after = pids.map(cpuTicks);
    const seconds = (now() - t0) / 1000;
    cores = after.reduce((s, v, i) => s + v - before[i], 0) / TICK_HZ / seconds;
    log(`cpu ${cores.toFixed(3)} cores over ${seconds.toFixed(1)} s (${pids.length} processes)`);

    headless = await headlessLatency(server, viewerBrowser, samples);
    log(`headless (screencast) latency p50 ${headless.latency.p50} ms, remote paint p50 ${headless.paint.p50} ms`);
    log(`headless session animating: ${headless.watched.toFixed(3)} cores watched, ${headless.watchedSmall.toFixed(3)} watched in a 960x540 window, ${headless.unwatched.toFixed(3)} unwatched`);
  } finally {
    await viewerBrowser?.close().catch(() => {});
    await cdp?.close().catch(() => {});
    if (session) await server.client.browsers.deleteByID(session.session_id).catch(() => {});
    await server.stop();
    await site.close();
  }
  const l = summary(latency);
  const p = summary(paint);
  const nl = summary(navLatency);
  const np = summary(navPaint);
  const sl = summary(stillLatency);
  const sp = summary(stillPaint);
  const note = `${samples} colour changes at 1920x1080, one headless viewer; baseline: the remote page presenting the change itself`;
  // A p50 row with its goal, against the remote page's own paint as the baseline.
  const p50Row = (metric, value, baseline, note) => ({
    name: 'liveview',
    metric,
    value: value.p50,
    baseline: baseline.p50,
    ratio: value.p50 / baseline.p50,
    goal: `≤ ${GOAL_MS} ms`,
    met: value.p50 <= GOAL_MS,
    note,
  });
  return [
    p50Row('p50 change → viewer shows it (ms)', l, p, note),
    { name: 'liveview', metric: 'p95 change → viewer shows it (ms)', value: l.p95, baseline: p.p95, ratio: l.p95 / p.p95 },
    p50Row(
      'p50 goto resolved → viewer shows the new page (ms)',
      nl,
      np,
      `${samples} cross-site navigations (waitUntil load) between two local solid-colour pages; baseline: the remote page presenting two frames after goto resolved`,
    ),
    { name: 'liveview', metric: 'p95 goto resolved → viewer shows the new page (ms)', value: nl.p95, baseline: np.p95, ratio: nl.p95 / np.p95 },
    p50Row(
      'p50 change → viewer shows it, headless session (ms)',
      headless.latency,
      headless.paint,
      `${samples} colour changes at 1920x1080 through the CDP screencast live view; baseline: the remote page presenting the change itself`,
    ),
    {
      name: 'liveview',
      metric: 'p95 change → viewer shows it, headless session (ms)',
      value: headless.latency.p95,
      baseline: headless.paint.p95,
      ratio: headless.latency.p95 / headless.paint.p95,
    },
    p50Row('p50 goto → viewer after 62 s still (ms)', sl, sp, `${stillSamples} navigations, each after the screen was still for 62 s`),
    {
      name: 'liveview',
      metric: 'x11vnc CPU, one viewer, screen still (cores)',
      value: stillCores,
      baseline: null,
      ratio: null,
      note: 'over the still minutes before those navigations',
    },
    {
      name: 'liveview',
      metric: 'CPU per viewer, page changing 10×/s (cores)',
      value: cores,
      baseline: null,
      ratio: null,
      note: 'x11vnc + hangar agent + server over 10 s',
    },
    {
      name: 'liveview',
      metric: 'CPU of a headless session watched by one viewer, page changing 10×/s (cores)',
      value: headless.watched,
      baseline: headless.unwatched,
      ratio: headless.watched / headless.unwatched,
      note: 'the instance (agent, Chromium) + server process over 10 s; baseline: the same with no viewer',
    },
    {
      name: 'liveview',
      metric: 'the same, the viewer a 960x540 window (cores)',
      value: headless.watchedSmall,
      baseline: headless.unwatched,
      ratio: headless.watchedSmall / headless.unwatched,
      note: 'frames fit the viewer window, not the 1920x1080 page',
    },
  ];
}

await runStandalone(import.meta.url, run);
