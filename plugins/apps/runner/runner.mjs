// Hangar's launcher for deployed apps. Runs inside an invocation's sandbox (started by the apps
// plugin's agent half) as
//
//   node --import <runner>/node_modules/tsx/dist/loader.mjs runner.mjs <job file>
//
// The job file is JSON: {mode: "describe"|"invoke"|"wait", app_dir, entrypoint, app_name?,
// action_name?, payload?, invocation_id?, api_socket?, api_port?}; "wait" imports the entrypoint,
// then reads the rest of an invoke job from fd 4. The one result line goes to fd 3:
//   describe → {ok: true, apps: [{name, actions: [{name}]}]}
//   invoke   → {ok: true, output: "<JSON text>"} | {ok: false, error: "<message>"}
// The app's own stdout/stderr are the invocation's logs (the agent points them at a file).
import { createRequire } from 'node:module';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
let answered = false;

function answer(result) {
  if (answered) return;
  answered = true;
  fs.writeSync(3, JSON.stringify(result) + '\n');
}

function message(err) {
  if (err instanceof Error) return err.message || String(err);
  try {
    return typeof err === 'string' ? err : JSON.stringify(err);
  } catch {
    return String(err);
  }
}

process.on('uncaughtException', (err) => {
  console.error(err);
  answer({ ok: false, error: message(err) });
  process.exit(1);
});
process.on('unhandledRejection', (err) => {
  console.error(err);
  answer({ ok: false, error: message(err) });
  process.exit(1);
});

// The sandbox has its own network namespace, so Hangar's port on the host's loopback is not
// reachable from here. The plugin serves the API on a unix socket in the instance folder; this
// listens on 127.0.0.1:<the server's port> inside and splices each connection to that socket,
// so KERNEL_BASE_URL and the browser URLs Hangar hands out (same host and port) work unchanged.
// When the port is taken (the operator allowed it through, or the sandbox shares the host's
// network), the server is already reachable at that address and nothing is needed.
async function forwardApi() {
  if (!job.api_socket || !job.api_port) return;
  const server = net.createServer((client) => {
    const upstream = net.connect(job.api_socket);
    client.pipe(upstream);
    upstream.pipe(client);
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', end);
    upstream.on('close', end);
  });
  await new Promise((resolve) => {
    server.once('error', resolve); // EADDRINUSE: the address already reaches the server
    server.listen(job.api_port, '127.0.0.1', resolve);
  });
  server.unref();
}

// The registry `kernel.app(name)` fills lives in the app's own copy of @onkernel/sdk; a module
// graph may hold its ESM and its CommonJS build at once, so both are read.
async function registries(entry) {
  const found = [];
  let dir;
  try {
    // The package's main file sits at its root (package.json itself is not exported).
    dir = path.dirname(createRequire(entry).resolve('@onkernel/sdk'));
  } catch {
    return found;
  }
  const esm = path.join(dir, 'core', 'app-framework.mjs');
  if (fs.existsSync(esm)) found.push((await import(pathToFileURL(esm).href)).appRegistry);
  const cjs = path.join(dir, 'core', 'app-framework.js');
  if (fs.existsSync(cjs)) {
    try {
      found.push(createRequire(entry)(cjs).appRegistry);
    } catch {
      // an ESM-only install: the ESM registry above is the one
    }
  }
  return found.filter(Boolean);
}

async function main() {
  await forwardApi();
  const entry = path.resolve(job.app_dir, job.entrypoint);
  process.chdir(job.app_dir);
  await import(pathToFileURL(entry).href);
  const regs = await registries(entry);
  const apps = [];
  for (const reg of regs) for (const app of reg.getApps()) if (!apps.includes(app)) apps.push(app);
  if (job.mode === 'describe') {
    answer({ ok: true, apps: apps.map((a) => a.toJSON()) });
    return;
  }
  if (job.mode === 'wait') {
    // Prepared ahead (a warm sandbox): the entrypoint is imported; the invocation's job comes on
    // fd 4, written and closed by the agent when one arrives.
    Object.assign(job, JSON.parse(fs.readFileSync(4, 'utf8')));
  }
  const app = apps.find((a) => a.name === job.app_name);
  if (!app) throw new Error(`app ${job.app_name} is not registered by ${job.entrypoint}`);
  const action = app.getAction(job.action_name);
  if (!action) throw new Error(`action ${job.action_name} not found in app ${job.app_name}`);
  const payload = job.payload === undefined || job.payload === null || job.payload === '' ? undefined : JSON.parse(job.payload);
  const result = await action.handler({ invocation_id: job.invocation_id }, payload);
  answer({ ok: true, output: JSON.stringify(result === undefined ? null : result) });
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    answer({ ok: false, error: message(err) });
    process.exit(1);
  },
);
