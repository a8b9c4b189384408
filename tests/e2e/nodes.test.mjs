// Nodes (issue 24 point 2): every `hangar serve` registers in its store's `nodes` table and
// heartbeats there; `hangar nodes` lists them. A start is refused, writing nothing, when its
// name is held by a live node, when its plugin set differs from a live node's, or when
// HANGAR_PUBLIC_URL is not an http(s) URL. A node killed with -9 reads as stale once its
// heartbeat allowance (3 intervals) passed, and the other nodes end its browser sessions; each
// node's own sweeps leave the other nodes' sessions alone, a session read through another node
// points at its owner, and a DELETE through another node stops the instance on its owner.
// `hangar drain` makes a node refuse new browsers and stop by itself once its sessions ended.
//
// The single-node cases run on either store. Two nodes on one store need PostgreSQL (each SQLite
// file is one machine's): those run under `make test-postgres` and are skipped on SQLite.
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';

import { toFile } from '@onkernel/sdk';
import WebSocket from 'ws';

import { PASSWORD, USER, startSites } from '../fixtures/sites/sites.mjs';
import { BidiClient } from './lib/bidi.mjs';
import { freePort } from './lib/cluster.mjs';
import { databaseFor, onPostgres } from './lib/pg.mjs';
import { hangarBin, repoRoot, startServer, waitFor } from './lib/server.mjs';

const execFileP = promisify(execFile);

/** `hangar nodes --json` with the environment of `env` (its store and data dir). */
async function nodes(env) {
  const { stdout } = await execFileP(hangarBin, ['nodes', '--json'], { env, timeout: 30_000 });
  return JSON.parse(stdout);
}

