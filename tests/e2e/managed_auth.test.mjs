// Managed auth (plugin `managed_auth`) through the official SDK (client.auth.connections.*)
// against the real server, real Chromium and the login test sites of tests/fixtures/sites
// (served here on an allowed host port; TOTP verified server-side). One auth browser at a time,
// plus one ordinary browser for the "the profile is logged in" check.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, test } from 'node:test';

import { BadRequestError, ConflictError, NotFoundError } from '@onkernel/sdk';
import { chromium } from 'playwright-core';

import { PASSWORD, SMS_CODE, TOTP_SECRET, USER, startSites, totp } from '../fixtures/sites/sites.mjs';
import { chromiumBaseArgs, chromiumPath, rejectsWith, repoRoot, startServer, waitFor } from './lib/server.mjs';
import { slow } from './lib/tier.mjs';

const execFileP = promisify(execFile);
const FLOW_FIELDS = [
  'browser_session_id', 'choices', 'discovered_fields', 'error_code', 'error_message', 'external_action_message',
  'fields', 'flow_expires_at', 'flow_status', 'flow_step', 'flow_type', 'hosted_url', 'live_view_url', 'mfa_options',
  'pending_sso_buttons', 'sign_in_options', 'sso_provider', 'website_error',
];

let server;
let kernel; // no retries: a 409 must reach the test, not be re-sent
let sites;

let configDir;

before(async () => {
  // The shipped configuration, with health checks allowed every 2 s (300 s is the shipped minimum).
  configDir = mkdtempSync(join(tmpdir(), 'hangar-auth-etc-'));
  chmodSync(configDir, 0o755); // the instances' agents (another user) read it too
  cpSync(join(repoRoot, 'etc'), configDir, { recursive: true });
  const ini = join(configDir, 'plugins.d/managed_auth.ini');
  writeFileSync(ini, readFileSync(ini, 'utf8').replace(/min_health_check_interval = \d+/, 'min_health_check_interval = 2'));
  sites = await startSites();
  // The hosted page redirects only to this server or the origins the operator lists.
  server = await startServer({ env: { HANGAR_CONFIG: join(configDir, 'hangar.ini'), HANGAR_REDIRECT_ORIGINS: sites.origin } });
  kernel = server.newClient({ maxRetries: 0 });
});

after(async () => {
  await server?.stop();
  await sites?.close();
  if (configDir) rmSync(configDir, { recursive: true, force: true });
});

/** Polls the connection until `pred` holds (or the flow ends when it does not). */
async function waitFlow(id, pred, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  let c;
  while (Date.now() < deadline) {
    c = await kernel.auth.connections.retrieve(id);
    if (pred(c)) return c;
    if (['SUCCESS', 'FAILED', 'EXPIRED', 'CANCELED'].includes(c.flow_status) && !pred(c))
      assert.fail(`flow ended ${c.flow_status} (${c.error_code}: ${c.error_message}; ${c.website_error})`);
    await new Promise((r) => setTimeout(r, 250));
  }
  assert.fail(`timed out; last state ${JSON.stringify(c)}`);
}

/** POST …/exchange without an API key. */
async function exchange(id, code, expect = 200) {
  const r = await fetch(`${server.baseURL}/auth/connections/${id}/exchange`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ code }),
  });
  const body = await r.json();
  assert.equal(r.status, expect, JSON.stringify(body));
  return body;
}

/** GET …/{id} with a flow JWT instead of the API key. */
const flowGet = (id, jwt) =>
  fetch(`${server.baseURL}/auth/connections/${id}`, { headers: { authorization: `Bearer ${jwt}` } });

const done = (c) => ['SUCCESS', 'FAILED', 'EXPIRED', 'CANCELED'].includes(c.flow_status);

/** Whether a new browser on `profile` is signed in to `site` (reads the account page). */
async function signedIn(profile, site) {
  const b = await kernel.browsers.create({ headless: true, profile: { name: profile } });
  try {
    const browser = await chromium.connectOverCDP(b.cdp_ws_url, { timeout: 30_000 });
    try {
      const page = browser.contexts()[0].pages()[0] ?? (await browser.contexts()[0].newPage());
      await page.goto(`${sites.origin}/${site}/account`);
      return (await page.title()).startsWith('Welcome');
    } finally {
      await browser.close();
    }
  } finally {
    await kernel.browsers.deleteByID(b.session_id);
  }
}

