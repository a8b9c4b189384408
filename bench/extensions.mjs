// bench/extensions: uploading one small MV3 extension into a running headful browser until the
// call returns (unpacked, Chromium restarted, DevTools answering again), beside a raw Chromium
// cold start measured in the same run. Goal: upload-to-ready ≤ 1.3 × the cold start.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { CdpClient, launchChromium, now, runStandalone, startServer, summary } from './lib.mjs';

const { toFile } = createRequire(new URL('../tests/e2e/package.json', import.meta.url))('@onkernel/sdk');

function extensionZip() {
  const dir = mkdtempSync(join(tmpdir(), 'hangar-bench-ext-'));
  try {
    writeFileSync(join(dir, 'manifest.json'), JSON.stringify({
      manifest_version: 3, name: 'bench', version: '1.0',
      content_scripts: [{ matches: ['<all_urls>'], js: ['c.js'] }],
    }));
    writeFileSync(join(dir, 'c.js'), 'document.documentElement.dataset.bench = 1;');
    execFileSync('zip', ['-qr', join(dir, 'e.zip'), 'manifest.json', 'c.js'], { cwd: dir });
    return readFileSync(join(dir, 'e.zip'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function rawColdStart() {
  const t0 = now();
  const chrome = await launchChromium();
  try {
    const cdp = await CdpClient.connect(chrome.wsUrl);
    await cdp.send('Browser.getVersion');
    await cdp.close();
    return now() - t0;
  } finally {
    await chrome.stop();
  }
}

export async function run({ log = () => {}, runs = Number(process.env.BENCH_EXTENSION_RUNS || 8) } = {}) {
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  const zip = extensionZip();
  const upload = [];
  const raw = [];
  let b;
  try {
    b = await server.client.browsers.create({ headless: false, timeout_seconds: 600 });
    for (let i = 0; i < runs; i++) {
      raw.push(await rawColdStart());
      const t0 = now();
      await server.client.browsers.loadExtensions(b.session_id, {
        extensions: [{ name: 'bench', zip_file: await toFile(zip, 'bench.zip') }],
      });
      const cdp = await CdpClient.connect(b.cdp_ws_url);
      await cdp.send('Browser.getVersion');
      upload.push(now() - t0);
      await cdp.close();
      log(`extensions ${i + 1}/${runs}: upload-to-ready ${upload.at(-1).toFixed(0)} ms, raw ${raw.at(-1).toFixed(0)} ms`);
    }
  } finally {
    if (b) await server.client.browsers.deleteByID(b.session_id).catch(() => {});
    await server.stop();
  }
  const u = summary(upload);
  const r = summary(raw);
  const note = `${runs} uploads of one small MV3 extension into a headful browser`;
  return [
    { name: 'extensions', metric: 'p50 upload→CDP ready (ms)', value: u.p50, baseline: r.p50, ratio: u.p50 / r.p50, goal: '≤ 1.3×', met: u.p50 / r.p50 <= 1.3, note },
    { name: 'extensions', metric: 'p95 upload→CDP ready (ms)', value: u.p95, baseline: r.p95, ratio: u.p95 / r.p95, goal: '', met: null, note },
  ];
}

await runStandalone(import.meta.url, run);
