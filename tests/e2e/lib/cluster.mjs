// A cluster on loopback for the tests and the benchmarks (issue 24): Hangar nodes on fixed ports
// sharing one PostgreSQL store, and a real HAProxy in front of them, round robin, as a Kubernetes
// Service or any load balancer spreads requests.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { startServer, waitFor } from './server.mjs';

export const HAPROXY = '/usr/sbin/haproxy';

export async function freePort() {
  const srv = createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

/** HAProxy in front of `ports`, round robin, checking each node's /readyz every second. */
export async function startHaproxy(dir, frontPort, ports) {
  const cfg = join(dir, 'haproxy.cfg');
  writeFileSync(cfg, [
    'global',
    '  maxconn 4096',
    'defaults',
    '  mode http',
    '  timeout connect 2s',
    // A busy two-core machine starting browsers may take a while to answer a check.
    '  timeout check 5s',
    '  timeout client 120s',
    '  timeout server 120s',
    '  timeout tunnel 1h',
    '  retries 3',
    '  option redispatch 1',
    'frontend api',
    `  bind 127.0.0.1:${frontPort}`,
    '  default_backend nodes',
    'backend nodes',
    '  balance roundrobin',
    '  option httpchk GET /readyz',
    ...ports.map((p, i) => `  server node-${i + 1} 127.0.0.1:${p} check inter 1s fall 3 rise 1`),
    '',
  ].join('\n'));
  const child = spawn(HAPROXY, ['-db', '-f', cfg], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (c) => (output += c));
  child.stderr.on('data', (c) => (output += c));
  await waitFor(async () => {
    if (child.exitCode !== null) throw new Error(`haproxy exited: ${output}`);
    return (await fetch(`http://127.0.0.1:${frontPort}/healthz`).catch(() => null))?.ok;
  }, { timeoutMs: 15_000, what: 'haproxy answering' });
  return {
    url: `http://127.0.0.1:${frontPort}`,
    output: () => output,
    stop: () => child.kill('SIGKILL'),
  };
}

/**
 * `count` nodes named node-1… on `storeUrl`, each on a fixed port with HANGAR_PUBLIC_URL set as
 * the Helm chart sets it (the URLs a session carries name its node), then HAProxy in front.
 * Returns {nodes: [{name, port, dataDir, server, start()}], front, nodeOf(session), stop()}.
 */
export async function startCluster({ storeUrl, apiKey, count = 3, env = {}, nodeEnv = () => ({}) }) {
  const dir = mkdtempSync(join(tmpdir(), 'hangar-cluster-'));
  const nodes = [];
  for (let i = 1; i <= count; i++) {
    const n = { name: `node-${i}`, port: await freePort(), dataDir: mkdtempSync(join(tmpdir(), `hangar-cluster-${i}-`)) };
    n.start = async () => {
      n.server = await startServer({
        apiKey,
        dataDir: n.dataDir,
        env: {
          HANGAR_STORE_URL: storeUrl,
          HANGAR_SECRETS_KEY_FILE: join(dir, 'secrets.key'),
          HANGAR_NODE_NAME: n.name,
          HANGAR_LISTEN: `127.0.0.1:${n.port}`,
          HANGAR_PUBLIC_URL: `http://127.0.0.1:${n.port}`,
          HANGAR_NODE_HEARTBEAT_SECONDS: '1',
          HANGAR_WARM_SPARES: '0',
          ...env,
          ...nodeEnv(i),
        },
      });
    };
    nodes.push(n);
  }
  let front;
  try {
    // One at a time: the first creates the store's schema and token key.
    for (const n of nodes) await n.start();
    front = await startHaproxy(dir, await freePort(), nodes.map((n) => n.port));
  } catch (err) {
    for (const n of nodes) await n.server?.stop();
    throw err;
  }
  return {
    nodes,
    front,
    nodeOf: (session) => nodes.find((n) => new URL(session.cdp_ws_url).port === String(n.port)),
    async stop() {
      front.stop();
      for (const n of nodes) await n.server?.stop();
      rmSync(dir, { recursive: true, force: true });
      for (const n of nodes) rmSync(n.dataDir, { recursive: true, force: true });
    },
  };
}
