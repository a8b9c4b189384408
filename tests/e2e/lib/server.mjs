// Starts the real `hangar serve` for a test file, and a tiny page server the browsers can load.
//
//   const server = await startServer();          // fresh data dir, random key, free port
//   after(() => server.stop());
//   await server.client.browsers.create({headless: true});
//
// Readiness is the server's own "hangar listening on http://127.0.0.1:<port>" line, never a sleep.
// stop() sends SIGTERM, then SIGKILL after 30 s, and always removes the temp data dir. The server's
// stop finishes the teardowns of sessions deleted just before (a DELETE answers first), each
// bounded by the agent's 10 s stop; on a loaded machine one took longer than the 10 s this
// allowed before, and the SIGKILL left that instance mounted. The unit file allows 60 s.
import assert from 'node:assert/strict';
import { spawn, execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import Kernel, { NotFoundError } from '@onkernel/sdk';

import { databaseFor, onPostgres } from './pg.mjs';

const execFileP = promisify(execFile);
const here = dirname(fileURLToPath(import.meta.url));
export const repoRoot = resolve(here, '../../..');
export const hangarBin = process.env.HANGAR_BIN || join(repoRoot, 'build/bin/hangar');
export const chromiumPath = '/usr/bin/chromium';
/** Flags for a directly launched Chromium used as a baseline (same as Hangar always passes). */
export const chromiumBaseArgs = [
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--no-sandbox',
];

/**
 * Host loopback ports an instance may reach (its network namespace sees nothing else of the
 * host): every server the tests start allows them, and every page server listens on one.
 */
export const ALLOWED_PORTS = { first: 21000, last: 21199 };
export const ALLOWED_PORTS_SPEC = `${ALLOWED_PORTS.first}-${ALLOWED_PORTS.last}`;

/** Listens on 127.0.0.1 on a free port an instance may reach; resolves to the port. */
export async function listenAllowed(srv) {
  const span = ALLOWED_PORTS.last - ALLOWED_PORTS.first + 1;
  const start = Math.floor(Math.random() * span);
  for (let i = 0; i < span; i++) {
    const port = ALLOWED_PORTS.first + ((start + i) % span);
    const ok = await new Promise((resolve) => {
      const onError = (err) => {
        srv.off('listening', onListening);
        if (err.code === 'EADDRINUSE' || err.code === 'EACCES') resolve(false);
        else throw err;
      };
      const onListening = () => {
        srv.off('error', onError);
        resolve(true);
      };
      srv.once('error', onError);
      srv.once('listening', onListening);
      srv.listen(port, '127.0.0.1');
    });
    if (ok) return port;
  }
  throw new Error(`no free port in ${ALLOWED_PORTS_SPEC}`);
}

const LISTEN_RE = /hangar listening on (http:\/\/127\.0\.0\.1:(\d+))/;
const live = new Set();

// A test runner that dies (or a failed assertion that skips `after`) must not leave servers and
// their browsers behind.
process.on('exit', () => {
  for (const s of live) {
    try {
      process.kill(s.pid, 'SIGKILL');
    } catch {}
  }
});

/**
 * @param {object} [opts]
 * @param {string} [opts.extraPluginDir]  HANGAR_PLUGIN_DIR (colon-separated folders searched after the default)
 * @param {string[]} [opts.enablePlugins]  HANGAR_PLUGINS_ENABLE (extra plugin names to enable)
 * @param {Record<string,string>} [opts.env]  more environment variables
 * @param {number} [opts.readyTimeoutMs]
 * @param {object} [opts.clientOptions]  extra options for the default Kernel client
 * @param {string} [opts.dataDir]  use this data dir (owned by the caller: not removed on stop)
 * @param {string} [opts.apiKey]  use this bootstrap key instead of a random one
 * @param {(bin: string) => [string, string[]]} [opts.launch]  the command that runs `bin serve`
 *   (a wrapper that places or demotes it first; it must exec, so the pid stays the server's)
 */
export async function startServer(opts = {}) {
  if (!existsSync(hangarBin)) {
    throw new Error(`${hangarBin} does not exist: build first (make build)`);
  }
  const ownDataDir = !opts.dataDir;
  const dataDir = opts.dataDir || mkdtempSync(join(tmpdir(), 'hangar-e2e-'));
  const apiKey = opts.apiKey || 'sk_test_' + randomBytes(24).toString('hex');
  // HANGAR_E2E_STORE=postgres (lib/pg.mjs): a database of its own unless the test names a store.
  const db = onPostgres && !opts.env?.HANGAR_STORE_URL ? await databaseFor(dataDir, ownDataDir) : null;
  const env = {
    ...process.env,
    HANGAR_LISTEN: '127.0.0.1:0',
    HANGAR_DATA_DIR: dataDir,
    HANGAR_API_KEY: apiKey,
    // Keep the number of live Chromiums bounded and predictable in tests.
    HANGAR_WARM_SPARES: '0',
    // A stop ends every session, so no test leaves browsers behind (a real server keeps them
    // on SIGTERM for the next start to adopt; restart.test.mjs covers that).
    HANGAR_KEEP_SESSIONS_ON_STOP: '0',
    HANGAR_SANDBOX_ALLOW_HOST_PORTS: ALLOWED_PORTS_SPEC,
    // The same ports for what the server itself dials for a tenant (a custom proxy's check, a
    // credential provider's Connect URL): the test doubles listen there.
    HANGAR_FETCH_ALLOW: `127.0.0.1:${ALLOWED_PORTS_SPEC}`,
    ...(db ? { HANGAR_STORE_URL: db.url } : {}),
    ...(opts.extraPluginDir ? { HANGAR_PLUGIN_DIR: opts.extraPluginDir } : {}),
    ...(opts.enablePlugins?.length ? { HANGAR_PLUGINS_ENABLE: opts.enablePlugins.join(',') } : {}),
    ...(opts.env || {}),
  };
  // The SDK must be steered only by what we pass it.
  delete env.KERNEL_API_KEY;
  delete env.KERNEL_BASE_URL;

  const [command, args] = opts.launch ? opts.launch(hangarBin) : [hangarBin, ['serve']];
  const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  let output = '';
  let exited = null;
  const exitPromise = new Promise((resolveExit) => {
    child.on('exit', (code, signal) => {
      exited = { code, signal };
      live.delete(child);
      resolveExit(exited);
    });
  });
  if (process.env.HANGAR_E2E_VERBOSE) {
    child.stdout.pipe(process.stderr, { end: false });
    child.stderr.pipe(process.stderr, { end: false });
  }
  const onData = (chunk) => {
    output += chunk.toString();
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);

  let stopped = false;
  const cleanup = async () => {
    if (ownDataDir) rmSync(dataDir, { recursive: true, force: true });
    await db?.drop();
  };

  const baseURL = await new Promise((resolveReady, rejectReady) => {
    const timeoutMs = opts.readyTimeoutMs ?? 60_000;
    const timer = setTimeout(() => fail(new Error(`hangar did not print its listening line within ${timeoutMs} ms`)), timeoutMs);
    const check = () => {
      const m = LISTEN_RE.exec(output);
      if (m) {
        clearTimeout(timer);
        child.stdout.off('data', check);
        resolveReady(m[1]);
      }
    };
    function fail(err) {
      clearTimeout(timer);
      child.kill('SIGKILL');
      exitPromise.then(async () => {
        await cleanup().catch((e) => (err.message += `\n(dropping its database: ${e.message})`));
        err.message += `\n--- hangar output ---\n${output}`;
        rejectReady(err);
      });
    }
    child.stdout.on('data', check);
    child.on('error', (err) => fail(err));
    exitPromise.then((e) => {
      if (!LISTEN_RE.test(output)) fail(new Error(`hangar exited before listening (${JSON.stringify(e)})`));
    });
    check();
  });

  // The switch must not pass on SQLite by mistake: the server names the store it opened.
  if (db && !output.includes(`store ${db.url.replace(/:[^:@/]*@/, ':***@')}`)) {
    child.kill('SIGKILL');
    await exitPromise;
    await cleanup();
    throw new Error(`HANGAR_E2E_STORE=postgres but the server did not open ${db.url}:\n${output}`);
  }

  const newClient = (options = {}) =>
    new Kernel({ apiKey, baseURL, timeout: 120_000, ...(opts.clientOptions || {}), ...options });

  const server = {
    baseURL,
    port: Number(new URL(baseURL).port),
    apiKey,
    dataDir,
    pid: child.pid,
    env,
    client: newClient(),
    newClient,
    /** Everything the server printed so far (stdout and stderr). */
    output: () => output,
    exited: () => exited,
    /** Runs `hangar admin <args...>` against the same data dir; resolves to trimmed stdout. */
    async admin(...args) {
      const flat = args.flat();
      const { stdout } = await execFileP(hangarBin, ['admin', ...flat], { env, timeout: 30_000 });
      return stdout.trim();
    },
    /** A fetch against the API with the bootstrap key unless headers say otherwise. */
    fetch(path, init = {}) {
      const headers = { authorization: `Bearer ${apiKey}`, ...(init.headers || {}) };
      return fetch(new URL(path, baseURL), { ...init, headers });
    },
    /** SIGTERM, then SIGKILL after 30 s; removes the data dir. Resolves to {code, signal, killed}. */
    async stop() {
      if (stopped) return exited;
      stopped = true;
      let killed = false;
      if (!exited) {
        child.kill('SIGTERM');
        const t = setTimeout(() => {
          killed = true;
          child.kill('SIGKILL');
        }, 30_000);
        await exitPromise;
        clearTimeout(t);
      }
      await cleanup();
      return { ...exited, killed };
    },
    /** SIGKILL, as a crash would; the data dir is kept only if the caller owns it. */
    async kill() {
      if (stopped) return exited;
      stopped = true;
      if (!exited) child.kill('SIGKILL');
      await exitPromise;
      await cleanup();
      return exited;
    },
  };
  return server;
}

/** Polls `fn` until it returns a truthy value (returned) or the time runs out (throws). */
// The instances of a server's data dir whose agent is up: its log says so (the socket, in the
// server's own folder of the instance, exists from before the agent starts).
export function readyInstances(dataDir) {
  const root = join(dataDir, 'instances');
  return readdirSync(root, { withFileTypes: true })
    .filter((e) => e.isDirectory() && !e.name.endsWith('.host'))
    .filter((e) => {
      try {
        return readFileSync(join(root, e.name, 'logs', 'agent.log'), 'utf8').includes('agent ready');
      } catch {
        return false;
      }
    })
    .map((e) => e.name)
    .sort();
}

export async function waitFor(fn, { timeoutMs = 30_000, intervalMs = 250, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** `hangar doctor` on a data dir: its exit status (1 when a check failed) and what it printed. */
export function doctor(dataDir) {
  try {
    return { status: 0, out: execFileSync(hangarBin, ['doctor'], { env: { ...process.env, HANGAR_DATA_DIR: dataDir }, encoding: 'utf8' }) };
  } catch (e) {
    return { status: e.status, out: String(e.stdout) };
  }
}

/**
 * Runs `hangar doctor` until its report matches every one of `patterns` (and none of `absent`):
 * instances settle on their own time (a sandbox still starting stops by itself, a cgroup empties),
 * which a busy machine stretches. On a timeout the error shows the report's instance section first,
 * the part a CI log's excerpt keeps.
 */
export async function doctorShows(dataDir, patterns, { absent = null, timeoutMs = 30_000 } = {}) {
  let report;
  const settled = () => {
    report = doctor(dataDir);
    return patterns.every((p) => p.test(report.out)) && !(absent && absent.test(report.out));
  };
  await waitFor(settled, { timeoutMs, intervalMs: 500, what: 'the doctor report' }).catch((err) => {
    const at = report.out.indexOf('\ninstances\n');
    const instances = at >= 0 ? report.out.slice(at + 1) : report.out;
    throw new Error(`${err.message}: wanted ${patterns.join(', ')}${absent ? `, not ${absent}` : ''}; got\n${instances}`);
  });
  return report;
}

export const TEST_PAGE_TITLE = 'Hangar test page';

/** A local HTTP server on 127.0.0.1 serving test pages. `/` has <title>Hangar test page</title>. */
export async function startTestPages() {
  const hits = [];
  const srv = http.createServer((req, res) => {
    hits.push({ url: req.url, headers: req.headers });
    const url = new URL(req.url, 'http://x');
    if (url.pathname === '/' || url.pathname === '/index.html') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(`<!doctype html><html><head><title>${TEST_PAGE_TITLE}</title></head>` +
        `<body><h1 id="greeting">Hello from the test page</h1></body></html>`);
    } else if (url.pathname === '/page') {
      const title = url.searchParams.get('title') || 'untitled';
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(`<!doctype html><html><head><title>${title.replace(/[<&>]/g, '')}</title></head><body></body></html>`);
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found');
    }
  });
  const port = await listenAllowed(srv);
  return {
    url: `http://127.0.0.1:${port}/`,
    hits,
    close: () => new Promise((r) => {
      srv.closeAllConnections?.();
      srv.close(() => r());
    }),
  };
}

/** Serves one HTML page at every path on 127.0.0.1: {url, close()}. */
export async function servePage(html) {
  const srv = http.createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(html);
  });
  const port = await listenAllowed(srv);
  return {
    url: `http://127.0.0.1:${port}/`,
    close: () =>
      new Promise((r) => {
        srv.closeAllConnections?.();
        srv.close(() => r());
      }),
  };
}

