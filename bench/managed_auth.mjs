// bench/managed_auth: how long a managed-auth login takes, as a team logging its agent in sees
// it: `auth.connections.login()` → the connection `AUTHENTICATED` (polled every 50 ms), on the
// one-page site and on the password + TOTP site of tests/fixtures/sites, each run a new
// connection and a new profile (a first login, the profile saved at the end).
// Baseline: the same login scripted by hand with Playwright over CDP in a Hangar browser (create,
// connect, open the form, fill, submit, the account page, delete), in the same run, alternated.
// Goal: p50 ≤ 3 s on both sites.
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { PASSWORD, TOTP_SECRET, USER, startSites, totp } from '../tests/fixtures/sites/sites.mjs';
import { now, percentile, runStandalone, startServer, summary } from './lib.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const GOAL_MS = 3000;

async function playwright() {
  const entry = join(here, '../tests/e2e/node_modules/playwright-core/index.mjs');
  return (await import(pathToFileURL(entry).href)).chromium;
}

async function managedLogin(client, site, origin, n) {
  const c = await client.auth.connections.create({
    domain: '127.0.0.1', profile_name: `bench-${site}-${n}`, login_url: `${origin}/${site}/login`, credential: { name: `bench-${site}` },
  });
  const t0 = now();
  await client.auth.connections.login(c.id);
  for (;;) {
    const s = await client.auth.connections.retrieve(c.id);
    if (s.status === 'AUTHENTICATED' && s.flow_status === 'SUCCESS') break;
    if (['FAILED', 'EXPIRED', 'CANCELED'].includes(s.flow_status)) throw new Error(`${site} login ${s.flow_status}: ${s.error_message}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const ms = now() - t0;
  await client.auth.connections.delete(c.id);
  return ms;
}

async function scriptedLogin(client, chromium, site, origin) {
  const t0 = now();
  const b = await client.browsers.create({ headless: true });
  const browser = await chromium.connectOverCDP(b.cdp_ws_url);
  try {
    const page = browser.contexts()[0].pages()[0];
    await page.goto(`${origin}/${site}/login`);
    await page.fill('#username', USER);
    await page.fill('#password', PASSWORD);
    await Promise.all([page.waitForURL(site === 'totp' ? /\/verify$/ : /\/account$/), page.click('button[type=submit]')]);
    if (site === 'totp') {
      await page.fill('#otp', totp(TOTP_SECRET));
      await Promise.all([page.waitForURL(/\/account$/), page.click('button[type=submit]')]);
    }
    return now() - t0;
  } finally {
    await browser.close().catch(() => {});
    await client.browsers.deleteByID(b.session_id);
  }
}

export async function run({ log = () => {}, runs = Number(process.env.BENCH_AUTH_RUNS || 6) } = {}) {
  const sites = await startSites();
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '1', ...(process.env.BENCH_AUTH_CONFIG ? { HANGAR_CONFIG: process.env.BENCH_AUTH_CONFIG } : {}) } });
  const chromium = await playwright();
  const rows = [];
  try {
    const client = server.client;
    await client.credentials.create({ name: 'bench-one', domain: '127.0.0.1', values: { username: USER, password: PASSWORD } });
    await client.credentials.create({
      name: 'bench-totp', domain: '127.0.0.1', values: { username: USER, password: PASSWORD }, totp_secret: TOTP_SECRET,
    });
    for (const site of ['one', 'totp']) {
      const managed = [];
      const scripted = [];
      for (let i = 0; i < runs; i++) {
        managed.push(await managedLogin(client, site, sites.origin, i));
        scripted.push(await scriptedLogin(client, chromium, site, sites.origin));
      }
      const m = summary(managed);
      const base = percentile(scripted, 50);
      log(`${site}: managed p50 ${m.p50.toFixed(0)} ms p95 ${m.p95.toFixed(0)} ms; scripted p50 ${base.toFixed(0)} ms`);
      rows.push({
        name: 'managed_auth',
        metric: `login() → AUTHENTICATED, ${site === 'one' ? 'one-page' : 'password + TOTP'} site, p50 ms`,
        value: m.p50,
        baseline: base,
        ratio: m.p50 / base,
        goal: `p50 ≤ ${GOAL_MS} ms`,
        met: m.p50 <= GOAL_MS,
        note: `p95 ${m.p95.toFixed(0)} ms over ${m.n} logins, each a new profile`,
        samples: managed,
      });
    }
    return rows;
  } finally {
    await server.stop();
    await sites.close();
  }
}

await runStandalone(import.meta.url, run);
