// The browser REPL (POST /browsers/{id}/repl): one long-lived Node process per REPL id, started by
// the playwright plugin's instance half inside the browser's sandbox, as the executor is.
//
// Started as `node repl.mjs <CDP endpoint>`. The agent writes one JSON line per call on fd 3:
//   {"id": 7, "code": "…"}
// and reads one JSON line per answer on stdout:
//   {"id": 7, "success": true, "content": [{type, channel, text} | {type, mime_type, data_b64}],
//    "content_truncated": false, "error": "…", "stack": "…", "duration_ms": 12}
//
// Unlike playwright/execute, every call runs in the same vm context, so what one call defines the
// next one sees. Timeouts are the agent's: it ends this process (a busy loop cannot be stopped
// from inside), and the next call starts a new REPL with a new id.
import { createRequire } from 'node:module';
import { format, inspect } from 'node:util';
import vm from 'node:vm';
import { chromium } from 'playwright-core';

import { webmcp } from './agent.mjs';
import { browserConnection, serveCalls } from './runtime.mjs';
import { ReplSyntaxError, toplevel } from './toplevel.mjs';

const ENDPOINT = process.argv[2];
// Per call: text over all channels, and images. Beyond them output is dropped and the answer
// says content_truncated.
const MAX_TEXT = 1 << 20;
const MAX_IMAGES = 8 << 20;

const connect = browserConnection(ENDPOINT);
connect().catch(() => {});

let out = null; // the current call's output; output after a call has answered is dropped

function emitText(channel, text) {
  if (!out || !text) return;
  if (out.text + text.length > MAX_TEXT) {
    text = text.slice(0, Math.max(0, MAX_TEXT - out.text));
    out.truncated = true;
    if (!text) return;
  }
  out.text += text.length;
  const last = out.content.at(-1);
  if (last?.type === 'text' && last.channel === channel) last.text += text;
  else out.content.push({ type: 'text', channel, text });
}

function sniffMime(bytes) {
  if (bytes[0] === 0x89 && bytes[1] === 0x50) return 'image/png';
  if (bytes[0] === 0xff && bytes[1] === 0xd8) return 'image/jpeg';
  if (bytes.subarray(0, 4).toString('latin1') === 'GIF8') return 'image/gif';
  if (bytes.subarray(8, 12).toString('latin1') === 'WEBP') return 'image/webp';
  return 'application/octet-stream';
}

function emitImage(data, mimeType) {
  if (!out) return;
  const bytes = typeof data === 'string' ? Buffer.from(data, 'base64') : Buffer.from(data);
  if (!bytes.length) throw new TypeError('repl.emitImage: the image is empty');
  if (out.images + bytes.length > MAX_IMAGES) {
    out.truncated = true;
    return;
  }
  out.images += bytes.length;
  out.content.push({ type: 'image', mime_type: mimeType ?? sniffMime(bytes), data_b64: bytes.toString('base64') });
}

const HELP = {
  '': `Browser REPL: JavaScript in a persistent Node.js runtime next to this browser.
Bindings that persist: top-level let/const/var/function/class. Use await at the top level and
\`await import('…')\` for modules (no static import). Expression values are not printed.
  page, context, browser   Playwright objects of this browser (first context, first tab)
  playwright               playwright-core's chromium object
  webmcp                   listTools({excludeCustom}) / invokeTool(toolRef, input, {timeoutSec})
  repl.write(...values)    text output (channel "write"); console.* gives "stdout"/"stderr"
  repl.emitImage(data, mimeType?)  image output: a Buffer or base64, e.g. await page.screenshot()
  repl.cdp(method, params) a raw CDP command to the browser target
  repl.help(topic)         more on one of: page, webmcp, cdp, output
Patchright is not part of this runtime.`,
  page: 'page, context and browser are bound on the first call (and after Chromium restarts). Assign page = await context.newPage() to work on another tab; the assignment persists.',
  webmcp: 'const tools = await webmcp.listTools(); const r = await webmcp.invokeTool(tools[0].tool_ref, {…}); r.status, r.output',
  cdp: 'await repl.cdp("Browser.getVersion") — a session on the browser target; for one page: const s = await context.newCDPSession(page)',
  output: 'Text beyond 1 MiB and images beyond 8 MiB per call are dropped (content_truncated: true).',
};

const context = vm.createContext({
  console: Object.fromEntries(
    ['log', 'info', 'debug', 'dir', 'table', 'error', 'warn', 'trace'].map((m) => [
      m,
      (...args) => emitText(['error', 'warn', 'trace'].includes(m) ? 'stderr' : 'stdout', format(...args) + '\n'),
    ]),
  ),
  repl: Object.freeze({
    write: (...values) => emitText('write', values.map((v) => (typeof v === 'string' ? v : inspect(v))).join(' ')),
    emitImage,
    help: (topic = '') => emitText('write', (HELP[topic] ?? `no help on "${topic}"; topics: ${Object.keys(HELP).filter(Boolean).join(', ')}`) + '\n'),
    cdp: async (method, params = {}) => {
      const session = await (await connect()).newBrowserCDPSession();
      try {
        return await session.send(method, params);
      } finally {
        await session.detach().catch(() => {});
      }
    },
  }),
  webmcp,
  playwright: chromium,
  require: createRequire(import.meta.url),
  process, Buffer, URL, URLSearchParams, TextEncoder, TextDecoder, AbortController, AbortSignal,
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate, queueMicrotask,
  fetch, structuredClone, atob, btoa,
});

let boundTo = null; // the connection page/context/browser were bound from
async function bindBrowser() {
  const b = await connect();
  if (boundTo === b) return;
  const ctx = b.contexts()[0] ?? (await b.newContext());
  context.browser = b;
  context.context = ctx;
  context.page = ctx.pages()[0] ?? (await ctx.newPage());
  boundTo = b;
}

// The stack down to the code's own frames; the REPL's machinery below them is noise.
function userFrames(stack) {
  const lines = stack.split('\n');
  const end = lines.findIndex((l) => l.includes('node:vm') || l.includes('repl.mjs'));
  return (end < 0 ? lines : lines.slice(0, end)).join('\n');
}

async function run(call) {
  out = { content: [], text: 0, images: 0, truncated: false };
  const started = performance.now();
  const answer = (fields) => ({
    ...fields,
    content: out.content,
    ...(out.truncated ? { content_truncated: true } : {}),
    duration_ms: Math.round(performance.now() - started),
  });
  try {
    const js = toplevel(call.code);
    await bindBrowser();
    const script = new vm.Script(js, {
      filename: 'repl.js',
      // Node's own loader, relative to this folder (playwright-core, acorn… resolve).
      importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
    });
    await script.runInContext(context);
    return answer({ success: true });
  } catch (e) {
    // Errors of the code come from the vm context's realm: not `instanceof Error` here.
    const isError = e !== null && typeof e === 'object' && 'message' in e;
    const error = isError ? `${e.name ?? 'Error'}: ${e.message}` : format('%s', e);
    const stack = isError && !(e instanceof ReplSyntaxError) && typeof e.stack === 'string' ? userFrames(e.stack) : undefined;
    return answer({ success: false, error, ...(stack ? { stack } : {}) });
  } finally {
    out = null;
  }
}

// A rejection or exception the code left behind must not end the REPL (its state is the point);
// it shows up on the current call's stderr, or nowhere when no call runs.
process.on('unhandledRejection', (e) => emitText('stderr', `Unhandled rejection: ${e?.stack ?? e}\n`));
process.on('uncaughtException', (e) => emitText('stderr', `Uncaught exception: ${e?.stack ?? e}\n`));

serveCalls(run, { serial: true });
