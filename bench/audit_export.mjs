// bench/audit_export: what continuous audit-log export costs the server (plugins/audit_export).
// A steady 10,000 requests a minute (BENCH_AUDIT_EXPORT_RATE per minute, for
// BENCH_AUDIT_EXPORT_SECONDS, 60) against one server, twice: with its S3 destination paused, then
// active, shipping to moto's S3 server (tests/python/.venv, `make setup-pyvenv`). The server's CPU
// (utime+stime of its process) over each phase; the difference is what export costs.
// Goal (issue 47): ≤ 5 % of a core at 10,000 entries/min. Every entry of the active phase must be
// in the bucket, or the run fails.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';

import { freePort, now, runStandalone, startServer } from './lib.mjs';

const PYTHON = new URL('../tests/python/.venv/bin/python', import.meta.url).pathname;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function startMoto() {
  if (!existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: run make setup-pyvenv`);
  const port = await freePort(21100, 21149); // within the harness's [server] fetch_allow
  const proc = spawn(PYTHON, ['-m', 'moto.server', '-H', '127.0.0.1', '-p', String(port)], { stdio: 'ignore' });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 300; i++) {
    try {
      if ((await fetch(`${url}/moto-api/`)).ok) break;
    } catch {}
    await sleep(100);
  }
  // moto does not check signatures: plain requests list and read the bucket.
  const put = await fetch(`${url}/hangar-bench`, { method: 'PUT' });
  if (!put.ok) throw new Error(`bucket: ${put.status}`);
  return {
    url,
    // moto refuses unsigned object reads: boto3 (the test venv's) counts the bucket's lines.
    lines(prefix) {
      const script = `import boto3, gzip, sys
s3 = boto3.client("s3", endpoint_url=sys.argv[1], aws_access_key_id="x", aws_secret_access_key="x", region_name="us-east-1")
n = 0
for page in s3.get_paginator("list_objects_v2").paginate(Bucket="hangar-bench", Prefix=sys.argv[2]):
    for o in page.get("Contents", []):
        n += len(gzip.decompress(s3.get_object(Bucket="hangar-bench", Key=o["Key"])["Body"].read()).splitlines())
print(n)`;
      return Number(execFileSync(PYTHON, ['-c', script, url, prefix]).toString().trim());
    },
    stop: () => proc.kill('SIGTERM'),
  };
}

const cpuTicks = (pid) => {
  const rest = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return Number(rest[11]) + Number(rest[12]);
};

export async function run({
  log = () => {},
  seconds = Number(process.env.BENCH_AUDIT_EXPORT_SECONDS || 60),
  perMinute = Number(process.env.BENCH_AUDIT_EXPORT_RATE || 10000),
} = {}) {
  const moto = await startMoto();
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0', HANGAR_LOG_LEVEL: 'warning' } });
  try {
    const prefix = `bench-${Date.now()}`;
    const dest = await server.client.post('/audit-logs/export/destinations', {
      body: {
        type: 's3', format: 'jsonl.gz', bucket: 'hangar-bench', prefix, region: 'us-east-1', role_arn: '',
        endpoint: moto.url, access_key_id: 'AKIABENCH', secret_access_key: 'bench-secret',
      },
    });
    // A steady rate from 8 keep-alive clients; each request is one audit entry.
    const load = async (tag) => {
      const total = Math.round((perMinute * seconds) / 60);
      const gap = (seconds * 1000) / total;
      const t0 = now();
      let sent = 0;
      const worker = async () => {
        for (;;) {
          const i = sent++;
          if (i >= total) return;
          const wait = t0 + i * gap - now();
          if (wait > 0) await sleep(wait);
          const res = await server.fetch(`/profiles/${tag}-${i}`);
          await res.arrayBuffer();
        }
      };
      const c0 = cpuTicks(server.pid);
      await Promise.all(Array.from({ length: 8 }, worker));
      const elapsed = (now() - t0) / 1000;
      return { total, elapsed, cpu: (cpuTicks(server.pid) - c0) / 100 / elapsed * 100 };
    };
    const paused = await load('paused');
    log(`paused: ${paused.total} requests in ${paused.elapsed.toFixed(1)} s, server ${paused.cpu.toFixed(1)} % of a core`);
    await server.client.patch(`/audit-logs/export/destinations/${dest.id}`, { body: { status: 'active' } });
    const active = await load('active');
    log(`active: ${active.total} requests in ${active.elapsed.toFixed(1)} s, server ${active.cpu.toFixed(1)} % of a core`);
    let shipped = 0;
    for (let i = 0; i < 120 && shipped < active.total; i++) {
      await sleep(1000);
      shipped = moto.lines(`${prefix}/`);
    }
    // The PATCH itself is an entry too, and the load's entries from the active phase.
    if (shipped < active.total) throw new Error(`only ${shipped} of ${active.total} entries reached the bucket`);
    const extra = active.cpu - paused.cpu;
    return [
      {
        name: 'audit_export',
        metric: `server CPU, ${perMinute} entries/min exported (% of a core)`,
        value: active.cpu,
        baseline: paused.cpu,
        ratio: active.cpu / Math.max(paused.cpu, 0.01),
        goal: '≤ +5 % of a core',
        met: extra <= 5,
        note: `${seconds} s of requests a side; baseline: the same load with the destination paused; +${extra.toFixed(1)} % for export; ${shipped} lines in the bucket`,
      },
    ];
  } finally {
    await server.stop();
    moto.stop();
  }
}

await runStandalone(import.meta.url, run);
