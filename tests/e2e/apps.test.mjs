// Apps, deployments and invocations through the official SDK: the TypeScript fixture app
// (tests/fixtures/apps/ts-app) is zipped, deployed (npm ci from its lockfile on the host, the
// registry read in a sandbox), and its actions run, each invocation in its own sandbox whose
// `new Kernel()` reaches this server: one creates a browser with invocation_id, opens a page the
// test serves and returns its title. Sync and async invocations, events with replay, cancel
// (its browser goes), timeout, thrown errors, env vars (redacted in responses), the bad-input
// rules, the project's concurrency cap (429), a redeploy superseding the previous deployment.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';

import { BadRequestError, NotFoundError, RateLimitError, toFile } from '@onkernel/sdk';

import { TEST_PAGE_TITLE, rejectsWith, startServer, startTestPages, waitFor } from './lib/server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const fixture = join(here, '../fixtures/apps/ts-app');
const pyFixture = join(here, '../fixtures/apps/py-app');
const scratch = mkdtempSync(join(tmpdir(), 'hangar-apps-test-'));

let server;
let client;
let pages;
let deployment;

function zipDir(dir) {
  const out = join(scratch, `${Math.random().toString(36).slice(2)}.zip`);
  // -y stores symbolic links as links, as the Kernel CLI's zip does
  execFileSync('zip', ['-qry', out, '.', '-x', 'node_modules/*'], { cwd: dir });
  return readFileSync(out);
}

function zipFiles(files) {
  const dir = mkdtempSync(join(scratch, 'src-'));
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), content);
  }
  return zipDir(dir);
}

async function collect(stream) {
  const events = [];
  for await (const e of stream) events.push(e);
  return events;
}

async function deploy(zip, params = {}) {
  const created = await client.deployments.create({
    file: await toFile(zip, 'app.zip'),
    entrypoint_rel_path: 'index.ts',
    ...params,
  });
  const events = await collect(await client.deployments.follow(created.id));
  return { created, events, final: await client.deployments.retrieve(created.id) };
}

before(async () => {
  server = await startServer();
  client = server.client;
  pages = await startTestPages();
});

