// The browser's WebMCP service (kernel-api-0131.md §1G): one long-lived Node process per browser,
// started by the playwright plugin's instance half on the first /webmcp call.
//
// Started as `node webmcp.mjs <CDP endpoint>` with HANGAR_WEBMCP_STATE naming the file that keeps
// the custom tools across a restart of this process. Calls arrive as JSON lines on fd 3,
//   {"id": 3, "op": "list" | "invoke" | "custom_list" | "custom_add" | "custom_delete", …}
// and are answered, in any order, as JSON lines on stdout: {"id": 3, "status": 200, "body": {…}}.
//
// Page tools come from Chromium itself: every tab gets a CDP session with the WebMCP domain on,
// whose toolsAdded/toolsRemoved events say exactly which document registered what, and whose
// invokeTool runs a tool in the frame that registered it. Custom tools of kind "page" are
// registered by a script in an isolated world of each matching document (so the page cannot
// reach their closures) and then are page tools like any other; kind "cdp" tools run here, with
// Playwright's objects, on the tabs whose URL they match.
import { randomUUID } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import vm from 'node:vm';
import { chromium } from 'playwright-core';
import { URLPattern } from 'urlpattern-polyfill/urlpattern';

import { webmcp } from './agent.mjs';
import { Cdp } from './cdp.mjs';
import { serveCalls } from './runtime.mjs';
import { targetIdOf } from './tabs.mjs';

const ENDPOINT = process.argv[2];
const STATE = process.env.HANGAR_WEBMCP_STATE;
const WORLD = 'hangar_webmcp';
const CUSTOM_URL = 'hangar-webmcp-custom/';
const MAX_CDP_OUTPUT = 240 * 1024;
const NAME = /^[A-Za-z0-9_.-]{1,128}$/;

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}
const invalid = (message) => new ApiError(400, 'invalid_input', message);

// ---- tabs and the tools their documents registered ----

let browser;
let cdp; // the tabs' WebMCP traffic
const tabs = new Map(); // Page → Tab
let tabSeq = 0;
let frameSeq = 0;
let refSeq = 0;
const frameNumbers = new Map(); // CDP frame id → the API's monotonically increasing frame_id
const windowNumbers = new Map(); // Chromium window id → the API's window_id, likewise
const tools = new Map(); // tool_ref → {tab, session, frameId, name, meta, customId, awaitsSubmission}
const pending = new Map(); // CDP invocationId → resolve
const early = new Map(); // CDP invocationId → a toolResponded that arrived before its invokeTool answer

function frameNumber(frameId) {
  if (!frameNumbers.has(frameId)) frameNumbers.set(frameId, ++frameSeq);
  return frameNumbers.get(frameId);
}

function dropTools(tab, keep) {
  for (const [ref, t] of tools) if (t.tab === tab && !keep(t)) tools.delete(ref);
}

// Chromium's annotation names → the MCP/WebMCP hint names of the API.
function metaOf(tool) {
  const a = tool.annotations ?? {};
  const annotations = {};
  if (a.readOnly !== undefined) annotations.readOnlyHint = a.readOnly;
  if (a.untrustedContent !== undefined) annotations.untrustedContentHint = a.untrustedContent;
  if (a.consequential !== undefined) annotations.consequentialHint = a.consequential;
  if (a.autosubmit !== undefined) annotations.autosubmit = a.autosubmit;
  return {
    name: tool.name,
    description: tool.description ?? '',
    inputSchema: tool.inputSchema ?? { type: 'object', properties: {} },
    ...(Object.keys(annotations).length ? { annotations } : {}),
  };
}

