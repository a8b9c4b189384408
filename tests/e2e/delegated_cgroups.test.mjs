// The packaged service runs as the user `hangar` under systemd with Delegate=yes: it may not make
// a cgroup tree of its own, only below the cgroup systemd gave the unit. This file hands a
// cgroup to the `hangar` user the way systemd's delegation does (the unit's folder and its
// control files chowned to it, the server started inside it) and runs the real server as that
// user. Each instance must then get its own cgroup with its limits below the delegated one, a
// fork bomb must stop there, and a restart adopts the session (on v2 without DelegateSubgroup
// the stop parks it first; host/README.md, cgroups).
// No systemd runs on these machines, so the delegation itself is done by hand here. One browser.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { hangarBin, startServer, waitFor } from './lib/server.mjs';

const PIDS_MAX = 512;
const asRoot = process.getuid?.() === 0;
const v2 = existsSync('/sys/fs/cgroup/cgroup.controllers') &&
  readFileSync('/sys/fs/cgroup/cgroup.controllers', 'utf8').includes('memory');
const unitName = `hangar-e2e-${process.pid}.service`;
// The unit's cgroup in each hierarchy the server limits instances with.
const unitDirs = v2 ? [join('/sys/fs/cgroup', unitName)]
  : ['memory', 'pids', 'cpu'].map((c) => join('/sys/fs/cgroup', c, unitName)).filter((d) => existsSync(join(d, '..')));
const idOf = (name) => Number(execFileSync('id', [name === 'user' ? '-u' : '-g', 'hangar'], { encoding: 'utf8' }).trim());

let uid;
let gid;
let dataDir;
let server;

// What systemd does for Delegate=yes: the unit's cgroup, and the files that let its user make
// and fill cgroups below it, owned by the unit's user.
function delegate() {
  if (v2) writeFileSync('/sys/fs/cgroup/cgroup.subtree_control', '+memory +pids +cpu');
  for (const dir of unitDirs) {
    mkdirSync(dir, { recursive: true });
    chownSync(dir, uid, gid);
    for (const f of ['cgroup.procs', 'cgroup.subtree_control', 'cgroup.threads', 'tasks'])
      if (existsSync(join(dir, f))) chownSync(join(dir, f), uid, gid);
  }
}

// Every process in the unit's cgroups killed, then the folders removed deepest first.
function undelegate() {
  for (const dir of unitDirs) {
    if (!existsSync(dir)) continue;
    const walk = (d) => {
      for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(join(d, e.name));
      for (let i = 0; i < 50; i++) {
        const pids = readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
        if (!pids.length) break;
        for (const p of pids) try { process.kill(Number(p), 'SIGKILL'); } catch {}
        execFileSync('sleep', ['0.1']);
      }
      try { rmdirSync(d); } catch {}
    };
    walk(dir);
  }
}

// Started as systemd would: inside the unit's cgroups, as the unit's user. `exec` keeps the pid.
const launch = (bin) => ['sh', ['-c',
  `for d in ${unitDirs.join(' ')}; do echo $$ > "$d/cgroup.procs"; done; ` +
  `exec setpriv --reuid=${uid} --regid=${gid} --clear-groups "$0" serve`, bin]];

const apiKey = 'sk_test_delegated_' + Date.now();
const serve = (env = {}) => startServer({
  dataDir, apiKey, launch, env: { HANGAR_SANDBOX_PIDS_MAX: String(PIDS_MAX), HANGAR_KEEP_SESSIONS_ON_STOP: '1', ...env },
});

// <data_dir>/cgroup-roots, which the server writes at start: {mode, origin, survives_restart,
// roots: {controller: folder}}.
function recorded() {
  const said = { roots: {} };
  for (const line of readFileSync(join(dataDir, 'cgroup-roots'), 'utf8').split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const [key, ...rest] = line.split(' ');
    if (key === 'root') said.roots[rest[0]] = rest.slice(1).join(' ');
    else said[key] = rest.join(' ');
  }
  return said;
}

