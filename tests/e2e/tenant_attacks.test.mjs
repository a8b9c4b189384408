// Tenant boundaries attacked the way an outside tester did (issue 40), with project-scoped keys
// only: two projects, A the attacker, B the victim, and the admin key kept for the server alone.
// This file covers the paths the server follows into a sandbox: the agent's socket (replaced from
// inside with a fake agent or a link to B's) and the app log (a symlink to the server's own
// environment). The other attacks of the issue have files of their own:
// tenant_attacks_build.test.mjs (app builds), tenant_attacks_relay.test.mjs (instance answers
// as routing, streaming, per-project load), tenant_attacks_web.test.mjs (pages, server-side
// fetches, tokens). Each attack here succeeded on c6b5cdf.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';

import Kernel, { toFile } from '@onkernel/sdk';

import { startServer } from './lib/server.mjs';
import { slow } from './lib/tier.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'hangar-tenant-attacks-'));
const unb64 = (s) => Buffer.from(s ?? '', 'base64').toString();

let server;
let tenantA; // clients with project-scoped keys
let tenantB;

async function sh(client, session, script, timeout_sec = 30) {
  const r = await client.browsers.process.exec(session.session_id, { command: 'bash', args: ['-c', script], timeout_sec });
  return { code: r.exit_code, out: unb64(r.stdout_b64), err: unb64(r.stderr_b64) };
}

before(async () => {
  server = await startServer();
  const admin = server.client;
  const clientFor = async (name) => {
    await admin.projects.create({ name });
    const key = await admin.apiKeys.create({ name: `${name}-key`, project_id: name });
    return new Kernel({ apiKey: key.key, baseURL: server.baseURL, timeout: 120_000 });
  };
  tenantA = await clientFor('tenant-a');
  tenantB = await clientFor('tenant-b');
});

