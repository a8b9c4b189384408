// Browser log streaming through the official SDK (client.browsers.logs.stream): a file inside the
// instance read to its end, the same file followed while it grows, the instance's service logs,
// and the errors for bad queries. One headless browser is shared by every test.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { BadRequestError, NotFoundError } from '@onkernel/sdk';

import { rejectsWith, startServer, waitFor } from './lib/server.mjs';

let server;
let client;
let id;

before(async () => {
  server = await startServer();
  client = server.client;
  id = (await client.browsers.create({ headless: true })).session_id;
});

after(async () => {
  if (id) await client.browsers.deleteByID(id).catch(() => {});
  await server?.stop();
});

async function collect(query) {
  const events = [];
  for await (const ev of await client.browsers.logs.stream(id, query)) events.push(ev);
  return events;
}

test('follow=false sends the whole file as log events, then ends', async () => {
  await client.browsers.fs.writeFile(id, 'one\ntwo\r\nthree', { path: '/tmp/app.log' });
  const events = await collect({ source: 'path', path: '/tmp/app.log', follow: false });
  assert.deepEqual(events.map((e) => e.message), ['one', 'two', 'three']);
  for (const e of events) {
    assert.equal(e.event, 'log');
    assert.ok(!Number.isNaN(Date.parse(e.timestamp)), e.timestamp);
  }
});

test('follow=true tails the file: lines appended later arrive', async () => {
  await client.browsers.fs.writeFile(id, 'first\n', { path: '/home/kernel/grow.log' });
  const stream = await client.browsers.logs.stream(id, { source: 'path', path: '/home/kernel/grow.log', follow: true });
  const seen = [];
  const reading = (async () => {
    for await (const ev of stream) seen.push(ev.message);
  })().catch(() => {});
  await waitFor(() => seen.includes('first'), { what: 'the existing line', timeoutMs: 10_000 });
  for (const line of ['appended 1', 'appended 2']) {
    await client.browsers.process.exec(id, { command: 'sh', args: ['-c', `echo '${line}' >> /home/kernel/grow.log`] });
  }
  await waitFor(() => seen.includes('appended 2'), { what: 'the appended lines', timeoutMs: 10_000 });
  assert.deepEqual(seen, ['first', 'appended 1', 'appended 2']);
  stream.controller.abort();
  await reading;
});

test('service logs: Chromium and the agent', async () => {
  const chromium = await collect({ source: 'supervisor', supervisor_process: 'chromium', follow: false });
  assert.ok(chromium.some((e) => e.message.includes('DevTools listening')), JSON.stringify(chromium.slice(0, 5)));
  const agent = await collect({ source: 'supervisor', supervisor_process: 'agent', follow: false });
  assert.ok(agent.length > 0, 'the agent logs its plugins starting');
});

test('bad queries: 400 naming the field, a missing file 404, an unknown session 404', async () => {
  await rejectsWith(client.browsers.logs.stream(id, { source: 'nope' }), BadRequestError, 'bad_request');
  await rejectsWith(client.browsers.logs.stream(id, { source: 'path' }), BadRequestError, 'bad_request');
  await rejectsWith(client.browsers.logs.stream(id, { source: 'path', path: 'relative.log' }), BadRequestError);
  await rejectsWith(client.browsers.logs.stream(id, { source: 'path', path: '/tmp/../etc/passwd' }), BadRequestError);
  await rejectsWith(client.browsers.logs.stream(id, { source: 'supervisor', supervisor_process: 'sshd' }), BadRequestError);
  await rejectsWith(client.browsers.logs.stream(id, { source: 'path', path: '/tmp/none.log' }), NotFoundError);
  await rejectsWith(client.browsers.logs.stream(id, { source: 'path', path: '/tmp' }), BadRequestError);
  await rejectsWith(
    client.browsers.logs.stream('aaaaaaaaaaaaaaaaaaaaaaaa', { source: 'path', path: '/tmp/app.log' }),
    NotFoundError,
  );
  // The server's own data dir is not in the sandbox, whatever the path says.
  await rejectsWith(
    client.browsers.logs.stream(id, { source: 'path', path: `${server.dataDir}/hangar.db`, follow: false }),
    NotFoundError,
  );
});
