// Part of tests/package/run.sh: the staged `hangar serve` (HANGAR_BIN) answers the official SDK,
// creates a real browser, loads the hello example from an extra folder, and loads page-archive
// from its own plugin folder and etc/plugins.d (both put there by `cmake --install` of the example
// built against the installed hangar-dev), which archives a real page as MHTML; and WebDriver BiDi
// through the installed share/hangar/bidi-mapper.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

import { BidiClient } from '../e2e/lib/bidi.mjs';
import { startServer, startTestPages, TEST_PAGE_TITLE } from '../e2e/lib/server.mjs';

// playwright-core is installed with the end-to-end tests' packages, not beside this file.
const { chromium } = createRequire(new URL('../e2e/package.json', import.meta.url))('playwright-core');

const pages = await startTestPages();
const server = await startServer({ extraPluginDir: process.env.STAGED_PLUGINS, enablePlugins: ['hello'] });
try {
  const b = await server.client.browsers.create({ headless: true });
  assert.match(b.cdp_ws_url, /jwt=/);
  const hello = await server.fetch('/hello');
  assert.equal(hello.status, 200, await hello.text());

  const browser = await chromium.connectOverCDP(b.cdp_ws_url);
  try {
    await browser.contexts()[0].pages()[0].goto(pages.url);
    const res = await server.fetch(`/browsers/${b.session_id}/archive`, { method: 'POST' });
    assert.equal(res.status, 201, await res.clone().text());
    const archive = await res.json();
    assert.equal(archive.title, TEST_PAGE_TITLE);
    const listed = await (await server.fetch(`/browsers/${b.session_id}/archives`)).json();
    assert.deepEqual(listed.map((a) => a.id), [archive.id]);
    const mhtml = await (await server.fetch(`/browsers/${b.session_id}/archives/${archive.id}`)).text();
    assert.match(mhtml, new RegExp(`^Snapshot-Content-Location: ${pages.url}`, 'm'));
    assert.ok(mhtml.replace(/=\r?\n/g, '').includes('Hello from the test page'));
  } finally {
    await browser.close();
  }
  const bidi = await BidiClient.connect(b.webdriver_ws_url);
  try {
    const { context } = await bidi.start();
    const r = await bidi.send('script.evaluate', { expression: 'document.title', target: { context }, awaitPromise: false });
    assert.equal(r.result.value, TEST_PAGE_TITLE);
  } finally {
    await bidi.close();
  }
  await server.client.browsers.deleteByID(b.session_id);
  console.log('serve-check: browser created and deleted; hello answered; page-archive archived a real page; BiDi read its title');
} finally {
  await server.stop();
  await pages.close();
}