after(async () => {
  await server?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

describe('the agent socket', () => {
  let a;
  let b;
  before(async () => {
    a = await tenantA.browsers.create({ headless: true });
    b = await tenantB.browsers.create({ headless: true });
    await tenantB.browsers.fs.writeFile(b.session_id, 'secret-of-b\n', { path: '/home/kernel/b-secret.txt' });
    await tenantA.browsers.fs.writeFile(a.session_id, 'file-of-a\n', { path: '/home/kernel/b-secret.txt' });
  });
  after(async () => {
    await tenantA.browsers.deleteByID(a.session_id).catch(() => {});
    await tenantB.browsers.deleteByID(b.session_id).catch(() => {});
  });

  test("A links its agent socket to B's: A's calls still reach A, and deleting A leaves B running", async () => {
    // Wherever B's socket lives on the host (the attacker learns the data dir from an error or a
    // log); on c6b5cdf it was <data dir>/instances/<id>/agent.sock, seen inside as /run/hangar.
    const candidates = [join(server.dataDir, 'instances', b.session_id, 'agent.sock'),
      join(server.dataDir, 'instances', `${b.session_id}.host`, 'agent.sock')].filter((p) => existsSync(p));
    assert.ok(candidates.length > 0, "B's agent socket exists on the host");
    const attack = await sh(tenantA, a,
      'for d in /run/hangar /run/hangar-host; do ' +
      `  mv "$d/agent.sock" "$d/agent.sock.real" 2>/dev/null; ln -sf "${candidates[0]}" "$d/agent.sock" 2>/dev/null; ` +
      'done; echo attempted');
    assert.match(attack.out, /attempted/);
    const read = await tenantA.browsers.fs.readFile(a.session_id, { path: '/home/kernel/b-secret.txt' });
    assert.equal(await read.text(), 'file-of-a\n', "A's call was served by A's own agent, not B's");
    const who = await sh(tenantA, a, 'cat /home/kernel/b-secret.txt');
    assert.equal(who.out, 'file-of-a\n');

    await tenantA.browsers.deleteByID(a.session_id);
    const still = await tenantB.browsers.retrieve(b.session_id);
    assert.equal(still.deleted_at ?? null, null, 'B survives the deletion of A');
    const readB = await tenantB.browsers.fs.readFile(b.session_id, { path: '/home/kernel/b-secret.txt' });
    assert.equal(await readB.text(), 'secret-of-b\n');
  });

  test('A replaces its agent socket with a fake agent: the server never talks to it', async () => {
    const c = await tenantA.browsers.create({ headless: true });
    try {
      // The fake agent answers every request with a marker; it logs what it received.
      const fake = [
        "const net=require('net'),fs=require('fs');",
        "for (const d of ['/run/hangar','/run/hangar-host']) {",
        "  const p=d+'/agent.sock';",
        "  try { fs.renameSync(p, p+'.real'); } catch {}",
        "  try { fs.rmSync(p,{force:true}); } catch {}",
        "  net.createServer(s=>{s.on('data',x=>{fs.appendFileSync('/home/kernel/fake-seen.txt',x);",
        "    s.end('HTTP/1.1 200 OK\\r\\nContent-Type: text/plain\\r\\nContent-Length: 10\\r\\n\\r\\nFAKE-AGENT');});})",
        "    .on('error', () => {}).listen(p);",
        '}',
        "setTimeout(()=>{}, 60000);",
      ].join('\n');
      await tenantA.browsers.fs.writeFile(c.session_id, fake, { path: '/home/kernel/fake.js' });
      await tenantA.browsers.process.spawn(c.session_id, { command: 'node', args: ['/home/kernel/fake.js'] });
      await new Promise((r) => setTimeout(r, 1500));
      const wrote = await tenantA.browsers.fs.writeFile(c.session_id, 'real\n', { path: '/home/kernel/probe.txt' })
        .then(() => 'ok', (e) => e);
      // Read from the host side: on c6b5cdf the fake answered every API call from then on.
      const seen = join(server.dataDir, 'instances', c.session_id, 'home', 'fake-seen.txt');
      assert.ok(!existsSync(seen), `the fake agent received a request:\n${existsSync(seen) && readFileSync(seen, 'utf8')}`);
      assert.equal(wrote, 'ok');
      const res = await tenantA.browsers.fs.readFile(c.session_id, { path: '/home/kernel/probe.txt' });
      assert.equal(await res.text(), 'real\n', 'the real agent answered');
    } finally {
      await tenantA.browsers.deleteByID(c.session_id).catch(() => {});
    }
  });
});

describe('the app log', () => {
  test("an app's symlink from its log to /proc/self/environ shows no server environment", { ...slow, timeout: 300_000 }, async () => {
    // The fixture app, plus module code that replaces its log with a link to the environment of
    // whoever opens it when it is imported by a warm sandbox, which then waits for the invocation
    // whose log the server tails.
    const dir = join(scratch, 'app');
    cpSync(join(here, '../fixtures/apps/ts-app'), dir, { recursive: true, filter: (p) => !p.includes('node_modules') });
    const source = readFileSync(join(dir, 'index.ts'), 'utf8');
    writeFileSync(join(dir, 'index.ts'),
      "import * as nodeFs from 'node:fs';\n" +
      "try { if (JSON.parse(nodeFs.readFileSync('/run/hangar/job.json', 'utf8')).mode === 'wait') { " +
      "nodeFs.rmSync('/run/hangar/logs/app.log', { force: true }); nodeFs.symlinkSync('/proc/self/environ', '/run/hangar/logs/app.log');" +
      ' } } catch {}\n' +
      source);
    const zip = join(scratch, 'app.zip');
    execFileSync('zip', ['-qry', zip, '.'], { cwd: dir });
    const created = await tenantA.deployments.create({ file: await toFile(readFileSync(zip), 'app.zip'), entrypoint_rel_path: 'index.ts' });
    const events = [];
    for await (const e of await tenantA.deployments.follow(created.id)) events.push(e);
    const leaked = (text) => text.includes(server.apiKey) || /HANGAR_API_KEY|HANGAR_DATA_DIR/.test(text);
    assert.ok(!leaked(JSON.stringify(events)), 'no server environment in the build and describe events');
    const deployed = await tenantA.deployments.retrieve(created.id);
    assert.equal(deployed.status, 'running', JSON.stringify(events.slice(-3)));

    events.length = 0;
    for (let i = 0; i < 2; i++) {
      // Time for a warm sandbox (the first, or the replacement for the last one) to be ready and
      // to have laid its link.
      await new Promise((r) => setTimeout(r, 6000));
      const inv = await tenantA.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest', async: true });
      for await (const e of await tenantA.invocations.follow(inv.id)) events.push(e);
    }
    assert.ok(!leaked(JSON.stringify(events)), "no server environment in the invocations' events");
    assert.ok(events.some((e) => e.event === 'invocation_state' && e.invocation?.status === 'succeeded'),
      JSON.stringify(events.slice(-3)));
  });
});
