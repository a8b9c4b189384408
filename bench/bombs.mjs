// bench/bombs: what zip bombs cost the server. Eight uploads at once of an extension whose one
// entry unpacks to 300 MB (about 300 KB zipped) must each be refused (400, over the unpack limit)
// while the server's resident memory grows by less than 64 MB: the zip checks stream entries and
// never hold one. The baseline is the server's resident memory before, in the same run.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { startServer } from './lib.mjs';

function makeBomb() {
  const dir = mkdtempSync(join(tmpdir(), 'hangar-bomb-'));
  try {
    writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ manifest_version: 3, name: 'bomb', version: '1' }));
    execFileSync('sh', ['-c', 'head -c 300000000 /dev/zero > big.bin && zip -q -9 bomb.zip manifest.json big.bin && rm big.bin'], { cwd: dir });
    return readFileSync(join(dir, 'bomb.zip'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function run({ log }) {
  const zip = makeBomb();
  const server = await startServer();
  const status = (field) => Number(readFileSync(`/proc/${server.pid}/status`, 'utf8').match(new RegExp(`${field}:\\s+(\\d+)`))[1]) / 1024;
  const send = async () => {
    const form = new FormData();
    form.append('file', new Blob([zip]), 'bomb.zip');
    form.append('name', `bomb-${Math.random().toString(36).slice(2, 8)}`);
    return (await server.fetch('/extensions', { method: 'POST', body: form })).status;
  };
  try {
    await send(); // warm up the route once
    const before = status('VmRSS');
    const statuses = await Promise.all(Array.from({ length: 8 }, send));
    const grew = status('VmHWM') - before;
    log(`statuses ${statuses.join(',')}; ${(zip.length / 1024).toFixed(0)} KB each`);
    const refused = statuses.every((s) => s === 400);
    return [
      { name: 'bombs', metric: '8 bombs at once: all refused (400)', value: refused ? 1 : 0, goal: '= 1', met: refused },
      { name: 'bombs', metric: 'server peak RSS growth (MB)', value: grew, baseline: before, goal: '< 64 MB', met: grew < 64 },
    ];
  } finally {
    await server.stop();
  }
}