describe('connections CRUD', () => {
  test('create with defaults, every field, null flow fields; profile created', async () => {
    const c = await kernel.auth.connections.create({ domain: 'Example.COM', profile_name: 'crud-a' });
    assert.match(c.id, /^[a-z0-9]{24}$/);
    assert.equal(c.domain, 'example.com');
    assert.equal(c.profile_name, 'crud-a');
    assert.equal(c.status, 'NEEDS_AUTH');
    assert.equal(c.save_credentials, true);
    assert.equal(c.record_session, false);
    assert.equal(c.health_checks, true);
    assert.equal(c.auto_reauth, true);
    assert.equal(c.health_check_interval, 3600);
    assert.deepEqual(c.allowed_domains, []);
    assert.equal(c.can_reauth, false);
    assert.equal(c.can_reauth_reason, 'no_credential');
    for (const k of FLOW_FIELDS) assert.equal(c[k], null, k);
    assert.equal((await kernel.profiles.retrieve('crud-a')).name, 'crud-a');

    await rejectsWith(kernel.auth.connections.create({ domain: 'example.com', profile_name: 'CRUD-A' }), ConflictError, 'conflict');
    await rejectsWith(kernel.auth.connections.create({ domain: 'https://x.com/a', profile_name: 'p' }), BadRequestError, 'bad_request');
    await rejectsWith(kernel.auth.connections.create({ domain: 'x.com', profile_name: 'bad name' }), BadRequestError, 'bad_request');
    await rejectsWith(kernel.auth.connections.create({ domain: 'x.com', profile_name: 'p', health_check_interval: 90000 }), BadRequestError);
    await rejectsWith(kernel.auth.connections.create({ domain: 'x.com', profile_name: 'p', credential: { path: 'a/b' } }), BadRequestError);
    // nothing half-written by the refused creates
    assert.equal((await kernel.auth.connections.list({ domain: 'x.com' })).items.length, 0);
  });

  test('get, update (only given fields; allowed_domains replaces; login_url "" clears), list, delete', async () => {
    const c = await kernel.auth.connections.create({
      domain: 'shop.test', profile_name: 'crud-b', login_url: 'https://shop.test/login',
      allowed_domains: ['idp.test'], credential: { name: 'shop' }, health_check_interval: 1200, auto_reauth: false,
    });
    assert.equal(c.login_url, 'https://shop.test/login');
    assert.deepEqual(c.credential, { name: 'shop' });
    assert.equal(c.can_reauth, true);
    assert.equal(c.can_reauth_reason, 'has_credential');
    const got = await kernel.auth.connections.retrieve(c.id);
    assert.deepEqual(got, c);

    const u = await kernel.auth.connections.update(c.id, { allowed_domains: ['*.sso.test'], login_url: '', save_credentials: false });
    assert.deepEqual(u.allowed_domains, ['*.sso.test']);
    assert.equal(u.login_url, undefined);
    assert.equal(u.save_credentials, false);
    assert.equal(u.health_check_interval, 1200);
    assert.equal(u.auto_reauth, false);
    await rejectsWith(kernel.auth.connections.update(c.id, { health_checks: 'yes' }), BadRequestError);

    for (const n of ['crud-c', 'crud-d', 'crud-e']) await kernel.auth.connections.create({ domain: 'page.test', profile_name: n });
    const first = await kernel.auth.connections.list({ domain: 'page.test', limit: 2 });
    assert.equal(first.items.length, 2);
    assert.ok(first.hasNextPage());
    const all = [];
    for await (const x of kernel.auth.connections.list({ domain: 'page.test', limit: 2 })) all.push(x.profile_name);
    assert.deepEqual(all.sort(), ['crud-c', 'crud-d', 'crud-e']);
    assert.deepEqual((await kernel.auth.connections.list({ profile_name: 'crud-b' })).items.map((x) => x.id), [c.id]);
    assert.deepEqual((await kernel.auth.connections.list({ query: 'shop.t' })).items.map((x) => x.id), [c.id]);

    await kernel.auth.connections.delete(c.id);
    await rejectsWith(kernel.auth.connections.retrieve(c.id), NotFoundError, 'not_found');
    await rejectsWith(kernel.auth.connections.delete(c.id), NotFoundError);
    await rejectsWith(kernel.auth.connections.login('nope'), NotFoundError);
    await rejectsWith(kernel.auth.connections.submit('nope', { fields: { a: 'b' } }), NotFoundError);
    await rejectsWith(kernel.auth.connections.timeline('nope').then((p) => p), NotFoundError);
  });

  test('proxy by {name}: resolved to the one active proxy of that name (404 unknown, 400 ambiguous)', async () => {
    const proxy = (name) => kernel.proxies.create({ type: 'custom', name, config: { host: '127.0.0.1', port: 3128 } });
    const solo = await proxy('ma-solo');
    const dups = [await proxy('ma-dup'), await proxy('ma-dup')];
    try {
      const c = await kernel.auth.connections.create({ domain: 'proxied.test', profile_name: 'crud-proxy', proxy: { name: 'ma-solo' } });
      assert.equal(c.proxy_id, solo.id);
      await rejectsWith(kernel.auth.connections.create({ domain: 'p2.test', profile_name: 'crud-p2', proxy: { name: 'ma-dup' } }),
        BadRequestError, 'bad_request');
      await rejectsWith(kernel.auth.connections.create({ domain: 'p3.test', profile_name: 'crud-p3', proxy: { name: 'nope' } }),
        NotFoundError, 'not_found');
      const updated = await kernel.auth.connections.update(c.id, { proxy: { id: dups[0].id } });
      assert.equal(updated.proxy_id, dups[0].id);
      await kernel.auth.connections.delete(c.id);
    } finally {
      for (const p of [solo, ...dups]) await kernel.proxies.delete(p.id).catch(() => {});
    }
  });

  test('submit: 400 with a code when nothing awaits input or with two kinds of input', async () => {
    const c = await kernel.auth.connections.create({ domain: 'submit.test', profile_name: 'crud-f' });
    await rejectsWith(kernel.auth.connections.submit(c.id, { fields: { a: 'b' } }), BadRequestError, 'no_flow_awaiting_input');
    await rejectsWith(kernel.auth.connections.submit(c.id, { fields: { a: 'b' }, mfa_option_id: 'sms' }), BadRequestError, 'invalid_submit');
    await rejectsWith(kernel.auth.connections.submit(c.id, {}), BadRequestError, 'invalid_submit');
    await rejectsWith(kernel.auth.connections.submit(c.id, { sso_provider: 'google', sso_button_selector: '//a' }), BadRequestError, 'invalid_submit');
  });
});

