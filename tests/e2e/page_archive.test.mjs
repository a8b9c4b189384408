// The SDK's page-archive example (sdk/examples/page-archive), built out of tree from the SDK
// headers alone by tests/sdk/build_example.sh and loaded into a real server next to the built-in
// plugins: both of its halves run (the capture in the browser's agent through CDP, the blobs and
// rows on the server), on a real page in a real Chromium. tests/package/run.sh does the same
// against the installed packages.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { chromium } from 'playwright-core';

import { examplePlugins, startServer, startTestPages, TEST_PAGE_TITLE } from './lib/server.mjs';

// MHTML keeps HTML quoted-printable: soft line breaks and =XX escapes.
const unquote = (text) =>
  text.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_, hex) => String.fromCharCode(parseInt(hex, 16)));

describe('page-archive (the SDK example with both halves)', () => {
  let server;
  let pages;
  let session;
  let browser;
  let page;

  before(async () => {
    const plugins = await examplePlugins();
    pages = await startTestPages();
    server = await startServer({ extraPluginDir: plugins.pageArchive, enablePlugins: ['page-archive'] });
    session = await server.client.browsers.create({ headless: true });
    // An agent drives the browser to a page, then archives it.
    browser = await chromium.connectOverCDP(session.cdp_ws_url);
    page = browser.contexts()[0].pages()[0];
    await page.goto(pages.url);
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    await pages?.close();
  });

  const archive = (id = session.session_id, headers = {}) =>
    server.fetch(`/browsers/${id}/archive`, { method: 'POST', headers });

  test('POST /browsers/{id}/archive saves the current page as MHTML; the download is that page', async () => {
    const res = await archive();
    assert.equal(res.status, 201, await res.clone().text());
    const a = await res.json();
    assert.match(a.id, /^[a-z0-9]{24}$/);
    assert.equal(a.session_id, session.session_id);
    assert.equal(a.url, pages.url);
    assert.equal(a.title, TEST_PAGE_TITLE);
    assert.ok(a.size_bytes > 100);
    assert.ok(Math.abs(Date.parse(a.created_at) - Date.now()) < 60_000);

    const file = await server.fetch(`/browsers/${session.session_id}/archives/${a.id}`);
    assert.equal(file.status, 200);
    assert.match(file.headers.get('content-type'), /^multipart\/related/);
    const mhtml = await file.text();
    assert.equal(mhtml.length, a.size_bytes);
    assert.match(mhtml, /^From: <Saved by Blink>/m);
    assert.match(mhtml, new RegExp(`^Snapshot-Content-Location: ${pages.url}`, 'm'));
    assert.ok(unquote(mhtml).includes('<h1 id="greeting">Hello from the test page</h1>'), mhtml.slice(0, 2000));
  });

  test('a page the client navigated to is what the next archive holds; the list is newest first and paged', async () => {
    await page.goto(`${pages.url}page?title=Second`);
    const res = await archive();
    assert.equal(res.status, 201);
    const second = await res.json();
    assert.equal(second.title, 'Second');

    const list = await server.fetch(`/browsers/${session.session_id}/archives`);
    assert.equal(list.status, 200);
    const items = await list.json();
    assert.deepEqual(items.map((a) => a.title), ['Second', TEST_PAGE_TITLE]);
    const first = await server.fetch(`/browsers/${session.session_id}/archives?limit=1`);
    assert.equal(first.headers.get('x-has-more'), 'true');
    assert.equal(first.headers.get('x-next-offset'), '1');
    assert.deepEqual((await first.json()).map((a) => a.id), [second.id]);
    const bad = await server.fetch(`/browsers/${session.session_id}/archives?limit=x`);
    assert.equal(bad.status, 400);
    assert.equal((await bad.json()).code, 'bad_request');
  });

  test('archives belong to the caller\'s project; unknown sessions and archives are 404', async () => {
    const other = await server.admin('project', 'create', 'archive-other');
    const headers = { 'x-kernel-project-id': other };
    assert.equal((await archive(session.session_id, headers)).status, 404);
    assert.equal((await server.fetch(`/browsers/${session.session_id}/archives`, { headers })).status, 404);
    const missing = await archive('nosuchsession');
    assert.equal(missing.status, 404);
    assert.equal((await missing.json()).code, 'not_found');
    assert.equal((await server.fetch(`/browsers/${session.session_id}/archives/nosucharchive`)).status, 404);
  });

  test('DELETE removes an archive; archives outlive their session, which can no longer be archived', async () => {
    const items = await (await server.fetch(`/browsers/${session.session_id}/archives`)).json();
    const del = await server.fetch(`/browsers/${session.session_id}/archives/${items[0].id}`, { method: 'DELETE' });
    assert.equal(del.status, 204, await del.clone().text());
    assert.equal((await server.fetch(`/browsers/${session.session_id}/archives/${items[0].id}`)).status, 404);

    await browser.close();
    browser = null;
    await server.client.browsers.deleteByID(session.session_id);
    const after = await server.fetch(`/browsers/${session.session_id}/archives`);
    assert.equal(after.status, 200);
    const left = await after.json();
    assert.deepEqual(left.map((a) => a.id), [items[1].id]);
    assert.equal((await server.fetch(`/browsers/${session.session_id}/archives/${items[1].id}`)).status, 200);
    assert.equal((await archive()).status, 404);
  });
});