/** Runs `hangar serve` expecting it to refuse: resolves to {code, output} once it exited. */
function refusedStart(env) {
  return new Promise((resolve, reject) => {
    const child = spawn(hangarBin, ['serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c) => (output += c));
    child.stderr.on('data', (c) => (output += c));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`hangar serve did not exit within 30 s:\n${output}`));
    }, 30_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}

function baseEnv(extra) {
  const env = { ...process.env, HANGAR_LISTEN: '127.0.0.1:0', HANGAR_WARM_SPARES: '0', ...extra };
  delete env.KERNEL_API_KEY;
  delete env.KERNEL_BASE_URL;
  return env;
}

describe('one node', () => {
  let server;
  before(async () => {
    server = await startServer({ env: { HANGAR_NODE_NAME: 'solo' } });
  });
  after(() => server?.stop());

  test('hangar nodes lists the one node, live, at its listen address, with its plugins', async () => {
    const list = await nodes(server.env);
    assert.equal(list.length, 1, JSON.stringify(list));
    const [n] = list;
    assert.equal(n.name, 'solo');
    assert.equal(n.state, 'live');
    assert.equal(n.public_url, server.baseURL);
    assert.equal(n.browsers, 0);
    assert.ok(n.mem_available_bytes > 0, JSON.stringify(n));
    assert.ok(n.plugins.browsers, JSON.stringify(n.plugins));
    assert.ok(n.heartbeat_age_seconds <= 15, JSON.stringify(n));

    const { stdout } = await execFileP(hangarBin, ['nodes'], { env: server.env, timeout: 30_000 });
    assert.match(stdout, /NAME\s+STATE\s+PUBLIC URL\s+BROWSERS/);
    assert.match(stdout, new RegExp(`solo\\s+live\\s+${server.baseURL.replace(/\./g, '\\.')}\\s+0\\s`));
  });

  test('a HANGAR_PUBLIC_URL that is not http(s) is refused before anything is written', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-nodes-'));
    try {
      const { code, output } = await refusedStart(
        baseEnv({ HANGAR_DATA_DIR: dataDir, HANGAR_PUBLIC_URL: 'ftp://10.0.0.5:8080', HANGAR_STORE_URL: '' }),
      );
      assert.notEqual(code, 0, output);
      assert.match(output, /HANGAR_PUBLIC_URL = "ftp:\/\/10\.0\.0\.5:8080" is not an http\(s\) URL/);
      assert.deepEqual(readdirSync(dataDir), [], 'nothing written');
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('two nodes on one PostgreSQL store', { skip: !onPostgres && 'needs HANGAR_E2E_STORE=postgres (make test-postgres)' }, () => {
  const apiKey = 'sk_test_' + randomBytes(24).toString('hex');
  let db;
  let dbDir;
  let a;
  let b;
  // node-b's own data dir: it is killed with -9 below and started again on it, and that start
  // stops the instances the kill left behind.
  let bDir;
  // No warm spares: fewer browsers on two cores, and none to outlive a kill. Nodes of one store
  // share its secrets key (the operator copies it; the Helm chart mounts one Secret).
  const shared = () => ({
    HANGAR_STORE_URL: db.url,
    HANGAR_SECRETS_KEY_FILE: join(dbDir, 'secrets.key'),
    HANGAR_NODE_HEARTBEAT_SECONDS: '1',
    HANGAR_WARM_SPARES: '0',
  });

  before(async () => {
    dbDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-nodes-db-'));
    db = await databaseFor(dbDir, true);
    bDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-nodes-b-'));
    a = await startServer({ apiKey, env: { ...shared(), HANGAR_NODE_NAME: 'node-a' } });
  });
  after(async () => {
    await a?.stop();
    await b?.stop();
    await db?.drop();
    rmSync(dbDir, { recursive: true, force: true });
    rmSync(bDir, { recursive: true, force: true });
  });

  const byName = async (env) => Object.fromEntries((await nodes(env)).map((n) => [n.name, n]));
  const psqlValue = async (sql) => (await execFileP('psql', ['-X', '-q', '-t', '-A', '-d', db.url, '-c', sql])).stdout.trim();
  async function storeCounts() {
    const { stdout } = await execFileP('psql', ['-X', '-q', '-t', '-A', '-d', db.url, '-c',
      "SELECT (SELECT count(*) FROM api_keys) || ' ' || (SELECT count(*) FROM nodes) || ' ' || " +
      "(SELECT string_agg(name || ':' || instance_id || ':' || started_at, ',' ORDER BY name) FROM nodes)"]);
    return stdout.trim();
  }

  // The count is read through node-b's config once it runs: one store.
  test('the browser count follows a create; hangar nodes lists both nodes with their URLs', async () => {
    assert.equal((await byName(a.env))['node-a'].browsers, 0);
    const browser = await a.client.browsers.create({ headless: true });
    await waitFor(async () => (await byName(a.env))['node-a'].browsers === 1, {
      timeoutMs: 15_000,
      what: 'node-a reporting 1 browser',
    });
    await a.client.browsers.deleteByID(browser.session_id);
    await waitFor(async () => (await byName(a.env))['node-a'].browsers === 0, {
      timeoutMs: 15_000,
      what: 'node-a back to 0 browsers',
    });

    b = await startServer({ apiKey, dataDir: bDir, env: { ...shared(), HANGAR_NODE_NAME: 'node-b' } });
    const all = await byName(b.env);
    assert.deepEqual(Object.keys(all).sort(), ['node-a', 'node-b']);
    assert.equal(all['node-a'].public_url, a.baseURL);
    assert.equal(all['node-b'].public_url, b.baseURL);
    assert.equal(all['node-a'].state, 'live');
    assert.equal(all['node-b'].state, 'live');
    assert.equal(all['node-a'].browsers, 0);
    assert.equal(all['node-b'].browsers, 0);
  });

  // A start on its own data dir with `extra` settings against this store, refused: its exit code
  // and output, once the store is checked to hold exactly what it held before.
  async function refusedWithNothingWritten(extra) {
    const before = await storeCounts();
    const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-nodes-'));
    let refused;
    try {
      refused = await refusedStart(baseEnv({
        ...shared(),
        HANGAR_DATA_DIR: dataDir,
        HANGAR_API_KEY: 'sk_test_' + randomBytes(24).toString('hex'), // would be stored if it got that far
        ...extra,
      }));
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
    assert.equal(await storeCounts(), before, 'nothing written');
    return refused;
  }

  test('a third start with a live node\'s name is refused, naming the setting and the holder, and writes nothing', async () => {
    const { code, output } = await refusedWithNothingWritten({ HANGAR_NODE_NAME: 'node-a' });
    assert.notEqual(code, 0, output);
    assert.ok(output.includes(`HANGAR_NODE_NAME = "node-a" is taken by a live node at ${a.baseURL}`), output);
    assert.doesNotMatch(output, /hangar listening/);
  });

  test('a HANGAR_PUBLIC_URL that does not lead to this node is refused naming the setting, and writes nothing', async () => {
    // The other nodes relay to it. A fixed listen port: a port picked at start is not probed.
    const listen = `127.0.0.1:${await freePort()}`;
    const closed = `http://127.0.0.1:${await freePort()}`;
    let { code, output } = await refusedWithNothingWritten({ HANGAR_NODE_NAME: 'node-e', HANGAR_LISTEN: listen, HANGAR_PUBLIC_URL: closed });
    assert.notEqual(code, 0, output);
    assert.ok(output.includes(`HANGAR_PUBLIC_URL = "${closed}" does not reach this node (`), output);
    assert.doesNotMatch(output, /hangar listening/);
    // Another node's URL: something answers, but not this node.
    ({ code, output } = await refusedWithNothingWritten({ HANGAR_NODE_NAME: 'node-e', HANGAR_LISTEN: listen, HANGAR_PUBLIC_URL: a.baseURL }));
    assert.notEqual(code, 0, output);
    assert.match(output, /does not reach this node \(another server answers there \(HTTP \d+\)\)/);
  });

  test('a start with another secrets key is refused naming the setting, and writes nothing', async () => {
    const { code, output } = await refusedWithNothingWritten({
      HANGAR_NODE_NAME: 'node-d',
      HANGAR_SECRETS_KEY_FILE: join(dbDir, 'another.key'),
    });
    assert.notEqual(code, 0, output);
    assert.ok(output.includes(`HANGAR_SECRETS_KEY_FILE = "${join(dbDir, 'another.key')}" does not open what this store holds`), output);
    assert.doesNotMatch(output, /hangar listening/);
  });

  test('a start whose plugin set differs from the live nodes\' is refused naming the plugin', async () => {
    const { code, output } = await refusedWithNothingWritten({
      HANGAR_NODE_NAME: 'node-c',
      HANGAR_PLUGIN_DIR: join(repoRoot, 'build/test-plugins'),
      HANGAR_PLUGINS_ENABLE: 'ut_services',
    });
    assert.notEqual(code, 0, output);
    assert.match(output, /node "node-c" cannot join: its plugins differ from live node "node-[ab]"/);
    assert.match(output, /plugin ut_services \S+ is enabled here, not there/);
    assert.match(output, /HANGAR_PLUGINS_ENABLE/);
  });

  /** The session as `status=deleted` lists it through `server`, or undefined while it is active. */
  async function deletedThrough(server, id) {
    for await (const s of server.client.browsers.list({ status: 'deleted' })) if (s.session_id === id) return s;
    return undefined;
  }

  async function openSocket(url) {
    const ws = new WebSocket(url);
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    return ws;
  }

  let cdpId = 0;
  function cdpVersion(ws) {
    const id = ++cdpId;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no CDP reply within 10 s')), 10_000);
      const onMessage = (data) => {
        const msg = JSON.parse(data.toString());
        if (msg.id !== id) return;
        clearTimeout(timer);
        ws.off('message', onMessage);
        resolve(msg.result);
      };
      ws.on('message', onMessage);
      ws.send(JSON.stringify({ id, method: 'Browser.getVersion' }));
    });
  }

  let onA;
  let onB;
  let cdpOnA;
  let fullB;
  test('each node\'s sweeps leave the other\'s sessions alone; another node\'s session points at it (CDP works there), and its instance routes, streams and CDP are relayed from here; a DELETE through the other node stops the instance on its owner', async () => {
    onA = await a.client.browsers.create({ headless: true });
    onB = await b.client.browsers.create({ headless: true });
    // Every sweep (once a second) of each node ran a few times, each seeing a session without an
    // instance of its own.
    await new Promise((r) => setTimeout(r, 4000));
    for (const [server, id] of [[a, onB.session_id], [b, onA.session_id], [a, onA.session_id], [b, onB.session_id]]) {
      const read = await server.client.browsers.retrieve(id);
      assert.equal(read.deleted_at, undefined, `${id} read through ${server.baseURL}: ${JSON.stringify(read)}`);
    }
    assert.doesNotMatch(a.output() + b.output(), /ending browser session/);

    // Read through node-a, node-b's session points at node-b, and its token verifies there (one
    // signing key per store).
    const viaA = await a.client.browsers.retrieve(onB.session_id);
    assert.equal(new URL(viaA.cdp_ws_url).host, new URL(b.baseURL).host, viaA.cdp_ws_url);
    const cdpOnB = await openSocket(viaA.cdp_ws_url);
    assert.match((await cdpVersion(cdpOnB)).product, /Chrome/);
    cdpOnB.close();
    // Its instance routes through node-a are relayed to node-b, which answers (and checks the
    // caller's key itself): binary bodies, request bodies, SSE streams, and CDP's WebSocket.
    const shot = Buffer.from(await (await a.client.browsers.computer.captureScreenshot(onB.session_id)).arrayBuffer());
    assert.equal(shot.subarray(1, 4).toString(), 'PNG');
    await a.client.browsers.fs.writeFile(onB.session_id, 'from node-a', { path: '/tmp/relayed.txt' });
    assert.equal(await (await b.client.browsers.fs.readFile(onB.session_id, { path: '/tmp/relayed.txt' })).text(), 'from node-a');
    const exec = await a.client.browsers.process.exec(onB.session_id, { command: 'cat', args: ['/tmp/relayed.txt'] });
    assert.equal(Buffer.from(exec.stdout_b64, 'base64').toString(), 'from node-a');
    const spawned = await a.client.browsers.process.spawn(onB.session_id, { command: 'echo streamed; sleep 0.3; echo done' });
    let streamed = '';
    for await (const ev of await a.client.browsers.process.stdoutStream(spawned.process_id, { id: onB.session_id })) {
      if (ev.data_b64) streamed += Buffer.from(ev.data_b64, 'base64').toString();
      if (ev.event === 'exit') break;
    }
    assert.equal(streamed, 'streamed\ndone\n');
    const cdpViaA = new URL(viaA.cdp_ws_url);
    cdpViaA.host = new URL(a.baseURL).host;
    const relayedCdp = await openSocket(cdpViaA.href);
    assert.match((await cdpVersion(relayedCdp)).product, /Chrome/, 'CDP through node-a reaches node-b\'s browser');
    relayedCdp.close();
    // WebDriver BiDi too: node-a relays the upgrade to node-b, whose agent hands it to its mapper.
    const bidiViaA = new URL(viaA.webdriver_ws_url);
    bidiViaA.host = new URL(a.baseURL).host;
    const relayedBidi = await BidiClient.connect(bidiViaA.href);
    try {
      const { context } = await relayedBidi.start();
      const r = await relayedBidi.send('script.evaluate', { expression: '6*7', target: { context }, awaitPromise: false });
      assert.deepEqual(r.result, { type: 'number', value: 42 }, 'BiDi through node-a reaches node-b\'s browser');
    } finally {
      await relayedBidi.close();
    }
    // Only a node relays (the header steers placement): a client posing as node-c, without the
    // proof nodes add with their shared key, is refused before anything runs.
    const posed = await a.fetch(`/browsers/${onB.session_id}/computer/screenshot`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-hangar-relayed-by': 'node-c' },
      body: '{}',
    });
    assert.equal(posed.status, 400);
    const posedBody = await posed.json();
    assert.equal(posedBody.code, 'bad_request');
    assert.match(posedBody.message, /X-Hangar-Relayed-By/);

    const ended = await a.client.browsers.create({ headless: true });
    await waitFor(async () => (await byName(a.env))['node-a'].browsers === 2, { timeoutMs: 15_000, what: 'node-a at 2 browsers' });
    // Relayed to its owner, which ends it there before the answer (profile saved, instance gone).
    await b.client.browsers.deleteByID(ended.session_id);
    assert.ok((await deletedThrough(a, ended.session_id))?.deleted_at, 'deleted for every node at once');
    assert.equal(await psqlValue(`SELECT ended_by FROM browsers_sessions WHERE id = '${ended.session_id}'`), 'node-a');
    await waitFor(async () => (await byName(a.env))['node-a'].browsers === 1, {
      timeoutMs: 15_000,
      what: 'node-a without the instance of the session it ended',
    });

    cdpOnA = await openSocket(onA.cdp_ws_url);
  });

  test('placement: creates sent to one node run where there are fewer sessions, relayed to the other node when it has two fewer', async () => {
    // Each node runs one session here (onA, onB). node-a keeps a create while it has at most one
    // more session than node-b: a, a, then b, then a.
    const made = [];
    for (let i = 0; i < 4; i++) made.push(await a.client.browsers.create({ headless: true }));
    const where = made.map((m) => (new URL(m.cdp_ws_url).host === new URL(b.baseURL).host ? 'b' : 'a'));
    assert.deepEqual(where, ['a', 'a', 'b', 'a']);
    // The one node-b runs is node-b's: read through it, driven through it.
    const third = await b.client.browsers.retrieve(made[2].session_id);
    assert.equal(third.session_id, made[2].session_id);
    const cdp = await openSocket(third.cdp_ws_url);
    assert.match((await cdpVersion(cdp)).product, /Chrome/);
    cdp.close();
    for (const m of made) await a.client.browsers.deleteByID(m.session_id);
  });

  test('a node killed with -9 reads as stale, its sessions end on the other node within 15 s, the other\'s live on; its restart rejoins', async (t) => {
    assert.ok(cdpOnA, 'the test before opened a CDP connection to node-a');
    assert.match((await cdpVersion(cdpOnA)).product, /Chrome/);
    const killedAt = Date.now();
    await b.kill();
    await waitFor(async () => (await deletedThrough(a, onB.session_id))?.deleted_at, {
      timeoutMs: 15_000,
      intervalMs: 200,
      what: `node-b's session ${onB.session_id} read as deleted through node-a`,
    });
    const endedAfterMs = Date.now() - killedAt;
    t.diagnostic(`node-b's session read deleted ${endedAfterMs} ms after the kill (heartbeat 1 s)`);
    assert.ok(endedAfterMs <= 15_000, `${endedAfterMs} ms`);
    assert.match(a.output(), new RegExp(`ending browser session ${onB.session_id}: its node node-b stopped heartbeating`));
    assert.equal((await a.client.browsers.retrieve(onA.session_id)).deleted_at, undefined, 'node-a\'s session lives on');
    assert.match((await cdpVersion(cdpOnA)).product, /Chrome/, 'an open CDP connection to node-a still answers');
    cdpOnA.close();

    const stale = await waitFor(async () => {
      const m = await byName(a.env);
      return m['node-b'].state === 'stale' ? m : null;
    }, { timeoutMs: 15_000, what: 'node-b stale' });
    assert.ok(stale['node-b'].heartbeat_age_seconds >= 3, JSON.stringify(stale['node-b']));
    assert.equal(stale['node-a'].state, 'live');
    const { stdout } = await execFileP(hangarBin, ['nodes'], { env: a.env, timeout: 30_000 });
    assert.match(stdout, /node-b\s+stale\s/);

    // The stale name is taken over by the next node that claims it. Its start on the same data
    // dir stops the instance of the session node-a ended, and it takes browsers again.
    const oldInstance = stale['node-b'].instance_id;
    b = await startServer({ apiKey, dataDir: bDir, env: { ...shared(), HANGAR_NODE_NAME: 'node-b' } });
    const back = (await byName(a.env))['node-b'];
    assert.equal(back.state, 'live');
    assert.notEqual(back.instance_id, oldInstance);
    assert.equal(back.public_url, b.baseURL);
    await waitFor(async () => (await byName(a.env))['node-b'].browsers === 0, {
      timeoutMs: 15_000,
      what: 'node-b without the instance of its ended session',
    });
    const again = await b.client.browsers.create({ headless: true });
    assert.equal((await a.client.browsers.retrieve(again.session_id)).deleted_at, undefined);
    await b.client.browsers.deleteByID(again.session_id);
    await a.client.browsers.deleteByID(onA.session_id);
  });

  test('a pool spans both nodes: each fills its share, an acquire through one node hands out members of both, release, flush and delete work through either; a lost node\'s share is refilled on the other', async (t) => {
    const onNode = (s) => (new URL(s.cdp_ws_url).host === new URL(b.baseURL).host ? 'b' : 'a');
    const available = async (server, id, n) => waitFor(async () => (await server.client.browserPools.retrieve(id)).available_count === n, {
      timeoutMs: 120_000,
      what: `${n} idle members of pool ${id}, read through ${server === a ? 'node-a' : 'node-b'}`,
    });
    const pool = await a.client.browserPools.create({ name: 'spans', size: 4, headless: true, fill_rate_per_minute: 6000 });
    // Known through the other node at once, not only from its next sync.
    assert.equal((await b.client.browserPools.retrieve('spans')).id, pool.id);
    await available(b, pool.id, 4);

    // node-a hands out its two, then relays to node-b for the other two.
    const leases = [];
    for (let i = 0; i < 4; i++) leases.push(await a.client.browserPools.acquire(pool.id, { acquire_timeout_seconds: 10 }));
    assert.deepEqual(leases.map(onNode), ['a', 'a', 'b', 'b']);
    for (const server of [a, b]) {
      const seen = await server.client.browserPools.retrieve(pool.id);
      assert.deepEqual([seen.acquired_count, seen.available_count], [4, 0]);
    }
    assert.equal(await b.client.browserPools.acquire(pool.id, { acquire_timeout_seconds: 1 }), null);
    // Each released through the node that does not run it: relayed to its own.
    for (const l of leases) await (onNode(l) === 'a' ? b : a).client.browserPools.release(pool.id, { session_id: l.session_id });
    await available(a, pool.id, 4);

    // A flush through node-b replaces the idle members of both nodes.
    await b.client.browserPools.flush(pool.id);
    await available(a, pool.id, 4);
    const fresh = [];
    for (let i = 0; i < 4; i++) fresh.push(await a.client.browserPools.acquire(pool.id, { acquire_timeout_seconds: 10 }));
    const before = new Set(leases.map((l) => l.session_id));
    assert.ok(fresh.every((l) => !before.has(l.session_id)), 'every member was rebuilt after the flush');

    // Deleted through node-a with force: the leases node-b runs end too, and node-b forgets it.
    await a.client.browserPools.delete(pool.id, { force: true });
    for (const l of fresh) assert.ok((await deletedThrough(b, l.session_id))?.deleted_at, l.session_id);
    await assert.rejects(b.client.browserPools.retrieve(pool.id), (e) => e.status === 404);
    await waitFor(async () => (await byName(a.env))['node-b'].browsers === 0, { timeoutMs: 15_000, what: 'node-b without leases' });

    // node-b lost: node-a's share grows to the whole pool and it fills it; node-b rejoins.
    const small = await b.client.browserPools.create({ name: 'survives', size: 2, headless: true, fill_rate_per_minute: 6000 });
    await available(a, small.id, 2);
    await b.kill();
    await waitFor(async () => (await byName(a.env))['node-b'].state === 'stale', { timeoutMs: 15_000, what: 'node-b stale' });
    await available(a, small.id, 2);
    const both = [];
    for (let i = 0; i < 2; i++) both.push(await a.client.browserPools.acquire(small.id, { acquire_timeout_seconds: 10 }));
    assert.deepEqual(both.map(onNode), ['a', 'a']);
    for (const l of both) await a.client.browserPools.release(small.id, { session_id: l.session_id });
    b = await startServer({ apiKey, dataDir: bDir, env: { ...shared(), HANGAR_NODE_NAME: 'node-b' } });
    await available(b, small.id, 2);
    await a.client.browserPools.delete(small.id, { force: true });
    t.diagnostic('pool members spread over the nodes, relayed acquires and releases, a flush and delete through the other node, a lost node\'s share refilled');
  });

  test('managed auth across nodes: a login running on one node takes its handoff, flow-token reads, input and follow through the other', async () => {
    const sites = await startSites();
    try {
      const c = await a.client.auth.connections.create({ domain: '127.0.0.1', profile_name: 'across', login_url: `${sites.origin}/one/login` });
      const started = await a.client.auth.connections.login(c.id);
      const waiting = await waitFor(async () => {
        const x = await b.client.auth.connections.retrieve(c.id); // the row: any node
        return x.flow_step === 'AWAITING_INPUT' ? x : null;
      }, { timeoutMs: 60_000, what: 'the flow on node-a asking for input, read through node-b' });
      // The hosted page's calls, all through node-b: the flow lives in node-a's memory.
      const ex = await fetch(`${b.baseURL}/auth/connections/${c.id}/exchange`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ code: started.handoff_code }),
      });
      assert.equal(ex.status, 200, await ex.clone().text());
      const { jwt } = await ex.json();
      const byToken = await fetch(`${b.baseURL}/auth/connections/${c.id}`, { headers: { authorization: `Bearer ${jwt}` } });
      assert.equal(byToken.status, 200, await byToken.clone().text());
      assert.equal((await byToken.json()).flow_step, 'AWAITING_INPUT');
      const states = [];
      const following = (async () => {
        for await (const e of await b.client.auth.connections.follow(c.id)) if (e.event === 'managed_auth_state') states.push(e);
      })();
      const values = Object.fromEntries(waiting.fields.map((f) => [f.id, f.type === 'password' ? PASSWORD : USER]));
      assert.deepEqual(await b.client.auth.connections.submit(c.id, { field_values: values }), { accepted: true });
      await following; // the stream ends with the flow
      assert.equal(states.at(-1)?.flow_status, 'SUCCESS', JSON.stringify(states.at(-1)));
      const end = await b.client.auth.connections.retrieve(c.id);
      assert.deepEqual([end.flow_status, end.status], ['SUCCESS', 'AUTHENTICATED']);
      await b.client.auth.connections.delete(c.id);
    } finally {
      await sites.close();
    }
  });

  test('apps across nodes: a build followed and invoked through the other node runs where it was built; a lost node\'s deployment is built again where it is next invoked', async () => {
    const zipped = join(mkdtempSync(join(tmpdir(), 'hangar-nodes-app-')), 'app.zip');
    execFileSync('zip', ['-qry', zipped, '.', '-x', 'node_modules/*'], { cwd: join(repoRoot, 'tests/fixtures/apps/ts-app') });
    const created = await b.client.deployments.create({
      file: await toFile(readFileSync(zipped), 'app.zip'), entrypoint_rel_path: 'index.ts', env_vars: { GREETING: 'across' },
    });
    // Followed through node-a while node-b builds: the live build log, relayed.
    const states = [];
    for await (const e of await a.client.deployments.follow(created.id)) if (e.event === 'deployment_state') states.push(e.deployment.status);
    assert.deepEqual(states, ['queued', 'in_progress', 'running']);
    const inv = await a.client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest' });
    assert.equal(inv.status, 'succeeded', inv.status_reason);
    assert.deepEqual(JSON.parse(inv.output), { greeting: 'across', has_key: true });
    assert.equal(await psqlValue(`SELECT node FROM apps_invocations WHERE id = '${inv.id}'`), 'node-b');

    await b.kill();
    await waitFor(async () => (await byName(a.env))['node-b'].state === 'stale', { timeoutMs: 15_000, what: 'node-b stale' });
    const asked = await a.client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest' }, { maxRetries: 0 })
      .then(() => null, (e) => e);
    assert.equal(asked?.status, 503, String(asked));
    assert.match(asked.message, /being built again/);
    // Asked again while it builds: still "retry", never "not found".
    const meanwhile = await a.client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest' }, { maxRetries: 0 })
      .then((inv) => inv.status, (e) => e.status);
    assert.ok(meanwhile === 503 || meanwhile === 'succeeded', String(meanwhile));
    await waitFor(async () => (await a.client.deployments.retrieve(created.id)).status === 'running', {
      timeoutMs: 240_000, what: 'the deployment built again on node-a',
    });
    const again = await a.client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest' });
    assert.equal(again.status, 'succeeded', again.status_reason);
    assert.equal(await psqlValue(`SELECT node FROM apps_invocations WHERE id = '${again.id}'`), 'node-a');
    await a.client.deployments.delete(created.id);
    b = await startServer({ apiKey, dataDir: bDir, env: { ...shared(), HANGAR_NODE_NAME: 'node-b' } });
  });

  test('hangar drain: creates sent to the node run on the other, it keeps serving its session, stops by itself once it ended (--wait, --timeout), and rejoins on restart with a cap', async () => {
    const kept = await b.client.browsers.create({ headless: true });
    const { stdout } = await execFileP(hangarBin, ['drain', 'node-b'], { env: a.env, timeout: 30_000 });
    assert.match(stdout, /node node-b is draining/);
    assert.equal((await byName(a.env))['node-b'].state, 'draining');
    // node-b reads it at its next heartbeat (1 s here); from then on a create sent to it runs on
    // node-a, the live node with room (before, node-b kept it: 1 session against node-a's 0).
    const placed = await waitFor(async () => {
      const created = await b.client.browsers.create({ headless: true });
      if (new URL(created.cdp_ws_url).host === new URL(a.baseURL).host) return created;
      await b.client.browsers.deleteByID(created.session_id);
      return null;
    }, { timeoutMs: 15_000, what: 'node-b sending creates to node-a' });
    assert.equal((await a.client.browsers.retrieve(placed.session_id)).session_id, placed.session_id);
    await a.client.browsers.deleteByID(placed.session_id);
    // Creates through the other node go on; the draining node still serves its own session.
    const elsewhere = await a.client.browsers.create({ headless: true });
    await a.client.browsers.deleteByID(elsewhere.session_id);
    assert.equal((await b.client.browsers.retrieve(kept.session_id)).session_id, kept.session_id);
    const cdp = await openSocket(kept.cdp_ws_url);
    assert.match((await cdpVersion(cdp)).product, /Chrome/);
    cdp.close();

    // With --timeout, --wait gives up while a session lives (a pod's preStop then leaves the
    // rest to SIGTERM); a timeout that is not a number is refused before anything is written.
    await assert.rejects(
      execFileP(hangarBin, ['drain', 'node-b', '--wait', '--timeout', '2'], { env: a.env, timeout: 30_000 }),
      (err) => {
        assert.equal(err.code, 1, err.stderr);
        assert.match(err.stderr, /node node-b is still draining after 2 s/);
        return true;
      },
    );
    await assert.rejects(execFileP(hangarBin, ['drain', 'node-a', '--wait', '--timeout', 'soon'], { env: a.env, timeout: 30_000 }), (err) => {
      assert.equal(err.code, 2, err.stderr);
      assert.match(err.stderr, /--timeout needs a number of seconds above 0, not 'soon'/);
      return true;
    });
    assert.equal((await byName(a.env))['node-a'].state, 'live', 'node-a was not marked draining');

    // `--wait` returns once the node stopped, which it does once its last session ended.
    const waiting = execFileP(hangarBin, ['drain', 'node-b', '--wait'], { env: a.env, timeout: 60_000 });
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(b.exited(), null, 'node-b runs while its session lives');
    await b.client.browsers.deleteByID(kept.session_id);
    const waited = await waiting;
    assert.match(waited.stdout, /node node-b drained and stopped/);
    await waitFor(() => b.exited(), { timeoutMs: 15_000, what: 'node-b to exit' });
    assert.equal(b.exited().code, 0, JSON.stringify(b.exited()));
    assert.match(b.output(), /node node-b drained: stopping/);
    assert.equal((await byName(a.env))['node-b'].state, 'stopped');

    // Back, with a cap of one session: its first create runs there, the next goes to node-a.
    b = await startServer({
      apiKey,
      dataDir: bDir,
      env: { ...shared(), HANGAR_NODE_NAME: 'node-b', HANGAR_NODE_MAX_BROWSERS: '1' },
    });
    const rejoined = (await byName(a.env))['node-b'];
    assert.equal(rejoined.state, 'live');
    assert.equal(rejoined.max_browsers, 1);
    fullB = await b.client.browsers.create({ headless: true });
    assert.equal(new URL(fullB.cdp_ws_url).host, new URL(b.baseURL).host);
    const overflow = await b.client.browsers.create({ headless: true });
    assert.equal(new URL(overflow.cdp_ws_url).host, new URL(a.baseURL).host, 'node-b at its max_browsers sends creates on');
    await a.client.browsers.deleteByID(overflow.session_id);

    // A pool made now is filled where there is room: node-b is at its cap, so node-a holds every
    // member (an even split would have started one on node-b, past its cap).
    const onB = (s) => new URL(s.cdp_ws_url).host === new URL(b.baseURL).host;
    const pool = await b.client.browserPools.create({ name: 'room', size: 2, headless: true, fill_rate_per_minute: 6000 });
    await waitFor(async () => (await b.client.browserPools.retrieve(pool.id)).available_count === 2, {
      timeoutMs: 120_000,
      what: 'two idle members of pool room',
    });
    await new Promise((r) => setTimeout(r, 2500)); // a member node-b would start past its cap has had time to
    assert.equal((await byName(a.env))['node-b'].browsers, 1, 'node-b runs only its own session');
    const members = [];
    for (let i = 0; i < 2; i++) members.push(await b.client.browserPools.acquire(pool.id, { acquire_timeout_seconds: 10 }));
    assert.deepEqual(members.map(onB), [false, false]);
    await b.client.browserPools.delete(pool.id, { force: true });
  });

  test('a SIGTERM stop reads as stopped; a full node with no other live node answers 503 no_capacity', async () => {
    await a.stop();
    assert.equal((await byName(b.env))['node-a'].state, 'stopped');
    const r = await b.fetch('/browsers', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(r.status, 503);
    assert.equal(r.headers.get('retry-after'), '2');
    const body = await r.json();
    assert.equal(body.code, 'no_capacity');
    assert.match(body.message, /node node-b runs its \[node\] max_browsers = 1 sessions, and no other node has room/);
    await b.client.browsers.deleteByID(fullB.session_id);
  });
});