after(async () => {
  await pages?.close();
  await server?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

test('a TypeScript app deploys: queued → in_progress → running, build logs, the registry read', async () => {
  const zip = zipDir(fixture);
  const { created, events, final } = await deploy(zip, { env_vars: { GREETING: 'hello' } });
  assert.equal(created.status, 'queued');
  assert.equal(created.region, 'aws.us-east-1a');
  assert.equal(created.source_type, 'file');
  assert.equal(created.entrypoint_rel_path, 'index.ts');
  assert.equal(created.source_checksum, createHash('sha256').update(zip).digest('hex'));
  assert.deepEqual(created.env_vars, { GREETING: '' }, 'values are redacted for API-key callers');

  const states = events.filter((e) => e.event === 'deployment_state').map((e) => e.deployment.status);
  assert.deepEqual(states, ['queued', 'in_progress', 'running'], JSON.stringify(events.slice(-5)));
  assert.ok(events.some((e) => e.event === 'log' && /npm ci/.test(e.message)), 'npm output is streamed');
  const summary = events.find((e) => e.event === 'app_version_summary');
  assert.equal(summary.app_name, 'fixture-ts');
  assert.equal(summary.version, 'latest');
  assert.deepEqual(summary.actions.map((a) => a.name).sort(), ['boom', 'env', 'hold', 'title']);
  assert.equal(final.status, 'running');
  deployment = final;

  // a late follower gets the whole history and the stream ends
  const replay = await collect(await client.deployments.follow(created.id));
  assert.equal(replay.at(-1).deployment.status, 'running');

  const apps = [];
  for await (const a of client.apps.list({ app_name: 'fixture-ts' })) apps.push(a);
  assert.equal(apps.length, 1);
  assert.equal(apps[0].deployment, created.id);
  assert.equal(apps[0].version, 'latest');
  assert.deepEqual(apps[0].env_vars, { GREETING: '' });
  const listed = [];
  for await (const d of client.deployments.list({ app_name: 'fixture-ts' })) listed.push(d.id);
  assert.deepEqual(listed, [created.id]);
});

test('sync invocations: output JSON-encoded, env vars and the deployment key reach the action', async () => {
  const inv = await client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest' });
  assert.equal(inv.status, 'succeeded', inv.status_reason);
  assert.deepEqual(JSON.parse(inv.output), { greeting: 'hello', has_key: true });
  const got = await client.invocations.retrieve(inv.id);
  assert.equal(got.app_name, 'fixture-ts');
  assert.equal(got.action_name, 'env');
  assert.equal(got.status, 'succeeded');
  assert.match(got.started_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$/);
  assert.ok(got.finished_at);
});

test('an action creates a browser in its invocation, opens a local page and returns its title', async () => {
  const inv = await client.invocations.create({
    app_name: 'fixture-ts',
    action_name: 'title',
    version: 'latest',
    payload: JSON.stringify({ url: pages.url }),
  });
  assert.equal(inv.status, 'succeeded', inv.status_reason);
  const out = JSON.parse(inv.output);
  assert.equal(out.title, TEST_PAGE_TITLE);
  // the browser ended with the invocation
  assert.deepEqual((await client.invocations.listBrowsers(inv.id)).browsers, []);
  const b = await client.browsers.retrieve(out.session_id, { include_deleted: true });
  assert.ok(b.deleted_at, 'the invocation’s browser was deleted when it ended');
  // its logs, replayed to a late follower, end with the terminal state
  const events = await collect(await client.invocations.follow(inv.id));
  assert.ok(events.some((e) => e.event === 'log' && e.message.includes(out.session_id)), JSON.stringify(events));
  assert.equal(events.at(-1).event, 'invocation_state');
  assert.equal(events.at(-1).invocation.status, 'succeeded');
});

test('async invocation: 202 queued, browsers listed while it runs, cancel kills it and deletes them', async () => {
  const inv = await client.invocations.create({
    app_name: 'fixture-ts',
    action_name: 'hold',
    version: 'latest',
    async: true,
    payload: JSON.stringify({ seconds: 120 }),
  });
  assert.equal(inv.status, 'queued');
  const following = collect(await client.invocations.follow(inv.id));
  const browsers = await waitFor(async () => {
    const list = (await client.invocations.listBrowsers(inv.id)).browsers;
    return list.length === 1 ? list : null;
  }, { timeoutMs: 60_000, what: 'the invocation’s browser' });
  assert.ok(browsers[0].cdp_ws_url);
  const listed = [];
  for await (const i of client.invocations.list({ status: 'running', app_name: 'fixture-ts' })) listed.push(i.id);
  assert.ok(listed.includes(inv.id));

  // the project's cap on concurrent invocations: over it, 429 at once (not retried by the SDK)
  const projects = [];
  for await (const p of client.projects.list()) projects.push(p);
  const project = projects[0].id;
  await client.projects.limits.update(project, { max_concurrent_invocations: 1 });
  try {
    const over = await rejectsWith(
      client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest' }),
      RateLimitError,
      'rate_limited',
    );
    assert.match(over.message, /1 invocations already/);
  } finally {
    await client.projects.limits.update(project, { max_concurrent_invocations: null });
  }

  const cancelled = await client.invocations.update(inv.id, { status: 'failed' });
  assert.equal(cancelled.status, 'failed');
  const events = await following;
  assert.equal(events.at(-1).invocation.status, 'failed');
  assert.deepEqual((await client.invocations.listBrowsers(inv.id)).browsers, []);
  const b = await client.browsers.retrieve(browsers[0].session_id, { include_deleted: true });
  assert.ok(b.deleted_at);
});

test('a thrown error fails the invocation with its message; async_timeout_seconds stops it', async () => {
  const boom = await client.invocations.create({
    app_name: 'fixture-ts',
    action_name: 'boom',
    version: 'latest',
    payload: JSON.stringify({ message: 'it broke' }),
  });
  assert.equal(boom.status, 'failed');
  assert.match(boom.status_reason, /it broke/);

  const slow = await client.invocations.create({
    app_name: 'fixture-ts',
    action_name: 'hold',
    version: 'latest',
    async: true,
    async_timeout_seconds: 10,
    payload: JSON.stringify({ seconds: 120 }),
  });
  const events = await collect(await client.invocations.follow(slow.id));
  const last = events.at(-1).invocation;
  assert.equal(last.status, 'failed');
  assert.match(last.status_reason, /timed out/);
});

test('a Python app: a venv from requirements.txt (wheels only), the kernel package\'s registry, a browser through the Python SDK, a raised error', async () => {
  const { events, final } = await deploy(zipDir(pyFixture), { entrypoint_rel_path: 'main.py', env_vars: { GREETING: 'hallo' } });
  const logs = events.filter((e) => e.event === 'log').map((e) => e.message);
  assert.equal(final.status, 'running', `${final.status_reason}\n${logs.slice(-15).join('\n')}`);
  assert.ok(logs.some((l) => /pip install .*--only-binary=:all:/.test(l)), 'pip output is streamed');
  const summary = events.find((e) => e.event === 'app_version_summary');
  assert.equal(summary.app_name, 'fixture-py');
  assert.deepEqual(summary.actions.map((a) => a.name).sort(), ['boom', 'env', 'title']);

  const env = await client.invocations.create({ app_name: 'fixture-py', action_name: 'env', version: 'latest' });
  assert.equal(env.status, 'succeeded', env.status_reason);
  assert.deepEqual(JSON.parse(env.output), { greeting: 'hallo', has_key: true });

  const title = await client.invocations.create({
    app_name: 'fixture-py', action_name: 'title', version: 'latest', payload: JSON.stringify({ url: pages.url }),
  });
  assert.equal(title.status, 'succeeded', title.status_reason);
  const out = JSON.parse(title.output);
  assert.equal(out.title, TEST_PAGE_TITLE);
  assert.ok((await client.browsers.retrieve(out.session_id, { include_deleted: true })).deleted_at, 'its browser ended with it');
  const log = await collect(await client.invocations.follow(title.id));
  assert.ok(log.some((e) => e.event === 'log' && e.message.includes(`browser ${out.session_id}`)), 'print() reaches the log');

  const boom = await client.invocations.create({ app_name: 'fixture-py', action_name: 'boom', version: 'latest', payload: JSON.stringify({ message: 'kaput' }) });
  assert.equal(boom.status, 'failed');
  assert.equal(boom.status_reason, 'kaput');

  // pyproject.toml's [project] dependencies serve as well; the project itself is never built
  const viaPyproject = await deploy(
    zipFiles({
      'app/main.py': 'import kernel\napp = kernel.App("fixture-pyproject")\n@app.action("hi")\nasync def hi(ctx):\n    return "hi"\n',
      'pyproject.toml': '[project]\nname = "fixture"\nversion = "0.1.0"\ndependencies = ["kernel==0.131.0"]\n',
    }),
    { entrypoint_rel_path: 'app/main.py' },
  );
  assert.equal(viaPyproject.final.status, 'running', viaPyproject.final.status_reason);
  const hi = await client.invocations.create({ app_name: 'fixture-pyproject', action_name: 'hi', version: 'latest' });
  assert.equal(hi.status, 'succeeded', hi.status_reason);
  assert.equal(JSON.parse(hi.output), 'hi');
});

// The lists' search (`query`), paging (`offset`) and filters, and `since` on the lists and the
// event follows, over the three apps the tests above deployed and invoked.
test('lists search, filter and page; since bounds the invocation list and a follow\'s log lines', async () => {
  const names = async (list) => {
    const out = [];
    for await (const x of list) out.push(x);
    return out;
  };
  const apps = await names(client.apps.list());
  const deployments = await names(client.deployments.list());
  assert.ok(deployments.length >= 3, JSON.stringify(deployments));
  // deployments carry no app name; the app version names its deployment
  const py = { id: apps.find((a) => a.app_name === 'fixture-pyproject').deployment };
  assert.deepEqual((await names(client.deployments.list({ query: 'pyproj' }))).map((d) => d.id), [py.id]);
  assert.deepEqual((await names(client.deployments.list({ query: py.id }))).map((d) => d.id), [py.id]);
  const secondDeployment = await client.deployments.list({ limit: 1, offset: 1 });
  assert.deepEqual(secondDeployment.getPaginatedItems().map((d) => d.id), [deployments[1].id]);

  assert.deepEqual((await names(client.apps.list({ query: 'fixture-py' }))).map((a) => a.app_name).sort(),
    ['fixture-py', 'fixture-pyproject']);
  const secondApp = await client.apps.list({ limit: 1, offset: 1 });
  assert.deepEqual(secondApp.getPaginatedItems().map((a) => a.id), [apps[1].id]);

  const invocations = await names(client.invocations.list());
  const hi = invocations.find((i) => i.app_name === 'fixture-pyproject');
  assert.deepEqual((await names(client.invocations.list({ deployment_id: py.id }))).map((i) => i.id), [hi.id]);
  // search by id, by app name, by action name
  assert.deepEqual((await names(client.invocations.list({ query: hi.id }))).map((i) => i.id), [hi.id]);
  assert.deepEqual((await names(client.invocations.list({ query: 'pyproject' }))).map((i) => i.id), [hi.id]);
  const boom = await names(client.invocations.list({ query: 'boom' }));
  assert.ok(boom.length >= 1 && boom.every((i) => i.action_name === 'boom'), JSON.stringify(boom));
  const secondInvocation = await client.invocations.list({ limit: 1, offset: 1 });
  assert.deepEqual(secondInvocation.getPaginatedItems().map((i) => i.id), [invocations[1].id]);

  // `since`: a new invocation is the only one started in the last moment
  const cut = new Date().toISOString();
  await new Promise((r) => setTimeout(r, 20));
  const fresh = await client.invocations.create({ app_name: 'fixture-pyproject', action_name: 'hi', version: 'latest' });
  assert.deepEqual((await names(client.invocations.list({ since: cut }))).map((i) => i.id), [fresh.id]);
  assert.ok((await names(client.invocations.list({ since: '1h' }))).length >= invocations.length);
  await rejectsWith(client.invocations.list({ since: 'yesterday-ish' }), BadRequestError);

  // a follow from `since` replays the state events but leaves out log lines older than it
  const allDeployEvents = await collect(await client.deployments.follow(py.id));
  assert.ok(allDeployEvents.some((e) => e.event === 'log'));
  const lateDeploy = await collect(await client.deployments.follow(py.id, { since: cut }));
  assert.deepEqual(lateDeploy.filter((e) => e.event === 'log'), []);
  assert.equal(lateDeploy.at(-1).deployment.status, 'running');
  const boomInvocation = boom[0];
  const allInvocationEvents = await collect(await client.invocations.follow(boomInvocation.id));
  assert.ok(allInvocationEvents.some((e) => e.event === 'log'), JSON.stringify(allInvocationEvents));
  const lateInvocation = await collect(await client.invocations.follow(boomInvocation.id, { since: cut }));
  assert.deepEqual(lateInvocation.filter((e) => e.event === 'log'), []);
  assert.equal(lateInvocation.at(-1).invocation.status, 'failed');
  await rejectsWith(client.deployments.follow(py.id, { since: 'soon' }), BadRequestError);
});

test('bad input: unknown ids, apps and actions, payloads, archives', async () => {
  const nf = await rejectsWith(client.invocations.retrieve('nope'), NotFoundError);
  assert.equal(nf.error.message, 'invocation not found: nope');
  await rejectsWith(client.invocations.follow('nope'), NotFoundError);
  const app = await rejectsWith(
    client.invocations.create({ app_name: 'missing', action_name: 'x', version: 'latest' }),
    NotFoundError,
  );
  assert.match(app.message, /app missing version latest not found/);
  await rejectsWith(
    client.invocations.create({ app_name: 'fixture-ts', action_name: 'nope', version: 'latest' }),
    NotFoundError,
  );
  await rejectsWith(
    client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest', payload: '{not json' }),
    BadRequestError,
  );
  await rejectsWith(
    client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest', async_timeout_seconds: 5, async: true }),
    BadRequestError,
  );
  const big = await server.fetch('/invocations', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ app_name: 'fixture-ts', action_name: 'env', version: 'latest', payload: JSON.stringify('x'.repeat(5_000_000)) }),
  });
  assert.equal(big.status, 413);

  // a zip entry escaping the folder, and a missing file: 400 at once
  const evil = join(scratch, 'evil.zip');
  execFileSync('python3', ['-c', `import zipfile; z = zipfile.ZipFile(${JSON.stringify(evil)}, 'w'); z.writestr('../escape.ts', 'x'); z.close()`]);
  await rejectsWith(
    client.deployments.create({ file: await toFile(readFileSync(evil), 'evil.zip'), entrypoint_rel_path: 'index.ts' }),
    BadRequestError,
  );
  await rejectsWith(client.deployments.create({ entrypoint_rel_path: 'index.ts' }), BadRequestError);
  // a Python app that lists no dependencies: failed with a reason
  const bare = await deploy(zipFiles({ 'main.py': '' }), { entrypoint_rel_path: 'main.py' });
  assert.equal(bare.final.status, 'failed');
  assert.match(bare.final.status_reason, /requirements\.txt or pyproject\.toml/);

  // an entrypoint not in the archive: failed with a reason
  const missing = await deploy(zipFiles({ 'package.json': '{}', 'other.ts': '' }));
  assert.equal(missing.final.status, 'failed');
  assert.match(missing.final.status_reason, /index\.ts is not in the archive/);
  // no lockfile (Kernel's templates ignore it, so the CLI leaves it out): npm install, saying so;
  // an entrypoint that registers no app: failed with a reason
  const nolock = await deploy(zipFiles({ 'package.json': '{"type":"module"}', 'index.ts': '' }));
  assert.ok(nolock.events.some((e) => e.event === 'log' && /no package-lock\.json.*npm install/.test(e.message)));
  assert.equal(nolock.final.status, 'failed');
  assert.match(nolock.final.status_reason, /registers no app/);
});

