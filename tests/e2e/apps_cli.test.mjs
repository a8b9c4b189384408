// `kernel deploy` and `kernel invoke` from the official Kernel CLI, replayed as raw HTTP: the CLI
// (Go) cannot be built here, so its requests are rebuilt from its sources and sent to the real
// server, and the answers are read the way the CLI reads them.
//
// Read (facts only, no code copied):
// - kernel/cli at 99e42f37988a59d9a8c0481d593111d1b3a3529a (v0.31.0+2; cmd/deploy.go and
//   cmd/invoke.go last changed in 2d0376587fa9): cmd/deploy.go (runDeploy, followDeployment),
//   cmd/invoke.go (runInvoke, getPayload, printResult, formatJSONValue), pkg/util/zip.go
//   (ZipDirectory), cmd/root.go (X-Kernel-Cli-Version), pkg/auth/client.go (Authorization),
//   go.mod (kernel-go-sdk v0.92.0, gocodewalker v1.4.0, godotenv v1.5.1).
// - kernel/kernel-go-sdk 0.28.0 (670d1868beed) and 0.86.1 (deployment.go at 0cdfbfdfccab,
//   internal/apiform/encoder.go at da4c7c658497, identical in what matters here):
//   DeploymentNewParams.MarshalMultipart, internal/apiform (encoder.go, richparam.go),
//   internal/apiquery/richparam.go, internal/requestconfig, InvocationNewParams,
//   InvocationFollowParams, packages/ssestream, the follow unions.
// - boyter/gocodewalker v1.4.0 file.go (the walk ZipDirectory uses).
//
// What each request reproduces:
// - `kernel deploy <dir>/index.ts --version cli-1 --env GREETING=hello --env-file <dir>/.env`:
//   the zip of the entrypoint's folder as ZipDirectory writes it (gocodewalker with hidden files
//   included: .gitignore and .ignore files inside that folder and below are honoured, "last match
//   wins", ignored folders not entered; nothing else is left out: not node_modules, .git or a venv
//   unless an ignore file lists them, and a .gitignore above the folder is never read; archive/zip
//   entries via Writer.Create: deflate with a data descriptor, no timestamps, no Unix modes, a
//   folder entry before its first file). Then POST /deployments, multipart from apiform's
//   MarshalRoot: parts sorted by field name — entrypoint_rel_path (the entrypoint's base name),
//   env_vars.<KEY> per variable in key order (dotted keys: MarshalRoot uses the "comma" format),
//   file (filename kernel_<unixnano>.zip, application/octet-stream), force ("true"/"false",
//   always sent), region (only with --region), version. The --env-file values come first and
//   --env overrides them.
// - its follow: GET /deployments/{id}/events, Accept: text/event-stream, read with ssestream's
//   decoder (every blank line dispatches a block whose data must be JSON, the SSE `event:` line
//   ignored, the switch on the JSON's own "event"), stopping at deployment_state running.
// - `kernel deploy … --version cli-1 --force --region aws.us-east-1a`: force=true and region.
// - `kernel invoke fixture-ts cli --version cli-1 -p '<json>'`: POST /invocations with
//   {"action_name","app_name","version","async":true,"payload":"<the text as typed>"} in that
//   order (Go's encoding/json: HTML characters escaped), a non-queued answer printed at once,
//   otherwise GET /invocations/{id}/events?since= (kernel.Opt("") is sent, empty) until
//   invocation_state succeeded/failed, whose invocation.output (a JSON string) is printed
//   re-indented with sorted keys. The same for an action running past the host's 15 s SSE
//   keepalive, which the Go decoder must survive.
// - every request: the headers requestconfig and the CLI set, in the order Go's client writes
//   them (Host, User-Agent, Content-Length, the rest sorted, Accept-Encoding: gzip last).
//
// Two deployments (each an `npm ci` of the fixture) and a 17 s invocation; no browser.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { basename, dirname, join, posix } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { crc32, deflateRawSync, gunzipSync } from 'node:zlib';

