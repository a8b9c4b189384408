// bench/agent_tools: the runtimes next to a browser (issue 46), each against what it stands on,
// in alternating blocks of sequential calls:
//   - POST /browsers/{id}/repl of `1+1` against playwright/execute of `return 1 + 1` (same browser;
//     both runtimes already started). Goal: REPL p50 ≤ 1.2× execute.
//   - POST /browsers/{id}/webmcp/invoke of a trivial page tool against CDP Runtime.evaluate of the
//     same function in the same page over cdp_ws_url from this process (goal: p50 ≤ 2× evaluate),
//     and against Chromium's own WebMCP.invokeTool of the tool over the same connection: the floor
//     of any invoke, which Runtime.evaluate is not (the tool runs behind a browser-process hop).
// The TypeScript SDK 0.84 the bench uses has neither route: they go through its generic post().
import { servePage } from '../tests/e2e/lib/server.mjs';
import { CdpClient, interleaved, runStandalone, startServer, summary, timed } from './lib.mjs';

export const REPL_GOAL = 1.2;
export const WEBMCP_GOAL = 2;

const TOOL_RESULT = "({ content: [{ type: 'text', text: 'ok' }] })";
const PAGE = `<!doctype html><title>bench tools</title><script>
document.modelContext.registerTool({ name: 'ok', description: 'answers ok', inputSchema: { type: 'object' },
  execute: async () => ${TOOL_RESULT} });
</script>`;

export async function run({
  log = () => {},
  calls = Number(process.env.BENCH_AGENT_TOOLS_CALLS || 200),
  warmup = Number(process.env.BENCH_AGENT_TOOLS_WARMUP || 20),
  block = 20,
} = {}) {
  // On a host port the test server lets instances reach (the instance has its own network).
  const site = await servePage(PAGE);
  const server = await startServer({ env: { HANGAR_WARM_SPARES: '0' } });
  let rows;
  let session;
  let cdp;
  try {
    session = await server.client.browsers.create({ headless: true, timeout_seconds: 600 });
    const sid = session.session_id;
    const post = (path, body) => server.client.post(`/browsers/${sid}${path}`, { body });
    const go = await server.client.browsers.playwright.execute(sid, {
      code: `await page.goto(${JSON.stringify(site.url)}); return await page.title();`,
    });
    if (!go.success || go.result !== 'bench tools') throw new Error(`the tool page did not load: ${JSON.stringify(go)}`);

    const { tools } = await server.client.get(`/browsers/${sid}/webmcp/tools`);
    const ref = tools.find((t) => t.tool.name === 'ok')?.tool_ref;
    if (!ref) throw new Error(`the page's tool is not listed: ${JSON.stringify(tools)}`);

    cdp = await CdpClient.connect(session.cdp_ws_url);
    const page = await cdp.attachToPage();
    const { targetInfo } = await cdp.send('Target.getTargetInfo', {}, page);
    const responded = new Map(); // invocationId → resolve
    const early = new Map(); // events that beat invokeTool's own reply
    cdp.ws.on('message', (data) => {
      const m = JSON.parse(data.toString());
      if (m.method !== 'WebMCP.toolResponded') return;
      const done = responded.get(m.params.invocationId);
      if (done) done(m.params);
      else early.set(m.params.invocationId, m.params);
    });
    await cdp.send('WebMCP.enable', {}, page);
    const cdpInvoke = async () => {
      const { invocationId } = await cdp.send('WebMCP.invokeTool', { frameId: targetInfo.targetId, toolName: 'ok', input: {} }, page);
      if (early.has(invocationId)) return early.get(invocationId);
      return new Promise((resolve) => responded.set(invocationId, resolve));
    };

    const steps = {
      repl: () =>
        timed(
          () => post('/repl', { code: '1+1' }),
          (r) => {
            if (!r.success) throw new Error(`repl gave ${JSON.stringify(r)}`);
          },
        ),
      execute: () =>
        timed(
          () => server.client.browsers.playwright.execute(sid, { code: 'return 1 + 1;' }),
          (r) => {
            if (!r.success || r.result !== 2) throw new Error(`execute gave ${JSON.stringify(r)}`);
          },
        ),
      invoke: () =>
        timed(
          () => post('/webmcp/invoke', { tool_ref: ref, input: {} }),
          (r) => {
            if (r.status !== 'completed' || r.output?.content?.[0]?.text !== 'ok') throw new Error(`invoke gave ${JSON.stringify(r)}`);
          },
        ),
      evaluate: () =>
        timed(
          () =>
            cdp.send(
              'Runtime.evaluate',
              { expression: `(async () => ${TOOL_RESULT})()`, awaitPromise: true, returnByValue: true },
              page,
            ),
          (r) => {
            if (r.result?.value?.content?.[0]?.text !== 'ok') throw new Error(`evaluate gave ${JSON.stringify(r)}`);
          },
        ),
      cdpInvoke: () =>
        timed(cdpInvoke, (r) => {
          if (r.status !== 'Completed' || r.output?.content?.[0]?.text !== 'ok') throw new Error(`invokeTool gave ${JSON.stringify(r)}`);
        }),
    };
    rows = await interleaved(steps, { calls, warmup, block, log, label: 'agent_tools' });
  } finally {
    cdp?.close();
    if (session) await server.client.browsers.deleteByID(session.session_id).catch(() => {});
    await server.stop();
    await site.close();
  }
  const [repl, execute, invoke, evaluate, direct] = ['repl', 'execute', 'invoke', 'evaluate', 'cdpInvoke'].map((k) => summary(rows[k]));
  const note = `${calls} sequential calls each after ${warmup} warm-up, headless, alternating blocks of ${block}`;
  const row = (metric, s, b, p, goal) => ({
    name: 'agent_tools',
    metric,
    value: s[p],
    baseline: b[p],
    ratio: s[p] / b[p],
    goal: goal ? `≤ ${goal}×` : '',
    met: goal ? s[p] / b[p] <= goal : null,
  });
  return [
    { ...row('p50 repl `1+1` vs execute `return 1 + 1` (ms)', repl, execute, 'p50', REPL_GOAL), note },
    row('p95 repl vs execute (ms)', repl, execute, 'p95'),
    row('p50 webmcp invoke vs CDP Runtime.evaluate (ms)', invoke, evaluate, 'p50', WEBMCP_GOAL),
    row('p95 webmcp invoke vs CDP Runtime.evaluate (ms)', invoke, evaluate, 'p95'),
    row('p50 webmcp invoke vs CDP WebMCP.invokeTool (ms)', invoke, direct, 'p50'),
    row('p95 webmcp invoke vs CDP WebMCP.invokeTool (ms)', invoke, direct, 'p95'),
  ];
}

await runStandalone(import.meta.url, run);