describe('login flows', () => {
  test('the fixture TOTP is oathtool\'s', async () => {
    const { stdout } = await execFileP('oathtool', ['--totp', '-b', TOTP_SECRET]);
    const now = Date.now();
    assert.ok([totp(TOTP_SECRET, now - 1000), totp(TOTP_SECRET, now)].includes(stdout.trim()));
  });

  test('one page, full credential: SUCCESS, AUTHENTICATED, profile logged in, timeline, events', async () => {
    await kernel.credentials.create({ name: 'one', domain: '127.0.0.1', values: { username: USER, password: PASSWORD } });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'one', login_url: `${sites.origin}/one/login`, credential: { name: 'one' },
    });
    const login = await kernel.auth.connections.login(c.id);
    assert.equal(login.id, c.id);
    assert.equal(login.flow_type, 'LOGIN');
    assert.match(login.hosted_url, /^http/);
    assert.ok(login.handoff_code);
    assert.ok(Date.parse(login.flow_expires_at) > Date.now());

    // The SSE stream reports states and ends at the terminal one.
    const states = [];
    const stream = await kernel.auth.connections.follow(c.id);
    for await (const e of stream) {
      if (e.event === 'managed_auth_state') states.push(e);
    }
    assert.ok(states.length >= 1);
    assert.equal(states.at(-1).flow_status, 'SUCCESS');
    assert.equal(states.at(-1).flow_step, 'COMPLETED');

    const after = await kernel.auth.connections.retrieve(c.id);
    assert.equal(after.status, 'AUTHENTICATED');
    assert.equal(after.flow_status, 'SUCCESS');
    assert.match(after.post_login_url, /\/one\/account$/);
    assert.equal(after.hosted_url, null);
    assert.ok(after.browser_session_id);
    assert.equal(after.can_reauth, true);

    const tl = [];
    for await (const t of kernel.auth.connections.timeline(c.id)) tl.push(t);
    assert.equal(tl.length, 1);
    assert.equal(tl[0].type, 'login');
    assert.equal(tl[0].status, 'SUCCESS');
    assert.equal(tl[0].step, 'COMPLETED');
    assert.equal(tl[0].browser_session_id, after.browser_session_id);
    assert.equal((await kernel.auth.connections.timeline(c.id, { type: 'health_check' })).items.length, 0);

    assert.equal(await signedIn('one', 'one'), true);
    // Nothing of the credential in what the server printed.
    assert.ok(!server.output().includes(PASSWORD));
  });

  test('record_session: the auth browser is recorded; the timeline names the replay, an MP4 once the flow ended', async () => {
    await kernel.credentials.create({ name: 'rec', domain: '127.0.0.1', values: { username: USER, password: PASSWORD } });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'rec', login_url: `${sites.origin}/one/login`, credential: { name: 'rec' },
    });
    await kernel.auth.connections.login(c.id, { record_session: true });
    const end = await waitFlow(c.id, done);
    assert.equal(end.flow_status, 'SUCCESS');
    const [entry] = (await kernel.auth.connections.timeline(c.id)).items;
    assert.ok(entry.replay_id, JSON.stringify(entry));
    // The auth browser is gone; its replay stays, finished, under that session.
    let replay;
    await waitFor(async () => {
      replay = (await kernel.browsers.replays.list(entry.browser_session_id)).find((r) => r.replay_id === entry.replay_id);
      return replay?.finished_at;
    }, { what: 'the replay to be finished with the auth browser', timeoutMs: 30_000 });
    const video = Buffer.from(await (await kernel.browsers.replays.download(entry.replay_id, { id: entry.browser_session_id })).arrayBuffer());
    assert.equal(video.subarray(4, 8).toString(), 'ftyp', 'an MP4');
    assert.ok(video.length > 1000);
  });

  test('wrong password: FAILED with the site\'s error as website_error, profile untouched', async () => {
    await kernel.credentials.create({ name: 'wrong', domain: '127.0.0.1', values: { username: USER, password: 'nope' } });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'wrong', login_url: `${sites.origin}/one/login`, credential: { name: 'wrong' },
    });
    const before = await kernel.profiles.retrieve('wrong');
    await kernel.auth.connections.login(c.id);
    const end = await waitFlow(c.id, done);
    assert.equal(end.flow_status, 'FAILED');
    assert.equal(end.error_code, 'credentials_invalid');
    assert.match(end.website_error, /Invalid email or password/);
    assert.equal(end.status, 'NEEDS_AUTH');
    const profile = await kernel.profiles.retrieve('wrong');
    assert.equal(profile.updated_at ?? null, before.updated_at ?? null);
    const tl = (await kernel.auth.connections.timeline(c.id)).items;
    assert.equal(tl[0].status, 'FAILED');
    assert.equal(tl[0].error_code, 'credentials_invalid');
    assert.ok(!JSON.stringify(tl).includes('nope'));
  });

  test('identifier then password, password missing: AWAITING_INPUT, submit, credential saved', async () => {
    await kernel.credentials.create({ name: 'steps', domain: '127.0.0.1', values: { username: USER } });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'steps', login_url: `${sites.origin}/steps/login`, credential: { name: 'steps' },
    });
    await kernel.auth.connections.login(c.id);
    const waiting = await waitFlow(c.id, (x) => x.flow_step === 'AWAITING_INPUT');
    assert.equal(waiting.flow_status, 'IN_PROGRESS');
    assert.equal(waiting.discovered_fields.length, 1);
    assert.equal(waiting.discovered_fields[0].type, 'password');
    assert.equal(waiting.fields[0].type, 'password');
    assert.equal(waiting.fields[0].id, 'password');
    assert.equal(waiting.fields[0].reason, 'missing');
    await rejectsWith(kernel.auth.connections.submit(c.id, { fields: { a: 'b' }, field_values: { c: 'd' } }), BadRequestError, 'invalid_submit');
    // 0.131: each pause has an interaction_id; an answer naming another one is refused, the flow waits on.
    assert.match(waiting.interaction_id, /^int_[a-z0-9]{20}$/);
    await rejectsWith(
      kernel.auth.connections.submit(c.id, { field_values: { password: 'stale' }, interaction_id: 'int_stale' }, { maxRetries: 0 }),
      ConflictError,
    );
    assert.equal((await kernel.auth.connections.retrieve(c.id)).interaction_id, waiting.interaction_id);
    const r = await kernel.auth.connections.submit(c.id, { field_values: { password: PASSWORD }, interaction_id: waiting.interaction_id });
    assert.deepEqual(r, { accepted: true });
    const end = await waitFlow(c.id, done);
    assert.equal(end.flow_status, 'SUCCESS', JSON.stringify(end));
    assert.equal(end.status, 'AUTHENTICATED');
    const cred = await kernel.credentials.retrieve('steps');
    assert.deepEqual([...cred.value_keys].sort(), ['password', 'username']);
    assert.equal(await signedIn('steps', 'steps'), true);
  });

  test('password + TOTP from the stored secret, verified by the site', async () => {
    await kernel.credentials.create({
      name: 'totp', domain: '127.0.0.1', values: { username: USER, password: PASSWORD }, totp_secret: TOTP_SECRET,
    });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'totp', login_url: `${sites.origin}/totp/login`, credential: { name: 'totp' },
    });
    const accepted = sites.hits.totpAccepted;
    await kernel.auth.connections.login(c.id);
    const end = await waitFlow(c.id, done);
    assert.equal(end.flow_status, 'SUCCESS', JSON.stringify(end));
    assert.equal(sites.hits.totpAccepted, accepted + 1);
    // 0.131: the code came from the stored secret, so a re-auth can make it too
    assert.equal(end.can_reauth, true);
    assert.equal(end.can_reauth_reason, 'totp_reauth_allowed');
  });

  test('push approval: AWAITING_EXTERNAL_ACTION with the page\'s words until approved on the phone, then SUCCESS', slow, async () => {
    await kernel.credentials.create({ name: 'push', domain: '127.0.0.1', values: { username: USER, password: PASSWORD } });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'push', login_url: `${sites.origin}/push/login`, credential: { name: 'push' },
    });
    await kernel.auth.connections.login(c.id);
    const waiting = await waitFlow(c.id, (x) => x.flow_step === 'AWAITING_EXTERNAL_ACTION');
    assert.equal(waiting.flow_status, 'IN_PROGRESS');
    assert.equal(waiting.external_action_message, 'We sent a notification to your phone. Tap Approve to sign in.');
    // Still waiting a while later: nothing moves on without the approval.
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal((await kernel.auth.connections.retrieve(c.id)).flow_step, 'AWAITING_EXTERNAL_ACTION');
    sites.approvePush();
    const end = await waitFlow(c.id, done);
    assert.equal(end.flow_status, 'SUCCESS', JSON.stringify(end));
    assert.equal(end.status, 'AUTHENTICATED');
    assert.equal(end.external_action_message, null);
    assert.match(end.post_login_url, /\/push\/account$/);
    // A re-auth could not approve on the phone alone.
    assert.equal(end.can_reauth, false);
    assert.equal(end.can_reauth_reason, 'requires_external_action');
    assert.equal(await signedIn('push', 'push'), true);
  });

  test('SSO to an identity provider on another host: the credential\'s sso_provider clicked, the IdP\'s form filled', slow, async () => {
    await kernel.credentials.create({ name: 'sso', domain: '127.0.0.1', sso_provider: 'okta', values: { username: USER, password: PASSWORD } });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'sso', login_url: `${sites.origin}/sso/login`, credential: { name: 'sso' },
      allowed_domains: ['localhost'],
    });
    const idp = sites.hits.idpLogins ?? 0;
    await kernel.auth.connections.login(c.id);
    const end = await waitFlow(c.id, done);
    assert.equal(end.flow_status, 'SUCCESS', JSON.stringify(end));
    assert.equal(end.sso_provider, 'okta');
    assert.equal(sites.hits.idpLogins, idp + 1, 'the IdP took the login');
    assert.match(end.post_login_url, /\/sso\/account$/);
    assert.equal(await signedIn('sso', 'sso'), true);
  });

  test('SSO chosen by the user: AWAITING_INPUT with pending_sso_buttons, then sso_provider; an IdP host not allowed is blocked', slow, async () => {
    await kernel.credentials.create({ name: 'sso-pick', domain: '127.0.0.1', values: { username: USER, password: PASSWORD } });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'sso-pick', login_url: `${sites.origin}/sso/login`, credential: { name: 'sso-pick' },
      allowed_domains: ['localhost'],
    });
    await kernel.auth.connections.login(c.id);
    const ask = await waitFlow(c.id, (x) => x.flow_step === 'AWAITING_INPUT');
    assert.deepEqual(ask.pending_sso_buttons.map((b) => b.provider), ['okta']);
    assert.ok(ask.choices.some((x) => x.type === 'sso_provider' && x.id === 'okta'));
    await kernel.auth.connections.submit(c.id, { sso_provider: 'okta' });
    const end = await waitFlow(c.id, done);
    assert.equal(end.flow_status, 'SUCCESS', JSON.stringify(end));
    assert.equal(end.sso_provider, 'okta');

    const closed = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'sso-closed', login_url: `${sites.origin}/sso/login`, credential: { name: 'sso' },
    });
    await kernel.auth.connections.login(closed.id);
    const blocked = await waitFlow(closed.id, done);
    assert.equal(blocked.flow_status, 'FAILED');
    assert.equal(blocked.error_code, 'navigation_blocked');
    assert.match(blocked.error_message, /localhost/);
  });

  test('choice of MFA method: AWAITING_INPUT with mfa_options, then the SMS code', slow, async () => {
    await kernel.credentials.create({ name: 'mfa', domain: '127.0.0.1', values: { username: USER, password: PASSWORD } });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'mfa', login_url: `${sites.origin}/mfa/login`, credential: { name: 'mfa' },
    });
    await kernel.auth.connections.login(c.id);
    const choose = await waitFlow(c.id, (x) => x.flow_step === 'AWAITING_INPUT');
    assert.deepEqual(choose.mfa_options.map((m) => m.type).sort(), ['sms', 'totp']);
    assert.ok(choose.choices.every((x) => x.type === 'mfa_method'));
    await kernel.auth.connections.submit(c.id, { mfa_option_id: 'sms' });
    const code = await waitFlow(c.id, (x) => x.flow_step === 'AWAITING_INPUT' && x.discovered_fields?.length > 0);
    assert.equal(code.discovered_fields[0].type, 'code');
    assert.equal(code.discovered_fields[0].linked_mfa_type, 'sms');
    await kernel.auth.connections.submit(c.id, { fields: { [code.discovered_fields[0].name]: SMS_CODE } });
    const end = await waitFlow(c.id, done);
    assert.equal(end.flow_status, 'SUCCESS', JSON.stringify(end));
    // a one-time code is never saved
    const cred = await kernel.credentials.retrieve('mfa');
    assert.deepEqual([...cred.value_keys].sort(), ['password', 'username']);

    // The same pick through the canonical selected_choice_id (a choice's id, not the MFA type).
    const c2 = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'mfa-choice', login_url: `${sites.origin}/mfa/login`, credential: { name: 'mfa' },
    });
    await kernel.auth.connections.login(c2.id);
    const choose2 = await waitFlow(c2.id, (x) => x.flow_step === 'AWAITING_INPUT');
    const sms = choose2.choices.find((x) => /sms|text/i.test(`${x.id} ${x.label}`));
    assert.ok(sms, JSON.stringify(choose2.choices));
    await kernel.auth.connections.submit(c2.id, { selected_choice_id: sms.id });
    const code2 = await waitFlow(c2.id, (x) => x.flow_step === 'AWAITING_INPUT' && x.discovered_fields?.length > 0);
    assert.equal(code2.discovered_fields[0].linked_mfa_type, 'sms');
    await kernel.auth.connections.submit(c2.id, { fields: { [code2.discovered_fields[0].name]: SMS_CODE } });
    assert.equal((await waitFlow(c2.id, done)).flow_status, 'SUCCESS');
  });

  test('an account picker: AWAITING_INPUT with sign_in_options, then sign_in_option_id picks one', slow, async () => {
    await kernel.credentials.create({ name: 'pick', domain: '127.0.0.1', values: { username: USER, password: PASSWORD } });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'pick', login_url: `${sites.origin}/pick/login`, credential: { name: 'pick' },
    });
    await kernel.auth.connections.login(c.id);
    const asking = await waitFlow(c.id, (x) => x.flow_step === 'AWAITING_INPUT' || done(x));
    assert.deepEqual(asking.sign_in_options?.map((o) => o.label), ['Personal account', 'Work account'], JSON.stringify(asking));
    assert.ok(asking.choices.every((x) => x.type === 'account'));
    const work = asking.sign_in_options.find((o) => o.label === 'Work account');
    await kernel.auth.connections.submit(c.id, { sign_in_option_id: work.id });
    const end = await waitFlow(c.id, done);
    assert.equal(end.flow_status, 'SUCCESS', JSON.stringify(end));
    assert.match(end.post_login_url, /\/pick\/account$/);
    assert.equal(sites.hits.pickedAccount, 'work');
    // 0.131: a re-auth would wait for someone to pick the account again
    assert.equal(end.can_reauth, false);
    assert.equal(end.can_reauth_reason, 'requires_customer_input');
  });

  test('a second login supersedes the running flow (410 for its JWT); delete cancels', slow, async () => {
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'super', login_url: `${sites.origin}/one/login`,
    });
    // The first login's own browser_telemetry reaches its browser; the second turns it off.
    const l1 = await kernel.auth.connections.login(c.id, { browser_telemetry: { browser: { console: { enabled: true } } } });
    await waitFlow(c.id, (x) => x.flow_step === 'AWAITING_INPUT');
    const { jwt } = await exchange(c.id, l1.handoff_code);
    assert.equal((await flowGet(c.id, jwt)).status, 200);
    const first = (await kernel.auth.connections.timeline(c.id)).items[0];
    await kernel.auth.connections.login(c.id, { browser_telemetry: { enabled: false } });
    const gone = await flowGet(c.id, jwt);
    assert.equal(gone.status, 410);
    assert.equal((await gone.json()).code, 'flow_superseded');
    const tl = await waitFlow(c.id, (x) => x.flow_step === 'AWAITING_INPUT');
    assert.equal(tl.flow_status, 'IN_PROGRESS');
    const entries = (await kernel.auth.connections.timeline(c.id)).items;
    assert.equal(entries.length, 2);
    assert.equal(entries.find((e) => e.id === first.id).status, 'CANCELED');
    assert.equal(entries.find((e) => e.id === first.id).telemetry_captured, true);
    assert.equal(entries.find((e) => e.id !== first.id).telemetry_captured, false);
    const firstBrowser = await kernel.browsers.retrieve(first.browser_session_id, { include_deleted: true });
    assert.equal(firstBrowser.telemetry?.browser?.console?.enabled, true);
    const second = (await kernel.auth.connections.timeline(c.id, { limit: 1, offset: 1 })).items;
    assert.deepEqual(second.map((e) => e.id), [entries[1].id]);
    await kernel.auth.connections.delete(c.id);
    await rejectsWith(kernel.auth.connections.retrieve(c.id), NotFoundError);
  });
});

