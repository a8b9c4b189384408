// The executor's worker thread: keeps the browser's CDP connection and runs its snippets, one at
// a time, each in a fresh vm context with page, context, browser and webmcp bound.
import { parentPort, workerData } from 'node:worker_threads';
import vm from 'node:vm';
import { format } from 'node:util';

import { webmcp } from './agent.mjs';
import { browserConnection } from './runtime.mjs';
import { pageForTarget, targetIdOf } from './tabs.mjs';

const connect = browserConnection(workerData.endpoint);
// Connect ahead of the first call; a failure here is reported by the call that needs it.
connect().catch(() => {});

// The default executor works on the first tab (opening one when there is none); a named executor
// on a background tab of its own, opened on its first call and again if someone closed it.
let ownTab = null;
async function bindTab(b, ctx) {
  if (workerData.executor === 'default') {
    const pages = ctx.pages();
    if (pages.length) return { page: pages[0], created: false };
    return { page: await ctx.newPage(), created: true };
  }
  if (ownTab && !ownTab.isClosed() && ctx.pages().includes(ownTab)) return { page: ownTab, created: false };
  // A worker replaced after a timeout takes over the tab its predecessor opened.
  if (workerData.tab) {
    for (const p of ctx.pages()) if ((await targetIdOf(p)) === workerData.tab) ownTab = p;
    if (ownTab) return { page: ownTab, created: false };
  }
  const cdp = await b.newBrowserCDPSession();
  try {
    const { targetId } = await cdp.send('Target.createTarget', { url: 'about:blank', background: true });
    ownTab = await pageForTarget(ctx, targetId);
    parentPort.postMessage({ ownTab: targetId });
  } finally {
    await cdp.detach().catch(() => {});
  }
  return { page: ownTab, created: true };
}

// A snippet's result must be JSON: undefined becomes null, values JSON cannot hold are refused.
function toJson(value) {
  if (value === undefined) return null;
  const text = JSON.stringify(value);
  return text === undefined ? null : JSON.parse(text);
}

function describe(e) {
  if (e instanceof Error || (e && typeof e === 'object' && 'message' in e)) return String(e.message);
  return format('%s', e);
}

// Errors of the user's code that escape the call (a floating rejected promise) must not end the
// worker; they are reported on the current call's stderr.
let current = null;
process.on('unhandledRejection', (e) => current?.stderr.push(`Unhandled rejection: ${describe(e)}\n`));
process.on('uncaughtException', (e) => current?.stderr.push(`Uncaught exception: ${describe(e)}\n`));

// Output kept per stream and call; a snippet logging in a loop must not exhaust the executor.
const MAX_OUTPUT = 1 << 20;

function sink() {
  const parts = [];
  let size = 0;
  return {
    push(text) {
      if (size >= MAX_OUTPUT) return;
      if (size + text.length > MAX_OUTPUT) text = text.slice(0, MAX_OUTPUT - size) + '\n[output truncated at 1 MiB]\n';
      size += text.length;
      parts.push(text);
    },
    text: () => parts.join(''),
  };
}

function capturingConsole(out, err) {
  const w = (sink) => (...args) => sink.push(format(...args) + '\n');
  return {
    log: w(out), info: w(out), debug: w(out), trace: w(err),
    warn: w(err), error: w(err),
    dir: (v) => out.push(format('%o', v) + '\n'),
    table: w(out), assert: (ok, ...args) => { if (!ok) err.push(format('Assertion failed:', ...args) + '\n'); },
  };
}

async function run({ js }) {
  const stdout = sink();
  const stderr = sink();
  current = { stdout, stderr };
  let tab;
  try {
    const b = await connect();
    const ctx = b.contexts()[0] ?? (await b.newContext());
    const bound = await bindTab(b, ctx);
    const page = bound.page;
    tab = { target_id: await targetIdOf(page), created: bound.created };
    const sandbox = vm.createContext({
      page, context: ctx, browser: b, webmcp,
      console: capturingConsole(stdout, stderr),
      setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate, queueMicrotask,
      URL, URLSearchParams, TextEncoder, TextDecoder, Buffer, AbortController, AbortSignal,
      fetch, structuredClone, atob, btoa,
    });
    const fn = new vm.Script(js, { filename: 'playwright-execute.js' }).runInContext(sandbox);
    const result = toJson(await fn());
    return { success: true, result, stdout: stdout.text(), stderr: stderr.text(), tab };
  } catch (e) {
    return { success: false, error: describe(e), stdout: stdout.text(), stderr: stderr.text(), tab };
  } finally {
    current = null;
  }
}

parentPort.on('message', async (call) => parentPort.postMessage(await run(call)));