/** The SDK example plugins built out of tree (tests/sdk/build_example.sh); built on demand. */
export async function examplePlugins() {
  const out = process.env.HANGAR_SDK_EXAMPLE_DIR || join(repoRoot, 'build/sdk-example');
  const dirs = {
    hello: join(out, 'hello'),
    pageArchive: join(out, 'page-archive'),
    wrongAbi: join(out, 'wrong_abi'),
    abiV1: join(out, 'abi_v1'),
  };
  const files = [['hello', 'hello'], ['pageArchive', 'page-archive'], ['wrongAbi', 'wrong_abi'], ['abiV1', 'abi_v1']];
  if (files.some(([key, name]) => !existsSync(join(dirs[key], `${name}.so`)))) {
    await execFileP(join(repoRoot, 'tests/sdk/build_example.sh'), [out], { timeout: 300_000 });
  }
  return dirs;
}

/** Live (non-zombie) processes: [{pid, ppid, cmd}]. */
export function processTable() {
  const out = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (rest[0] === 'Z') continue;
      const cmd = readFileSync(`/proc/${name}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
      out.push({ pid: Number(name), ppid: Number(rest[1]), cmd });
    } catch {}
  }
  return out;
}

/** The pasta processes ({pid, ppid, cmd}) whose pid file lies under `dataDir`. */
export const pastasOf = (dataDir) => processTable().filter((p) => p.cmd.startsWith('pasta') && p.cmd.includes(dataDir));

const inNetworksCgroup = (pid) => {
  try {
    return /\/networks-[0-9a-f]+$/m.test(readFileSync(`/proc/${pid}/cgroup`, 'utf8'));
  } catch {
    return false;
  }
};

/**
 * The runtime's prepared networks of `dataDir` no start has taken yet (host/README.md, "Prepared
 * networks"): pastas still in the data dir's networks cgroup.
 */
export const preparedNetworksOf = (dataDir) => pastasOf(dataDir).filter((p) => inNetworksCgroup(p.pid));

/** The pastas of `dataDir`'s instances: every one but the prepared networks no start took. */
export const instancePastasOf = (dataDir) => pastasOf(dataDir).filter((p) => !inNetworksCgroup(p.pid));

/** Every live descendant of `pid` (children, grandchildren ...). */
export function descendants(pid) {
  const table = processTable();
  const byParent = new Map();
  for (const p of table) {
    if (!byParent.has(p.ppid)) byParent.set(p.ppid, []);
    byParent.get(p.ppid).push(p);
  }
  const out = [];
  const stack = [pid];
  while (stack.length) {
    for (const c of byParent.get(stack.pop()) || []) {
      out.push(c);
      stack.push(c.pid);
    }
  }
  return out;
}

/** Which of `procs` ({pid, cmd}) still run the same command line. */
export function stillAlive(procs) {
  const now = new Map(processTable().map((p) => [p.pid, p.cmd]));
  return procs.filter((p) => now.get(p.pid) === p.cmd);
}

/** Median of numbers. */
export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/**
 * Resolves to the error `promise` rejects with, after checking it is an instance of `Class` (an
 * SDK error class) and, when given, that its wire `code` is `code`. Fails if it resolves.
 */
export async function rejectsWith(promise, Class, code) {
  const err = await promise.then(
    (v) => assert.fail(`expected ${Class.name}, got ${JSON.stringify(v)}`),
    (e) => e,
  );
  assert.ok(err instanceof Class, `expected ${Class.name}, got ${err?.constructor?.name}: ${err?.message}`);
  if (code) assert.equal(err.error?.code, code, JSON.stringify(err.error));
  return err;
}

/** Creates a headless browser with `client` for the duration of `fn`, then deletes it. */
export async function withBrowser(client, params, fn) {
  const b = await client.browsers.create({ headless: true, ...params });
  try {
    return await fn(b);
  } finally {
    await client.browsers.deleteByID(b.session_id).catch(() => {});
  }
}

/** Whether the session is active (retrieve answers), false on 404. */
export async function sessionExists(client, id) {
  try {
    await client.browsers.retrieve(id);
    return true;
  } catch (err) {
    if (err instanceof NotFoundError) return false;
    throw err;
  }
}
