// bench/profiles: what a profile costs at the two ends of a session, after visiting a few pages.
// Save = DELETE of a session with save_changes (Chromium closes in order, the user-data folder is
// archived and stored) beside a DELETE of the same kind of session without a profile. Load =
// create on the saved profile (copied in, unpacked, Chromium restores its tabs) beside a cold
// create without one. Spares are off so both sides are cold starts. No goal: the issue asks for
// the numbers.
import { now, runStandalone, startServer, summary } from './lib.mjs';
import { startTestPages } from '../tests/e2e/lib/server.mjs';
import { createRequire } from 'node:module';

// playwright-core is installed for the end-to-end tests; resolve it from there.
const { chromium } = createRequire(new URL('../tests/e2e/package.json', import.meta.url))('playwright-core');

async function visit(b, pages) {
  const browser = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
  try {
    const page = browser.contexts()[0].pages()[0];
    for (let i = 0; i < 4; i++) {
      await page.goto(`${pages.url}page?title=p${i}`);
      await page.evaluate((n) => {
        document.cookie = `visit${n}=yes; max-age=86400; path=/`;
        localStorage.setItem(`visit${n}`, 'x'.repeat(10_000));
      }, i);
    }
  } finally {
    await browser.close();
  }
}

export async function run({ log = () => {}, runs = Number(process.env.BENCH_PROFILE_RUNS || 5) } = {}) {
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  const pages = await startTestPages();
  const client = server.client;
  const save = [];
  const plainDelete = [];
  const load = [];
  const plainCreate = [];
  let bytes = 0;
  try {
    const profile = await client.profiles.create({ name: 'bench' });
    for (let i = 0; i < runs; i++) {
      // Alternating which starts first, so a Chromium still settling hurts both sides alike.
      const createWithProfile = async () => {
        const t0 = now();
        const b = await client.browsers.create({ headless: true, profile: { id: profile.id, save_changes: true } });
        if (i > 0) load.push(now() - t0); // the first run starts on an empty profile
        return b;
      };
      const createPlain = async () => {
        const t0 = now();
        const b = await client.browsers.create({ headless: true });
        plainCreate.push(now() - t0);
        return b;
      };
      let withProfile;
      let plain;
      if (i % 2) {
        plain = await createPlain();
        withProfile = await createWithProfile();
      } else {
        withProfile = await createWithProfile();
        plain = await createPlain();
      }
      let t0;
      await visit(withProfile, pages);
      await visit(plain, pages);
      t0 = now();
      await client.browsers.deleteByID(withProfile.session_id);
      save.push(now() - t0);
      t0 = now();
      await client.browsers.deleteByID(plain.session_id);
      plainDelete.push(now() - t0);
      log(`profiles ${i + 1}/${runs}`);
    }
    bytes = (await (await client.profiles.download(profile.id)).arrayBuffer()).byteLength;
  } finally {
    await pages.close();
    await server.stop();
  }
  const s = summary(save);
  const d = summary(plainDelete);
  const l = summary(load);
  const c = summary(plainCreate);
  const note = `${runs} sessions, 4 pages visited each, archive ${(bytes / 1024).toFixed(0)} KiB (tar.zst)`;
  return [
    { name: 'profiles', metric: 'p50 save: DELETE with save_changes (ms)', value: s.p50, baseline: d.p50, ratio: s.p50 / d.p50, goal: '', met: null, note },
    { name: 'profiles', metric: 'p50 load: create on the profile (ms)', value: l.p50, baseline: c.p50, ratio: l.p50 / c.p50, goal: '', met: null, note },
  ];
}

await runStandalone(import.meta.url, run);
