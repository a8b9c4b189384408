// Process hygiene: SIGTERM with keep_sessions_on_stop = false (what lib/server.mjs sets) ends every
// browser instance and exits 0; after a crash (SIGKILL) the instances run on, the next start adopts
// those whose agent answers and cleans up the rest. No orphan processes, ever. (A planned restart
// that keeps sessions is restart.test.mjs.)
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';


import {
  descendants, doctor, doctorShows, instancePastasOf, pastasOf, preparedNetworksOf, sessionExists, startServer,
  stillAlive, waitFor,
} from './lib/server.mjs';
import { slow } from './lib/tier.mjs';

const isChromium = (p) => /chrom/i.test(p.cmd);

test('SIGTERM stops the server cleanly and ends every instance', async () => {
  const server = await startServer();
  let procs = [];
  try {
    await server.client.browsers.create({ headless: true });
    await server.client.browsers.create({ headless: false, viewport: { width: 1024, height: 768 } });
    procs = descendants(server.pid);
    assert.ok(procs.filter(isChromium).length >= 2, `Chromium runs under the server:\n${procs.map((p) => p.cmd).join('\n')}`);
  } finally {
    const t0 = Date.now();
    const stopped = await server.stop();
    assert.equal(stopped.killed, false, 'exited on SIGTERM');
    assert.equal(stopped.code, 0, `exit status: ${JSON.stringify(stopped)}`);
    assert.ok(Date.now() - t0 < 10_000);
  }
  // Every process the server had started is gone (allowing a moment for reaping).
  await waitFor(() => stillAlive(procs).length === 0, {
    timeoutMs: 5_000,
    what: 'instance processes to end',
  }).catch(() => {
    const left = stillAlive(procs);
    for (const p of left) try { process.kill(p.pid, 'SIGKILL'); } catch {}
    assert.fail(`orphans after SIGTERM:\n${left.map((p) => `${p.pid} ${p.cmd}`).join('\n')}`);
  });
});