import { startServer } from './lib/server.mjs';
import { slow } from './lib/tier.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const fixture = join(here, '../fixtures/apps/ts-app');
const scratch = mkdtempSync(join(tmpdir(), 'hangar-apps-cli-'));

const GO_SDK_VERSION = '0.92.0'; // kernel/cli go.mod
const CLI_VERSION = '0.31.0'; // the release tag; goreleaser puts it in X-Kernel-Cli-Version
const GO_RUNTIME = 'go1.25.0'; // go.mod's toolchain line
const VERSION = 'cli-1';
const APP = 'fixture-ts';

let server;
let agent;
let appDir;
const state = {}; // what one test leaves for the next: the CLI's steps depend on each other

// ---- the Go client's requests ----------------------------------------------------------------

function goArch() {
  return { x64: 'x64', arm64: 'arm64', ia32: 'x32', arm: 'arm' }[process.arch] ?? `other:${process.arch}`;
}

/** A request as Go's http.Client writes one for the SDK (requestconfig + the CLI's options). */
function goRequest(method, path, { accept = 'application/json', contentType, body } = {}) {
  const url = new URL(server.baseURL);
  const headers = ['Host', url.host, 'User-Agent', `Kernel/Go ${GO_SDK_VERSION}`];
  if (body) headers.push('Content-Length', String(body.length));
  headers.push('Accept', accept, 'Authorization', `Bearer ${server.apiKey}`);
  if (contentType) headers.push('Content-Type', contentType);
  headers.push(
    'X-Kernel-Cli-Version', CLI_VERSION,
    'X-Stainless-Arch', goArch(),
    'X-Stainless-Lang', 'go',
    'X-Stainless-Os', 'Linux',
    'X-Stainless-Package-Version', GO_SDK_VERSION,
    'X-Stainless-Retry-Count', '0',
    'X-Stainless-Runtime', 'go',
    'X-Stainless-Runtime-Version', GO_RUNTIME,
    // Go's transport asks for gzip and inflates the answer itself.
    'Accept-Encoding', 'gzip',
  );
  const req = http.request({ host: url.hostname, port: url.port, method, path, headers, setHost: false, agent });
  req.end(body);
  return req;
}

/** A JSON call; Go's SDK turns any status ≥ 400 into an error, so the status is returned too. */
function goCall(method, path, opts) {
  return new Promise((resolve, reject) => {
    const req = goRequest(method, path, opts);
    req.on('error', reject);
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        let bytes = Buffer.concat(chunks);
        if (res.headers['content-encoding'] === 'gzip') bytes = gunzipSync(bytes);
        const text = bytes.toString('utf8');
        let json;
        try {
          json = JSON.parse(text);
        } catch {}
        resolve({ status: res.statusCode, text, json });
      });
    });
  });
}

/**
 * An SSE follow read the way ssestream's eventStreamDecoder and Stream.Next read it: lines cut at
 * \n (a trailing \r dropped), `event:` and `data:` kept (data lines joined by \n), everything else
 * ignored, and every blank line dispatches a block whose data must unmarshal as JSON — an empty
 * one (a comment or `id:`/`retry:` line followed by a blank line) is "unexpected end of JSON input"
 * and ends the CLI's follow with a stream error. `decide` gets each decoded event and returns the
 * CLI's outcome when it stops reading.
 */