// What one CDP session of a tab reports: the tab's own (its top document and the frames in its
// process) or an out-of-process iframe's, attached below it (Target.setAutoAttach, flattened).
// Tools remember the session that reported them: invokeTool goes to that one.
async function watch(tab, session, { top }) {
  session.on('Page.frameNavigated', ({ frame }) => {
    // A new document: what the old one registered is gone (Chromium sends no toolsRemoved),
    // and with a new top-level document its frames too (nor does it detach them one by one).
    if (top && !frame.parentId) {
      dropTools(tab, () => false);
      tab.frames.clear();
    } else dropTools(tab, (t) => t.frameId !== frame.id);
    tab.frames.set(frame.id, frame.url);
  });
  session.on('Page.frameDetached', ({ frameId }) => {
    dropTools(tab, (t) => t.frameId !== frameId);
    tab.frames.delete(frameId);
  });
  session.on('WebMCP.toolsAdded', ({ tools: added }) => {
    for (const t of added) {
      const url = t.stackTrace?.callFrames?.[0]?.url ?? '';
      const customId = url.startsWith(CUSTOM_URL) ? url.slice(CUSTOM_URL.length) : undefined;
      // A custom tool deleted while this document still held it is not offered again.
      if (customId && !custom.has(customId)) continue;
      // A declarative (form) tool without autosubmit is done once its fields are filled: the
      // page's user, or the agent, submits it; Chromium answers only after that.
      const awaitsSubmission = t.backendNodeId !== undefined && !t.annotations?.autosubmit;
      tools.set(`t${++refSeq}`, { tab, session, frameId: t.frameId, name: t.name, meta: metaOf(t), customId, awaitsSubmission });
    }
  });
  session.on('WebMCP.toolsRemoved', ({ tools: removed }) => {
    for (const r of removed) dropTools(tab, (t) => !(t.frameId === r.frameId && t.name === r.name));
  });
  session.on('WebMCP.toolResponded', deliver);
  session.on('WebMCP.toolInvoked', (e) => {
    const t = [...tools.values()].find((x) => x.tab === tab && x.frameId === e.frameId && x.name === e.toolName);
    if (t?.awaitsSubmission) deliver({ invocationId: e.invocationId, status: 'awaiting_submission' });
  });
  session.on('Target.attachedToTarget', ({ sessionId, targetInfo }) => {
    if (targetInfo.type !== 'iframe') return;
    const child = cdp.session(sessionId);
    tab.children.set(sessionId, child);
    watch(tab, child, { top: false }).catch((e) => process.stderr.write(`webmcp: an iframe's session failed: ${e.message}\n`));
  });
  session.on('Target.detachedFromTarget', ({ sessionId }) => {
    const child = tab.children.get(sessionId);
    tab.children.delete(sessionId);
    if (child) dropTools(tab, (t) => t.session !== child);
  });
  await session.send('Page.enable');
  if (top) {
    session.on('Runtime.executionContextCreated', ({ context }) => {
      if (context.name === WORLD && context.auxData?.frameId) tab.worlds.set(context.auxData.frameId, context.id);
    });
    session.on('Runtime.executionContextsCleared', () => tab.worlds.clear());
    await session.send('Runtime.enable');
  }
  const { frameTree } = await session.send('Page.getFrameTree');
  const walk = (node) => {
    tab.frames.set(node.frame.id, node.frame.url);
    (node.childFrames ?? []).forEach(walk);
  };
  walk(frameTree);
  if (top) for (const def of custom.values()) if (def.kind === 'page') await inject(tab, def);
  await session.send('WebMCP.enable');
  await session.send('Target.setAutoAttach', { autoAttach: true, waitForDebuggerOnStart: false, flatten: true });
}

function deliver(e) {
  const done = pending.get(e.invocationId);
  if (done) return done(e);
  // It beat invokeTool's own answer here (or answers a form submitted long after its
  // invocation returned awaiting_submission: kept a while, then dropped).
  early.set(e.invocationId, e);
  if (early.size > 256) early.delete(early.keys().next().value);
}

async function track(page) {
  if (tabs.has(page)) return;
  const tab = { tabId: ++tabSeq, page, frames: new Map(), scripts: new Map(), worlds: new Map(), children: new Map() };
  tabs.set(page, tab);
  page.on('close', () => untrack(page));
  try {
    tab.targetId = await targetIdOf(page);
    tab.session = await cdp.attach(tab.targetId);
    await watch(tab, tab.session, { top: true });
    const { windowId } = await cdp.send('Browser.getWindowForTarget', { targetId: tab.targetId }).catch(() => ({ windowId: 0 }));
    if (!windowNumbers.has(windowId)) windowNumbers.set(windowId, windowNumbers.size + 1);
    tab.windowId = windowNumbers.get(windowId);
  } catch (e) {
    // The tab closed while it was being set up.
    if (!page.isClosed()) process.stderr.write(`webmcp: tracking a tab failed: ${e.message}\n`);
  }
}

