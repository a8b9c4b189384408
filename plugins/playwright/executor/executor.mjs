// The playwright plugin's executor: one long-lived Node process per executor of a browser (the
// default one and each named one), started by the instance half of the plugin inside the
// browser's sandbox on the executor's first call.
//
// Started as `node executor.mjs <CDP endpoint> [--executor <name>]` (the endpoint is
// ws+unix:/run/hangar-host/agent.sock:/cdp); a named executor binds `page` to a background tab of
// its own, the default one to the first tab. The agent writes one JSON line per call on fd 3:
//   {"id": 7, "code": "…", "timeout_ms": 60000}
// and reads one JSON line per answer on stdout:
//   {"id": 7, "success": true, "result": …, "error": "…", "stdout": "…", "stderr": "…",
//    "tab": {"target_id": "…", "created": false}}
//
// Snippets run in a worker thread that keeps the CDP connection between calls. Calls queue
// behind each other; a call that overruns its timeout terminates the worker (which stops even a
// busy loop in the user's code) and the next call starts a fresh one.
import { Worker } from 'node:worker_threads';

import { transform } from 'esbuild';

import { serveCalls } from './runtime.mjs';

const WORKER_URL = new URL('./worker.mjs', import.meta.url);
const ENDPOINT = process.argv[2];
const NAME = process.argv[3] === '--executor' ? process.argv[4] : 'default';

// The tab a named executor opened, handed to the next worker when one is replaced.
let ownTab = null;

function spawnWorker() {
  const worker = new Worker(WORKER_URL, { workerData: { endpoint: ENDPOINT, executor: NAME, tab: ownTab } });
  worker.pending = null;
  const fail = (why) => {
    const done = worker.pending;
    worker.pending = null;
    done?.({ success: false, error: why, stdout: '', stderr: '' });
    if (current === worker) current = null;
  };
  worker.on('message', (m) => {
    if (m.ownTab) {
      ownTab = m.ownTab;
      return;
    }
    const done = worker.pending;
    worker.pending = null;
    done?.(m);
  });
  worker.on('error', (e) => fail(`executor worker failed: ${e?.message ?? e}`));
  worker.on('exit', () => fail('executor worker exited'));
  return worker;
}

let current = null;

function worker() {
  current ??= spawnWorker();
  return current;
}

// TypeScript and JavaScript alike: esbuild strips the types (p50 0.6 ms). The snippet is the body
// of an async function, so `return` and `await` work at its top level.
async function compile(code) {
  const wrapped = `(async () => {\n${code}\n})`;
  const out = await transform(wrapped, { loader: 'ts', format: 'esm', target: 'node20', sourcefile: 'snippet.ts' });
  return out.code;
}

async function runOne(call) {
  let js;
  try {
    js = await compile(call.code);
  } catch (e) {
    const first = e.errors?.[0];
    const where = first?.location ? ` (line ${first.location.line - 1}, column ${first.location.column})` : '';
    return { success: false, error: `SyntaxError: ${first?.text ?? e.message}${where}`, stdout: '', stderr: '' };
  }
  const w = worker();
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      w.pending = null;
      if (current === w) current = null;
      // Terminating stops the snippet wherever it is, busy loops included; the CDP connection
      // goes with the worker and the next call reconnects.
      w.terminate();
      resolve({
        success: false,
        error: `execution timed out after ${call.timeout_ms / 1000} seconds`,
        stdout: '',
        stderr: '',
      });
    }, call.timeout_ms);
    w.pending = (m) => {
      clearTimeout(timer);
      resolve(m);
    };
    w.postMessage({ js });
  });
}

// Load playwright-core and connect while the first call is still on its way (or, with
// `prestart`, before there is one).
worker();

serveCalls(runOne, { serial: true });
