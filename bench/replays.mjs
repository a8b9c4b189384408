// bench/replays: CPU and memory of recording a headful 1920x1080 session at 25 fps for 10 s, once
// with a static page and once with a page whose background and a box change every frame (the
// worst case): the replay's ffmpeg and the instance's agent (whose ScreenFeed reads and converts
// the screen; all of its CPU is counted) after `client.browsers.replays.start`, against a
// baseline in the same run, the same display recorded by a plain `ffmpeg -f x11grab ... out.mp4`
// (x264's default settings), started inside the instance through process.spawn.
// CPU is utime+stime from /proc over the window; memory is ffmpeg's peak RSS (VmHWM) plus what
// the agent's resident memory grew by while recording.
// Goal: ≤ 0.15 core and ≤ 150 MB.
import { readFileSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';

import { now, runStandalone, startServer } from './lib.mjs';

const require = createRequire(new URL('../tests/e2e/package.json', import.meta.url));
const { chromium } = require('playwright-core');

export const GOAL_CORES = 0.15;
export const GOAL_MB = 150;
const CONTENTS = (process.env.BENCH_REPLAY_PAGES || 'static,animated,scrolling').split(',');
const TICK_HZ = 100;

function cpuTicks(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(f[11]) + Number(f[12]);
}

function parentOf(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

function statusMb(pid, field) {
  const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

async function pidOf(re) {
  for (let i = 0; i < 50; i++) {
    for (const d of readdirSync('/proc')) {
      if (!/^\d+$/.test(d)) continue;
      try {
        if (re.test(readFileSync(`/proc/${d}/cmdline`, 'utf8').replaceAll('\0', ' '))) return Number(d);
      } catch {}
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no process matches ${re}`);
}

// `helper` (the agent) is counted too, its memory as what it grew by since `helperMbBefore`.
async function measure(pid, seconds, helper, helperMbBefore) {
  await new Promise((r) => setTimeout(r, 1000)); // encoder warm-up
  const pids = helper ? [pid, helper] : [pid];
  const ticks = () => pids.reduce((sum, p) => sum + cpuTicks(p), 0);
  const t0 = now();
  const c0 = pids.map(cpuTicks);
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const wall = (now() - t0) / 1000;
  const each = pids.map((p, i) => (cpuTicks(p) - c0[i]) / TICK_HZ / wall);
  const cores = each.reduce((a, b) => a + b, 0);
  const grown = helper ? Math.max(0, statusMb(helper, 'VmRSS') - helperMbBefore) : 0;
  return { cores, ffmpeg: each[0], agent: each[1], mb: statusMb(pid, 'VmHWM') + grown };
}

export async function run({ log = () => {}, seconds = Number(process.env.BENCH_REPLAY_SECONDS || 10) } = {}) {
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  const client = server.client;
  let session;
  let cdp;
  const result = {};
  try {
    session = await client.browsers.create({ headless: false, viewport: { width: 1920, height: 1080 }, timeout_seconds: 600 });
    const id = session.session_id;
    cdp = await chromium.connectOverCDP(session.cdp_ws_url);
    const page = cdp.contexts()[0].pages()[0];
    // `mode`: 'static', 'animated' (the whole background and a box change every frame: the
    // worst case) or 'scrolling' (a column of text scrolled 4 px a frame: a user reading).
    const text = Array.from({ length: 400 }, (_, i) =>
      `<p>${i} The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. ` +
      'Sphinx of black quartz, judge my vow. How vexingly quick daft zebras jump!</p>').join('');
    await page.setContent(`<html><body style="margin:0;height:100vh;overflow:hidden">
      <div id="box" style="position:absolute;width:200px;height:200px;background:#222"></div>
      <div id="text" style="display:none;height:100vh;overflow:hidden;font:18px/1.5 serif;padding:0 20%">${text}</div>
      <script>
        let n = 0;
        window.mode = 'static';
        (function frame() {
          requestAnimationFrame(frame);
          const t = document.getElementById('text'), b = document.getElementById('box');
          t.style.display = window.mode === 'scrolling' ? 'block' : 'none';
          b.style.display = window.mode === 'scrolling' ? 'none' : 'block';
          if (window.mode === 'static') return;
          n++;
          if (window.mode === 'scrolling') {
            document.body.style.background = '#fff';
            t.scrollTop = (n * 4) % (t.scrollHeight - t.clientHeight);
            return;
          }
          document.body.style.background = 'hsl(' + (n % 360) + ',60%,60%)';
          b.style.left = (n * 7) % 1700 + 'px';
          b.style.top = (n * 3) % 860 + 'px';
        })();
      </script></body></html>`);
    const display = (await client.browsers.process.exec(id, { command: 'sh', args: ['-c', 'ls /tmp/.X11-unix'] }))
      .stdout_b64;
    const x = Buffer.from(display, 'base64').toString().trim().replace(/^X/, ':');
    const animate = (mode) => page.evaluate((v) => (window.mode = v), mode);

    for (const content of CONTENTS) {
      await animate(content);
      // Hangar's recording.
      const replay = await client.browsers.replays.start(id, { framerate: 25 });
      const ours = await pidOf(new RegExp(`ffmpeg .*${replay.replay_id}\\.part\\.mp4`));
      // This instance's agent is ffmpeg's parent (other servers' agents may run beside it). What
      // it grew by is counted from about the start of the recording.
      const agent = parentOf(ours);
      const agentMb = statusMb(agent, 'VmRSS');
      result[`hangar-${content}`] = await measure(ours, seconds, agent, agentMb);
      await client.browsers.replays.stop(replay.replay_id, { id });

      // Baseline: x264 defaults on the same capture.
      const base = await client.browsers.process.spawn(id, {
        command: 'ffmpeg',
        args: ['-v', 'error', '-f', 'x11grab', '-framerate', '25', '-video_size', '1920x1080', '-i', `${x}.0+0,0`,
          '-c:v', 'libx264', '-pix_fmt', 'yuv420p', '-y', `/tmp/bench-baseline-${content}.mp4`],
      });
      const theirs = await pidOf(new RegExp(`ffmpeg .*bench-baseline-${content}\\.mp4`));
      result[`baseline-${content}`] = await measure(theirs, seconds);
      await client.browsers.process.kill(base.process_id, { id, signal: 'KILL' }).catch(() => {});
      const h = result[`hangar-${content}`];
      log(`${content}: replay ${h.cores.toFixed(3)} cores (ffmpeg ${h.ffmpeg.toFixed(3)}, agent ${h.agent.toFixed(3)}) / ${h.mb.toFixed(0)} MB, ` +
        `baseline ${result[`baseline-${content}`].cores.toFixed(3)} cores / ${result[`baseline-${content}`].mb.toFixed(0)} MB`);
    }
  } finally {
    await cdp?.close().catch(() => {});
    if (session) await client.browsers.deleteByID(session.session_id).catch(() => {});
    await server.stop();
  }
  const note = `1920x1080 at 25 fps for ${seconds} s: a static page (a page being read), one whose whole background and a box change every frame (the worst case) and a column of text scrolled 4 px a frame; baseline: ffmpeg x11grab + libx264 defaults on the same display`;
  const rows = [];
  for (const content of CONTENTS) {
    const h = result[`hangar-${content}`];
    const b = result[`baseline-${content}`];
    rows.push(
      {
        name: 'replays',
        metric: `CPU while recording, ${content} page (cores)`,
        value: h.cores,
        baseline: b.cores,
        ratio: h.cores / b.cores,
        goal: `≤ ${GOAL_CORES} core`,
        met: h.cores <= GOAL_CORES,
        ...(content === 'static' ? { note } : {}),
      },
      {
        name: 'replays',
        metric: `peak memory of the recorder, ${content} page (MB)`,
        value: h.mb,
        baseline: b.mb,
        ratio: h.mb / b.mb,
        goal: `≤ ${GOAL_MB} MB`,
        met: h.mb <= GOAL_MB,
      },
    );
  }
  return rows;
}

await runStandalone(import.meta.url, run);