function untrack(page) {
  const tab = tabs.get(page);
  if (!tab) return;
  tabs.delete(page);
  tab.session?.detach();
  dropTools(tab, () => false);
  for (const frameId of tab.frames.keys()) frameNumbers.delete(frameId);
  tab.closed?.forEach((f) => f());
}

// ---- custom tools ----

const custom = new Map(); // id → definition
let batches = []; // [{namespace, source, ids}] in the order added, for the state file

function patternsMatch(patterns, url) {
  return patterns.some((p) => {
    try {
      return new URLPattern(p).test(url);
    } catch {
      return false;
    }
  });
}

// The page half of a page-backed tool: registered in an isolated world of each matching document
// (top-level only, so each matching tool is exposed once per tab), unregistered through its
// AbortSignal when the tool is deleted.
function pageScript(def) {
  let fn = def.executeSource.trim();
  if (/^(async\s+)?execute\s*\(/.test(fn)) fn = `({ ${fn} }).execute`;
  return `(() => {
  if (window !== window.top || !document.modelContext) return;
  const patterns = ${JSON.stringify(def.match.url_patterns)};
  if (!patterns.some((p) => { try { return new URLPattern(p).test(location.href); } catch { return false; } })) return;
  const controllers = (globalThis.__hangarWebmcp ??= {});
  controllers[${JSON.stringify(def.id)}] = new AbortController();
  const execute = (${fn});
  document.modelContext.registerTool({ ...${JSON.stringify(def.tool)}, execute: (input) => execute(input) },
    { signal: controllers[${JSON.stringify(def.id)}].signal });
})();
//# sourceURL=${CUSTOM_URL}${def.id}`;
}

async function inject(tab, def) {
  const { identifier } = await tab.session.send('Page.addScriptToEvaluateOnNewDocument', {
    source: pageScript(def),
    worldName: WORLD,
    runImmediately: true,
  });
  tab.scripts.set(def.id, identifier);
}

async function uninject(tab, def) {
  const identifier = tab.scripts.get(def.id);
  tab.scripts.delete(def.id);
  if (identifier) await tab.session.send('Page.removeScriptToEvaluateOnNewDocument', { identifier }).catch(() => {});
  const world = tab.worlds.get(tab.targetId);
  if (world)
    await tab.session
      .send('Runtime.evaluate', { contextId: world, expression: `globalThis.__hangarWebmcp?.[${JSON.stringify(def.id)}]?.abort()` })
      .catch(() => {});
  dropTools(tab, (t) => t.customId !== def.id);
}

function definitionView(def) {
  return { id: def.id, namespace: def.namespace, kind: def.kind, match: { url_patterns: def.match.url_patterns }, tool: def.tool };
}

// Evaluates a batch's source and checks every definition before anything is added.
function parseBatch(namespace, source, ids) {
  let value;
  try {
    value = vm.runInContext(`(${source}\n)`, vm.createContext({ console, URL, URLSearchParams, setTimeout, clearTimeout, fetch, webmcp, Buffer }), {
      filename: `custom-tools/${namespace}.js`,
      timeout: 5000,
    });
  } catch (e) {
    throw invalid(`source: does not evaluate: ${e?.message ?? e}`);
  }
  if (!Array.isArray(value) || value.length === 0) throw invalid('source: must evaluate to a non-empty array of tool definitions');
  return value.map((d, i) => {
    const at = `source[${i}]`;
    if (!d || typeof d !== 'object') throw invalid(`${at}: must be an object`);
    const kind = d.kind ?? 'page';
    if (kind !== 'page' && kind !== 'cdp') throw invalid(`${at}.kind: must be "page" or "cdp"`);
    const patterns = d.match?.url_patterns;
    if (!Array.isArray(patterns) || !patterns.length || !patterns.every((p) => typeof p === 'string'))
      throw invalid(`${at}.match.url_patterns: must be a non-empty array of URL patterns`);
    for (const p of patterns) {
      try {
        new URLPattern(p);
      } catch (e) {
        throw invalid(`${at}.match.url_patterns: "${p}" is not a URL pattern: ${e.message}`);
      }
    }
    const t = d.tool;
    if (!t || typeof t !== 'object') throw invalid(`${at}.tool: required`);
    if (typeof t.name !== 'string' || !NAME.test(t.name)) throw invalid(`${at}.tool.name: 1-128 letters, digits, '_', '-' or '.'`);
    if (typeof t.description !== 'string') throw invalid(`${at}.tool.description: must be a string`);
    for (const k of ['inputSchema', 'outputSchema', 'annotations'])
      if (t[k] !== undefined && (typeof t[k] !== 'object' || t[k] === null || Array.isArray(t[k])))
        throw invalid(`${at}.tool.${k}: must be an object`);
    if (t.title !== undefined && typeof t.title !== 'string') throw invalid(`${at}.tool.title: must be a string`);
    if (typeof d.execute !== 'function') throw invalid(`${at}.execute: must be a function`);
    const tool = JSON.parse(JSON.stringify({
      name: t.name,
      description: t.description,
      inputSchema: t.inputSchema ?? { type: 'object', properties: {} },
      ...(t.outputSchema ? { outputSchema: t.outputSchema } : {}),
      ...(t.title !== undefined ? { title: t.title } : {}),
      ...(t.annotations ? { annotations: t.annotations } : {}),
    }));
    return {
      id: ids?.[i] ?? `ct_${randomUUID().replaceAll('-', '').slice(0, 20)}`,
      namespace,
      kind,
      match: { url_patterns: [...patterns] },
      tool,
      execute: d.execute,
      executeSource: Function.prototype.toString.call(d.execute),
    };
  });
}

function saveState() {
  if (!STATE) return;
  writeFileSync(`${STATE}.tmp`, JSON.stringify(batches));
  renameSync(`${STATE}.tmp`, STATE);
}

async function addBatch({ namespace, source, force_overwrite_namespace: force }, ids) {
  if (typeof namespace !== 'string' || !NAME.test(namespace)) throw invalid("namespace: 1-128 letters, digits, '_', '-' or '.'");
  if (typeof source !== 'string' || !source.trim()) throw invalid('source: required');
  const defs = parseBatch(namespace, source, ids);
  const replaced = force ? [...custom.values()].filter((d) => d.namespace === namespace) : [];
  const names = new Set();
  for (const d of defs) {
    if (names.has(d.tool.name)) throw invalid(`source: two tools are named "${d.tool.name}"`);
    names.add(d.tool.name);
    const clash = [...custom.values()].find((c) => c.tool.name === d.tool.name && !replaced.includes(c));
    if (clash)
      throw new ApiError(409, 'conflict', `a custom tool named "${d.tool.name}" exists in namespace "${clash.namespace}" (id ${clash.id}); delete it first or set force_overwrite_namespace`);
  }
  for (const d of replaced) await removeTool(d);
  for (const d of defs) {
    custom.set(d.id, d);
    if (d.kind === 'page') for (const tab of tabs.values()) if (tab.session) await inject(tab, d).catch(() => {});
  }
  if (force) batches = batches.filter((b) => b.namespace !== namespace);
  batches.push({ namespace, source, ids: defs.map((d) => d.id) });
  saveState();
  return defs.map(definitionView);
}

async function removeTool(def) {
  custom.delete(def.id);
  if (def.kind === 'page') for (const tab of tabs.values()) if (tab.session) await uninject(tab, def);
}

// ---- the operations ----

async function describeTab(tab) {
  const url = tab.page.url().split('#')[0];
  const title = await Promise.race([tab.page.title(), new Promise((r) => setTimeout(() => r(''), 2000))]).catch(() => '');
  return { window_id: tab.windowId ?? 1, tab_id: tab.tabId, page_url: url, page_title: title };
}

async function list({ exclude_custom: excludeCustom }) {
  const out = [];
  for (const tab of tabs.values()) {
    if (!tab.session) continue;
    const where = await describeTab(tab);
    for (const [ref, t] of tools) {
      if (t.tab !== tab || (excludeCustom && t.customId)) continue;
      const def = t.customId ? custom.get(t.customId) : undefined;
      const frame = t.frameId === tab.targetId ? null : { frame_id: frameNumber(t.frameId), url: (tab.frames.get(t.frameId) ?? '').split('#')[0] };
      out.push({
        tool_ref: ref,
        tool: def ? def.tool : t.meta,
        source: { ...where, frame, ...(def ? { custom: { id: def.id, namespace: def.namespace }, target_id: tab.targetId } : {}) },
      });
    }
    if (excludeCustom) continue;
    for (const def of custom.values()) {
      if (def.kind !== 'cdp' || !patternsMatch(def.match.url_patterns, tab.page.url())) continue;
      out.push({
        tool_ref: `c${tab.tabId}.${def.id}`,
        tool: def.tool,
        source: { ...where, frame: null, custom: { id: def.id, namespace: def.namespace }, target_id: tab.targetId },
      });
    }
  }
  return { tools: out };
}

const unknown = (invocationId, why) => ({ invocation_id: invocationId, status: 'error', error_text: `outcome_unknown: ${why}; the tool was not retried` });

function withDeadline(promise, timeoutMs, tab, onTimeout, onClose) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => resolve(onTimeout()), timeoutMs);
    const closed = () => resolve(onClose());
    (tab.closed ??= new Set()).add(closed);
    promise.then(resolve, reject).finally(() => {
      clearTimeout(timer);
      tab.closed.delete(closed);
    });
  });
}