function goFollow(path, decide, { timeoutMs = 300_000 } = {}) {
  return new Promise((resolve, reject) => {
    const blocks = [];
    let finished = false;
    let req;
    const timer = setTimeout(() => done({ outcome: 'timeout' }), timeoutMs);
    function done(result) {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      req.destroy();
      resolve({ ...result, blocks });
    }
    req = goRequest('GET', path, { accept: 'text/event-stream' });
    req.on('error', (err) => (finished ? undefined : reject(err)));
    req.on('response', (res) => {
      if (res.statusCode >= 400) {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => done({ outcome: 'http_error', status: res.statusCode, text }));
        return;
      }
      const contentType = res.headers['content-type'];
      let buf = '';
      let type = '';
      let data = '';
      let lines = [];
      const onLine = (line) => {
        if (line === '') {
          const block = { type, raw: data, lines };
          type = '';
          data = '';
          lines = [];
          try {
            block.event = JSON.parse(block.raw);
          } catch (err) {
            blocks.push(block);
            const seen = JSON.stringify([...block.lines, '']);
            return done({ outcome: 'stream_error', error: `${err.message}: the block ${seen} after ${blocks.length - 1} good ones` });
          }
          blocks.push(block);
          const verdict = decide(block.event);
          if (verdict) done({ outcome: verdict, contentType });
          return;
        }
        lines.push(line);
        const colon = line.indexOf(':');
        const name = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (name === 'event') type = value;
        else if (name === 'data') data += value + '\n';
      };
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        buf += chunk;
        let nl;
        while (!finished && (nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          onLine(line.endsWith('\r') ? line.slice(0, -1) : line);
        }
      });
      res.on('end', () => done({ outcome: 'ended', contentType }));
      res.on('error', (err) => done({ outcome: 'stream_error', error: err.message }));
    });
  });
}

/** Go's encoding/json for a string: <, > and & (and U+2028/9) as \u escapes. */
function goJSONString(s) {
  return JSON.stringify(s).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** The CLI's formatJSONValue: re-encoded with sorted keys (Go maps), two-space indent, HTML kept. */
function goPretty(text) {
  const sortKeys = (v) =>
    Array.isArray(v) ? v.map(sortKeys)
      : v && typeof v === 'object' ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys(v[k])]))
        : v;
  try {
    return JSON.stringify(sortKeys(JSON.parse(text)), null, 2);
  } catch {
    return text;
  }
}

// ---- the CLI's zip ---------------------------------------------------------------------------

// The .gitignore syntax the fixture uses, with go-gitignore's meaning: `!` negates, a trailing /
// matches folders only, a pattern with a / is anchored to the ignore file's folder, otherwise it
// matches a name at any depth; *, ? and **.
function parseIgnore(text) {
  return text.split('\n').flatMap((raw) => {
    let line = raw.replace(/\r$/, '').replace(/\s+$/, '');
    if (!line || line.startsWith('#')) return [];
    const negate = line.startsWith('!');
    if (negate) line = line.slice(1);
    const dirOnly = line.endsWith('/');
    if (dirOnly) line = line.slice(0, -1);
    const anchored = line.includes('/');
    if (line.startsWith('/')) line = line.slice(1);
    let re = '';
    for (let i = 0; i < line.length; i++) {
      const c = line[i];
      if (c === '*' && line[i + 1] === '*') {
        re += line[i + 2] === '/' ? '(?:.*/)?' : '.*';
        i += line[i + 2] === '/' ? 2 : 1;
      } else if (c === '*') re += '[^/]*';
      else if (c === '?') re += '[^/]';
      else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
    }
    return [{ negate, dirOnly, anchored, re: new RegExp(`^${re}$`) }];
  });
}

/** gocodewalker's verdict: each ignore file that has a matching pattern overrides the previous. */
function ignoredBy(sets, rel, isDir) {
  let ignored = false;
  for (const set of sets) {
    const local = set.base ? posix.relative(set.base, rel) : rel;
    let hit = null;
    for (const p of set.patterns) {
      if (p.dirOnly && !isDir) continue;
      if (p.re.test(p.anchored ? local : posix.basename(local))) hit = p;
    }
    if (hit) ignored = !hit.negate;
  }
  return ignored;
}

/**
 * The files ZipDirectory puts in the archive, in walk order: a folder's files (sorted, as ReadDir
 * gives them) before its subfolders; .gitignore files checked before .ignore files.
 */
