// bench/computer: the computer API on a headful 1920x1080 browser.
// Screenshot latency (API round trip, PNG of the whole screen) beside, in the same run and on the
// same display, one frame grabbed by spawning `ffmpeg -f x11grab` inside the instance (through
// process.exec, so both sides pay one API round trip) and a CDP Page.captureScreenshot of the
// page. Click latency: the API round trip, and the time inside the agent (its Server-Timing).
// Goals: screenshot p50 ≤ 50 ms; a click ≤ 5 ms p50 inside the agent.
import { CdpClient, now, runStandalone, startServer, summary } from './lib.mjs';

export async function run({ log = () => {}, shots = Number(process.env.BENCH_COMPUTER_SHOTS || 30) } = {}) {
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  const client = server.client;
  const api = [];
  const ffmpeg = [];
  const cdpShots = [];
  const clickRtt = [];
  const clickAgent = [];
  let b;
  let cdp;
  try {
    b = await client.browsers.create({ headless: false, viewport: { width: 1920, height: 1080 }, timeout_seconds: 600 });
    const id = b.session_id;
    const x11 = await client.browsers.process.exec(id, { command: 'sh', args: ['-c', 'ls /tmp/.X11-unix'] });
    const display = ':' + Buffer.from(x11.stdout_b64 || '', 'base64').toString().trim().split(/\s+/)[0].replace(/^X/, '');
    cdp = await CdpClient.connect(b.cdp_ws_url);
    const sessionId = await cdp.attachToPage();
    const grab = ['-c', `ffmpeg -loglevel error -y -f x11grab -video_size 1920x1080 -i ${display} -frames:v 1 /tmp/frame.png`];
    for (let i = 0; i < 3; i++) await (await client.browsers.computer.captureScreenshot(id)).arrayBuffer(); // warm up
    for (let i = 0; i < shots; i++) {
      let t0 = now();
      const png = Buffer.from(await (await client.browsers.computer.captureScreenshot(id)).arrayBuffer());
      api.push(now() - t0);
      if (png.length < 1000) throw new Error('screenshot too small');
      t0 = now();
      const r = await client.browsers.process.exec(id, { command: 'sh', args: grab });
      ffmpeg.push(now() - t0);
      if (r.exit_code !== 0) throw new Error(`ffmpeg x11grab failed: ${Buffer.from(r.stderr_b64 || '', 'base64')}`);
      t0 = now();
      await cdp.send('Page.captureScreenshot', { format: 'png' }, sessionId);
      cdpShots.push(now() - t0);
      if (i % 10 === 9) log(`computer ${i + 1}/${shots} screenshots each`);
    }
    for (let i = 0; i < 100; i++) {
      const t0 = now();
      const res = await server.fetch(`/browsers/${id}/computer/click_mouse`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ x: 1900, y: 1070 }),
      });
      clickRtt.push(now() - t0);
      if (res.status !== 204) throw new Error(`click answered ${res.status}`);
      const m = /dur=([\d.]+)/.exec(res.headers.get('server-timing') || '');
      if (m) clickAgent.push(Number(m[1]));
    }
  } finally {
    await cdp?.close();
    if (b) await client.browsers.deleteByID(b.session_id).catch(() => {});
    await server.stop();
  }
  const a = summary(api);
  const f = summary(ffmpeg);
  const c = summary(cdpShots);
  const k = summary(clickRtt);
  const ka = clickAgent.length ? summary(clickAgent) : { p50: NaN, p95: NaN };
  const note = `${shots} screenshots each at 1920x1080 headful; 100 clicks`;
  return [
    { name: 'computer', metric: 'p50 screenshot vs ffmpeg x11grab (ms)', value: a.p50, baseline: f.p50, ratio: a.p50 / f.p50, goal: '≤ 50 ms', met: a.p50 <= 50, note },
    { name: 'computer', metric: 'p95 screenshot vs ffmpeg x11grab (ms)', value: a.p95, baseline: f.p95, ratio: a.p95 / f.p95, goal: '', met: null, note },
    { name: 'computer', metric: 'p50 screenshot vs CDP captureScreenshot (ms)', value: a.p50, baseline: c.p50, ratio: a.p50 / c.p50, goal: '', met: null, note },
    { name: 'computer', metric: 'p50 click inside the agent (ms)', value: ka.p50, baseline: '', ratio: '', goal: '≤ 5 ms', met: ka.p50 <= 5, note },
    { name: 'computer', metric: 'p50 click API round trip (ms)', value: k.p50, baseline: '', ratio: '', goal: '', met: null, note },
  ];
}

await runStandalone(import.meta.url, run);
