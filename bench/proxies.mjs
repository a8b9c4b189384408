// bench/proxies: a page with 24 sub-resources loaded by a Hangar browser through its per-instance
// forwarder to a real tinyproxy, against a Hangar browser whose Chromium is pointed at the same
// tinyproxy directly (browsers.ini chromium_flags, proxies plugin off) — both sandboxed, so the
// ratio is what the forwarder adds. Cache off, alternating blocks. Plus the live swap: PATCH
// /browsers/{id} {proxy_id} alternating between two proxies, as the SDK sees it. And request
// signing (Web Bot Auth: Fetch interception in the agent adds three headers to every request): the
// same page in a signing browser against the unsigned one, both through the forwarder and proxy.
// And an egress allowlist (network.allowed_hosts) of 1,000 entries, the page's host matched by the
// last wildcard (the forwarder scans every one for every connection), against none.
// Goals: load ratio ≤ 1.1; swap p50 ≤ 50 ms; signing ratio ≤ 1.1; allowlist ratio ≤ 1.05.
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { CdpClient, now, runStandalone, startServer, summary } from './lib.mjs';
import { repoRoot } from '../tests/e2e/lib/server.mjs';
import { startOrigin, startTinyproxy } from '../tests/e2e/lib/proxy-servers.mjs';

export const LOAD_RATIO_GOAL = 1.1;
export const SWAP_GOAL_MS = 50;
export const SIGNING_RATIO_GOAL = 1.1;
export const ALLOWLIST_RATIO_GOAL = 1.05;

function configDir(scratch, name, { withProxies, chromiumFlags }) {
  const etc = join(repoRoot, 'etc');
  const conf = join(scratch, name);
  mkdirSync(join(conf, 'plugins.d'), { recursive: true });
  copyFileSync(join(etc, 'hangar.ini'), join(conf, 'hangar.ini'));
  for (const f of readdirSync(join(etc, 'plugins.d')))
    if (withProxies || f !== 'proxies.ini') copyFileSync(join(etc, 'plugins.d', f), join(conf, 'plugins.d', f));
  if (chromiumFlags) writeFileSync(join(conf, 'plugins.d', 'browsers.ini'), `[browsers]\nenabled = true\nchromium_flags = ${chromiumFlags}\n`);
  for (const d of [conf, join(conf, 'plugins.d')]) chmodSync(d, 0o755);
  return join(conf, 'hangar.ini');
}

async function pageLoader(cdpUrl) {
  const cdp = await CdpClient.connect(cdpUrl);
  const page = await cdp.attachToPage();
  await cdp.send('Page.enable', {}, page);
  await cdp.send('Network.enable', {}, page);
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: true }, page);
  const load = async (url) => {
    cdp.events.length = 0;
    const t0 = now();
    await cdp.send('Page.navigate', { url }, page);
    for (;;) {
      if (cdp.events.some((e) => e.method === 'Page.loadEventFired')) return now() - t0;
      if (now() - t0 > 30_000) throw new Error(`no load event for ${url}`);
      await new Promise((r) => setTimeout(r, 2));
    }
  };
  return { cdp, load };
}

// Five warm-up loads in each browser, then `loads` each in alternating blocks of `block`; the
// samples of `a` and of `b`.
async function alternate(a, b, url, loads, block) {
  for (let i = 0; i < 5; i++) {
    await a.load(url());
    await b.load(url());
  }
  const samples = [[], []];
  for (let done = 0; done < loads; done += block) {
    for (let i = 0; i < block; i++) samples[0].push(await a.load(url()));
    for (let i = 0; i < block; i++) samples[1].push(await b.load(url()));
  }
  return samples;
}