test('a redeploy of the same version supersedes the previous deployment; links inside the folder are kept, links out refused', async () => {
  const dir = join(scratch, 'redeploy');
  cpSync(fixture, dir, { recursive: true, filter: (src) => !src.includes('node_modules') });
  // the entrypoint reached through a link in a subfolder, as a symlinked workspace would
  mkdirSync(join(dir, 'lib'));
  symlinkSync('../index.ts', join(dir, 'lib', 'entry.ts'));
  const { final } = await deploy(zipDir(dir), { entrypoint_rel_path: 'lib/entry.ts' });
  assert.equal(final.status, 'running', final.status_reason);
  const old = await client.deployments.retrieve(deployment.id);
  assert.equal(old.status, 'stopped');
  assert.match(old.status_reason, /superseded/);
  const inv = await client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest' });
  assert.equal(inv.status, 'succeeded');
  // env vars are the new deployment's (none given)
  assert.deepEqual(JSON.parse(inv.output), { greeting: null, has_key: true });

  await client.deployments.delete(final.id);
  assert.equal((await client.deployments.retrieve(final.id)).status, 'stopped');

  // a link leaving the folder: 400 naming it, nothing deployed
  const out = join(scratch, 'escape');
  mkdirSync(out);
  writeFileSync(join(out, 'index.ts'), '');
  symlinkSync('../../etc/passwd', join(out, 'leak'));
  const bad = await rejectsWith(client.deployments.create({ file: await toFile(zipDir(out), 'app.zip'), entrypoint_rel_path: 'index.ts' }), BadRequestError);
  assert.match(bad.message + JSON.stringify(bad.error ?? {}), /leak/);
  await rejectsWith(
    client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest' }),
    NotFoundError,
  );
});

