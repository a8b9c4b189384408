// A cluster (issue 24): three nodes on loopback sharing one PostgreSQL, a real HAProxy in front of
// them (round robin, as a Kubernetes Service or any load balancer spreads requests), and the
// official SDK pointed at the front only. Every request may reach any node: creates are placed,
// instance routes and CDP through the front are relayed to the browser's node, a node killed with
// -9 has its sessions ended by the others while theirs live on, and it rejoins when it restarts.
//
// Runs under `make test-postgres` (nodes share a PostgreSQL store); skipped on SQLite.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import Kernel from '@onkernel/sdk';

import { CdpClient, openWebSocket } from './lib/cdp.mjs';
import { startCluster } from './lib/cluster.mjs';
import { databaseFor, onPostgres, pgOutage } from './lib/pg.mjs';
import { waitFor } from './lib/server.mjs';

describe('three nodes on one PostgreSQL store behind HAProxy', { skip: !onPostgres && 'needs HANGAR_E2E_STORE=postgres (make test-postgres)' }, () => {
  const apiKey = 'sk_test_' + randomBytes(24).toString('hex');
  let dbDir;
  let db;
  let cluster;
  let nodes;
  let nodeOf;
  let front;
  let client;

  /** The session's CDP URL with the front's host: HAProxy sends it to any node. */
  const viaFront = (session) => {
    const u = new URL(session.cdp_ws_url);
    u.host = new URL(front).host;
    return u.href;
  };

  before(async () => {
    dbDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-cluster-db-'));
    db = await databaseFor(dbDir, true);
    // node-3 serves another region ([node] region): creates naming it go there.
    cluster = await startCluster({ storeUrl: db.url, apiKey, count: 3, nodeEnv: (i) => (i === 3 ? { HANGAR_NODE_REGION: 'eu-west' } : {}) });
    ({ nodes, nodeOf } = cluster);
    front = cluster.front.url;
    client = new Kernel({ apiKey, baseURL: front, maxRetries: 4, timeout: 120_000 });
  });

  after(async () => {
    await cluster?.stop();
    await db?.drop();
    rmSync(dbDir, { recursive: true, force: true });
  });

  let sessions = [];
  const direct = []; // CDP connections opened at each session's own cdp_ws_url

  test('nine creates through the front spread over the three nodes, none holding more than four', async () => {
    // Three at a time, as agents arriving together would.
    for (let i = 0; i < 9; i += 3) {
      sessions.push(...(await Promise.all([0, 1, 2].map(() => client.browsers.create({ headless: true })))));
    }
    const per = Object.fromEntries(nodes.map((n) => [n.name, 0]));
    for (const s of sessions) per[nodeOf(s).name]++;
    assert.ok(Object.values(per).every((c) => c >= 1 && c <= 4), JSON.stringify(per));
  });

  test('a region is placed on a node serving it, whichever node answers; a region no node serves is 400', async () => {
    const eu = await Promise.all([0, 1, 2].map(() => client.browsers.create({ headless: true, region: 'eu-west' })));
    const us = await client.browsers.create({ headless: true, region: 'us-east' });
    try {
      for (const s of eu) {
        assert.equal(nodeOf(s).name, 'node-3');
        assert.equal(s.region, 'eu-west');
      }
      assert.notEqual(nodeOf(us).name, 'node-3');
      assert.equal(us.region, 'us-east');
      // Every browser node-3 runs is in eu-west, those the load placed there before included.
      const onEuWest = [...sessions, ...eu, us].filter((s) => nodeOf(s).name === 'node-3').map((s) => s.session_id);
      const listed = [];
      for await (const b of client.browsers.list({ region: 'eu-west' })) listed.push(b.session_id);
      assert.deepEqual(new Set(listed), new Set(onEuWest));
      await assert.rejects(client.browsers.create({ headless: true, region: 'ap-southeast' }), (e) => {
        assert.equal(e.status, 400);
        assert.match(e.message, /region ap-southeast.*eu-west, us-east/);
        return true;
      });
    } finally {
      await Promise.all([...eu, us].map((s) => client.browsers.deleteByID(s.session_id)));
    }
  });

  test('every session, through the front whichever node answers: read, screenshotted, given a file, driven over CDP', async () => {
    for (const s of sessions) {
      for (let round = 0; round < 3; round++) {
        // Three rounds: round robin over three nodes reaches the owner and both others.
        assert.equal((await client.browsers.retrieve(s.session_id)).session_id, s.session_id);
      }
      const png = Buffer.from(await (await client.browsers.computer.captureScreenshot(s.session_id)).arrayBuffer());
      assert.equal(png.subarray(1, 4).toString(), 'PNG');
      const text = `file of ${s.session_id}`;
      await client.browsers.fs.writeFile(s.session_id, text, { path: '/tmp/cluster.txt' });
      for (let round = 0; round < 3; round++) {
        assert.equal(await (await client.browsers.fs.readFile(s.session_id, { path: '/tmp/cluster.txt' })).text(), text);
      }
      const cdp = new CdpClient(await openWebSocket(viaFront(s)));
      assert.match((await cdp.send('Browser.getVersion')).product, /Chrome/);
      const page = await cdp.attachToPage();
      const { result } = await cdp.send('Runtime.evaluate', { expression: '6 * 7', returnByValue: true }, page);
      assert.equal(result.value, 42);
      await cdp.close();
    }
  });

  test('a profile saved on one node loads on another (its archive kept in PostgreSQL)', async () => {
    const profile = await client.profiles.create({ name: `cluster-${randomBytes(4).toString('hex')}` });
    const first = await client.browsers.create({ headless: true, profile: { id: profile.id, save_changes: true } });
    const savedOn = nodeOf(first);
    const expires = Math.floor(Date.now() / 1000) + 86_400;
    let cdp = new CdpClient(await openWebSocket(first.cdp_ws_url));
    await cdp.send('Storage.setCookies', {
      cookies: [{ name: 'kept', value: `by-${savedOn.name}`, domain: 'cluster.test', path: '/', expires }],
    });
    await cdp.close();
    await client.browsers.deleteByID(first.session_id); // saves the archive on its node
    await waitFor(async () => (await client.profiles.retrieve(profile.id)).updated_at, { what: 'the profile saved' });

    // Created at another node. Here, with the nine spread evenly, placement keeps a create where it
    // lands; should it still send one back, the next node is tried.
    let second;
    for (const n of nodes.filter((x) => x !== savedOn)) {
      const viaNode = new Kernel({ apiKey, baseURL: `http://127.0.0.1:${n.port}`, maxRetries: 4, timeout: 120_000 });
      const s = await viaNode.browsers.create({ headless: true, profile: { id: profile.id, save_changes: true } });
      if (nodeOf(s) !== savedOn) {
        second = s;
        break;
      }
      await client.browsers.deleteByID(s.session_id);
    }
    assert.ok(second, `no session landed away from ${savedOn.name}`);
    cdp = new CdpClient(await openWebSocket(second.cdp_ws_url));
    const { cookies } = await cdp.send('Storage.getCookies');
    await cdp.close();
    assert.deepEqual(
      cookies.filter((c) => c.domain === 'cluster.test').map((c) => `${c.name}=${c.value}`),
      [`kept=by-${savedOn.name}`],
      `loaded on ${nodeOf(second).name}`,
    );
    // The same archive, downloaded through any node.
    for (let round = 0; round < 3; round++) {
      const zst = Buffer.from(await (await client.profiles.download(profile.id)).arrayBuffer());
      assert.deepEqual([...zst.subarray(0, 4)], [0x28, 0xb5, 0x2f, 0xfd]);
    }
    // A DELETE answers before its session ended; a node other than the session's still sees the
    // profile's lease until then, and waits for it instead of answering 409.
    await client.browsers.deleteByID(second.session_id);
    const elsewhere = nodes.find((n) => n !== nodeOf(second));
    await new Kernel({ apiKey, baseURL: `http://127.0.0.1:${elsewhere.port}`, maxRetries: 0 }).profiles.delete(profile.id);
  });

  test('a node killed with -9: its sessions read deleted within 15 s, the other nodes\' CDP connections keep working, creates go on', async (t) => {
    for (const s of sessions) direct.push({ s, cdp: new CdpClient(await openWebSocket(s.cdp_ws_url)) });
    const victim = nodes[2];
    const ofVictim = sessions.filter((s) => nodeOf(s) === victim);
    assert.ok(ofVictim.length > 0);
    const killedAt = Date.now();
    await victim.server.kill();
    await waitFor(async () => {
      const deleted = new Set();
      for await (const s of client.browsers.list({ status: 'deleted' })) if (s.deleted_at) deleted.add(s.session_id);
      return ofVictim.every((s) => deleted.has(s.session_id));
    }, { timeoutMs: 15_000, intervalMs: 250, what: `the sessions of ${victim.name} read as deleted through the front` });
    t.diagnostic(`${victim.name}'s ${ofVictim.length} sessions read deleted ${Date.now() - killedAt} ms after the kill`);
    // The reason is in the log of the node that ended them.
    const survivors = nodes.filter((n) => n !== victim);
    for (const s of ofVictim) {
      const line = `ending browser session ${s.session_id}: its node ${victim.name} stopped heartbeating`;
      assert.ok(survivors.some((n) => n.server.output().includes(line)), line);
    }

    for (const { s, cdp } of direct) {
      if (nodeOf(s) === victim) continue;
      assert.match((await cdp.send('Browser.getVersion')).product, /Chrome/, `${s.session_id} on ${nodeOf(s).name}`);
      assert.equal((await client.browsers.retrieve(s.session_id)).deleted_at, undefined);
    }
    const fresh = await Promise.all([0, 1, 2].map(() => client.browsers.create({ headless: true })));
    for (const s of fresh) assert.notEqual(nodeOf(s), victim, 'nothing is placed on the dead node');
    sessions = [...sessions.filter((s) => nodeOf(s) !== victim), ...fresh];
  });

  test('the killed node restarts, rejoins and takes browsers again', async () => {
    const victim = nodes[2];
    await victim.start();
    // It has no session, the others have several: placement sends creates there, from any node.
    let landed;
    await waitFor(async () => {
      const s = await client.browsers.create({ headless: true });
      sessions.push(s);
      if (nodeOf(s) === victim) landed = s;
      return landed;
    }, { timeoutMs: 60_000, what: `a create placed on the restarted ${victim.name}` });
    const png = Buffer.from(await (await client.browsers.computer.captureScreenshot(landed.session_id)).arrayBuffer());
    assert.equal(png.subarray(1, 4).toString(), 'PNG');
  });

  test('PostgreSQL restarted mid-run: 503 store_unavailable with Retry-After through the front, then recovery, nothing lost', async () => {
    const read = `/browsers/${sessions[0].session_id}`;
    await pgOutage('stop');
    try {
      // Through the front: a node's 503, or HAProxy's own once its checks of /readyz (503 while
      // the store is away) took every node out; either way the SDK backs off and retries.
      const r = await fetch(`${front}${read}`, { headers: { authorization: `Bearer ${apiKey}` } });
      assert.equal(r.status, 503);
      // Each node's own answer: the wire body and how long to back off.
      for (const n of nodes) {
        const direct = await n.server.fetch(read);
        assert.equal(direct.status, 503, n.name);
        assert.ok(Number(direct.headers.get('retry-after')) > 0, n.name);
        assert.equal((await direct.json()).code, 'store_unavailable', n.name);
      }
      // Longer than the nodes' heartbeat allowance (3 x 1 s): once the store is back, every node's
      // last heartbeat is old, and none may take another for dead before it could beat again.
      await new Promise((resolve) => setTimeout(resolve, 5000));
    } finally {
      await pgOutage('restart');
    }
    await waitFor(async () => (await fetch(`${front}/browsers`, { headers: { authorization: `Bearer ${apiKey}` } })).ok, {
      timeoutMs: 30_000,
      what: 'the front answering again',
    });
    for (const s of sessions) assert.equal((await client.browsers.retrieve(s.session_id)).deleted_at, undefined);
    sessions.push(await client.browsers.create({ headless: true }));
  });

  test('every session ends through the front', async () => {
    for (const { cdp } of direct) await cdp.close();
    for (const s of sessions) await client.browsers.deleteByID(s.session_id);
    const deleted = new Set();
    for await (const s of client.browsers.list({ status: 'deleted' })) if (s.deleted_at) deleted.add(s.session_id);
    for (const s of sessions) assert.ok(deleted.has(s.session_id), s.session_id);
    await waitFor(async () => {
      const rows = await Promise.all(nodes.map(async (n) => (await n.server.fetch('/healthz')).ok));
      return rows.every(Boolean) && nodes.every((n) => !n.server.output().includes('exited unexpectedly'));
    }, { what: 'every node still up' });
  });
});
