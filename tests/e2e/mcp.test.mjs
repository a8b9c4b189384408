// The MCP server at /mcp, driven by the official MCP TypeScript SDK client
// (@modelcontextprotocol/sdk, Streamable HTTP, Bearer API key): version negotiation, tools/list,
// a browser created, screenshotted (image content), driven by Playwright code and a command,
// fetched through, deleted; tool errors; a bad key refused before anything runs; sessions bound
// to their caller. At most two browsers at once (one headless, and the one
// execute_playwright_code makes for itself).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { NotFoundError } from '@onkernel/sdk';
import { PNG } from 'pngjs';

import { servePage, startServer, startTestPages, TEST_PAGE_TITLE } from './lib/server.mjs';

let server;
let pages;
let mcp;
let transport;
let sessionId; // the browser's

const connect = async (key) => {
  const t = new StreamableHTTPClientTransport(new URL('/mcp', server.baseURL), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  const c = new Client({ name: 'hangar-e2e', version: '1.0.0' });
  await c.connect(t);
  return { client: c, transport: t };
};

// A tool's JSON answer (the text content), asserting it did not fail.
const callJson = async (name, args) => {
  const r = await mcp.callTool({ name, arguments: args });
  assert.ok(!r.isError, `${name} failed: ${JSON.stringify(r.content)}`);
  return JSON.parse(r.content.find((c) => c.type === 'text').text);
};

const rawPost = (body, headers = {}) =>
  server.fetch('/mcp', {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body: JSON.stringify(body),
  });

before(async () => {
  server = await startServer();
  pages = await startTestPages();
  ({ client: mcp, transport } = await connect(server.apiKey));
});

after(async () => {
  if (sessionId) await server.client.browsers.deleteByID(sessionId).catch(() => {});
  await mcp?.close().catch(() => {});
  await server?.stop();
  await pages?.close();
});

test('initialize negotiates 2025-06-18 and opens a session', async () => {
  // The SDK offers a newer revision first; the server answers the one it speaks, which the SDK accepts.
  assert.equal(transport.protocolVersion, '2025-06-18');
  assert.match(transport.sessionId, /^[a-z0-9]{32}$/);
  assert.equal(mcp.getServerVersion().name, 'hangar');
  assert.ok(mcp.getServerCapabilities().tools);
  await mcp.ping();
});

test('tools/list names Kernel\'s tools with their input schemas', async () => {
  const { tools } = await mcp.listTools();
  const names = tools.map((t) => t.name);
  for (const n of ['manage_browsers', 'computer_action', 'execute_playwright_code', 'exec_command',
    'manage_browser_pools', 'manage_profiles', 'manage_proxies', 'manage_extensions', 'manage_replays',
    'browser_curl', 'manage_credentials', 'manage_credential_providers', 'manage_projects', 'manage_api_keys',
    'browser_repl', 'webmcp']) {
    assert.ok(names.includes(n), `${n} missing from ${names}`);
  }
  const ca = tools.find((t) => t.name === 'computer_action');
  assert.deepEqual(ca.inputSchema.required, ['session_id', 'actions']);
  assert.ok(ca.inputSchema.properties.actions.items.properties.type.enum.includes('screenshot'));
});

test('a browser created through MCP belongs to the caller\'s project', async () => {
  const b = await callJson('manage_browsers', { action: 'create', headless: true, timeout_seconds: 120, name: 'from-mcp' });
  sessionId = b.session_id;
  assert.ok(sessionId);
  assert.match(b.cdp_ws_url, /^ws/);
  // The same browser, seen through the Kernel SDK with the same key.
  const seen = await server.client.browsers.retrieve('from-mcp');
  assert.equal(seen.session_id, sessionId);
  const listed = await callJson('manage_browsers', { action: 'list' });
  assert.deepEqual(listed.items.map((x) => x.session_id), [sessionId]);
  assert.equal(listed.items[0].cdp_ws_url, undefined);
});

test('execute_playwright_code runs in the browser', async () => {
  const r = await callJson('execute_playwright_code', {
    session_id: sessionId,
    code: `await page.goto(${JSON.stringify(pages.url)}); return await page.title();`,
  });
  assert.equal(r.success, true, r.error);
  assert.equal(r.result, TEST_PAGE_TITLE);
  // Code that throws is a tool error carrying the message.
  const bad = await mcp.callTool({ name: 'execute_playwright_code', arguments: { session_id: sessionId, code: 'throw new Error("nope here")' } });
  assert.equal(bad.isError, true);
  assert.match(bad.content[0].text, /nope here/);
});

test('browser_repl keeps state between calls and answers images as image content', async () => {
  const first = await mcp.callTool({ name: 'browser_repl', arguments: { session_id: sessionId, code: 'let n = 40; repl.write("set")' } });
  assert.equal(first.isError, undefined, JSON.stringify(first));
  assert.equal(first.content[0].text, 'set');
  const second = await mcp.callTool({
    name: 'browser_repl',
    arguments: { session_id: sessionId, code: 'n += 2; console.log(n); repl.emitImage(await page.screenshot())' },
  });
  assert.equal(second.content[0].text, '42\n');
  assert.equal(second.content[1].type, 'image');
  assert.equal(second.content[1].mimeType, 'image/png');
  assert.ok(PNG.sync.read(Buffer.from(second.content[1].data, 'base64')).width > 0);
  assert.equal(JSON.parse(second.content.at(-1).text).repl_id, JSON.parse(first.content.at(-1).text).repl_id);
  const bad = await mcp.callTool({ name: 'browser_repl', arguments: { session_id: sessionId, code: 'throw new Error("repl says no")' } });
  assert.equal(bad.isError, true);
  assert.match(bad.content.at(-1).text, /repl says no/);
});

test('webmcp lists the tools a page registers and invokes one', async () => {
  const site = await servePage(`<!doctype html><title>tools</title><script>
    document.modelContext.registerTool({ name: 'double', description: 'Doubles n', inputSchema: { type: 'object', properties: { n: { type: 'number' } } },
      execute: async ({ n }) => ({ content: [{ type: 'text', text: String(2 * n) }] }) });
  </script>`);
  try {
    await callJson('execute_playwright_code', { session_id: sessionId, code: `await page.goto(${JSON.stringify(site.url)});` });
    let listed;
    for (let i = 0; i < 50 && !listed?.tools?.length; i++) {
      listed = await callJson('webmcp', { action: 'list', session_id: sessionId });
      if (!listed.tools.length) await new Promise((r) => setTimeout(r, 100));
    }
    const tool = listed.tools.find((t) => t.tool.name === 'double');
    assert.ok(tool, JSON.stringify(listed));
    assert.equal(tool.source.page_url, site.url);
    const r = await callJson('webmcp', { action: 'invoke', session_id: sessionId, tool_ref: tool.tool_ref, input: { n: 21 } });
    assert.equal(r.status, 'completed', JSON.stringify(r));
    assert.equal(r.output.content[0].text, '42');
    const gone = await mcp.callTool({ name: 'webmcp', arguments: { action: 'invoke', session_id: sessionId, tool_ref: 'nope' } });
    assert.equal(gone.isError, true);
  } finally {
    await site.close();
  }
});

test('computer_action batches actions and answers a screenshot as image content', async () => {
  const r = await mcp.callTool({
    name: 'computer_action',
    arguments: {
      session_id: sessionId,
      actions: [
        { type: 'move_mouse', move_mouse: { x: 20, y: 30 } },
        { type: 'sleep', sleep: { duration_ms: 50 } },
        { type: 'screenshot' },
      ],
    },
  });
  assert.ok(!r.isError, JSON.stringify(r.content));
  assert.match(r.content[0].text, /Executed 2 action/);
  const image = r.content.find((c) => c.type === 'image');
  assert.equal(image.mimeType, 'image/png');
  const png = PNG.sync.read(Buffer.from(image.data, 'base64'));
  const { viewport } = await server.client.browsers.retrieve(sessionId);
  assert.equal(png.width, viewport.width);
  assert.equal(png.height, viewport.height);
  assert.ok(r.content.some((c) => c.type === 'text' && c.text.includes(`${viewport.width}x${viewport.height}`)));
  // A region, and the mouse where the batch left it.
  const region = await mcp.callTool({
    name: 'computer_action',
    arguments: { session_id: sessionId, actions: [{ type: 'screenshot', screenshot: { region: { x: 0, y: 0, width: 64, height: 48 } } }] },
  });
  const small = PNG.sync.read(Buffer.from(region.content.find((c) => c.type === 'image').data, 'base64'));
  assert.deepEqual([small.width, small.height], [64, 48]);
  const pos = await mcp.callTool({ name: 'computer_action', arguments: { session_id: sessionId, actions: [{ type: 'get_mouse_position' }] } });
  assert.deepEqual(JSON.parse(pos.content[0].text), { x: 20, y: 30 });
});

test('exec_command runs in the browser\'s sandbox and decodes its output', async () => {
  const r = await callJson('exec_command', { session_id: sessionId, command: 'sh', args: ['-c', 'echo out; echo err >&2; exit 3'] });
  assert.deepEqual([r.exit_code, r.stdout, r.stderr], [3, 'out\n', 'err\n']);
  assert.equal(typeof r.duration_ms, 'number');
});

test('browser_curl fetches through the browser', async () => {
  const r = await callJson('browser_curl', { session_id: sessionId, url: pages.url });
  assert.equal(r.status, 200);
  assert.match(r.body, new RegExp(TEST_PAGE_TITLE));
});

test('execute_playwright_code without a session makes a browser for the code and deletes it', async () => {
  const r = await callJson('execute_playwright_code', { code: 'return 6 * 7;' });
  assert.equal(r.result, 42);
  assert.notEqual(r.session_id, sessionId);
  await assert.rejects(server.client.browsers.retrieve(r.session_id), NotFoundError);
});

test('API failures are tool errors; bad arguments are protocol errors', async () => {
  const missing = await mcp.callTool({ name: 'manage_browsers', arguments: { action: 'get', session_id: 'no-such-browser' } });
  assert.equal(missing.isError, true);
  assert.match(missing.content[0].text, /404 not_found/);
  await assert.rejects(mcp.callTool({ name: 'manage_browsers', arguments: { action: 'explode' } }), /action must be one of/);
  await assert.rejects(mcp.callTool({ name: 'no_such_tool', arguments: {} }), /unknown tool/);
});

test('the profile, pool and credential tools reach their areas', async () => {
  const p = await callJson('manage_profiles', { action: 'create', name: 'mcp-profile' });
  assert.equal((await server.client.profiles.retrieve('mcp-profile')).id, p.id);
  const c = await callJson('manage_credentials', { action: 'create', name: 'mcp-cred', domain: 'example.com', values: { username: 'u', password: 'secret-value' } });
  assert.equal(c.name, 'mcp-cred');
  const got = await mcp.callTool({ name: 'manage_credentials', arguments: { action: 'get', credential: 'mcp-cred' } });
  assert.ok(!got.content[0].text.includes('secret-value'), 'values are write-only through MCP too');
  const pools = await callJson('manage_browser_pools', { action: 'list' });
  assert.deepEqual(pools.items, []);
  const del = await mcp.callTool({ name: 'manage_profiles', arguments: { action: 'delete', profile: 'mcp-profile' } });
  assert.ok(!del.isError);
});

test('delete ends the browser', async () => {
  const r = await mcp.callTool({ name: 'manage_browsers', arguments: { action: 'delete', session_id: sessionId } });
  assert.ok(!r.isError, JSON.stringify(r.content));
  await assert.rejects(server.client.browsers.retrieve(sessionId), NotFoundError);
  sessionId = undefined;
});

test('a bad key is refused before anything runs', async () => {
  await assert.rejects(connect('sk_wrong_key'), (e) => /401|nauthorized/.test(String(e)));
  // Even with a live session id, a tool call under a bad key never reaches the MCP server.
  const before = (await server.client.browsers.list()).getPaginatedItems().length;
  const res = await rawPost(
    { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'manage_browsers', arguments: { action: 'create', headless: true } } },
    { authorization: 'Bearer sk_wrong_key', 'mcp-session-id': transport.sessionId, 'mcp-protocol-version': '2025-06-18' },
  );
  assert.equal(res.status, 401);
  assert.equal((await res.json()).code, 'unauthorized');
  assert.equal((await server.client.browsers.list()).getPaginatedItems().length, before);
});

