// Tenant attacks through an app build (issue 40), with project-scoped keys only: what an archive
// carries must never be built or run outside a sandbox. Each attack leaves a marker file in a
// world-writable folder of the host if any of its code runs there (as root or as anyone else),
// and tries to list the data dir and another project's deployment into it:
//   1. pip: requirements.txt names a local folder with its own PEP 517 backend;
//   2. npm: the archive's .npmrc points `git` at a script of the archive, plus a git dependency;
//   3. npm lifecycle scripts (root and of a file: dependency);
//   4. a build that reaches for a non-registry address (a loopback listener of this test, on a
//      port sandboxes may otherwise reach): npm (tarball URL, the archive's registry) and pip
//      (--index-url);
//   5. a build that outlasts build_timeout_seconds ends `failed` and leaves nothing running.
// Every build ends `failed` (or its upload is a 400) with a reason that names no host path.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import Kernel, { BadRequestError, NotFoundError, toFile } from '@onkernel/sdk';

import { listenAllowed, rejectsWith, startServer, waitFor } from './lib/server.mjs';

const BUILD_TIMEOUT_SECONDS = 25;
const scratch = mkdtempSync(join(tmpdir(), 'hangar-attacks-build-'));
// Any process of the host could write here: a marker proves the attack's code ran on the host.
const markers = mkdtempSync(join(tmpdir(), 'hangar-attack-markers-'));
chmodSync(markers, 0o777);

let server;
let tenantA;
let tenantB;
let secretDeployment; // project B's, whose files the attacks try to read
let listener;
let listenerPort;
const hits = [];

function zipFiles(files, executable = []) {
  const dir = mkdtempSync(join(scratch, 'src-'));
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), content);
    if (executable.includes(name)) chmodSync(join(dir, name), 0o755);
  }
  const out = join(scratch, `${Math.random().toString(36).slice(2)}.zip`);
  execFileSync('zip', ['-qry', out, '.'], { cwd: dir });
  return readFileSync(out);
}

const marker = (name) => join(markers, name);

// A shell script that records who ran it and what it saw of the data dir.
const evilSh = (name) =>
  `#!/bin/sh\n{ id; ls -la ${JSON.stringify(server.dataDir)}; ls -laR ${JSON.stringify(join(server.dataDir, 'blobs'))}; } > ${JSON.stringify(marker(name))} 2>&1\nexit 1\n`;

// Deploys with tenant A's key; resolves to {rejected} (a 400 at upload) or {final, events}.
async function attempt(files, entrypoint, executable = []) {
  let created;
  try {
    created = await tenantA.deployments.create({
      file: await toFile(zipFiles(files, executable), 'app.zip'),
      entrypoint_rel_path: entrypoint,
    });
  } catch (err) {
    if (err instanceof BadRequestError) return { rejected: err };
    throw err;
  }
  const events = [];
  for await (const e of await tenantA.deployments.follow(created.id)) events.push(e);
  return { final: await tenantA.deployments.retrieve(created.id), events };
}

function assertRefused(result, what) {
  if (result.rejected) {
    assert.doesNotMatch(result.rejected.message, new RegExp(server.dataDir), 'no host path in the answer');
    return;
  }
  assert.equal(result.final.status, 'failed', `${what}: ${JSON.stringify(result.events.slice(-4))}`);
  assert.ok(result.final.status_reason, 'a reason');
  assert.ok(!result.final.status_reason.includes(server.dataDir), `no host path: ${result.final.status_reason}`);
  assert.ok(!/secrets\.key|hangar\.db/.test(result.final.status_reason), result.final.status_reason);
}

function assertNoMarker(name) {
  const path = marker(name);
  assert.ok(!existsSync(path), `${name} ran on the host:\n${existsSync(path) ? readFileSync(path, 'utf8') : ''}`);
}

// No sandbox of a build is left once its deployment ended.
async function noInstancesLeft() {
  const dir = join(server.dataDir, 'instances');
  await waitFor(() => !existsSync(dir) || readdirSync(dir).length === 0, {
    timeoutMs: 20_000,
    what: 'no instance left after the builds',
  });
}

before(async () => {
  server = await startServer({ env: { HANGAR_APPS_BUILD_TIMEOUT_SECONDS: String(BUILD_TIMEOUT_SECONDS) } });
  const admin = server.newClient({ maxRetries: 0 });
  const scoped = async (name) => {
    const project = await admin.projects.create({ name });
    const key = await admin.apiKeys.create({ name: `${name} key`, project_id: project.id });
    return new Kernel({ apiKey: key.key, baseURL: server.baseURL, maxRetries: 0, timeout: 300_000 });
  };
  tenantA = await scoped('tenant-a');
  tenantB = await scoped('tenant-b');
  listener = http.createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    res.writeHead(404).end();
  });
  listenerPort = await listenAllowed(listener);

  // Project B's deployment: a file the attacks try to read (its build fails: no SDK to register
  // an app; the unpacked files stay).
  const created = await tenantB.deployments.create({
    file: await toFile(
      zipFiles({ 'index.js': 'export {};\n', 'package.json': '{"name":"b","version":"1.0.0"}', 'b-secret.txt': 'B' }),
      'b.zip',
    ),
    entrypoint_rel_path: 'index.js',
  });
  for await (const _ of await tenantB.deployments.follow(created.id));
  secretDeployment = created.id;
  await rejectsWith(tenantA.deployments.retrieve(secretDeployment), NotFoundError);
});