function cliWalk(root) {
  const files = [];
  const walk = (rel, gitignores, ignores) => {
    const entries = readdirSync(join(root, rel), { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1));
    const plain = entries.filter((e) => !e.isDirectory());
    const dirs = entries.filter((e) => e.isDirectory());
    const load = (name) => ({ base: rel, patterns: parseIgnore(readFileSync(join(root, rel, name), 'utf8')) });
    if (plain.some((e) => e.name === '.gitignore')) gitignores = [...gitignores, load('.gitignore')];
    if (plain.some((e) => e.name === '.ignore')) ignores = [...ignores, load('.ignore')];
    const sets = [...gitignores, ...ignores];
    for (const e of plain) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (!ignoredBy(sets, p, false)) files.push(p);
    }
    for (const e of dirs) {
      const p = rel ? `${rel}/${e.name}` : e.name;
      if (!ignoredBy(sets, p, true)) walk(p, gitignores, ignores);
    }
  };
  walk('', [], []);
  return files;
}

/**
 * The archive Go's archive/zip Writer.Create writes: deflate (level 5 there; the deflate bytes
 * differ, the content does not), flag 0x8 with a data descriptor after each file, DOS time and
 * date 0, version 2.0 made by "FAT" with external attributes 0, no extra fields; a folder entry
 * ("dir/", stored, no descriptor) before the first file in it.
 */
function cliZip(root, files) {
  const out = [];
  const central = [];
  let offset = 0;
  const folders = new Set();
  const put = (name, data) => {
    const dir = name.endsWith('/');
    const nameBytes = Buffer.from(name, 'utf8');
    const flags = (dir ? 0 : 0x8) | (/[^\x00-\x7f]/.test(name) ? 0x800 : 0);
    const method = dir ? 0 : 8;
    const packed = dir ? Buffer.alloc(0) : deflateRawSync(data, { level: 5 });
    const crc = dir ? 0 : crc32(data);
    const size = dir ? 0 : data.length;
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt16LE(flags, 6);
    local.writeUInt16LE(method, 8);
    local.writeUInt16LE(nameBytes.length, 26); // time, date, crc and sizes stay 0
    const parts = [local, nameBytes, packed];
    if (!dir) {
      const descriptor = Buffer.alloc(16);
      descriptor.writeUInt32LE(0x08074b50, 0);
      descriptor.writeUInt32LE(crc, 4);
      descriptor.writeUInt32LE(packed.length, 8);
      descriptor.writeUInt32LE(size, 12);
      parts.push(descriptor);
    }
    const record = Buffer.alloc(46);
    record.writeUInt32LE(0x02014b50, 0);
    record.writeUInt16LE(20, 4);
    record.writeUInt16LE(20, 6);
    record.writeUInt16LE(flags, 8);
    record.writeUInt16LE(method, 10);
    record.writeUInt32LE(crc, 16);
    record.writeUInt32LE(packed.length, 20);
    record.writeUInt32LE(size, 24);
    record.writeUInt16LE(nameBytes.length, 28);
    record.writeUInt32LE(offset, 42);
    central.push(record, nameBytes);
    for (const p of parts) {
      out.push(p);
      offset += p.length;
    }
  };
  for (const rel of files) {
    const segments = rel.split('/').slice(0, -1);
    for (let i = 1; i <= segments.length; i++) {
      const folder = segments.slice(0, i).join('/') + '/';
      if (!folders.has(folder)) {
        folders.add(folder);
        put(folder, null);
      }
    }
    put(rel, readFileSync(join(root, rel)));
  }
  const cd = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(central.length / 2, 8);
  end.writeUInt16LE(central.length / 2, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...out, cd, end]);
}

/** godotenv.Read for the plain KEY=value lines the fixture's .env has. */
function readDotenv(path) {
  const vars = {};
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*?)\s*$/.exec(line);
    if (m && !line.trim().startsWith('#')) vars[m[1]] = m[2].replace(/^"(.*)"$/, '$1').replace(/^'(.*)'$/, '$1');
  }
  return vars;
}

/**
 * runDeploy up to the POST: the zip of the entrypoint's folder, the env (files first, --env over
 * them), and the multipart body apiform writes, parts sorted by name, with Go's multipart.Writer
 * framing (a 60-hex-digit boundary, Content-Disposition before Content-Type).
 */