async function invokeCdpTool(ref, input, timeoutMs) {
  const m = /^c(\d+)\.(.+)$/.exec(ref);
  const tab = m && [...tabs.values()].find((t) => t.tabId === Number(m[1]));
  const def = m && custom.get(m[2]);
  if (!tab || !def || def.kind !== 'cdp' || !patternsMatch(def.match.url_patterns, tab.page.url()))
    throw new ApiError(404, 'not_found', `tool_ref ${ref} is not a live tool (its tab closed or navigated away, or the tool was deleted)`);
  const invocationId = randomUUID();
  const run = (async () => {
    try {
      const output = await def.execute(input, { page: tab.page, context: tab.page.context(), browser, webmcp, tab: { target_id: tab.targetId } });
      const text = output === undefined ? undefined : JSON.stringify(output);
      if (text !== undefined && Buffer.byteLength(text) > MAX_CDP_OUTPUT)
        return { invocation_id: invocationId, status: 'error', error_text: `the tool's output is larger than 240 KiB (${Buffer.byteLength(text)} bytes)` };
      return { invocation_id: invocationId, status: 'completed', ...(text === undefined ? {} : { output: JSON.parse(text) }) };
    } catch (e) {
      return { invocation_id: invocationId, status: 'error', error_text: String(e?.message ?? e) };
    }
  })();
  return withDeadline(run, timeoutMs, tab, () => unknown(invocationId, 'the call timed out after the tool started'), () => unknown(invocationId, 'the tab closed while the tool ran'));
}