after(async () => {
  await new Promise((resolve) => (listener ? listener.close(resolve) : resolve()));
  await server?.stop();
  rmSync(scratch, { recursive: true, force: true });
  rmSync(markers, { recursive: true, force: true });
});

test('pip: a local folder with its own PEP 517 backend is not built on the host', async () => {
  const backend = `import os
def _record():
    seen = []
    for d in (${JSON.stringify(server.dataDir)}, ${JSON.stringify(join(server.dataDir, 'blobs', 'apps', 'deployments'))}):
        try:
            seen.append(repr(os.listdir(d)))
        except Exception as e:
            seen.append(repr(e))
    try:
        with open(${JSON.stringify(marker('pip'))}, "w") as f:
            f.write("uid=%d\\n%s\\n" % (os.getuid(), "\\n".join(seen)))
    except Exception:
        pass
_record()
def get_requires_for_build_wheel(config_settings=None):
    return []
def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _record()
    raise RuntimeError("no")
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _record()
    raise RuntimeError("no")
`;
  const result = await attempt(
    {
      'main.py': 'import kernel\napp = kernel.App("attack-pip")\n',
      'requirements.txt': './evil\n',
      'evil/pyproject.toml':
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n[project]\nname = "evil"\nversion = "0.1"\n',
      'evil/backend.py': backend,
    },
    'main.py',
  );
  assertNoMarker('pip');
  assertRefused(result, 'pip local folder');
});

test('npm: the archive .npmrc (git=<script of the archive>) with a git dependency runs nothing on the host', async () => {
  const result = await attempt(
    {
      'index.js': 'export {};\n',
      'package.json': JSON.stringify({
        name: 'attack-npmrc',
        version: '1.0.0',
        dependencies: { evil: 'git+https://example.invalid/evil.git' },
      }),
      '.npmrc': 'git=/proc/self/cwd/evil.sh\n',
      'evil.sh': evilSh('npmrc'),
    },
    'index.js',
    ['evil.sh'],
  );
  assertNoMarker('npmrc');
  assertRefused(result, 'npm .npmrc git');
});

test('npm: lifecycle scripts (the app and a file: dependency) do not run on the host', async () => {
  const run = 'sh ./evil.sh';
  const result = await attempt(
    {
      'index.js': 'export {};\n',
      'package.json': JSON.stringify({
        name: 'attack-scripts',
        version: '1.0.0',
        scripts: { preinstall: run, install: run, postinstall: run, prepare: run },
        dependencies: { dep: 'file:./dep', missing: '0.0.0-does-not-exist' },
      }),
      'evil.sh': evilSh('scripts'),
      'dep/package.json': JSON.stringify({ name: 'dep', version: '1.0.0', scripts: { preinstall: run, postinstall: run } }),
      'dep/evil.sh': evilSh('dep-scripts'),
    },
    'index.js',
    ['evil.sh', 'dep/evil.sh'],
  );
  assertNoMarker('scripts');
  assertNoMarker('dep-scripts');
  assertRefused(result, 'npm lifecycle scripts');
});

test('a build reaches no address but the package registries', async () => {
  const base = `http://127.0.0.1:${listenerPort}`;
  const npm = await attempt(
    {
      'index.js': 'export {};\n',
      'package.json': JSON.stringify({ name: 'attack-net', version: '1.0.0', dependencies: { x: `${base}/x.tgz` } }),
      '.npmrc': `registry=${base}/npm/\n`,
    },
    'index.js',
  );
  assert.deepEqual(hits, [], 'npm reached the test listener');
  assertRefused(npm, 'npm to a loopback address');
  if (!npm.rejected) {
    const refused = npm.events.some((e) => e.event === 'log' && /127\.0\.0\.1.*refused/.test(e.message));
    assert.ok(refused, 'the build log says what was refused');
  }
  const pip = await attempt(
    {
      'main.py': 'import kernel\napp = kernel.App("attack-net")\n',
      'requirements.txt': `--index-url ${base}/simple/\nsomething-not-on-pypi==1.0\n`,
    },
    'main.py',
  );
  assert.deepEqual(hits, [], 'pip reached the test listener');
  assertRefused(pip, 'pip to a loopback address');
});

test('a build past build_timeout_seconds ends failed and leaves nothing running', async () => {
  const result = await attempt(
    {
      'main.py': 'import kernel\napp = kernel.App("attack-slow")\n',
      'requirements.txt': './slow\n',
      'slow/pyproject.toml':
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n[project]\nname = "slow"\nversion = "0.1"\n',
      'slow/backend.py': 'import time\nwhile True:\n    time.sleep(1)\n',
    },
    'main.py',
  );
  assertRefused(result, 'a build that never ends');
  if (!result.rejected) assert.match(result.final.status_reason, /longer than|timed out/);
  await noInstancesLeft();
  assert.equal((await tenantB.deployments.retrieve(secretDeployment)).status, 'failed');
});