test('a session belongs to the key that opened it', async () => {
  const project = await server.admin('project', 'create', 'mcp-other');
  const key = await server.admin('key', 'create', '--project', project);
  const res = await rawPost(
    { jsonrpc: '2.0', id: 1, method: 'tools/list' },
    { authorization: `Bearer ${key}`, 'mcp-session-id': transport.sessionId },
  );
  assert.equal(res.status, 404);
  // That key has its own sessions, in its own project.
  const { client: theirs } = await connect(key);
  const listed = JSON.parse((await theirs.callTool({ name: 'manage_profiles', arguments: { action: 'list' } })).content[0].text);
  assert.deepEqual(listed.items, []);
  await theirs.close();
});

test('transport rules: session required, unknown versions refused, notifications accepted, no GET stream', async () => {
  const noSession = await rawPost({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
  assert.equal(noSession.status, 400);
  const unknown = await rawPost({ jsonrpc: '2.0', id: 1, method: 'tools/list' }, { 'mcp-session-id': 'nosuchsession' });
  assert.equal(unknown.status, 404);
  const version = await rawPost({ jsonrpc: '2.0', id: 1, method: 'ping' }, { 'mcp-session-id': transport.sessionId, 'mcp-protocol-version': '1999-01-01' });
  assert.equal(version.status, 400);
  const note = await rawPost({ jsonrpc: '2.0', method: 'notifications/initialized' }, { 'mcp-session-id': transport.sessionId });
  assert.equal(note.status, 202);
  const parse = await server.fetch('/mcp', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{nope' });
  assert.equal(parse.status, 400);
  assert.equal((await parse.json()).error.code, -32700);
  const get = await server.fetch('/mcp', { headers: { accept: 'text/event-stream' } });
  assert.equal(get.status, 405);
  const foreign = await rawPost({ jsonrpc: '2.0', id: 1, method: 'ping' }, { 'mcp-session-id': transport.sessionId, origin: 'http://evil.example' });
  assert.equal(foreign.status, 403);
});

test('DELETE ends the session', async () => {
  const id = transport.sessionId;
  await transport.terminateSession();
  const res = await rawPost({ jsonrpc: '2.0', id: 1, method: 'ping' }, { 'mcp-session-id': id });
  assert.equal(res.status, 404);
});