async function invoke({ tool_ref: ref, input, timeout_ms: timeoutMs }) {
  if (typeof ref !== 'string' || !ref) throw invalid('tool_ref: required');
  if (ref.startsWith('c')) return invokeCdpTool(ref, input, timeoutMs);
  const t = tools.get(ref);
  if (!t) throw new ApiError(404, 'not_found', `tool_ref ${ref} is not a live tool (its document navigated, closed or unregistered it)`);
  let invocationId;
  try {
    ({ invocationId } = await t.session.send('WebMCP.invokeTool', { frameId: t.frameId, toolName: t.name, input }));
  } catch (e) {
    // The frame or its document went away between the listing and this call: nothing ran.
    tools.delete(ref);
    throw new ApiError(404, 'not_found', `tool_ref ${ref} is not a live tool any more: ${e.message.replace(/^WebMCP.invokeTool: /, '')}`);
  }
  const done = early.has(invocationId)
    ? Promise.resolve(early.get(invocationId))
    : new Promise((resolve) => pending.set(invocationId, resolve));
  early.delete(invocationId);
  const answer = await withDeadline(
    done.then((e) => ({
      invocation_id: invocationId,
      status: e.status.toLowerCase(),
      ...(e.output === undefined ? {} : { output: e.output }),
      ...(e.errorText ? { error_text: e.errorText } : {}),
    })),
    timeoutMs,
    t.tab,
    () => unknown(invocationId, 'the call timed out after the tool started'),
    () => unknown(invocationId, 'the tab closed while the tool ran'),
  );
  pending.delete(invocationId);
  return answer;
}