describe('hosted login page', () => {
  test('Playwright fills the hosted page; redirect to success_url; single-use code (401), JWT after the end (410)', async () => {
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'hosted', login_url: `${sites.origin}/one/login`,
    });
    const l = await kernel.auth.connections.login(c.id);
    const successUrl = `${sites.origin}/done`;
    const browser = await chromium.launch({ executablePath: chromiumPath, args: chromiumBaseArgs });
    try {
      const page = await browser.newPage();
      await page.goto(`${l.hosted_url}&success_url=${encodeURIComponent(successUrl)}`);
      await page.locator('form input[name="identifier"]').waitFor({ timeout: 30_000 });
      await page.fill('form input[name="identifier"]', USER);
      await page.fill('form input[name="password"]', PASSWORD);
      await page.click('form button[type="submit"]');
      // The flow still has to sign in, reload and archive the profile: slow on a loaded machine.
      await page.waitForURL((u) => u.toString().startsWith(successUrl), { timeout: 120_000 }).catch(async (e) => {
        const state = await kernel.auth.connections.retrieve(c.id);
        throw new Error(`${e.message}; page says "${await page.locator('#status').textContent()}"; flow ${JSON.stringify(state)}`);
      });
      const u = new URL(page.url());
      assert.equal(u.searchParams.get('profile_name'), 'hosted');
      assert.equal(u.searchParams.get('domain'), '127.0.0.1');
    } finally {
      await browser.close();
    }
    const end = await kernel.auth.connections.retrieve(c.id);
    assert.equal(end.flow_status, 'SUCCESS');
    assert.equal(end.status, 'AUTHENTICATED');
    // the code was used by the page: a second exchange is refused
    const used = await exchange(c.id, l.handoff_code, 401);
    assert.equal(used.code, 'handoff_code_used');
    assert.equal((await exchange(c.id, 'not-a-code', 401)).code, 'invalid_handoff_code');
    const forged = await flowGet(c.id, 'eyJhbGciOiJIUzI1NiJ9.e30.bad');
    assert.equal(forged.status, 401);
    assert.equal((await forged.json()).code, 'invalid_flow_token');
    // the credential the user typed was saved and the connection now points at it
    assert.deepEqual(end.credential, { name: 'hosted-127.0.0.1' });
    assert.equal(end.can_reauth, true);

    // a new login, a JWT, then the flow ends: 410 for that JWT
    const l2 = await kernel.auth.connections.login(c.id);
    const { jwt } = await exchange(c.id, l2.handoff_code);
    const fin = await waitFlow(c.id, done);
    assert.equal(fin.flow_type, 'REAUTH');
    assert.equal(fin.flow_status, 'SUCCESS');
    // the page may still read how its flow ended, but not submit to it
    const over = await flowGet(c.id, jwt);
    assert.equal(over.status, 200);
    assert.equal((await over.json()).flow_status, 'SUCCESS');
    const sub = await fetch(`${server.baseURL}/auth/connections/${c.id}/submit`, {
      method: 'POST', headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
      body: JSON.stringify({ fields: { a: 'b' } }),
    });
    assert.equal(sub.status, 410);
    assert.equal((await sub.json()).code, 'flow_ended');
  });
});