export async function run({ log = () => {}, loads = Number(process.env.BENCH_PROXY_LOADS || 40), swaps = Number(process.env.BENCH_PROXY_SWAPS || 40), block = 10 } = {}) {
  const scratch = mkdtempSync(join(tmpdir(), 'hangar-bench-proxies-'));
  chmodSync(scratch, 0o755);
  const origin = await startOrigin();
  const tiny = await startTinyproxy(scratch, { originPort: origin.port });
  const tiny2 = await startTinyproxy(scratch, { originPort: origin.port });
  const upstream = `http://127.0.0.1:${tiny.port}`;
  const servers = [];
  const clients = [];
  try {
    const viaForwarder = await startServer({ env: { HANGAR_CONFIG: configDir(scratch, 'fwd', { withProxies: true }) } });
    servers.push(viaForwarder);
    const direct = await startServer({
      env: { HANGAR_CONFIG: configDir(scratch, 'direct', { withProxies: false, chromiumFlags: `--proxy-server=${upstream} --proxy-bypass-list=<-loopback>` }) },
    });
    servers.push(direct);

    const k = viaForwarder.client;
    const p1 = await k.proxies.create({ type: 'custom', protocol: 'http', config: { host: '127.0.0.1', port: tiny.port } });
    const p2 = await k.proxies.create({ type: 'custom', protocol: 'http', config: { host: '127.0.0.1', port: tiny2.port } });
    const b1 = await k.browsers.create({ headless: true, proxy_id: p1.id, timeout_seconds: 600 });
    const b2 = await direct.client.browsers.create({ headless: true, timeout_seconds: 600 });
    const fwd = await pageLoader(b1.cdp_ws_url);
    const dir = await pageLoader(b2.cdp_ws_url);
    clients.push(fwd.cdp, dir.cdp);

    // A page of 24 sub-resources under a name only tinyproxy resolves (it hands *.hangar.test to the origin).
    let n = 0;
    const url = () => `http://bench.hangar.test:${origin.port}/page-${n++}?subs=24`;
    const [viaForwarderMs, directMs] = await alternate(fwd, dir, url, loads, block);
    const hits = origin.hits.filter((h) => h.host?.startsWith('bench.hangar.test')).length;
    if (hits < loads * 2 * 25) throw new Error(`only ${hits} requests reached the origin through the proxy`);

    const swapMs = [];
    for (let i = 0; i < swaps; i++) {
      const t0 = now();
      await k.browsers.update(b1.session_id, { proxy_id: i % 2 ? p1.id : p2.id });
      swapMs.push(now() - t0);
    }
    await k.browsers.update(b1.session_id, { proxy_id: p1.id });

    // Signing: the direct browser goes (two browsers at a time), a signing one on the same proxy comes.
    await dir.cdp.close();
    clients.splice(clients.indexOf(dir.cdp), 1);
    await direct.client.browsers.deleteByID(b2.session_id);
    const b3 = await k.browsers.create({ headless: true, proxy_id: p1.id, extensions: [{ name: 'web-bot-auth' }], timeout_seconds: 600 });
    const sig = await pageLoader(b3.cdp_ws_url);
    clients.push(sig.cdp);
    const [signedMs, unsignedMs] = await alternate(sig, fwd, url, loads, block);
    const signed = origin.hits.filter((h) => h.host?.startsWith('bench.hangar.test') && h.headers['signature-input']).length;
    if (signed < loads * 25) throw new Error(`only ${signed} signed requests reached the origin`);

    // The allowlist: the signing browser goes, one held to 1,000 entries comes.
    await sig.cdp.close();
    clients.splice(clients.indexOf(sig.cdp), 1);
    await k.browsers.deleteByID(b3.session_id);
    const allowed = [...Array.from({ length: 999 }, (_, i) => `*.site-${i}.example.com`), '*.hangar.test'];
    const b4 = await k.browsers.create({ headless: true, proxy_id: p1.id, network: { allowed_hosts: allowed }, timeout_seconds: 600 });
    const fenced = await pageLoader(b4.cdp_ws_url);
    clients.push(fenced.cdp);
    const [fencedMs, openMs] = await alternate(fenced, fwd, url, loads, block);

    const f = summary(viaForwarderMs);
    const d = summary(directMs);
    const s = summary(swapMs);
    const on = summary(signedMs);
    const off = summary(unsignedMs);
    log(`page load p50 forwarder ${f.p50.toFixed(1)} ms, direct ${d.p50.toFixed(1)} ms; swap p50 ${s.p50.toFixed(1)} ms; signed ${on.p50.toFixed(1)} ms, unsigned ${off.p50.toFixed(1)} ms`);
    const ratio = f.p50 / d.p50;
    const signingRatio = on.p50 / off.p50;
    const fencedSummary = summary(fencedMs);
    const openSummary = summary(openMs);
    const allowlistRatio = fencedSummary.p50 / openSummary.p50;
    log(`allowlist of 1,000: ${fencedSummary.p50.toFixed(1)} ms, none ${openSummary.p50.toFixed(1)} ms`);
    return [
      { name: 'proxies', metric: 'page load p50 ms, network.allowed_hosts of 1,000 entries', value: fencedSummary.p50, baseline: openSummary.p50, ratio: allowlistRatio, goal: `ratio ≤ ${ALLOWLIST_RATIO_GOAL}`, met: allowlistRatio <= ALLOWLIST_RATIO_GOAL, note: `allowlist p95 ${fencedSummary.p95.toFixed(1)} ms, none p95 ${openSummary.p95.toFixed(1)} ms` },
      { name: 'proxies', metric: 'page load p50 ms, signing on (web-bot-auth, 25 signed requests)', value: on.p50, baseline: off.p50, ratio: signingRatio, goal: `ratio ≤ ${SIGNING_RATIO_GOAL}`, met: signingRatio <= SIGNING_RATIO_GOAL, note: `signed p95 ${on.p95.toFixed(1)} ms, unsigned p95 ${off.p95.toFixed(1)} ms` },
      { name: 'proxies', metric: 'page load p50 ms (24 sub-resources via tinyproxy)', value: f.p50, baseline: d.p50, ratio, goal: `ratio ≤ ${LOAD_RATIO_GOAL}`, met: ratio <= LOAD_RATIO_GOAL, note: `forwarder p95 ${f.p95.toFixed(1)} ms, direct p95 ${d.p95.toFixed(1)} ms` },
      { name: 'proxies', metric: 'live swap p50 ms (PATCH proxy_id)', value: s.p50, goal: `≤ ${SWAP_GOAL_MS} ms`, met: s.p50 <= SWAP_GOAL_MS, note: `p95 ${s.p95.toFixed(1)} ms` },
    ];
  } finally {
    for (const c of clients) await c.close();
    for (const s of servers) await s.stop();
    await tiny.stop();
    await tiny2.stop();
    await origin.close();
    rmSync(scratch, { recursive: true, force: true });
  }
}

await runStandalone(import.meta.url, run);
