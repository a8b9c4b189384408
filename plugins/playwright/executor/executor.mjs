// The playwright plugin's executor: one long-lived Node process serving every session.
//
// The server writes one JSON line per call on fd 3:
//   {"id": 7, "session": "<session id>", "endpoint": "ws+unix:/…/agent.sock:/cdp", "code": "…", "timeout_ms": 60000}
// and reads one JSON line per answer on stdout:
//   {"id": 7, "success": true, "result": …, "error": "…", "stdout": "…", "stderr": "…"}
//
// Each session gets its own worker thread holding that session's cached CDP connection. Calls for
// one session queue behind each other; a call that overruns its timeout terminates the worker
// (which stops even a busy loop in the user's code) and the next call starts a fresh one.
import { Worker } from 'node:worker_threads';
import { createInterface } from 'node:readline';
import { createReadStream } from 'node:fs';
import { transform } from 'esbuild';

const WORKER_URL = new URL('./worker.mjs', import.meta.url);
// How long an unused session worker (and its CDP connection) is kept.
const IDLE_MS = Number(process.env.HANGAR_PLAYWRIGHT_IDLE_MS ?? 300_000);

const sessions = new Map(); // session id → { worker, tail: Promise, idleTimer }

function reply(message) {
  process.stdout.write(JSON.stringify(message) + '\n');
}

function sessionFor(id, endpoint) {
  let s = sessions.get(id);
  if (s && s.endpoint !== endpoint) {
    s.worker.terminate();
    s = undefined;
  }
  if (!s) {
    s = { endpoint, worker: null, tail: Promise.resolve(), idleTimer: null };
    sessions.set(id, s);
  }
  return s;
}

function spawnWorker(s) {
  const worker = new Worker(WORKER_URL, { workerData: { endpoint: s.endpoint } });
  worker.unref();
  worker.pending = null;
  const fail = (why) => {
    if (worker.pending) worker.pending({ success: false, error: why, stdout: '', stderr: '' });
    worker.pending = null;
    if (s.worker === worker) s.worker = null;
  };
  worker.on('message', (m) => {
    const done = worker.pending;
    worker.pending = null;
    if (done) done(m);
  });
  worker.on('error', (e) => fail(`executor worker failed: ${e?.message ?? e}`));
  worker.on('exit', () => fail('executor worker exited'));
  return worker;
}

// TypeScript and JavaScript alike: esbuild strips the types (about a millisecond). The snippet is
// the body of an async function, so `return` and `await` work at its top level.
async function compile(code) {
  const wrapped = `(async () => {\n${code}\n})`;
  const out = await transform(wrapped, { loader: 'ts', format: 'esm', target: 'node20', sourcefile: 'snippet.ts' });
  return out.code.replace(/;\s*$/, '');
}

async function runOne(s, call) {
  let js;
  try {
    js = await compile(call.code);
  } catch (e) {
    const first = e.errors?.[0];
    const where = first?.location ? ` (line ${first.location.line - 1}, column ${first.location.column})` : '';
    return { success: false, error: `SyntaxError: ${first?.text ?? e.message}${where}`, stdout: '', stderr: '' };
  }
  return new Promise((resolve) => {
    if (!s.worker) s.worker = spawnWorker(s);
    const worker = s.worker;
    const timer = setTimeout(() => {
      worker.pending = null;
      if (s.worker === worker) s.worker = null;
      // Terminating stops the snippet wherever it is, busy loops included; the CDP connection
      // goes with the worker and the next call reconnects.
      worker.terminate();
      resolve({
        success: false,
        error: `execution timed out after ${call.timeout_ms / 1000} seconds`,
        stdout: '',
        stderr: '',
      });
    }, call.timeout_ms);
    worker.pending = (m) => {
      clearTimeout(timer);
      resolve(m);
    };
    worker.postMessage({ js });
  });
}

function handle(call) {
  const s = sessionFor(call.session, call.endpoint);
  clearTimeout(s.idleTimer);
  const run = s.tail.then(() => runOne(s, call));
  s.tail = run.then(
    () => {},
    () => {},
  );
  run.then((answer) => {
    reply({ id: call.id, ...answer });
    if (sessions.get(call.session) !== s) return;
    clearTimeout(s.idleTimer);
    s.idleTimer = setTimeout(() => {
      if (sessions.get(call.session) !== s) return;
      sessions.delete(call.session);
      s.worker?.terminate();
    }, IDLE_MS);
    s.idleTimer.unref();
  });
}

const lines = createInterface({ input: createReadStream(null, { fd: 3 }), crlfDelay: Infinity });
lines.on('line', (line) => {
  if (!line.trim()) return;
  let call;
  try {
    call = JSON.parse(line);
  } catch {
    process.stderr.write(`executor: ignoring a line that is not JSON\n`);
    return;
  }
  handle(call);
});
// The server closing the request stream means it is going away.
lines.on('close', () => process.exit(0));
reply({ ready: true });
