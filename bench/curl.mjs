// bench/curl: client.browsers.curl and client.browsers.fetch (both sent by the SDK to the
// session's base_url) of a small GET on a local site, against the same request made by hand
// through the same browser: fetch() evaluated over CDP in the session's page from the bench
// process. Sequential calls in alternating blocks so machine noise hits every side alike; plus the
// first curl of a fresh session (it opens the hidden page) and 8 requests at once.
// Goal: curl p50 ≤ 50 ms (absolute; the ratio shows what the API path adds).
import http from 'node:http';

import { listenAllowed } from '../tests/e2e/lib/server.mjs';
import { CdpClient, interleaved, now, runStandalone, startServer, summary, timed } from './lib.mjs';

export const GOAL_MS = 50;

// On a host port the test server lets instances reach: the instance has its own network, and
// any other port of the host is refused.
async function startSite() {
  const srv = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'set-cookie': 'seen=1; Path=/' });
    res.end(JSON.stringify({ path: req.url, cookie: req.headers.cookie ?? null }));
  });
  const port = await listenAllowed(srv);
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((r) => {
        srv.closeAllConnections();
        srv.close(() => r());
      }),
  };
}

export async function run({
  log = () => {},
  calls = Number(process.env.BENCH_CURL_CALLS || 200),
  warmup = Number(process.env.BENCH_CURL_WARMUP || 20),
  block = 20,
} = {}) {
  const site = await startSite();
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  let rows;
  let cold;
  let parallel;
  let parallelBaseline;
  let cdp;
  let session;
  try {
    session = await server.client.browsers.create({ headless: true, timeout_seconds: 600 });
    const sid = session.session_id;
    const url = `${site.url}/x`;
    const t0 = now();
    const first = await server.client.browsers.curl(sid, { url });
    cold = now() - t0;
    if (first.status !== 200) throw new Error(`curl gave ${first.status}`);

    cdp = await CdpClient.connect(session.cdp_ws_url);
    const page = await cdp.attachToPage();
    // Same-origin, as the hidden page's requests are (no CORS in the way).
    await cdp.send('Page.navigate', { url: `${site.url}/` }, page);
    for (let i = 0; i < 100; i++) {
      const r = await cdp.send('Runtime.evaluate', { expression: 'location.origin', returnByValue: true }, page);
      if (r.result.value === site.url) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const byHand = async () => {
      const r = await cdp.send(
        'Runtime.evaluate',
        { expression: `fetch(${JSON.stringify(url)}).then(r => r.text())`, awaitPromise: true, returnByValue: true },
        page,
      );
      if (!r.result.value?.includes('"path"')) throw new Error(`fetch in the page gave ${JSON.stringify(r)}`);
    };
    const steps = {
      curl: () =>
        timed(async () => {
          const r = await server.client.browsers.curl(sid, { url });
          if (r.status !== 200) throw new Error(`curl gave ${r.status}`);
        }),
      fetch: () =>
        timed(async () => {
          const r = await server.client.browsers.fetch(sid, url);
          if (!(await r.text()).includes('"path"')) throw new Error('browsers.fetch gave something else');
        }),
      cdp: () => timed(byHand),
    };
    rows = await interleaved(steps, { calls, warmup, block, log, label: 'curl' });
    const atOnce = async (fn) => {
      const s = now();
      await Promise.all(Array.from({ length: 8 }, fn));
      return now() - s;
    };
    const p = [];
    const pb = [];
    for (let i = 0; i < 10; i++) {
      p.push(await atOnce(() => server.client.browsers.curl(sid, { url })));
      pb.push(await atOnce(byHand));
    }
    parallel = summary(p).p50;
    parallelBaseline = summary(pb).p50;
  } finally {
    await cdp?.close();
    if (session) await server.client.browsers.deleteByID(session.session_id).catch(() => {});
    await server.stop();
    await site.close();
  }
  const base = summary(rows.cdp);
  const c = summary(rows.curl);
  const f = summary(rows.fetch);
  const note = `${calls} sequential GETs each after ${warmup} warm-up, headless, local site; baseline: fetch() evaluated over CDP in the session's page from the bench process`;
  const row = (metric, s, p, goal = false) => ({
    name: 'curl',
    metric,
    value: s[p],
    baseline: base[p],
    ratio: s[p] / base[p],
    goal: goal ? `≤ ${GOAL_MS} ms` : '',
    met: goal ? s[p] <= GOAL_MS : null,
    ...(goal ? { note } : {}),
  });
  return [
    row('p50 browsers.curl (ms)', c, 'p50', true),
    row('p95 browsers.curl (ms)', c, 'p95'),
    row('p50 browsers.fetch (ms)', f, 'p50'),
    row('p95 browsers.fetch (ms)', f, 'p95'),
    { name: 'curl', metric: 'first curl of a session (ms)', value: cold, baseline: base.p50, ratio: cold / base.p50, goal: '', met: null },
    {
      name: 'curl',
      metric: '8 curls at once, wall (ms)',
      value: parallel,
      baseline: parallelBaseline,
      ratio: parallel / parallelBaseline,
      goal: '',
      met: null,
    },
  ];
}

await runStandalone(import.meta.url, run);