describe('hosted login page, the flow ends elsewhere', () => {
  test('a login superseded while the page is open: redirect to error_url with the code', slow, async () => {
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'hosted-error', login_url: `${sites.origin}/one/login`,
    });
    const l = await kernel.auth.connections.login(c.id);
    const errorUrl = `${sites.origin}/failed`;
    const browser = await chromium.launch({ executablePath: chromiumPath, args: chromiumBaseArgs });
    try {
      const page = await browser.newPage();
      await page.goto(`${l.hosted_url}&error_url=${encodeURIComponent(errorUrl)}`);
      await page.locator('form input[name="identifier"]').waitFor({ timeout: 30_000 });
      await kernel.auth.connections.login(c.id); // the page's flow is superseded
      await page.waitForURL((u) => u.toString().startsWith(errorUrl), { timeout: 30_000 });
      assert.equal(new URL(page.url()).searchParams.get('code'), 'flow_superseded');
      assert.ok(new URL(page.url()).searchParams.get('message'));
    } finally {
      await browser.close();
    }
    await kernel.auth.connections.delete(c.id);
  });
});

describe('health checks', slow, () => {
  test('a check sees the session; after the site ends it, NEEDS_AUTH and an automatic re-auth restores it', async () => {
    await kernel.credentials.create({ name: 'exp', domain: '127.0.0.1', values: { username: USER, password: PASSWORD } });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'exp', login_url: `${sites.origin}/expire/login`, credential: { name: 'exp' },
      health_check_interval: 2,
    });
    await kernel.auth.connections.login(c.id);
    assert.equal((await waitFlow(c.id, done)).flow_status, 'SUCCESS');
    const checks = async () => (await kernel.auth.connections.timeline(c.id, { type: 'health_check' })).items;
    const until = async (pred, what) => {
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline) {
        const items = await checks();
        if (pred(items)) return items;
        await new Promise((r) => setTimeout(r, 300));
      }
      assert.fail(`timed out waiting for ${what}`);
    };
    const ok = await until((x) => x.length >= 1, 'a first health check');
    assert.equal(ok[0].status, 'AUTHENTICATED');
    assert.equal(ok[0].previous_status, 'AUTHENTICATED');
    assert.ok((await kernel.auth.connections.retrieve(c.id)).last_auth_check_at);

    const logins = sites.hits.logins.expire;
    sites.expireSessions('expire');
    const seen = await until((x) => x.some((e) => e.status === 'NEEDS_AUTH'), 'a check that sees the logout');
    assert.equal(seen.find((e) => e.status === 'NEEDS_AUTH').previous_status, 'AUTHENTICATED');
    const deadline = Date.now() + 60_000;
    let reauth;
    while (Date.now() < deadline) {
      reauth = (await kernel.auth.connections.timeline(c.id, { type: 'reauth' })).items[0];
      if (reauth && reauth.status !== 'IN_PROGRESS') break;
      await new Promise((r) => setTimeout(r, 300));
    }
    assert.equal(reauth?.status, 'SUCCESS', JSON.stringify(reauth));
    await kernel.auth.connections.update(c.id, { health_checks: false });
    const end = await kernel.auth.connections.retrieve(c.id);
    assert.equal(end.status, 'AUTHENTICATED');
    assert.equal(end.flow_type, 'REAUTH');
    assert.equal(sites.hits.logins.expire, logins + 1);
    assert.equal(await signedIn('exp', 'expire'), true);
  });

  // 0.131: the connection's `browser` config reaches the health-check and re-auth browsers, and a
  // re-auth follows the last accepted login's skill_mode. The plan is observed through
  // can_reauth_reason: learned on the TOTP site it says totp_reauth_allowed; a login or re-auth on
  // the plain site that wrote its plan would make it viable_plans_found.
  test('0.131: health checks and re-auths use the connection\'s browser config and the last login\'s skill_mode', async () => {
    await kernel.credentials.create({
      name: 'skills', domain: '127.0.0.1', values: { username: USER, password: PASSWORD }, totp_secret: TOTP_SECRET,
    });
    const c = await kernel.auth.connections.create({
      domain: '127.0.0.1', profile_name: 'skills', login_url: `${sites.origin}/totp/login`, credential: { name: 'skills' },
      health_check_interval: 2, browser: { stealth: false, telemetry: { enabled: true } },
    });
    await kernel.auth.connections.login(c.id);
    assert.equal((await waitFlow(c.id, done)).can_reauth_reason, 'totp_reauth_allowed');
    // The plain site, skill_mode disabled: signed in, the plan left as it was.
    await kernel.auth.connections.update(c.id, { login_url: `${sites.origin}/expire/login` });
    const disabled = await kernel.auth.connections.login(c.id, { skill_mode: 'disabled' });
    assert.equal(disabled.flow_type, 'LOGIN'); // the plan is not read
    const second = await waitFlow(c.id, done);
    assert.equal(second.flow_status, 'SUCCESS', JSON.stringify(second));
    assert.match(second.post_login_url, /\/expire\/account$/);
    assert.equal(second.can_reauth_reason, 'totp_reauth_allowed');

    // The session ends; a check sees it and the re-auth runs with the inherited skill_mode.
    const reauths = async () => (await kernel.auth.connections.timeline(c.id, { type: 'reauth' })).items;
    sites.expireSessions('expire');
    const deadline = Date.now() + 90_000;
    let reauth;
    while (Date.now() < deadline) {
      reauth = (await reauths())[0];
      if (reauth && reauth.status !== 'IN_PROGRESS') break;
      await new Promise((r) => setTimeout(r, 300));
    }
    assert.equal(reauth?.status, 'SUCCESS', JSON.stringify(reauth));
    await kernel.auth.connections.update(c.id, { health_checks: false });
    const end = await kernel.auth.connections.retrieve(c.id);
    assert.equal(end.flow_type, 'REAUTH');
    assert.equal(end.can_reauth_reason, 'totp_reauth_allowed', 'the re-auth left the plan alone');
    // The connection's telemetry ran in the check's browser and in the re-auth's.
    assert.equal(reauth.telemetry_captured, true);
    assert.ok(reauth.completed_at);
    const checks = (await kernel.auth.connections.timeline(c.id, { type: 'health_check' })).items;
    assert.ok(checks.length >= 1 && checks.every((e) => e.telemetry_captured === true), JSON.stringify(checks));
    assert.ok(checks.every((e) => !e.completed_at));
  });
});