function cliDeployRequest(entrypoint, { version = 'latest', force = false, region = '', env = [], envFiles = [] }) {
  const folder = dirname(entrypoint);
  const files = cliWalk(folder);
  const zip = cliZip(folder, files);
  const envVars = {};
  for (const f of envFiles) Object.assign(envVars, readDotenv(f));
  for (const kv of env) {
    const i = kv.indexOf('=');
    envVars[kv.slice(0, i)] = kv.slice(i + 1);
  }
  const parts = [['entrypoint_rel_path', basename(entrypoint)]];
  for (const key of Object.keys(envVars).sort()) parts.push([`env_vars.${key}`, envVars[key]]);
  parts.push(['file', zip, `kernel_${BigInt(Date.now()) * 1_000_000n}.zip`]);
  parts.push(['force', force ? 'true' : 'false']);
  if (region) parts.push(['region', region]);
  parts.push(['version', version]);

  const boundary = randomBytes(30).toString('hex');
  const escape = (s) => s.replace(/\\/g, '\\\\').replace(/"/g, '\\"');
  const chunks = [];
  parts.forEach(([name, value, filename], i) => {
    chunks.push(Buffer.from(`${i ? '\r\n' : ''}--${boundary}\r\n`));
    if (filename) {
      chunks.push(Buffer.from(`Content-Disposition: form-data; name="${escape(name)}"; filename="${escape(filename)}"\r\n` +
        'Content-Type: application/octet-stream\r\n\r\n'));
      chunks.push(value);
    } else {
      chunks.push(Buffer.from(`Content-Disposition: form-data; name="${escape(name)}"\r\n\r\n${value}`));
    }
  });
  chunks.push(Buffer.from(`\r\n--${boundary}--\r\n`));
  return {
    files,
    zip,
    parts: parts.map(([name]) => name),
    body: Buffer.concat(chunks),
    contentType: `multipart/form-data; boundary=${boundary}`,
  };
}

/** runDeploy's POST, then followDeployment: what it prints and how it ends. */
async function cliDeploy(entrypoint, flags) {
  const request = cliDeployRequest(entrypoint, flags);
  const created = await goCall('POST', '/deployments', { contentType: request.contentType, body: request.body });
  assert.ok(created.status < 400, `POST /deployments ${created.status}: ${created.text}`);
  assert.equal(typeof created.json?.id, 'string', created.text);
  const printed = [];
  const follow = await goFollow(`/deployments/${created.json.id}/events`, (ev) => {
    switch (ev.event) {
      case 'log':
        printed.push(`INFO ${String(ev.message).replace(/\n$/, '')}`);
        return null;
      case 'deployment_state': {
        const status = ev.deployment?.status;
        if (status === 'failed' || status === 'stopped') {
          printed.push(`ERROR deployment ${status}: ${ev.deployment.status_reason}`);
          return 'failed';
        }
        if (status === 'running') {
          printed.push('SUCCESS ✔ Deployment complete');
          return 'complete';
        }
        return null;
      }
      case 'app_version_summary':
        printed.push(`INFO App "${ev.app_name}" deployed (version: ${ev.version})`);
        if (ev.actions?.length) printed.push(`INFO Invoke with: kernel invoke ${ev.app_name} ${ev.actions[0].name} --payload '{...}'`);
        return null;
      case 'error':
        printed.push(`ERROR ${ev.error?.code}: ${ev.error?.message}`);
        return 'error';
      default:
        return null;
    }
  });
  return { request, created, follow, printed };
}

/** runInvoke: the async create, then the follow until a terminal state, and what it prints. */
async function cliInvoke(app, action, { version = 'latest', payload } = {}) {
  let body = `{"action_name":${goJSONString(action)},"app_name":${goJSONString(app)},"version":${goJSONString(version)},"async":true`;
  if (payload !== undefined) body += `,"payload":${goJSONString(payload)}`;
  body += '}';
  const created = await goCall('POST', '/invocations', { contentType: 'application/json', body: Buffer.from(body) });
  const printed = [];
  if (created.status >= 400 || created.json?.status !== 'queued') return { body, created, printed, follow: null };
  printed.push(`INFO Invocation ID: ${created.json.id}`);
  let terminal = null;
  const follow = await goFollow(`/invocations/${created.json.id}/events?since=`, (ev) => {
    if (ev.event === 'log') printed.push(`INFO ${String(ev.message).replace(/\n$/, '')}`);
    if (ev.event === 'error') return 'error';
    if (ev.event !== 'invocation_state') return null;
    const { status, output } = ev.invocation ?? {};
    if (status !== 'succeeded' && status !== 'failed') return null;
    terminal = ev.invocation;
    // Go decodes `output` into a string field: anything else prints as "".
    printed.push(`${status === 'succeeded' ? 'SUCCESS' : 'ERROR'} Result:\n${goPretty(typeof output === 'string' ? output : '')}`);
    return status;
  });
  return { body, created, printed, follow, terminal };
}

// ---- the app folder ---------------------------------------------------------------------------

// Paths the `cli` action reports on, and whether the CLI ships each.
const SHIPPED = {
  'index.ts': true,
  'package.json': true,
  'package-lock.json': true,
  '.gitignore': true,
  '.ignore': true,
  '.hidden.json': true, // hidden files are included
  'keep.log': true, // `!keep.log` after `*.log`
  'lib/data.json': true,
  'lib/.gitignore': true,
  'parent-ignored.txt': true, // only the .gitignore above the entrypoint's folder lists it
  'secret.txt': false,
  'debug.log': false,
  '.env': false,
  'notes.md': false, // listed in .ignore
  'private/key.pem': false, // an ignored folder is not entered
  'lib/local.json': false, // the nested .gitignore
};

const ACTION = `
// Added by apps_cli.test.mjs: which of the given paths beside this file were deployed, and the env.
app.action('cli', async (_ctx: { invocation_id: string }, payload?: { probe?: string; paths?: string[] }) => {
  console.log('cli action checking ' + (payload?.paths?.length ?? 0) + ' paths');
  const files: Record<string, boolean> = {};
  for (const p of payload?.paths ?? []) files[p] = existsSync(fileURLToPath(new URL(p, import.meta.url)));
  return {
    probe: payload?.probe ?? null,
    greeting: process.env.GREETING ?? null,
    from_file: process.env.FROM_FILE ?? null,
    files,
  };
});

app.action('wait', async (_ctx: { invocation_id: string }, payload?: { seconds?: number }) => {
  await new Promise((r) => setTimeout(r, (payload?.seconds ?? 1) * 1000));
  return { waited: payload?.seconds ?? 1 };
});
`;

function makeAppFolder() {
  // A repository whose app lives one folder down, so its root .gitignore is outside what the CLI walks.
  const repo = join(scratch, 'repo');
  const dir = join(repo, 'app');
  cpSync(fixture, dir, { recursive: true, filter: (src) => !src.includes('node_modules') });
  const source = readFileSync(join(dir, 'index.ts'), 'utf8');
  writeFileSync(join(dir, 'index.ts'),
    "import { existsSync } from 'node:fs';\nimport { fileURLToPath } from 'node:url';\n" + source + ACTION);
  const files = {
    '../.gitignore': 'parent-ignored.txt\n',
    '.gitignore': '# node_modules/, .env and *.log as the CLI templates list them (their package-lock.json line left out)\nnode_modules/\n.env\n*.log\n!keep.log\nsecret.txt\nprivate/\n',
    '.ignore': 'notes.md\n',
    '.env': '# read with --env-file; --env overrides GREETING\nFROM_FILE=dotenv\nGREETING=from-file\n',
    '.hidden.json': '{"hidden":true}\n',
    'secret.txt': 'never deployed\n',
    'debug.log': 'never deployed\n',
    'keep.log': 'deployed\n',
    'notes.md': 'never deployed\n',
    'private/key.pem': 'never deployed\n',
    'node_modules/stray/index.js': 'never deployed\n',
    'lib/data.json': '{}\n',
    'lib/.gitignore': 'local.json\n',
    'lib/local.json': 'never deployed\n',
    'parent-ignored.txt': 'deployed\n',
  };
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, name)), { recursive: true });
    writeFileSync(join(dir, name), content);
  }
  return dir;
}

