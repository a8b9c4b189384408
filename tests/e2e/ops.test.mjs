// Operations: Prometheus /metrics (API port with an org-wide key, and the keyless [metrics] listen
// address), /healthz, /readyz, JSON log lines and `hangar doctor`. A real server, real Chromium,
// at most 2 browsers alive at once.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';

import { chromium } from 'playwright-core';

import { hangarBin, repoRoot, startServer, waitFor } from './lib/server.mjs';

const execFileP = promisify(execFile);

/** Parses the text exposition into [{name, labels, value}] (comments skipped). */
function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `malformed exposition line: ${line}`);
    const labels = {};
    if (m[3]) for (const [, k, v] of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v;
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

/** The value of the one series `name` whose labels include `labels` (undefined when absent). */
function value(series, name, labels = {}) {
  const hits = series.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  assert.ok(hits.length <= 1, `${name} ${JSON.stringify(labels)} matches ${hits.length} series`);
  return hits[0]?.value;
}

describe('operations: metrics, health, JSON logs', () => {
  let server;
  let metricsPort;

  before(async () => {
    server = await startServer({
      env: {
        HANGAR_METRICS_LISTEN: '127.0.0.1:0',
        HANGAR_LOG_FORMAT: 'json',
        // Two browsers per project: the pool's one plus one on demand; a third is refused.
        HANGAR_MAX_BROWSERS_PER_PROJECT: '2',
      },
    });
    // Printed just after the listening line startServer waits for.
    const m = await waitFor(() => /hangar metrics on port (\d+)/.exec(server.output()), { what: 'the metrics port line' });
    metricsPort = Number(m[1]);
  });
  after(async () => {
    await server?.stop();
  });

  const scrape = async (headers = {}) => {
    const res = await server.fetch('/metrics', { headers });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    return { text, series: parseMetrics(text) };
  };

  test('/healthz and /readyz answer without a key and hold no secrets', async () => {
    for (const path of ['/healthz', '/readyz']) {
      const res = await fetch(new URL(path, server.baseURL));
      assert.equal(res.status, 200, path);
      const text = await res.text();
      assert.ok(!text.includes(server.apiKey) && !text.includes(server.dataDir), `${path} leaks nothing: ${text}`);
      assert.match(JSON.parse(text).status, /^(ok|ready)$/);
    }
    // A load balancer's HTTP/1.0 check (HAProxy's `option httpchk`) sends no Host header.
    const { hostname, port } = new URL(server.baseURL);
    const head = await new Promise((resolve, reject) => {
      const socket = connect(Number(port), hostname, () => socket.write('GET /readyz HTTP/1.0\r\n\r\n'));
      let got = '';
      socket.on('data', (c) => (got += c));
      socket.on('end', () => resolve(got));
      socket.on('error', reject);
    });
    assert.match(head, /^HTTP\/1\.[01] 200 /, head);
  });

  test('/metrics: 401 without a key, 403 for a project-scoped key, 200 for an org-wide key', async () => {
    const bare = await fetch(new URL('/metrics', server.baseURL));
    assert.equal(bare.status, 401);
    const project = await server.admin('project', 'create', 'ops-tenant');
    const scoped = await server.admin('key', 'create', '--project', project);
    const refused = await server.fetch('/metrics', { headers: { authorization: `Bearer ${scoped}` } });
    assert.equal(refused.status, 403);
    assert.equal((await refused.json()).code, 'forbidden');
    const { series } = await scrape();
    assert.equal(value(series, 'hangar_ready'), 1);
    assert.equal(value(series, 'hangar_plugin_loaded', { plugin: 'browsers', state: 'started' }), 1);
    assert.equal(value(series, 'hangar_browser_sessions_active', { kind: 'headless', pooled: 'false' }), 0);
  });

  test('sessions, pools, admission, connections, cgroups and request latency are counted', async () => {
    const client = server.client;
    const pool = await client.browserPools.create({ name: 'ops-pool', size: 1, headless: true });
    await waitFor(async () => value((await scrape()).series, 'hangar_pool_browsers', { pool: pool.id, state: 'idle' }) === 1, {
      timeoutMs: 60_000,
      what: 'the pool to fill',
    });
    const leased = await client.browserPools.acquire(pool.id, {});
    await client.browserPools.release(pool.id, { session_id: leased.session_id, reuse: false });

    const session = await client.browsers.create({ headless: true, timeout_seconds: 120 });
    // The pool's capacity and this browser fill the project's limit of 2.
    // One attempt: the SDK would otherwise retry the 429 twice, and each refusal counts.
    await assert.rejects(client.browsers.create({ headless: true }, { maxRetries: 0 }), (e) => e.status === 429);

    const browser = await chromium.connectOverCDP(session.cdp_ws_url);
    const sse = new AbortController();
    const stream = await server.fetch(`/browsers/${session.session_id}/logs/stream?source=supervisor&supervisor_process=chromium&follow=true`, {
      headers: { accept: 'text/event-stream' },
      signal: sse.signal,
    });
    assert.equal(stream.status, 200);

    const { text, series } = await scrape();
    // The tokenized CDP URL, keys and tenant paths never appear.
    const token = new URL(session.cdp_ws_url).searchParams.get('jwt') ?? session.cdp_ws_url.split('/').pop();
    for (const secret of [server.apiKey, token, server.dataDir, session.cdp_ws_url])
      assert.ok(!text.includes(secret), `the exposition leaks ${secret.slice(0, 24)}…`);

    assert.equal(value(series, 'hangar_browser_sessions_active', { kind: 'headless', pooled: 'false' }), 1);
    assert.equal(value(series, 'hangar_browser_creates_total', { source: 'cold' }), 1);
    assert.equal(value(series, 'hangar_browser_creates_total', { source: 'pool' }), 1);
    assert.equal(value(series, 'hangar_browser_create_seconds_count', { source: 'cold' }), 1);
    assert.ok(value(series, 'hangar_browser_create_seconds_sum', { source: 'cold' }) > 0);
    assert.ok(value(series, 'hangar_browser_deletes_total') >= 1, 'the released lease ended');
    assert.equal(value(series, 'hangar_admission_rejections_total'), 1);
    assert.equal(value(series, 'hangar_pool_size', { pool: pool.id }), 1);
    assert.ok(value(series, 'hangar_instance_start_seconds_count', { result: 'ok' }) >= 2);
    assert.ok(value(series, 'hangar_connections_open', { kind: 'cdp' }) >= 1);
    assert.equal(value(series, 'hangar_connections_open', { kind: 'sse' }), 1);
    assert.equal(value(series, 'hangar_warm_spares', { kind: 'headless' }), 0);
    const mem = value(series, 'hangar_instance_memory_bytes', { instance_id: session.session_id });
    assert.ok(mem > 10 * 2 ** 20, `a running Chromium is charged memory (${mem})`);
    assert.ok(value(series, 'hangar_instance_cpu_seconds_total', { instance_id: session.session_id }) > 0);
    assert.equal(
      value(series, 'hangar_http_request_duration_seconds_count', { method: 'POST', route: '/browsers', status: '200' }),
      1,
    );
    assert.equal(
      value(series, 'hangar_http_request_duration_seconds_count', { method: 'POST', route: '/browsers', status: '429' }),
      1,
    );
    // Buckets are cumulative and end at the count.
    const buckets = series.filter((s) => s.name === 'hangar_http_request_duration_seconds_bucket' && s.labels.route === '/browsers' && s.labels.status === '200');
    assert.equal(buckets.at(-1).labels.le, '+Inf');
    assert.equal(buckets.at(-1).value, 1);
    for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i].value >= buckets[i - 1].value);

    sse.abort();
    await browser.close();
    await waitFor(async () => {
      const s = (await scrape()).series;
      return value(s, 'hangar_connections_open', { kind: 'cdp' }) === 0 && value(s, 'hangar_connections_open', { kind: 'sse' }) === 0;
    }, { what: 'the connections to close' });

    await client.browsers.deleteByID(session.session_id);
    await client.browserPools.delete(pool.id, { force: true });
    const end = (await scrape()).series;
    assert.equal(value(end, 'hangar_browser_sessions_active', { kind: 'headless', pooled: 'false' }), 0);
    assert.ok(value(end, 'hangar_browser_deletes_total') >= 2);
    // The instance itself ends after the DELETE answered (its teardown runs on): its series goes then.
    await waitFor(async () => value((await scrape()).series, 'hangar_instance_memory_bytes', { instance_id: session.session_id }) === undefined,
      { what: "the deleted session's instance series to go" });
  });

  test('the Grafana dashboard in packaging/ reads only metrics the server exposes', async () => {
    const dash = JSON.parse(readFileSync(join(repoRoot, 'packaging/grafana/hangar-dashboard.json'), 'utf8'));
    const { text } = await scrape();
    const families = new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]));
    const used = new Set();
    for (const panel of dash.panels)
      for (const t of panel.targets)
        for (const [name] of t.expr.matchAll(/hangar_[a-z_]+/g)) used.add(name.replace(/_(bucket|count|sum)$/, ''));
    assert.ok(used.size >= 10);
    for (const name of used) assert.ok(families.has(name), `the dashboard reads ${name}, which /metrics does not have`);
  });

  test('the [metrics] listen address serves /metrics and /healthz without a key, nothing else', async () => {
    const base = `http://127.0.0.1:${metricsPort}`;
    const res = await fetch(`${base}/metrics`);
    assert.equal(res.status, 200);
    const series = parseMetrics(await res.text());
    assert.equal(value(series, 'hangar_plugin_loaded', { plugin: 'browsers', state: 'started' }), 1);
    assert.equal((await fetch(`${base}/healthz`)).status, 200);
    assert.equal((await fetch(`${base}/browsers`)).status, 404);
  });

  test('[logging] format = json: every log line is one JSON object', () => {
    const printed = new Set(['hangar listening on', 'hangar metrics on port', 'bootstrap API key']);
    const lines = server
      .output()
      .split('\n')
      .filter((l) => l.trim() && ![...printed].some((p) => l.startsWith(p)));
    assert.ok(lines.length > 10, `log lines were written (${lines.length})`);
    for (const line of lines) {
      let entry;
      assert.doesNotThrow(() => (entry = JSON.parse(line)), `not JSON: ${line}`);
      assert.equal(typeof entry.message, 'string');
      assert.match(entry.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.match(entry.level, /^(fatal|critical|error|warning|notice|information|debug|trace)$/);
    }
    assert.ok(lines.some((l) => JSON.parse(l).message.includes('POST /browsers')), 'the access log is there too');
  });

  test('hangar doctor checks ports, cgroups and the sandbox', async () => {
    // The doctor reads the same configuration; its listen address is the running server's.
    const env = { ...server.env, HANGAR_LISTEN: `127.0.0.1:${server.port}`, HANGAR_METRICS_LISTEN: '' };
    const { stdout } = await execFileP(hangarBin, ['doctor'], { env, timeout: 120_000 }).catch((e) => e);
    for (const section of ['ports', 'cgroups', 'sandbox', 'instances', 'data'])
      assert.match(stdout, new RegExp(`^${section}$`, 'm'), `doctor has a ${section} section:\n${stdout}`);
    assert.match(stdout, /a Hangar server already answers on 127\.0\.0\.1:\d+/);
    assert.match(stdout, /Chromium renders a page inside the bubblewrap sandbox/);
  });
});