// A stop that comes while sandboxes are still starting (spares, creates) must end those too: their
// pasta and disk once outlived the server when the start recorded them after the stop had run.
test('SIGTERM while sandboxes start: no process, mount or folder of theirs is left', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-stop-starting-'));
  const instances = join(dataDir, 'instances');
  const seen = new Map(); // id -> the pids its file named (sandbox, pasta)
  try {
    const server = await startServer({ dataDir, env: { HANGAR_WARM_SPARES: '2' } });
    const creating = [
      server.client.browsers.create({ headless: true }).catch(() => null),
      server.client.browsers.create({ headless: false }).catch(() => null),
    ];
    const starting = () => {
      for (const f of readdirSync(instances).filter((f) => f.endsWith('.pids'))) {
        const pids = readFileSync(join(instances, f), 'utf8').trim().split(' ').map(Number);
        seen.set(f.slice(0, -5), pids.slice(0, 2));
      }
      // a sandbox whose network (pasta) is up, the point where the old start re-recorded it
      return [...seen.values()].some(([, pasta]) => pasta > 0);
    };
    await waitFor(starting, { timeoutMs: 30_000, intervalMs: 5, what: 'a sandbox with its network, starting' });
    const stopped = await server.stop();
    assert.equal(stopped.code, 0, JSON.stringify(stopped));
    await Promise.all(creating);
    const alive = () => [...seen.values()].flat().filter((pid) => pid > 0 && existsSync(`/proc/${pid}`));
    await waitFor(() => alive().length === 0, { timeoutMs: 5_000, what: 'every sandbox and pasta to end' }).catch(() => {
      assert.fail(`left running: ${alive().map((p) => `${p} ${readFileSync(`/proc/${p}/cmdline`, 'utf8')}`).join(', ')}`);
    });
    const mounts = readFileSync('/proc/self/mounts', 'utf8').split('\n').filter((l) => l.includes(dataDir));
    assert.deepEqual(mounts, []);
    assert.deepEqual(existsSync(instances) ? readdirSync(instances) : [], []);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('after a crash the next start adopts the instance that still answers; a stop then ends it', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-crash-'));
  const apiKey = 'sk_test_crash_' + Date.now();
  let leftovers = [];
  try {
    const first = await startServer({ dataDir, apiKey });
    const b = await first.client.browsers.create({ headless: true });
    const procs = descendants(first.pid);
    assert.ok(procs.some(isChromium));
    await first.kill();
    // Instances are not tied to their server (their cgroups track them): the crash leaves them up.
    assert.ok(stillAlive(procs).some(isChromium), 'Chromium outlives the crashed server');

    const second = await startServer({ dataDir, apiKey });
    try {
      assert.match(second.output(), new RegExp(`adopted instance ${b.session_id}`));
      const kept = await second.client.browsers.retrieve(b.session_id);
      assert.equal(kept.deleted_at ?? null, null, 'the session goes on');
      const r = await second.client.browsers.process.exec(b.session_id, { command: 'echo', args: ['adopted'] });
      assert.equal(Buffer.from(r.stdout_b64, 'base64').toString(), 'adopted\n');
    } finally {
      await second.stop();
    }
    await waitFor(() => stillAlive(procs).length === 0, { timeoutMs: 10_000, what: 'the adopted instance to end with the stop' })
      .catch((err) => {
        leftovers = stillAlive(procs);
        throw new Error(`${err.message}:\n${leftovers.map((p) => `${p.pid} ${p.cmd}`).join('\n')}`);
      });
  } finally {
    for (const p of leftovers) try { process.kill(p.pid, 'SIGKILL'); } catch {}
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('kill -9 in the middle of creates, a profile save and a recording: no orphan, no mount, the profile whole', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-crash-'));
  const apiKey = 'sk_test_crash_' + Date.now();
  let leftovers = [];
  try {
    const first = await startServer({ dataDir, apiKey });
    const profile = await first.client.profiles.create({ name: 'crash-save' });
    const saving = await first.client.browsers.create({ headless: true, profile: { name: 'crash-save', save_changes: true } });
    await first.client.browsers.deleteByID(saving.session_id); // the version a crash must not damage
    const again = await first.client.browsers.create({ headless: true, profile: { name: 'crash-save', save_changes: true } });
    const filmed = await first.client.browsers.create({ headless: false });
    const replay = await first.client.browsers.replays.start(filmed.session_id, { framerate: 5 });

    // Two creates under way and a save (the delete of a session that saves its profile), then a crash.
    const pidFiles = () => readdirSync(join(dataDir, 'instances')).filter((f) => f.endsWith('.pids')).length;
    const before = pidFiles();
    const inFlight = [
      first.client.browsers.create({ headless: true }).catch(() => null),
      first.client.browsers.create({ headless: false }).catch(() => null),
      first.client.browsers.deleteByID(again.session_id).catch(() => null),
    ];
    // The crash comes once a new sandbox is starting (its pids written, not ready yet), not after
    // a fixed pause, which on a busy machine could fall before any create reached the runtime.
    await waitFor(() => pidFiles() > before, { timeoutMs: 10_000, intervalMs: 10, what: 'a create starting its sandbox' });
    const procs = descendants(first.pid);
    assert.ok(procs.length > 0);
    // An instance's processes: its sandbox, what runs under it, and its pasta.
    const treeOf = (id) => {
      const [pid, pasta] = readFileSync(join(dataDir, 'instances', `${id}.pids`), 'utf8').split(' ').map(Number);
      return new Set([pid, pasta, ...descendants(pid).map((p) => p.pid)]);
    };
    await first.kill();
    await Promise.all(inFlight);
    // Sandboxes still starting stop by themselves (nobody hears their ready line); their folders
    // stay until the next start, with the pasta of one whose network was already up (it does not
    // quit by itself: its cgroup finds it). The ready ones (the recording, the one saving its
    // profile) run on.
    await doctorShows(dataDir, [/instance \S+ (left its folder|runs without a server \(\d+ process\(es\) left in its cgroup, no sandbox\))/,
      new RegExp(`instance ${filmed.session_id} waits for the next start to adopt it`)]);

    const second = await startServer({ dataDir, apiKey });
    try {
      // The sessions still active were adopted: the recording one, and the one being deleted
      // when the delete had not taken effect yet (it then goes on, as its client saw no answer).
      const kept = [];
      for await (const b of second.client.browsers.list()) kept.push(b.session_id);
      assert.ok(kept.includes(filmed.session_id), `the recorded session goes on: ${kept}`);
      const keptPids = new Set(kept.flatMap((id) => [...treeOf(id)]));
      const others = procs.filter((p) => !keptPids.has(p.pid));
      // Everything but the adopted instances ends: half-started sandboxes, and the one whose
      // session was being deleted (adopted, claimed by no session, stopped).
      await waitFor(() => stillAlive(others).length === 0, { timeoutMs: 30_000, what: 'leftover processes to end' })
        .catch((err) => {
          leftovers = stillAlive(others);
          throw new Error(`${err.message}:\n${leftovers.map((p) => `${p.pid} ${p.cmd}`).join('\n')}`);
        });
      const isKept = (text) => kept.some((id) => text.includes(id));
      assert.deepEqual(readdirSync(join(dataDir, 'instances')).filter((f) => !isKept(f)), [],
        'every other instance folder, pid file and disk image removed');
      const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter((l) => l.includes(dataDir));
      assert.ok(mounts.every(isKept), `no other instance file system stays mounted:\n${mounts.join('\n')}`);
      // Nor a pasta of theirs: one started after the process list above was taken is in no list
      // but its instance's cgroup. (The second server's prepared networks are its own.)
      await waitFor(() => instancePastasOf(dataDir).every((p) => keptPids.has(p.pid)), { timeoutMs: 10_000, what: 'no pasta of another instance' })
        .catch((err) => assert.fail(`${err.message}:\n${instancePastasOf(dataDir).map((p) => `${p.pid} ${p.cmd}`).join('\n')}`));
      await doctorShows(dataDir, kept.map((id) => new RegExp(`instance ${id} adopted by server ${second.pid}`)),
        { absent: /runs without a server|left its folder|waits for the next start/ });

      // The profile is the old or the new version, never half of one.
      const tar = Buffer.from(await (await second.client.profiles.download(profile.id, { format: 'tar' })).arrayBuffer());
      const listing = execFileSync('tar', ['-t'], { input: tar, encoding: 'utf8' });
      assert.match(listing, /Default\//, 'a whole tar with the profile');
      // And it still starts a browser.
      const s = await second.client.browsers.create({ headless: true, profile: { name: 'crash-save' } });
      await second.client.browsers.deleteByID(s.session_id);

      // The recording went on through the crash with its adopted instance: still recording, and
      // a stop now gives the whole video, from before the crash to after it.
      const [going] = await second.client.browsers.replays.list(filmed.session_id);
      assert.equal(going.replay_id, replay.replay_id);
      assert.equal(going.finished_at ?? null, null, 'still recording after the restart');
      await second.client.browsers.replays.stop(replay.replay_id, { id: filmed.session_id });
      const [done] = await second.client.browsers.replays.list(filmed.session_id);
      assert.ok(done.finished_at, 'finished_at set by the stop');
      const video = Buffer.from(await (await second.client.browsers.replays.download(replay.replay_id, { id: filmed.session_id })).arrayBuffer());
      assert.equal(video.subarray(4, 8).toString(), 'ftyp', 'an MP4 file');
    } finally {
      await second.stop();
    }
    await waitFor(() => stillAlive(procs).length === 0, { timeoutMs: 10_000, what: 'the adopted instance to end with the stop' })
      .catch((err) => {
        leftovers = stillAlive(procs);
        throw new Error(`${err.message}:\n${leftovers.map((p) => `${p.pid} ${p.cmd}`).join('\n')}`);
      });
  } finally {
    for (const p of leftovers) try { process.kill(p.pid, 'SIGKILL'); } catch {}
    for (const p of pastasOf(dataDir)) try { process.kill(p.pid, 'SIGKILL'); } catch {}
    // After a failure an instance may still be mounted: unmounted lazily so the failure shows.
    for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
      const point = line.split(' ')[4];
      if (point?.startsWith(join(dataDir, 'instances'))) try { execFileSync('umount', ['-l', point]); } catch {}
    }
    rmSync(dataDir, { recursive: true, force: true });
  }
});

// The cgroup folders (one per hierarchy) of the instance whose sandbox is `pid`: each ends in its id.
const instanceCgroups = (pid, id) => {
  const dirs = [];
  for (const line of readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')) {
    const [, controllers, path] = line.split(':');
    if (!path?.endsWith(`/${id}`)) continue;
    const candidates = controllers
      ? [join('/sys/fs/cgroup', controllers.replace(/^name=/, ''), path)]
      : [join('/sys/fs/cgroup', path), join('/sys/fs/cgroup/unified', path)];
    dirs.push(...candidates.filter((d) => existsSync(d)));
  }
  return dirs;
};

// A DELETE answers before its session's teardown ends (issue 42). A crash in the middle of five
// teardowns must still leave nothing of them once the next server has started.
test('kill -9 during five teardowns: after the next start no instance, mount, cgroup or pasta is left', slow, async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-teardowns-'));
  const apiKey = 'sk_test_teardowns_' + Date.now();
  let leftovers = [];
  try {
    const first = await startServer({ dataDir, apiKey });
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push((await first.client.browsers.create({ headless: true })).session_id);
    const sandboxes = ids.map((id) => Number(readFileSync(join(dataDir, 'instances', `${id}.pids`), 'utf8').split(' ')[0]));
    const cgroups = sandboxes.flatMap((pid, i) => instanceCgroups(pid, ids[i]));
    assert.ok(cgroups.length >= ids.length, `each instance has its cgroups: ${cgroups}`);
    const procs = descendants(first.pid);
    assert.ok(instancePastasOf(dataDir).length >= ids.length, 'each instance has its pasta');
    // The networks prepared for the next cold starts: a crash leaves them to the next start.
    await waitFor(() => preparedNetworksOf(dataDir).length === 2, { timeoutMs: 15_000, what: 'two prepared networks' });
    const prepared = preparedNetworksOf(dataDir);

    // Five deletes answered, then the crash while their teardowns run.
    await Promise.all(ids.map((id) => first.client.browsers.deleteByID(id)));
    await first.kill();

    const second = await startServer({ dataDir, apiKey });
    try {
      for (const id of ids) assert.equal(await sessionExists(second.client, id), false, `${id} stays deleted`);
      await waitFor(() => stillAlive(procs).length === 0, { timeoutMs: 30_000, what: 'every process of the five to end' })
        .catch((err) => {
          leftovers = stillAlive(procs);
          throw new Error(`${err.message}:\n${leftovers.map((p) => `${p.pid} ${p.cmd}`).join('\n')}`);
        });
      const files = readdirSync(join(dataDir, 'instances')).filter((f) => ids.some((id) => f.includes(id)));
      assert.deepEqual(files, [], 'no folder, pid file or disk image of theirs');
      const mounts = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').filter((l) => l.includes(dataDir));
      assert.deepEqual(mounts, [], 'no instance file system mounted');
      assert.deepEqual(instancePastasOf(dataDir).map((p) => p.cmd), [], 'no pasta');
      assert.deepEqual(stillAlive(prepared), [], "the crashed server's prepared networks ended by the next start");
      await waitFor(() => cgroups.every((d) => !existsSync(d)), { timeoutMs: 10_000, what: 'their cgroups removed' })
        .catch((err) => assert.fail(`${err.message}: ${cgroups.filter((d) => existsSync(d))}`));
      await waitFor(() => preparedNetworksOf(dataDir).length > 0, { timeoutMs: 15_000, what: "the next start's prepared networks" });
    } finally {
      await second.stop();
    }
    assert.deepEqual(pastasOf(dataDir).map((p) => p.cmd), [], 'a clean stop ends every pasta, prepared ones too');
  } finally {
    for (const p of leftovers) try { process.kill(p.pid, 'SIGKILL'); } catch {}
    for (const p of pastasOf(dataDir)) try { process.kill(p.pid, 'SIGKILL'); } catch {}
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('hangar doctor reports a sandbox that runs without a server', async () => {
  // A stand-in for a sandbox left running without a server whose agent does not answer (a live
  // one waits for adoption instead, restart.test.mjs): a process named bwrap, recorded in a pid
  // file the way the runtime records its sandboxes.
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-orphan-'));
  const { spawn } = await import('node:child_process');
  const orphan = spawn('bash', ['-c', 'exec -a bwrap sleep 60'], { stdio: 'ignore' });
  try {
    const { mkdirSync, writeFileSync } = await import('node:fs');
    mkdirSync(join(dataDir, 'instances', 'left-behind'), { recursive: true });
    await waitFor(() => readFileSync(`/proc/${orphan.pid}/cmdline`, 'utf8').startsWith('bwrap'), { what: 'exec' });
    writeFileSync(join(dataDir, 'instances', 'left-behind.pids'), `${orphan.pid} 0`);
    const report = doctor(dataDir);
    assert.equal(report.status, 1, report.out);
    assert.match(report.out, new RegExp(`instance left-behind runs without a server \\(sandbox pid ${orphan.pid}\\)`), report.out);
  } finally {
    orphan.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
});
