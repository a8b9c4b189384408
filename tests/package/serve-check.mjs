// Part of tests/package/run.sh: the staged `hangar serve` (HANGAR_BIN) answers the official SDK,
// creates a real browser, and loads the example plugin built from the installed SDK.
import assert from 'node:assert/strict';

import { startServer } from '../e2e/lib/server.mjs';

const server = await startServer({ extraPluginDir: process.env.STAGED_PLUGINS, enablePlugins: ['hello'] });
try {
  const b = await server.client.browsers.create({ headless: true });
  assert.match(b.cdp_ws_url, /jwt=/);
  await server.client.browsers.deleteByID(b.session_id);
  const hello = await server.fetch('/hello');
  assert.equal(hello.status, 200, await hello.text());
  console.log('serve-check: browser created and deleted; example plugin answered');
} finally {
  await server.stop();
}