before(async () => {
  server = await startServer();
  agent = new http.Agent({ keepAlive: true }); // Go's transport keeps connections too
  appDir = makeAppFolder();
});

after(async () => {
  agent?.destroy();
  await server?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

test('kernel deploy: the zip of the entrypoint folder, the sorted multipart, the SSE follow to running', async () => {
  const { request, created, follow, printed } = await cliDeploy(join(appDir, 'index.ts'), {
    version: VERSION,
    env: ['GREETING=hello'],
    envFiles: [join(appDir, '.env')],
  });
  state.first = created.json;

  // The archive is what the walk picked, readable by Info-ZIP (CRCs checked) with those names.
  const zipPath = join(scratch, 'cli.zip');
  writeFileSync(zipPath, request.zip);
  execFileSync('unzip', ['-tq', zipPath]);
  const names = execFileSync('unzip', ['-Z1', zipPath], { encoding: 'utf8' }).trim().split('\n');
  assert.deepEqual(names.filter((n) => !n.endsWith('/')).sort(), Object.keys(SHIPPED).filter((p) => SHIPPED[p]).sort());
  assert.ok(names.indexOf('lib/') >= 0 && names.indexOf('lib/') < names.indexOf('lib/.gitignore'), 'a folder entry first');
  assert.deepEqual(request.parts,
    ['entrypoint_rel_path', 'env_vars.FROM_FILE', 'env_vars.GREETING', 'file', 'force', 'version']);

  assert.equal(created.status, 200, created.text);
  assert.equal(created.json.status, 'queued');
  assert.equal(created.json.entrypoint_rel_path, 'index.ts');
  assert.equal(created.json.region, 'aws.us-east-1a');

  assert.equal(follow.outcome, 'complete', `${follow.outcome} ${follow.error ?? ''}\n${printed.slice(-10).join('\n')}`);
  assert.match(follow.contentType ?? '', /^text\/event-stream/);
  const events = follow.blocks.map((b) => b.event);
  assert.ok(events.every((e) => e && typeof e === 'object' && typeof e.event === 'string'),
    'every block is a JSON object naming its event');
  const states = events.filter((e) => e.event === 'deployment_state').map((e) => e.deployment.status);
  assert.deepEqual(states, ['queued', 'in_progress', 'running']);
  for (const e of events.filter((x) => x.event === 'deployment_state')) assert.equal(e.deployment.id, created.json.id);
  assert.ok(events.some((e) => e.event === 'log' && /npm ci/.test(e.message)), 'the build log reaches the CLI');

  // The CLI stops at `running`: the summary it prints must come before.
  const summary = events.find((e) => e.event === 'app_version_summary');
  assert.ok(summary, 'app_version_summary before the running state');
  assert.equal(summary.app_name, APP);
  assert.equal(summary.version, VERSION);
  assert.ok(summary.actions.map((a) => a.name).includes('cli'));
  assert.ok(printed.includes(`INFO App "${APP}" deployed (version: ${VERSION})`), printed.join('\n'));
  assert.ok(printed.some((l) => new RegExp(`^INFO Invoke with: kernel invoke ${APP} \\w+ --payload`).test(l)));
  assert.equal(printed.at(-1), 'SUCCESS ✔ Deployment complete');

  // `kernel deploy get <id>`
  const got = await goCall('GET', `/deployments/${created.json.id}`);
  assert.equal(got.status, 200);
  assert.equal(got.json.status, 'running');
});

test('kernel invoke: async create (202 queued), the follow with since= to succeeded, the printed result', async () => {
  assert.ok(state.first, 'needs the deployment');
  // As typed on the command line: spaces kept, HTML characters that Go's JSON escapes.
  const payload = `{"probe": "a<b>&c", "paths": ${JSON.stringify(Object.keys(SHIPPED))}}`;
  const run = await cliInvoke(APP, 'cli', { version: VERSION, payload });
  assert.match(run.body, /^\{"action_name":"cli","app_name":"fixture-ts","version":"cli-1","async":true,"payload":"\{\\"probe\\": \\"a\\u003cb\\u003e\\u0026c\\"/);
  assert.equal(run.created.status, 202, run.created.text);
  assert.equal(run.created.json.status, 'queued', 'anything else is printed at once and never followed');
  assert.equal(run.created.json.action_name, 'cli');
  assert.equal(run.follow.outcome, 'succeeded', `${run.follow.outcome} ${run.follow.error ?? run.follow.text ?? ''}`);
  assert.ok(run.follow.blocks.every((b) => b.event && typeof b.event.event === 'string'));
  assert.equal(run.terminal.id, run.created.json.id);
  assert.equal(run.terminal.app_name, APP);
  assert.equal(run.terminal.version, VERSION);
  assert.equal(typeof run.terminal.output, 'string', 'Go reads output as a string');
  state.output = JSON.parse(run.terminal.output);

  // What the CLI shows: the action's log line, then the result, re-indented with sorted keys.
  assert.ok(run.printed.includes(`INFO cli action checking ${Object.keys(SHIPPED).length} paths`), run.printed.join('\n'));
  const result = run.printed.at(-1);
  assert.ok(result.startsWith('SUCCESS Result:\n{\n  "files": {'), result);
  assert.match(result, /\n {2}"probe": "a<b>&c"\n\}$/);
  assert.equal(state.output.probe, 'a<b>&c');
});

test('the deployed code is what the CLI zips: ignore files honoured, hidden files kept, nothing else dropped', () => {
  assert.ok(state.output, 'needs the invocation');
  assert.deepEqual(state.output.files, SHIPPED);
});

test('kernel deploy --env/--env-file: env_vars.<KEY> parts (apiform\'s dotted keys) reach the app', async () => {
  assert.ok(state.first && state.output, 'needs the deployment and the invocation');
  // The values are redacted for API-key callers; the names show what the server took.
  assert.deepEqual(Object.keys(state.first.env_vars ?? {}).sort(), ['FROM_FILE', 'GREETING'],
    `POST /deployments answered env_vars ${JSON.stringify(state.first.env_vars)}`);
  assert.equal(state.output.greeting, 'hello', '--env overrides the env file');
  assert.equal(state.output.from_file, 'dotenv');
});

test('kernel invoke following an action longer than the server\'s 15 s SSE keepalive: every block is JSON', slow, async () => {
  assert.ok(state.first, 'needs the deployment');
  // ssestream dispatches on every blank line and unmarshals the data: a comment block
  // (": keepalive" then a blank line) has none, and the CLI ends with "stream error: unexpected
  // end of JSON input" while the action still runs.
  const run = await cliInvoke(APP, 'wait', { version: VERSION, payload: '{"seconds": 17}' });
  assert.equal(run.created.status, 202, run.created.text);
  assert.equal(run.follow.outcome, 'succeeded', `${run.follow.outcome} ${run.follow.error ?? ''}`);
  assert.equal(run.printed.at(-1), 'SUCCESS Result:\n{\n  "waited": 17\n}');
});

test('kernel deploy --force --region: the same version again, the previous deployment superseded', async () => {
  assert.ok(state.first, 'needs the first deployment');
  const { request, created, follow, printed } = await cliDeploy(join(appDir, 'index.ts'), {
    version: VERSION,
    force: true,
    region: 'aws.us-east-1a',
  });
  assert.deepEqual(request.parts, ['entrypoint_rel_path', 'file', 'force', 'region', 'version']);
  assert.equal(created.status, 200, created.text);
  assert.equal(follow.outcome, 'complete', `${follow.outcome} ${follow.error ?? ''}\n${printed.slice(-10).join('\n')}`);
  const old = await goCall('GET', `/deployments/${state.first.id}`);
  assert.equal(old.json.status, 'stopped');
  assert.match(old.json.status_reason, /superseded/);
});