test('events outlive a restart: a follow afterwards replays the build log and the invocation', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hangar-e2e-apps-restart-'));
  const apiKey = 'sk_test_apps_restart_' + Date.now();
  let first;
  let second;
  try {
    first = await startServer({ dataDir, apiKey });
    const created = await first.client.deployments.create({ file: await toFile(zipDir(fixture), 'app.zip'), entrypoint_rel_path: 'index.ts' });
    const before = await collect(await first.client.deployments.follow(created.id));
    assert.equal(before.at(-1).deployment.status, 'running');
    const inv = await first.client.invocations.create({ app_name: 'fixture-ts', action_name: 'env', version: 'latest' });
    assert.equal(inv.status, 'succeeded', inv.status_reason);
    const invBefore = await collect(await first.client.invocations.follow(inv.id));
    await first.stop();

    second = await startServer({ dataDir, apiKey });
    const after = await collect(await second.client.deployments.follow(created.id));
    const logs = (events) => events.filter((e) => e.event === 'log').map((e) => e.message);
    assert.ok(logs(after).some((m) => /npm ci/.test(m)), 'the build log is replayed after the restart');
    assert.deepEqual(logs(after), logs(before));
    assert.deepEqual(after.filter((e) => e.event === 'deployment_state').map((e) => e.deployment.status),
      ['queued', 'in_progress', 'running']);
    const invAfter = await collect(await second.client.invocations.follow(inv.id));
    assert.deepEqual(invAfter.map((e) => e.event), invBefore.map((e) => e.event));
    assert.equal(invAfter.at(-1).invocation.status, 'succeeded');
  } finally {
    await second?.stop();
    await first?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