const ops = {
  list,
  invoke,
  custom_list: () => ({ tools: [...custom.values()].map(definitionView) }),
  custom_add: async (call) => ({ tools: await addBatch(call) }),
  custom_delete: async ({ tool_id: id }) => {
    const def = custom.get(id);
    if (!def) throw new ApiError(404, 'not_found', `no custom tool ${id} on this browser`);
    await removeTool(def);
    // The batch's source still defines the deleted tool: its place keeps a null, so that on a
    // restart only the kept definitions return, under their ids.
    for (const b of batches) b.ids = b.ids.map((i) => (i === id ? null : i));
    batches = batches.filter((b) => b.ids.some(Boolean));
    saveState();
    return null;
  },
};

// ---- start ----

function restoreState() {
  if (!STATE) return;
  let saved = [];
  try {
    saved = JSON.parse(readFileSync(STATE, 'utf8'));
  } catch {
    return; // none yet
  }
  for (const b of saved) {
    const defs = parseBatch(b.namespace, b.source, null);
    b.ids.forEach((id, i) => {
      if (!id || !defs[i]) return;
      defs[i].id = id;
      custom.set(id, defs[i]);
    });
    batches.push(b);
  }
}

// Connected to the browser, its tabs tracked. Chromium restarting (a viewport change, a crash)
// ends both connections: every tab, ref and running invocation goes with it (those answer
// outcome_unknown), and the service connects again — the agent's /cdp dials the new Chromium —
// keeping its custom tools. Calls wait for the new connection.
let ready;
function connect() {
  ready = (async () => {
    for (let attempt = 0; ; attempt++) {
      try {
        browser = await chromium.connectOverCDP(ENDPOINT);
        cdp = await Cdp.connect(ENDPOINT);
        break;
      } catch (e) {
        await browser?.close().catch(() => {});
        if (attempt >= 50) throw e;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    const thisBrowser = browser;
    let lost = false;
    const onLost = () => {
      if (lost || browser !== thisBrowser) return;
      lost = true;
      for (const page of [...tabs.keys()]) untrack(page);
      cdp.ws.close();
      connect();
    };
    browser.on('disconnected', onLost);
    cdp.closed.then(onLost);
    for (const ctx of browser.contexts()) {
      ctx.on('page', track);
      await Promise.all(ctx.pages().map(track));
    }
  })();
  ready.catch(() => {}); // each call reports it
}

restoreState();
connect();

// A custom tool's code may throw or reject after its call answered (a timer, a forgotten
// promise): that is the tool's failure, logged, and must not take every other tool down.
process.on('uncaughtException', (e) => process.stderr.write(`webmcp: a custom tool threw: ${e?.stack ?? e}\n`));
process.on('unhandledRejection', (e) => process.stderr.write(`webmcp: a custom tool rejected: ${e?.stack ?? e}\n`));

// Calls run at once: an invocation waiting on its tool must not hold up a listing.
serveCalls(
  async (call) => {
    try {
      await ready;
      const op = ops[call.op];
      if (!op) throw new ApiError(400, 'invalid_input', `unknown operation ${call.op}`);
      return { status: 200, body: await op(call) };
    } catch (e) {
      if (e instanceof ApiError) return { status: e.status, body: { code: e.code, message: e.message } };
      return { status: 500, body: { code: 'internal_error', message: `webmcp: ${e?.message ?? e}` } };
    }
  },
  { serial: false },
);