before(() => {
  if (unreadableByHangar()) return;
  uid = idOf('user');
  gid = idOf('group');
  dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-delegated-'));
  chownSync(dataDir, uid, gid);
  delegate();
});

after(async () => {
  if (unreadableByHangar()) return;
  if (server) {
    // SIGINT ends every session (SIGTERM would keep them for a next start that never comes).
    process.kill(server.pid, 'SIGINT');
    await waitFor(() => server.exited(), { timeoutMs: 30_000, what: 'the server to stop' }).catch(() => {});
    await server.stop();
  }
  undelegate();
  rmSync(dataDir, { recursive: true, force: true });
});

// The server runs as `hangar` from this checkout: every folder on the way must let it in (a
// checkout under a private home does not).
function unreadableByHangar() {
  if (!asRoot) return 'delegating a cgroup needs root';
  try {
    execFileSync('setpriv', ['--reuid=hangar', '--regid=hangar', '--clear-groups', 'test', '-x', hangarBin]);
    return false;
  } catch {
    return `the hangar user cannot run ${hangarBin} from this checkout`;
  }
}

test('as the unit user, each instance gets limits in a cgroup below the delegated one', { skip: unreadableByHangar() }, async () => {
  server = await serve();
  const said = recorded();
  assert.equal(said.mode, v2 ? 'v2' : 'v1', JSON.stringify(said));
  assert.match(said.origin, /^delegated/);
  assert.deepEqual(Object.keys(said.roots).sort(), v2 ? ['all'] : ['cpu', 'memory', 'pids']);
  for (const root of Object.values(said.roots))
    assert.ok(unitDirs.some((d) => root.startsWith(d + '/')), `instances under the unit's cgroup: ${root}`);
  const uidOfServer = Number(readFileSync(`/proc/${server.pid}/status`, 'utf8').match(/^Uid:\s+(\d+)/m)[1]);
  assert.equal(uidOfServer, uid, 'the server runs as the hangar user');

  const b = await server.client.browsers.create({ headless: true });
  const pidsDir = join(said.roots[v2 ? 'all' : 'pids'], b.session_id);
  assert.equal(readFileSync(join(pidsDir, 'pids.max'), 'utf8').trim(), String(PIDS_MAX));
  const members = readFileSync(join(pidsDir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
  assert.ok(members.length >= 3, `the sandbox, the agent and Chromium are in it: ${members.length}`);

  const bomb = await server.client.browsers.process.exec(b.session_id, {
    command: 'python3',
    args: ['-c', 'import os,time\nn=0\ntry:\n  for i in range(5000):\n    if os.fork()==0: time.sleep(3); os._exit(0)\n    n+=1\nexcept OSError as e: print("stopped", n, e.errno)'],
    timeout_sec: 60,
  });
  const out = Buffer.from(bomb.stdout_b64 ?? '', 'base64').toString();
  const m = out.match(/stopped (\d+) (\d+)/);
  assert.ok(m, `the fork bomb ran unchecked: ${out}`);
  assert.ok(Number(m[1]) < PIDS_MAX);

  // Every delegated layout keeps instances for the next start (v2 without DelegateSubgroup parks
  // them at the stop; host README, cgroups).
  assert.equal(said.survives_restart, 'yes');
  // A planned restart: the next server, started the same way, adopts the session.
  await waitFor(async () => (await server.client.browsers.process.exec(b.session_id, { command: 'true' })).exit_code === 0,
    { timeoutMs: 20_000, what: 'the bomb to pass' });
  const port = server.port;
  process.kill(server.pid, 'SIGTERM');
  await waitFor(() => server.exited(), { timeoutMs: 30_000, what: 'the server to stop' });
  server = await serve({ HANGAR_LISTEN: `127.0.0.1:${port}` });
  assert.match(server.output(), new RegExp(`adopted instance ${b.session_id}`));
  const r = await server.client.browsers.process.exec(b.session_id, { command: 'echo', args: ['still here'] });
  assert.equal(Buffer.from(r.stdout_b64, 'base64').toString().trim(), 'still here');
});
